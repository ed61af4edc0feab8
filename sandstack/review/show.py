"""A setting's value as a reviewer reads it: sizes in MiB/GiB, CPUs, durations, short digests, port lists as
ports, maps as `key=value`, never a Python repr and never cut at a fixed width (long lines are shown whole).

The unit comes from the setting's name (the last part of its spec path or the resource setting's key): the spec's
size, duration and CPU fields and the container inputs built from them (sandstack.spec.units formats them)."""

from __future__ import annotations

import re
from typing import Any

from sandstack.spec.units import MIB, format_cpus, format_duration, format_size

SIZES = {"memory", "disk", "size", "shm_size", "storage_quota", "memory_bytes", "memory_swap"}
SIZES_MIB = {"memory_mb"}
DURATIONS = {"max_lifetime", "idle_timeout", "interval", "start_period", "timeout", "grace_period"}
CPUS = {"cpus"}
HEX64 = re.compile(r"\b(?:sha256:)?([0-9a-f]{64})\b")


def short_digest(text: str) -> str:
    """Every full sha256 in `text` as `sha256:abcd1234…` (twelve hex digits: enough to tell two apart)."""
    return HEX64.sub(lambda m: f"sha256:{m.group(1)[:12]}…", text)


def _port(value: dict) -> str | None:
    if {"internal", "protocol"} <= set(value):  # a container's published port (no external: Docker picks one)
        if value.get("external") or value.get("ip"):
            return f"{value.get('ip') or '0.0.0.0'}:{value.get('external') or '*'}→{value['internal']}/{value['protocol']}"
        return f"{value['internal']}/{value['protocol']}"
    if "port" in value and "exposure" in value:  # a spec port
        extra = [f"host {value['host_port']}" if value.get("host_port") else "", value.get("name") or ""]
        extra_text = ", ".join(e for e in extra if e)
        return (f"{value['port']}/{value.get('protocol', 'tcp')} {value['exposure']}"
                + (f" ({extra_text})" if extra_text else ""))
    return None


def _cpus(n: float) -> str:
    return f"{format_cpus(n)} {'cpu' if n == 1 else 'cpus'}"


def value(key: str, v: Any) -> str:
    name = key.rsplit(".", 1)[-1].removeprefix("input ")
    if v is None:
        return "(unset)"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict) and set(v) == {"secret"}:
        return f"<secret {v['secret']}>"
    if isinstance(v, (int, float)):
        if name in SIZES and isinstance(v, int):
            return format_size(v)
        if name in SIZES_MIB:
            return format_size(int(v) * MIB)
        if name in DURATIONS and isinstance(v, int):
            return format_duration(v)
        if name in CPUS:
            return _cpus(float(v))
        if name == "nano_cpus":
            return _cpus(v / 1e9)
        return str(v)
    if isinstance(v, str) and name in CPUS and re.fullmatch(r"[0-9]+(\.[0-9]+)?", v):
        return _cpus(float(v))  # a container's `cpus` input is a string
    if isinstance(v, str):
        return short_digest(v) if HEX64.search(v) else v
    if isinstance(v, dict):
        port = _port(v)
        if port is not None:
            return port
        return "{" + ", ".join(f"{k}={value(str(k), x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(name, x) for x in v) + "]"
    return str(v)
