"""Label sweeps: remove every container, network, volume and image the harness made.

    python -m testbed.harness.teardown --orphans     # sessions whose test process is gone
    python -m testbed.harness.teardown --session ID  # one session
    python -m testbed.harness.teardown --list        # what carries harness labels now

Only objects labelled by the harness are touched (sandstack.harness.session / .pid), so a sweep never
removes the cached test images or another engineer's containers.
"""

from __future__ import annotations

import argparse
import os
import sys

import docker
import docker.errors

from testbed.harness.docker_backend import LABEL_PID, LABEL_SESSION

KINDS = ("containers", "networks", "volumes", "images")


def _labelled(api, label: str) -> dict[str, list[dict]]:
    return {
        "containers": api.containers(all=True, filters={"label": label}),
        "networks": api.networks(filters={"label": label}),
        "volumes": api.volumes(filters={"label": label}).get("Volumes") or [],
        # Newest first: an image built FROM another one must go before its parent.
        "images": sorted(api.images(all=True, filters={"label": label}), key=lambda i: -i.get("Created", 0)),
    }


def remaining(api, session_id: str) -> dict[str, list[str]]:
    """Names/ids of objects still labelled with `session_id` (empty dict when none)."""
    found = _labelled(api, f"{LABEL_SESSION}={session_id}")
    return {kind: [_name(kind, o) for o in objs] for kind, objs in found.items() if objs}


def sweep(api, label: str) -> dict[str, list[str]]:
    """Force-removes every object with `label` (containers first); returns what it removed."""
    removed: dict[str, list[str]] = {}
    found = _labelled(api, label)
    removers = {
        "containers": lambda o: api.remove_container(o["Id"], force=True, v=True),
        "networks": lambda o: api.remove_network(o["Id"]),
        "volumes": lambda o: api.remove_volume(o["Name"], force=True),
        "images": lambda o: api.remove_image(o["Id"], force=True),
    }
    for kind in KINDS:
        for obj in found[kind]:
            try:
                removers[kind](obj)
            except docker.errors.NotFound:
                continue
            except docker.errors.APIError as error:  # e.g. an image still used by a container of a live run
                print(f"[harness] could not remove {kind[:-1]} {_name(kind, obj)}: {error.explanation}", file=sys.stderr)
                continue
            removed.setdefault(kind, []).append(_name(kind, obj))
    return removed


def sweep_session(api, session_id: str) -> dict[str, list[str]]:
    return sweep(api, f"{LABEL_SESSION}={session_id}")


def sweep_orphans(api) -> dict[str, list[str]]:
    """Sweeps the sessions whose test process (label sandstack.harness.pid) no longer runs here."""
    removed: dict[str, list[str]] = {}
    sessions = set()
    for objs in _labelled(api, LABEL_PID).values():
        for obj in objs:
            labels = obj.get("Labels") or {}
            if not pid_alive(labels.get(LABEL_PID, "")) and labels.get(LABEL_SESSION):
                sessions.add(labels[LABEL_SESSION])
    for session in sorted(sessions):
        for kind, names in sweep_session(api, session).items():
            removed.setdefault(kind, []).extend(names)
    return removed


def pid_alive(pid_text: str) -> bool:
    """Whether process `pid_text` (a label's text) still runs here; anything but a number counts as gone."""
    try:
        os.kill(int(pid_text), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _name(kind: str, obj: dict) -> str:
    if kind == "containers":
        return (obj.get("Names") or [obj["Id"][:12]])[0].lstrip("/")
    if kind == "images":
        return (obj.get("RepoTags") or [obj["Id"][:19]])[0]
    return obj.get("Name") or obj["Id"][:12]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--orphans", action="store_true")
    group.add_argument("--session")
    group.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    api = docker.APIClient(version="auto")
    if args.list:
        for kind, objs in _labelled(api, LABEL_SESSION).items():
            for obj in objs:
                print(kind[:-1], _name(kind, obj), (obj.get("Labels") or {}).get(LABEL_SESSION))
        return 0
    print(sweep_orphans(api) if args.orphans else sweep_session(api, args.session))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
