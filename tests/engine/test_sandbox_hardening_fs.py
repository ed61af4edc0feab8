"""Filesystem and file-descriptor hardening of real sandboxes: noexec writable paths (exec only where a path
opts in), a /dev/shm bounded at the declared size and noexec, and the declared open-files limit.

One stack for the module: `hard` declares every knob (two writable paths, one of them exec, a small /dev/shm
and a small open-files limit); `plain` declares none of them and gets the built-ins. Every check runs inside
the sandbox (docker exec, as the sandbox user) unless it says "host".
"""

from __future__ import annotations

import re

import pytest

from testbed.deploy import engine_spec, shared_deployment
from tests.engine.sandbox_helpers import FILL, python, sh

pytestmark = pytest.mark.docker

MIB = 1024 * 1024
SHM_MIB = 4
OPEN_FILES = 200
BUILTIN_SHM_MIB = 16  # sandstack.spec.resolve.BUILTIN_SHM_SIZE
BUILTIN_OPEN_FILES = 1024  # sandstack.spec.models.limits.BUILTIN_LIMITS["open_files"]


@pytest.fixture(scope="module")
def stack(debian_image, harness_sweep_orphans, tmp_path_factory):
    templates = {
        # 8 + 8 + 4 MiB of tmpfs plus 32MiB for processes fit in 128MiB (rule writable-memory).
        "hard": {
            "base_image": debian_image,
            "command": ["sleep", "infinity"],
            "limits": {"memory": "128MiB", "open_files": OPEN_FILES},
            "filesystem": {"writable": [{"path": "/tmp", "size": "8MiB"},
                                        {"path": "/work", "size": "8MiB", "exec": True}],
                           "shm_size": f"{SHM_MIB}MiB"},
        },
        # Built-ins: a noexec /tmp, a 16MiB /dev/shm and 1024 open files, which all fit in 128MiB.
        "plain": {"base_image": debian_image, "command": ["sleep", "infinity"], "limits": {"memory": "128MiB"}},
    }
    spec = engine_spec(debian_image, templates)
    with shared_deployment(__file__, tmp_path_factory.mktemp("hardening-fs"), spec) as shared:
        yield shared


# Copies a real program into `dir`, shows it is there and executable by mode, then runs it. On a noexec mount
# the kernel refuses the execve with EACCES, which the shell reports as "Permission denied" and status 126.
# No `test -x` in the copy check: access(X_OK) itself fails on a noexec mount.
RUN_COPY = ('cp /bin/true {dir}/prog && chmod 0755 {dir}/prog && echo copied; '
            '{dir}/prog; echo "rc=$?"')


def _mount_options(sandbox, mount: str) -> set[str]:
    code, out = sh(sandbox, f"awk '$2 == \"{mount}\" {{print $1, $3, $4}}' /proc/mounts")
    assert code == 0 and out.strip(), out
    source, fstype, options = out.split()
    assert (source, fstype) == ("shm" if mount == "/dev/shm" else "tmpfs", "tmpfs"), out
    return set(options.split(","))


def _run_copy(sandbox, directory: str) -> tuple[int, str]:
    code, out = sh(sandbox, RUN_COPY.format(dir=directory) + f"; rm -f {directory}/prog")
    assert code == 0 and "copied" in out, out  # the copy itself worked: what follows is about running it
    return int(re.search(r"rc=(\d+)", out).group(1)), out


def test_a_writable_path_is_noexec_by_default(stack):
    stack.proves("Container.tmpfs")
    for pool in ("hard", "plain"):
        sandbox = stack.container(pool)
        rc, out = _run_copy(sandbox, "/tmp")
        assert rc == 126 and "Permission denied" in out, (pool, out)
        assert {"noexec", "nosuid", "nodev"} <= _mount_options(sandbox, "/tmp"), pool


def test_a_writable_path_that_opts_in_runs_programs(stack):
    stack.proves("Container.tmpfs")
    sandbox = stack.container("hard")
    rc, out = _run_copy(sandbox, "/work")
    assert rc == 0, out
    options = _mount_options(sandbox, "/work")
    assert "noexec" not in options and {"nosuid", "nodev"} <= options, options




@pytest.mark.parametrize(("pool", "size_mib"), [("hard", SHM_MIB), ("plain", BUILTIN_SHM_MIB)])
def test_dev_shm_is_bounded_at_the_declared_size(stack, pool, size_mib):
    stack.proves("Container.shmSize")
    sandbox = stack.container(pool)
    result = sandbox.exec_run(["python3", "-c", FILL, "/dev/shm/fill"])
    assert result.exit_code == 0, result.output
    verdict, size = result.output.decode().split()
    # Writable by the sandbox user up to exactly the declared size; one byte more is ENOSPC.
    assert verdict == "ENOSPC", f"{pool}: {verdict} after {size} bytes"
    assert int(size) == size_mib * MIB, f"{pool}: filled {size} bytes, declared {size_mib} MiB"
    code, out = sh(sandbox, "df -k /dev/shm | tail -n 1")
    assert code == 0 and int(out.split()[1]) == size_mib * 1024, out
    # Host: the daemon holds the same size in bytes.
    sandbox.reload()
    assert sandbox.attrs["HostConfig"]["ShmSize"] == size_mib * MIB


def test_dev_shm_is_noexec(stack):
    stack.proves("Container.shmSize")
    sandbox = stack.container("hard")
    rc, out = _run_copy(sandbox, "/dev/shm")
    assert rc == 126 and "Permission denied" in out, out
    assert {"noexec", "nosuid", "nodev"} <= _mount_options(sandbox, "/dev/shm")


@pytest.mark.parametrize(("pool", "limit"), [("hard", OPEN_FILES), ("plain", BUILTIN_OPEN_FILES)])
def test_the_open_files_limit_is_the_declared_one(stack, pool, limit):
    stack.proves("Container.ulimits")
    sandbox = stack.container(pool)
    # Soft and hard alike, in the shell of a `docker exec` as in the sandbox's own command (PID 1's child).
    code, out = sh(sandbox, "ulimit -n; ulimit -H -n; awk '/Max open files/ {print $4, $5}' /proc/1/limits")
    assert code == 0 and out.split() == [str(limit)] * 4, out
    sandbox.reload()
    assert sandbox.attrs["HostConfig"]["Ulimits"] == [{"Name": "nofile", "Soft": limit, "Hard": limit}]


def test_opening_more_files_than_the_limit_fails_with_emfile_and_cannot_be_raised(stack):
    stack.proves("Container.ulimits")
    sandbox = stack.container("hard")
    code, out = python(sandbox, (
        "import errno, os, resource\n"
        "held = []\n"
        "try:\n"
        f"    for _ in range({OPEN_FILES} + 10):\n"
        "        held.append(os.open('/dev/null', os.O_RDONLY))\n"
        "    print('no-limit', len(held))\n"
        "except OSError as e:\n"
        "    print(errno.errorcode[e.errno], len(held))\n"
        "for fd in held:\n"
        "    os.close(fd)\n"
        "try:\n"
        f"    resource.setrlimit(resource.RLIMIT_NOFILE, ({OPEN_FILES * 2}, {OPEN_FILES * 2}))\n"
        "    print('raised')\n"
        "except (ValueError, OSError):\n"
        "    print('refused')\n"
    ))
    assert code == 0, out
    first, second = out.split("\n")[:2]
    verdict, opened = first.split()
    # EMFILE once the process holds the limit: what it opened plus stdin/out/err and the few python keeps.
    assert verdict == "EMFILE", out
    assert OPEN_FILES - 16 <= int(opened) < OPEN_FILES, out
    # The hard limit is the limit: without CAP_SYS_RESOURCE a process cannot raise it.
    assert second == "refused", out
