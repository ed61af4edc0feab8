"""Plausible computed outputs for the dry backend (testbed/provider/mocks.py DryBackend).

Shaped like what the engine backend reads back (see container_ops.read / other_ops.read_*), derived
from a digest of the registration so they are stable across runs: an autoname-style `name`,
`networkDatas` with private addresses, random-looking external ports, image ids.
"""

from __future__ import annotations


def plausible_outputs(title: str, reg, ident: str, name: str | None) -> tuple[str, dict]:
    out = dict(reg.inputs)
    if name is not None:
        out["name"] = name
    if title == "Container":
        nets = [n.get("name") for n in reg.inputs.get("networksAdvanced") or []] or ["bridge"]
        out["networkDatas"] = [{"networkName": net, "ipAddress": f"172.30.{i}.{int(ident[:2], 16) % 250 + 2}",
                                "ipPrefixLength": 24, "gateway": f"172.30.{i}.1", "macAddress": ""}
                               for i, net in enumerate(nets)]
        # A random host port per unpublished-as-fixed port, distinct within the container (as Docker's are).
        base = 32768 + int(ident[:4], 16) % 2800 * 10
        out["ports"] = [{**p, "external": int(p.get("external") or base + i),
                         "ip": p.get("ip", "0.0.0.0"), "protocol": p.get("protocol", "tcp")}
                        for i, p in enumerate(reg.inputs.get("ports") or [])]
        out.setdefault("hostname", ident[:12])
        return ident[:64], out
    if title == "Network":
        out.setdefault("scope", "local")
        out.setdefault("driver", "bridge")
        return ident[:64], out
    if title == "Volume":
        out["mountpoint"] = f"/var/lib/docker/volumes/{name}/_data"
        return name or ident[:64], out
    if title == "RegistryImage":
        out["sha256Digest"] = "sha256:" + ident[:64]
        return out["name"], out
    if title == "RemoteImage":
        out.update(imageId="sha256:" + ident[:64], repoDigest="")
        return "sha256:" + ident[:64] + out["name"], out
    return ident[:64], out
