"""A writable root reset to its image: what a session installed or changed outside its writable paths
(`read_only_root: false`) is not seen by the next session.

A container's root is its image's layers under an overlay whose upper directory holds every change the
container made (a new file, a changed one, a whiteout for a removed one). With the container stopped the overlay
is not mounted, and emptying that directory gives the container back its image's root: same container, same
id (`pulumi up` still finds it), same configuration. The runtime cannot see the host's Docker data directory, so
a throwaway container does it, as a reset's workspace helper does (docker_backend.clean_workspaces): the
sandbox's own image, the upper directory bind-mounted (not at its path, so nothing is copied), root with
DAC_OVERRIDE and FOWNER only (a session's read-only directories, other users' files), no network, a read-only
root of its own, no new privileges; checked empty afterwards (scripts.CLEAN). Docker's overlay2 storage driver
names the directory in `GraphDriver.Data.UpperDir`; a daemon whose storage does not (the containerd image
store) cannot be reset this way, and the sandbox is quarantined rather than handed out with the last session's
root.

The same directory is what a snapshot keeps of a writable root (sandstack.runtime.rootsnap): `read_root` tars it
in a helper that mounts it read-only, with DAC_READ_SEARCH only (it reads every file and directory, whoever owns
it, and can change nothing); the container keeps running (reading an upper directory under a mounted overlay is
safe, only changing it is not). `write_root` extracts such a tar into the directory once a reset has emptied it,
the container stopped, as root with CHOWN (each file's owner), FOWNER (its mode and times, once owned by another
user), DAC_OVERRIDE (into a directory the session made unwritable), FSETID (a setgid bit of a group root is not
in, which the kernel clears on chmod otherwise) and MKNOD (the whiteouts: character devices 0/0, overlay's mark of
a removed image file). The tars go through the helper's attached stdout and stdin: nothing
is written on the host by the helper, and it logs nowhere (the log driver `none`), so the daemon keeps no copy.
Overlay's own extended attributes (`trusted.overlay.opaque` on a directory removed and made again) need
CAP_SYS_ADMIN to read or write and are not kept: docs/design/runtime.md says what that changes.
"""

from __future__ import annotations

import socket
import time
from typing import Any, BinaryIO, Callable

import docker
import requests

from sandstack.runtime.backend import BackendError, CappedBuffer, Sink
from sandstack.runtime.docker_exec import STDERR, STDOUT, shut
from sandstack.runtime.frames import copy_frames
from sandstack.runtime.scripts import CLEAN

MOUNT = "/sandstack-root"
CAPABILITIES = ["DAC_OVERRIDE", "FOWNER"]
READ_CAPABILITIES = ["DAC_READ_SEARCH"]
WRITE_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "MKNOD"]
TIMEOUT = 300  # seconds
# Numeric owners both ways: the image's /etc/passwd (the helper's) may not name a user the session added. busybox's
# tar has no such option and stores numbers anyway.
TAR_READ = ('if tar --help 2>&1 | grep -q -- --numeric-owner; then exec tar --numeric-owner -cf - .; fi\n'
            'exec tar -cf - .\n')
TAR_WRITE = ('if tar --help 2>&1 | grep -q -- --numeric-owner; then exec tar --numeric-owner -xpf -; fi\n'
             'exec tar -xpf -\n')


def upper_dir(info: dict[str, Any]) -> str:
    """The container's own changes, from `docker inspect`; BackendError when its storage has no such directory."""
    driver = info.get("GraphDriver") or {}
    upper = (driver.get("Data") or {}).get("UpperDir")
    if driver.get("Name") != "overlay2" or not upper:
        raise BackendError(f"container {info.get('Name', '?').lstrip('/')!r} has a writable root on storage "
                           f"{driver.get('Name') or 'unknown'!r}, whose changes the runtime cannot reset (it needs "
                           "overlay2's upper directory)")
    return upper


def reset_root(api: docker.APIClient, name: str, info: dict[str, Any], labels: dict[str, str]) -> None:
    """Empties the stopped container's upper directory (its root back to the image); raises BackendError."""
    upper = upper_dir(info)
    helper = f"{name}-root-reset"
    _remove(api, helper)  # a runtime that stopped mid-reset may have left it
    config = api.create_host_config(
        binds={upper: {"bind": MOUNT, "mode": "rw"}}, network_mode="none", cap_drop=["ALL"], cap_add=CAPABILITIES,
        security_opt=["no-new-privileges:true"], read_only=True, mem_limit="64m", pids_limit=64)
    api.create_container(info["Image"], entrypoint=["sh", "-c", CLEAN, "sandstack-clean"], command=[], user="0:0",
                         working_dir=MOUNT, host_config=config, labels=labels, name=helper, network_disabled=True)
    try:
        api.start(helper)
        code = api.wait(helper, timeout=TIMEOUT)["StatusCode"]
        err = api.logs(helper, stdout=False, stderr=True).decode(errors="replace").strip()
    except requests.exceptions.ReadTimeout:
        code, err = None, f"did not finish in {TIMEOUT}s"
    finally:
        _remove(api, helper)
    if code != 0:
        raise BackendError(f"the writable root of {name!r} could not be reset to its image (exit {code}): "
                           f"{err[-500:] or 'no message'}")


def _remove(api: docker.APIClient, helper: str) -> None:
    try:
        api.remove_container(helper, force=True)
    except docker.errors.NotFound:
        pass


def read_root(api: docker.APIClient, name: str, info: dict[str, Any], labels: dict[str, str], out: Sink) -> None:
    """A tar of the container's upper directory (its root's changes, whiteouts included) to `out` as it is read;
    raises BackendError, or what `out` raises (a bound passed: the helper is removed at once)."""
    _stream(api, name, info, labels, "root-snapshot", mode="ro", script=TAR_READ, caps=READ_CAPABILITIES, out=out)


def write_root(api: docker.APIClient, name: str, info: dict[str, Any], labels: dict[str, str], tar: BinaryIO,
               send: Callable[[socket.socket, BinaryIO], None]) -> None:
    """`tar` (a checked read_root's) extracted into the stopped container's emptied upper directory; `send` writes
    it to the attached socket and half-closes it (the backend's own, as for an exec's stdin)."""
    _stream(api, name, info, labels, "root-restore", mode="rw", script=TAR_WRITE, caps=WRITE_CAPABILITIES,
            stdin=tar, send=send, out=CappedBuffer(0))


def _stream(api: docker.APIClient, name: str, info: dict[str, Any], labels: dict[str, str], role: str, *,
            mode: str, script: str, caps: list[str], out: Sink, stdin: BinaryIO | None = None,
            send: Callable[[socket.socket, BinaryIO], None] | None = None) -> None:
    upper = upper_dir(info)
    helper = f"{name}-{role}"
    labels = {key: (role if key.endswith(".role") else value) for key, value in labels.items()}
    _remove(api, helper)  # a runtime that stopped mid-copy may have left it
    config = api.create_host_config(
        binds={upper: {"bind": MOUNT, "mode": mode}}, network_mode="none", cap_drop=["ALL"], cap_add=caps,
        security_opt=["no-new-privileges:true"], read_only=True, mem_limit="64m", pids_limit=64,
        log_config=docker.types.LogConfig(type="none"))
    api.create_container(info["Image"], entrypoint=["sh", "-c", script, f"sandstack-{role}"], command=[],
                         user="0:0", working_dir=MOUNT, host_config=config, labels=labels, name=helper,
                         network_disabled=True, stdin_open=stdin is not None)  # and StdinOnce: EOF ends it
    err = CappedBuffer(8192)
    code: int | None = None
    try:
        # Attached before it starts, as `docker run` does: nothing it writes is missed.
        raw = api.attach_socket(helper, params={"stdin": int(stdin is not None), "stdout": 1, "stderr": 1,
                                                "stream": 1})
        sock: socket.socket = getattr(raw, "_sock", raw)
        try:
            api.start(helper)
            if stdin is not None and send is not None:
                send(sock, stdin)
            finished = copy_frames(sock, {STDOUT: out, STDERR: err}, time.monotonic() + TIMEOUT)
        finally:
            shut(sock)
        if finished:
            code = api.wait(helper, timeout=TIMEOUT)["StatusCode"]
    except requests.exceptions.ReadTimeout:
        pass
    finally:
        _remove(api, helper)
    if code != 0:
        doing = "read" if stdin is None else "written back"
        message = err.data.decode(errors="replace").strip() or (f"did not finish in {TIMEOUT}s" if code is None
                                                                else "no message")
        raise BackendError(f"the writable root of {name!r} could not be {doing} (exit {code}): {message[-500:]}")
