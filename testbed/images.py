"""Test images built on this machine (no registry exists), cached by the content of their recipe.

Each image is tagged ``sandstack-test/<name>:<hash>``, where the hash covers everything that defines it
(packages, Dockerfile text, extra files, RECIPE_VERSION). When the tag exists locally nothing is built.

    python -m testbed.images            # prebuild every image (CI does this before pytest)
    python -m testbed.images --list     # print the tags without building

Images:
- busybox: ``FROM scratch`` + busybox-static (2 MB, builds in about a second). Its ``wget`` segfaults;
  ``httpd``, ``nslookup``, ``ping`` work. Its ``nc`` is the small variant: TCP only, no ``-z``/``-u``
  (port check: ``nc -w 1 HOST PORT </dev/null``, exit 0 when open); use the debian image for UDP.
  Has a non-root user ``sandbox`` (1000:1000).
- busybox-arm64: the busybox image for linux/arm64, from Debian's arm64 busybox-static package (apt's lists and
  cache for arm64 kept apart from the system's, under /var/tmp), built with the build's platform linux/arm64; its
  RUN step runs under qemu-user-static (testbed/emulation.py: built only where arm64 programs run here).
- debian: ``debootstrap --variant=minbase`` bookworm with squid, python3, firewall, HTTP/TCP/UDP/DNS
  tools, then ``docker import`` (about a minute, needs root and the Debian package mirror).
- debian-rsync: the debian image plus rsync, from Debian's packages (rsync and the two libraries the debian image
  lacks, unpacked into the image: no package manager runs in the build), for `rsync -e ssh` into a sandbox.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# Bump when the build code below changes in a way the recipe fields do not capture.
RECIPE_VERSION = "1"
REPOSITORY_PREFIX = "sandstack-test"
LOCK_PATH = Path(tempfile.gettempdir()) / "sandstack-test-images.lock"

BUSYBOX_PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\n"
    "sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
)
BUSYBOX_GROUP = "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n"
BUSYBOX_DOCKERFILE = """\
FROM scratch
COPY busybox /bin/busybox
COPY passwd group /etc/
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN mkdir -p /tmp /home/sandbox /root /var/www && chmod 1777 /tmp \\
 && chown 1000:1000 /home/sandbox && chmod 0700 /root
CMD ["/bin/sh"]
"""

DEBIAN_SUITE = "bookworm"
# What the engine tests need: an egress proxy (squid), a web server and scripting (python3), firewall
# commands (iptables, iproute2), process tools (procps), an HTTP client that speaks to proxies (curl),
# raw TCP/UDP probes (netcat-openbsd), DNS lookups (dnsutils) and sudo (templates with `security.sudo`); as the
# infra image also the ingress proxy (caddy), the runtime service (FastAPI, uvicorn with httptools and wsproto, the
# Docker SDK, prometheus_client, asyncssh), the connection logger (ulogd2) and the logging resolver (dnsmasq).
DEBIAN_PACKAGES = (
    "squid-openssl",
    "haproxy",  # the gateway's front, which holds its ports while squid reconfigures
    "caddy",
    "python3-fastapi",
    "python3-uvicorn",
    "python3-httptools",  # the runtime's request parser (sandstack/runtime/connections.py)
    "python3-wsproto",  # the runtime's terminals (uvicorn's WebSocket)
    "python3-docker",
    "python3-prometheus-client",  # the runtime's metrics (GET /metrics)
    "python3-asyncssh",  # the runtime's SSH endpoint (docs/design/ssh.md)
    # python3-cryptography's dependency through virtual packages (python3-cffi-backend-api-*), which debootstrap does
    # not resolve: without it, configuring python3-cryptography failed the build.
    "python3-cffi-backend",
    "ulogd2",
    "dnsmasq-base",
    "python3",
    "iptables",
    "iproute2",
    "procps",
    "curl",
    "netcat-openbsd",
    "dnsutils",
    "sudo",
)
# Removed from the root fs before import: package caches and documentation only.
DEBIAN_PRUNE = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
                "usr/share/info", "usr/share/locale")
DEBIAN_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    'CMD ["/bin/bash"]',
)


@dataclass(frozen=True)
class Recipe:
    name: str
    fields: dict

    @property
    def content_hash(self) -> str:
        blob = json.dumps({"name": self.name, "version": RECIPE_VERSION, **self.fields}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def tag(self) -> str:
        return f"{REPOSITORY_PREFIX}/{self.name}:{self.content_hash}"


BUSYBOX = Recipe("busybox", {"dockerfile": BUSYBOX_DOCKERFILE, "passwd": BUSYBOX_PASSWD,
                             "group": BUSYBOX_GROUP, "package": "busybox-static"})
BUSYBOX_ARM64 = Recipe("busybox-arm64", {**BUSYBOX.fields, "package": "busybox-static:arm64",
                                          "platform": "linux/arm64"})
# apt's package lists and downloads for arm64, apart from the system's (its dpkg stays amd64 only).
ARM64_APT = Path("/var/tmp/sandstack-apt-arm64")
DEBIAN = Recipe("debian", {"suite": DEBIAN_SUITE, "variant": "minbase", "packages": list(DEBIAN_PACKAGES),
                           "prune": list(DEBIAN_PRUNE), "changes": list(DEBIAN_CHANGES)})


RSYNC_PACKAGES = ("rsync", "libpopt0", "libxxhash0")  # rsync's libraries the debian image does not have
DEBIAN_RSYNC_DOCKERFILE = "ARG BASE\nFROM ${BASE}\nCOPY usr/ /usr/\n"
DEBIAN_RSYNC = Recipe("debian-rsync", {"base": DEBIAN.tag, "packages": list(RSYNC_PACKAGES),
                                       "dockerfile": DEBIAN_RSYNC_DOCKERFILE})
RSYNC_CACHE = Path("/var/tmp/sandstack-rsync")  # Debian's rsync unpacked, for this machine's side of a transfer


class _Progress:
    """Prints `[images] <name> +<seconds>s: <message>` lines, flushed at once (CI logs show them live)."""

    def __init__(self, name: str):
        self.name = name
        self.start = time.monotonic()

    def __call__(self, message: str) -> None:
        print(f"[images] {self.name} +{time.monotonic() - self.start:.0f}s: {message}", flush=True)


def _exists(client, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


@contextlib.contextmanager
def _build_lock():
    """Serialise builds across processes (other test runs on this machine may build the same tag)."""
    with open(LOCK_PATH, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ensure(client, recipe: Recipe, build) -> str:
    if _exists(client, recipe.tag):
        return recipe.tag
    with _build_lock():
        if _exists(client, recipe.tag):  # built by another process while we waited
            return recipe.tag
        progress = _Progress(recipe.name)
        progress(f"building {recipe.tag}")
        with tempfile.TemporaryDirectory(prefix=f"sandstack-{recipe.name}-", dir="/var/tmp") as work:
            build(client, recipe, Path(work), progress)
        progress(f"built {recipe.tag}")
    return recipe.tag


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}): {result.stderr.strip()[-2000:]}")


def _busybox_binary(work: Path, progress: _Progress) -> Path:
    """busybox from Debian's busybox-static package: downloaded, or the installed copy if apt cannot."""
    try:
        _run(["apt-get", "download", "busybox-static"], cwd=work)
        deb = next(work.glob("busybox-static_*.deb"))
        _run(["dpkg", "-x", str(deb), str(work / "pkg")])
        progress(f"using {deb.name}")
        return work / "pkg" / "bin" / "busybox"
    except (RuntimeError, StopIteration, FileNotFoundError) as error:
        installed = Path("/bin/busybox")
        listed = subprocess.run(["dpkg", "-L", "busybox-static"], capture_output=True, text=True)
        if listed.returncode == 0 and "/bin/busybox" in listed.stdout.split():
            progress(f"apt-get download failed ({str(error)[:120]}); using installed busybox-static")
            return installed
        raise RuntimeError("cannot get busybox-static: apt-get download failed and the package is not "
                           "installed (apt-get install busybox-static)") from error


def _build_busybox(client, recipe: Recipe, work: Path, progress: _Progress) -> None:
    context = work / "context"
    context.mkdir()
    shutil.copy(_busybox_binary(work, progress), context / "busybox")
    (context / "busybox").chmod(0o755)
    (context / "passwd").write_text(BUSYBOX_PASSWD)
    (context / "group").write_text(BUSYBOX_GROUP)
    (context / "Dockerfile").write_text(BUSYBOX_DOCKERFILE)
    progress("docker build")
    client.images.build(path=str(context), tag=recipe.tag, rm=True, forcerm=True,
                        labels={"org.sandstack.test-image": recipe.name})


def _arm64_busybox(work: Path, progress: _Progress) -> Path:
    options = ["-o", f"Dir::State::Lists={ARM64_APT}/lists", "-o", f"Dir::Cache={ARM64_APT}/cache",
               "-o", "APT::Architecture=arm64", "-o", "APT::Architectures::=arm64"]
    for folder in ("lists/partial", "cache/archives/partial"):
        (ARM64_APT / folder).mkdir(parents=True, exist_ok=True)
    try:
        _run(["apt-get", *options, "download", "busybox-static:arm64"], cwd=work)
    except RuntimeError:
        progress("apt-get update (arm64 lists)")
        _run(["apt-get", *options, "update", "-q"])
        _run(["apt-get", *options, "download", "busybox-static:arm64"], cwd=work)
    deb = next(work.glob("busybox-static_*_arm64.deb"))
    _run(["dpkg", "-x", str(deb), str(work / "pkg")])
    progress(f"using {deb.name}")
    return work / "pkg" / "bin" / "busybox"


def _build_busybox_arm64(client, recipe: Recipe, work: Path, progress: _Progress) -> None:
    from testbed import emulation

    reason = emulation.arm64()
    if reason is not None:
        raise RuntimeError(f"cannot build {recipe.tag}: {reason}")
    context = work / "context"
    context.mkdir()
    shutil.copy(_arm64_busybox(work, progress), context / "busybox")
    (context / "busybox").chmod(0o755)
    (context / "passwd").write_text(BUSYBOX_PASSWD)
    (context / "group").write_text(BUSYBOX_GROUP)
    (context / "Dockerfile").write_text(BUSYBOX_DOCKERFILE)
    progress("docker build --platform linux/arm64 (its RUN under qemu-user-static)")
    client.images.build(path=str(context), tag=recipe.tag, rm=True, forcerm=True, platform="linux/arm64",
                        labels={"org.sandstack.test-image": recipe.name})


def _build_debian(client, recipe: Recipe, work: Path, progress: _Progress) -> None:
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed (apt-get install debootstrap)")
    if os.geteuid() != 0:
        raise RuntimeError("building the debian test image needs root (debootstrap)")
    rootfs = work / "rootfs"
    cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(DEBIAN_PACKAGES)}", DEBIAN_SUITE,
           str(rootfs)]
    progress(" ".join(cmd))
    # debootstrap prints lines per package: show the first line of each kind (its verb), warnings,
    # errors, and the latest line every 10 s.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    verbs_seen: set[str] = set()
    last_shown = time.monotonic()
    for line in proc.stdout:
        line = line.rstrip()
        tail = (tail + [line])[-30:]
        verb = (line.split()[1:2] or [""])[0]
        if verb not in verbs_seen or line.startswith(("W:", "E:")) or time.monotonic() - last_shown > 10:
            verbs_seen.add(verb)
            last_shown = time.monotonic()
            progress(f"debootstrap: {line}")
    if proc.wait() != 0:
        raise RuntimeError(f"debootstrap failed ({proc.returncode}):\n" + "\n".join(tail))
    for relative in DEBIAN_PRUNE:
        target = rootfs / relative
        if target.is_dir():
            shutil.rmtree(target)
            target.mkdir()
    archive = work / "rootfs.tar"
    progress("packing root fs")
    _run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(archive), "."])
    shutil.rmtree(rootfs)
    progress(f"docker import ({archive.stat().st_size // 2**20} MiB)")
    repository, tag = recipe.tag.rsplit(":", 1)
    client.api.import_image_from_file(str(archive), repository=repository, tag=tag,
                                      changes=list(DEBIAN_CHANGES))
    if not _exists(client, recipe.tag):
        raise RuntimeError(f"docker import did not create {recipe.tag}")


def busybox_image(client) -> str:
    """Tag of the busybox test image, built if missing."""
    return _ensure(client, BUSYBOX, _build_busybox)


def busybox_arm64_image(client) -> str:
    """Tag of the linux/arm64 busybox image, built if missing (needs arm64 emulation: testbed/emulation.py)."""
    return _ensure(client, BUSYBOX_ARM64, _build_busybox_arm64)


def debian_image(client) -> str:
    """Tag of the Debian test image (squid, python3, iptables, curl, nc, dig), built if missing."""
    return _ensure(client, DEBIAN, _build_debian)


def debian_rsync_image(client) -> str:
    """Tag of the Debian image with rsync (and the debian image under it), built if missing."""
    debian_image(client)
    return _ensure(client, DEBIAN_RSYNC, _build_debian_rsync)


def _unpack_debs(packages: tuple[str, ...], work: Path, into: Path) -> None:
    """Debian's `packages` downloaded into `work` and unpacked into `into`, everything under usr/ (bookworm's root
    directories are links into /usr)."""
    _run(["apt-get", "download", *packages], cwd=work)
    for deb in sorted(work.glob("*.deb")):
        _run(["dpkg", "-x", str(deb), str(into)])
    for top in ("bin", "sbin", "lib"):
        moved = into / top
        if moved.is_dir() and not moved.is_symlink():
            _run(["cp", "-a", f"{moved}/.", str(into / "usr" / top)])
            shutil.rmtree(moved)


def _build_debian_rsync(client, recipe: Recipe, work: Path, progress: _Progress) -> None:
    context = work / "context"
    context.mkdir()
    _unpack_debs(RSYNC_PACKAGES, work, context)
    (context / "Dockerfile").write_text(DEBIAN_RSYNC_DOCKERFILE)
    progress(f"docker build FROM {DEBIAN.tag}")
    client.images.build(path=str(context), tag=recipe.tag, rm=True, forcerm=True, buildargs={"BASE": DEBIAN.tag},
                        labels={"org.sandstack.test-image": recipe.name})


def rsync_program() -> str:
    """This machine's rsync: the installed one, else Debian's package unpacked under RSYNC_CACHE (its libraries
    are this machine's)."""
    installed = shutil.which("rsync")
    if installed is not None:
        return installed
    program = RSYNC_CACHE / "usr" / "bin" / "rsync"
    with _build_lock():
        if not program.exists():
            work = Path(tempfile.mkdtemp(prefix="sandstack-rsync-", dir="/var/tmp"))
            try:
                _unpack_debs(("rsync",), work, work / "root")
                (work / "root").rename(RSYNC_CACHE)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return str(program)


ALL = {"busybox": busybox_image, "debian": debian_image}


def main(argv: list[str]) -> int:
    if "--list" in argv:
        for recipe in (BUSYBOX, DEBIAN):
            print(recipe.tag)
        return 0
    import docker

    client = docker.from_env()
    for name, ensure in ALL.items():
        started = time.monotonic()
        tag = ensure(client)
        print(f"[images] {name}: {tag} ready ({time.monotonic() - started:.1f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
