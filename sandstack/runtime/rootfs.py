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
"""

from __future__ import annotations

from typing import Any

import docker
import requests

from sandstack.runtime.backend import BackendError
from sandstack.runtime.scripts import CLEAN

MOUNT = "/sandstack-root"
CAPABILITIES = ["DAC_OVERRIDE", "FOWNER"]
TIMEOUT = 300  # seconds


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
