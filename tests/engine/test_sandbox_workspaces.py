"""Disk workspaces on the real engine: a filesystem of exactly the declared size (a write past it fails with
ENOSPC), noexec unless asked, kept across a restart while the tmpfs is emptied, seeded from the snapshot image
when the template says so, made anew (empty, at the new size) by a size change, and its loop device freed when
the stack is destroyed."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from testbed.deploy import Deployment, engine_spec
from tests.engine.sandbox_helpers import sh

pytestmark = pytest.mark.docker

MIB = 1024 * 1024
SEEDED = "cloned at build time\n"


def _spec(image: str, work_mib: int) -> str:
    text = engine_spec(image, {"agent": {
        "base_image": image, "command": ["sleep", "infinity"], "limits": {"memory": "64MiB", "disk": "256MiB"},
        # What a template clones at build time, owned by the sandbox user so it is writable in place.
        "snapshot": {"version": "1", "setup": [
            f"mkdir -p /srv/repo && printf '{SEEDED}' > /srv/repo/README && chown -R 10001:10001 /srv/repo"]},
        "filesystem": {"writable": [
            {"path": "/tmp", "size": "8MiB"},
            {"path": "/work", "type": "disk", "size": f"{work_mib}MiB"},
            {"path": "/srv/repo", "type": "disk", "size": "16MiB", "seed": True},
        ]},
    }})
    data = yaml.safe_load(text)
    data["hosts"]["local"]["disk_workspaces"] = "1GiB"
    return yaml.safe_dump(data, sort_keys=False)


def _loops_of(volume_prefix: str) -> list[str]:
    """The host's loop devices whose backing file is one of this stack's workspace images."""
    out = subprocess.run(["losetup", "-n", "-l", "-O", "NAME,BACK-FILE"], capture_output=True, text=True,
                         check=True).stdout
    return [line for line in out.splitlines() if volume_prefix in line]


def test_a_disk_workspace_is_size_enforced_persistent_seeded_and_renewed_by_a_size_change(
        docker_harness, docker_client, debian_image, tmp_path):
    docker_harness.proves("Volume.driverOpts", "Volume.driver", "Container.devices", "Container.deviceCgroupRules")
    deployment = Deployment(docker_harness, tmp_path)
    deployment.up(_spec(debian_image, 24))
    sandbox = deployment.container("agent")
    work = f"{deployment.name('agent', '0')}-ws0-24m"
    assert {m["Destination"]: m.get("Name") for m in sandbox.attrs["Mounts"] if m["Type"] == "volume"}["/work"] == work

    # An ext4 filesystem of the declared size, like a tmpfs: world-writable with the sticky bit, noexec.
    code, out = sh(sandbox, "stat -f -c %T /work; stat -c %a /work; df -k --output=size /work | tail -1; "
                            "cp /bin/true /work/true && /work/true 2>/dev/null; echo exec=$?")
    kind, mode, size_kb, exec_line = out.split()
    assert (kind, mode, exec_line) == ("ext2/ext3", "1777", "exec=126"), out
    assert 16 * 1024 < int(size_kb) <= 24 * 1024, out  # 24MiB less ext4's own metadata (journal, inodes)

    # A write past the size fails with ENOSPC, and what fitted stays readable.
    code, out = sh(sandbox, "dd if=/dev/zero of=/work/fill bs=1M count=40 2>&1; echo rc=$?")
    assert "No space left on device" in out and out.strip().endswith("rc=1"), out
    code, out = sh(sandbox, "echo kept > /work/keep && echo gone > /tmp/gone && rm /work/fill && cat /work/keep")
    assert code == 0 and out == "kept\n", out

    # Seeded from the image, with the image's owner: the clone is writable in place.
    code, out = sh(sandbox, "cat /srv/repo/README && stat -c %u /srv/repo && echo edit >> /srv/repo/README")
    assert code == 0 and out == f"{SEEDED}10001\n", out

    # A restart keeps the workspaces and empties the tmpfs.
    sandbox.restart(timeout=5)
    code, out = sh(sandbox, "cat /work/keep /srv/repo/README; ls /tmp")
    assert code == 0 and out == f"kept\n{SEEDED}edit\n", out

    # The same spec again changes nothing; a new size makes a new, empty workspace and moves the sandbox.
    again = deployment.up(_spec(debian_image, 24))
    assert again.count() == again.count("same"), [(a.kind, a.name) for a in again.actions if a.kind != "same"]
    deployment.up(_spec(debian_image, 32))
    sandbox = deployment.container("agent")
    code, out = sh(sandbox, "ls -A /work; df -k --output=size /work | tail -1; cat /srv/repo/README")
    lines = out.split()
    assert lines[0] == "lost+found" and int(size_kb) < int(lines[1]) <= 32 * 1024, out
    assert out.endswith(f"{SEEDED}edit\n"), out  # the seeded workspace was not renewed
    assert work not in {v.name for v in docker_client.volumes.list(filters={"label": f"sandstack.stack={deployment.stack}"})}

    # Destroyed: the volumes are gone and so are the loop devices that held their images.
    prefix = f"sandstack-{deployment.stack}-"
    assert len(_loops_of(prefix)) >= 2
    deployment.harness.destroy()
    assert _loops_of(prefix) == []
