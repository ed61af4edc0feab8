"""Running linux/arm64 on this amd64 machine: Debian's qemu-user-static, registered with the kernel's binfmt_misc
(docs/design/platforms.md). Without systemd (this machine's PID 1 is not), nothing registers it at boot: `arm64()`
mounts binfmt_misc and registers the package's own entry when it can, and otherwise says why not.

The entry has the F flag ("fix binary"): the kernel opens the interpreter when it is registered, so a container whose
root has no qemu still runs arm64 programs through it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

BINFMT = Path("/proc/sys/fs/binfmt_misc")
ENTRY = BINFMT / "qemu-aarch64"
CONF = Path("/usr/lib/binfmt.d/qemu-aarch64.conf")  # shipped by qemu-user-static


def _registered() -> str | None:
    text = ENTRY.read_text()
    if not text.startswith("enabled"):
        return f"{ENTRY} is disabled"
    flags = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("flags:")), "")
    return None if "F" in flags else f"{ENTRY} lacks the F flag (flags: {flags!r}): containers could not find qemu"


def arm64() -> str | None:
    """None once arm64 programs run here (registered now if need be), else why they cannot."""
    if ENTRY.exists():
        return _registered()
    if not CONF.exists():
        return f"qemu-user-static is not installed ({CONF} missing): apt-get install qemu-user-static"
    if not (BINFMT / "register").exists():
        mounted = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)], capture_output=True,
                                 text=True)
        if mounted.returncode != 0:
            return f"cannot mount binfmt_misc on {BINFMT}: {mounted.stderr.strip()[-300:]}"
    line = next(line for line in CONF.read_text().splitlines() if line.startswith(":"))
    try:
        (BINFMT / "register").write_text(line)
    except OSError as error:
        if not ENTRY.exists():  # another process may have registered it meanwhile
            return f"cannot register qemu-aarch64 with binfmt_misc: {error}"
    return _registered()
