"""Filesystem and user of real sandboxes: read-only root, size-bounded writable paths, non-root user.

One stack for the module: a sandbox with the defaults plus two declared writable paths, and one with a
declared user. Every check runs inside the sandbox (docker exec) unless it says "host".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.deploy import engine_spec, shared_deployment
from tests.engine.sandbox_helpers import FILL, python, sh, state

pytestmark = pytest.mark.docker

MIB = 1024 * 1024
WORK_MIB = 4
TMP_MIB = 8
DECLARED_USER = "2345:2346"


@pytest.fixture(scope="module")
def stack(debian_image, harness_sweep_orphans, tmp_path_factory):
    templates = {
        "plain": {
            "base_image": debian_image,
            "command": ["sleep", "infinity"],
            "limits": {"memory": "64MiB"},
            # Something the sandbox user owns on the root filesystem, to show that ownership does not help.
            "snapshot": {"version": "1", "setup": [
                "mkdir -p /srv/owned && touch /srv/owned/file && chown -R 10001:10001 /srv/owned"]},
            "filesystem": {"writable": [{"path": "/tmp", "size": f"{TMP_MIB}MiB"},
                                        {"path": "/work", "size": f"{WORK_MIB}MiB"}]},
        },
        "declared": {"base_image": debian_image, "command": ["sleep", "infinity"], "user": DECLARED_USER,
                     "limits": {"memory": "32MiB"}},
    }
    spec = engine_spec(debian_image, templates)
    with shared_deployment(__file__, tmp_path_factory.mktemp("filesystem"), spec) as shared:
        yield shared


WRITE_PROBE = """
import errno, os, sys
for path in sys.argv[1:]:
    try:
        with open(path, "ab") as f:
            f.write(b"x")
        print(path, "written")
    except OSError as e:
        print(path, errno.errorcode[e.errno])
"""


def _write_results(container, paths: list[str], user: str | None = None) -> dict[str, str]:
    result = container.exec_run(["python3", "-c", WRITE_PROBE, *paths], user=user or "")
    assert result.exit_code == 0, result.output
    return dict(line.rsplit(" ", 1) for line in result.output.decode().splitlines())


def test_root_filesystem_is_read_only_even_for_root_in_the_sandbox(stack):
    stack.proves("Container.readOnly")
    sandbox = stack.container("plain")
    # Paths file modes would let each user write: the sandbox user's own file and directory (made by a
    # setup step), a world-writable directory, and, for uid 0 (docker exec -u 0, no capabilities either),
    # root-owned files. The kernel refuses every write with EROFS: no user or mode changes that.
    writable_by_mode = {
        None: ["/srv/owned/file", "/srv/owned/new", "/var/tmp/x"],
        "0": ["/etc/passwd", "/new-file", "/usr/local/lib/sandstack/supervise"],
    }
    for user, targets in writable_by_mode.items():
        results = _write_results(sandbox, targets, user)
        assert results == {t: "EROFS" for t in targets}, (user, results)
    code, out = sh(sandbox, "ls -ln /srv/owned/file; mkdir /srv/owned/dir 2>&1; awk '$2 == \"/\" {print $4}' /proc/mounts")
    assert out.split()[2] == "10001", out  # the file really is the sandbox user's
    assert "Read-only file system" in out
    assert out.strip().splitlines()[-1].split(",")[0] == "ro"


def test_declared_writable_paths_are_writable_and_bounded_by_their_size(stack):
    stack.proves("Container.tmpfs", "Container.readOnly")
    sandbox = stack.container("plain")
    probe = FILL
    for mount, size_mib in (("/work", WORK_MIB), ("/tmp", TMP_MIB)):
        result = sandbox.exec_run(["python3", "-c", probe, f"{mount}/fill"])
        assert result.exit_code == 0, result.output
        verdict, size = result.output.decode().split()
        # Writable by the sandbox user, up to exactly the declared size; one byte more is ENOSPC.
        assert verdict == "ENOSPC", f"{mount}: {verdict} after {size} bytes"
        assert int(size) == size_mib * MIB, f"{mount}: filled {size} bytes, declared {size_mib} MiB"
    # Both are tmpfs mounts of that size, and the sandbox user may create files there.
    code, out = sh(sandbox, "touch /work/a /tmp/b && ls -ln /work/a /tmp/b && df -k /work /tmp | tail -n 2")
    assert code == 0, out
    sizes = {line.split()[-1]: int(line.split()[1]) for line in out.splitlines() if line.startswith("tmpfs")}
    assert sizes == {"/work": WORK_MIB * 1024, "/tmp": TMP_MIB * 1024}, out


def test_sandbox_runs_as_non_root_user_10001_by_default(stack):
    stack.proves("Container.user")
    sandbox = stack.container("plain")
    code, out = sh(sandbox, "id -u; id -g; id -G")
    assert code == 0 and out.split() == ["10001", "10001", "10001"], out
    # Host view: every process of the sandbox (init, supervisor, command) runs as 10001, none as root.
    assert _host_uids(sandbox) == {"10001"}


def test_declared_user_is_the_sandbox_user(stack):
    stack.proves("Container.user")
    sandbox = stack.container("declared")
    uid, gid = DECLARED_USER.split(":")
    code, out = sh(sandbox, "id -u; id -g")
    assert code == 0 and out.split() == [uid, gid], out
    assert _host_uids(sandbox) == {uid}


def _host_uids(container) -> set[str]:
    """Real, effective, saved and filesystem uids of every process in the sandbox, read on the host."""
    pid = state(container)["Pid"]
    cgroup = next(line.split(":", 2)[2] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                  if "pids" in line.split(":")[1].split(","))
    procs = (Path("/sys/fs/cgroup/pids") / cgroup.lstrip("/") / "cgroup.procs").read_text().split()
    uids: set[str] = set()
    for proc in procs:
        try:
            status = Path(f"/proc/{proc}/status").read_text()
        except FileNotFoundError:  # a short-lived process (the supervisor's `sleep 1`) ended meanwhile
            continue
        uids.update(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:])
    assert len(procs) >= 3, procs  # docker-init, the supervisor, the command
    return uids


def test_writable_path_files_count_against_the_memory_limit(stack):
    # A tmpfs is memory: what a sandbox writes into its writable paths is charged to its memory cgroup
    # (engine-findings e), so `limits.memory` also bounds writable-path use.
    stack.proves("Container.tmpfs", "Container.memory")
    sandbox = stack.container("plain")
    code, out = python(sandbox, (
        "import os, re\n"
        "def usage():\n"
        "    return int(open('/sys/fs/cgroup/memory/memory.usage_in_bytes').read())\n"
        "before = usage()\n"
        "with open('/work/blob', 'wb') as f:\n"
        "    f.write(b'\\1' * (3 << 20))\n"
        "after = usage()\n"
        "os.remove('/work/blob')\n"
        "print(after - before)\n"
    ))
    assert code == 0, out
    assert int(out) >= 3 * MIB * 0.9, f"writing 3 MiB to /work charged only {int(out)} bytes"
