"""Secrets of real sandboxes: an env var from a secret, and secret files on a read-only mount.

The values come from the deployment's Pulumi secret config (`Deployment.secret_config`), never from the
spec. The files are copied by the pool's run-once seeder into a volume the sandbox mounts read-only at
`/run/secrets` (docs/design/engine-findings.md c).
"""

from __future__ import annotations

import io
import tarfile

import pytest

from testbed.deploy import engine_spec, shared_deployment
from tests.engine.sandbox_helpers import ATTEMPT, client, python, sh

pytestmark = pytest.mark.docker

ENV_VALUE = "env-value-5f1d"
FILE_VALUE = "file-value-93c2\nsecond line\n"
NESTED_VALUE = "nested-value-0a7e"
FILES = {"/run/secrets/token": FILE_VALUE, "/run/secrets/db/password": NESTED_VALUE}


@pytest.fixture(scope="module")
def stack(debian_image, harness_sweep_orphans, tmp_path_factory):
    templates = {
        "vault": {
            "base_image": debian_image,
            "command": ["sleep", "infinity"],
            "limits": {"memory": "48MiB"},
            "env": {"API_TOKEN": {"secret": "api_token"}, "PLAIN": "not-secret"},
            "secrets": [{"secret": "file_token", "path": "/run/secrets/token"},
                        {"secret": "db_password", "path": "/run/secrets/db/password"}],
        },
    }
    spec = engine_spec(debian_image, templates)
    assert ENV_VALUE not in spec and "file-value" not in spec  # the spec names config keys only
    secrets = {"api_token": ENV_VALUE, "file_token": FILE_VALUE, "db_password": NESTED_VALUE}
    with shared_deployment(__file__, tmp_path_factory.mktemp("secrets"), spec, secret_config=secrets) as shared:
        yield shared


def test_secret_env_var_has_its_value_in_the_sandbox(stack):
    stack.proves("Container.envs")
    code, out = sh(stack.container("vault"), "printf '%s|%s' \"$API_TOKEN\" \"$PLAIN\"")
    assert code == 0 and out == f"{ENV_VALUE}|not-secret", out


def test_secret_files_are_readable_by_the_sandbox_user_only_mode_0400(stack):
    stack.proves("Container.mounts", "Container.mounts.readOnly", "Container.uploads")
    sandbox = stack.container("vault")
    for path, value in FILES.items():
        code, out = sh(sandbox, f"stat -c '%u %g %a %F' {path}")
        assert code == 0 and out.split() == ["10001", "10001", "400", "regular", "file"], (path, out)
        code, out = python(sandbox, f"print(open({path!r}).read(), end='')")
        assert code == 0 and out == value, (path, out)
        # Another uid in the same sandbox cannot read it (and has no capability to get round the mode).
        for other in ("10002:10002", "0:0"):
            code, out = sh(sandbox, f"cat {path}", user=other)
            assert code != 0 and "Permission denied" in out, (path, other, out)


def test_secret_files_cannot_be_changed_chmodded_or_removed(stack):
    stack.proves("Container.mounts.readOnly")
    sandbox = stack.container("vault")
    code, out = python(sandbox, (
        ATTEMPT +
        "p = '/run/secrets/token'\n"
        "attempt('write', lambda: open(p, 'w'))\n"
        "attempt('chmod', lambda: os.chmod(p, 0o644))\n"
        "attempt('remove', lambda: os.remove(p))\n"
        "attempt('rename', lambda: os.rename(p, '/run/secrets/moved'))\n"
        "attempt('create', lambda: open('/run/secrets/new', 'w'))\n"
        "attempt('chmod-dir', lambda: os.chmod('/run/secrets', 0o777))\n"
    ))
    assert code == 0, out
    results = dict(line.split() for line in out.splitlines())
    # The owner itself is refused by the read-only mount, not by a mode it could change.
    assert results == {k: "EROFS" for k in ("write", "chmod", "remove", "rename", "create", "chmod-dir")}, results
    code, out = sh(sandbox, "awk '$2 == \"/run/secrets\" {print $4}' /proc/mounts")
    assert out.split(",")[0] == "ro", out
    code, out = sh(sandbox, "cat /run/secrets/token")
    assert out == FILE_VALUE  # unchanged


def test_seeder_ran_once_and_left_no_copy_in_its_staging_dir(stack):
    stack.proves("Container.uploads", "Container.mustRun", "Container.attach")
    seeder = client().containers.get(f"sandstack-{stack.deployment.stack}-vault-secrets-seeder")
    seeder.reload()
    assert seeder.attrs["State"]["Status"] == "exited" and seeder.attrs["State"]["ExitCode"] == 0, seeder.attrs["State"]
    assert seeder.attrs["RestartCount"] == 0
    # It had no network and only CHOWN, and its staging dir (where `uploads` put the values) is empty.
    host = seeder.attrs["HostConfig"]
    assert host["NetworkMode"] == "none" and host["CapAdd"] == ["CHOWN"] and host["CapDrop"] == ["ALL"], host
    stream, _ = seeder.get_archive("/staging")
    members = tarfile.open(fileobj=io.BytesIO(b"".join(stream))).getmembers()
    assert [m.name for m in members] == ["staging"], [m.name for m in members]
    # The volume holds exactly the declared files (and the directory for the nested one), and the mount point of
    # the session secrets' tmpfs, empty while no claim gave any.
    code, out = sh(stack.container("vault"), "cd /run/secrets && find . -mindepth 1 | sort")
    assert out.split() == ["./db", "./db/password", "./session", "./token"], out


def test_a_secret_file_moved_in_the_spec_is_gone_from_the_running_sandbox(stack):
    # Last in the module: it applies a changed spec to the module's stack. Only the seeder is replaced; the
    # running sandbox sees the re-seeded volume, which must not keep the old path readable.
    stack.proves("Container.uploads")
    moved = stack.deployment.spec_path.read_text().replace("/run/secrets/token", "/run/secrets/moved")
    assert moved != stack.deployment.spec_path.read_text()
    result = stack.deployment.up(moved)
    assert result.error is None, result.error
    sandbox = stack.container("vault")
    code, out = sh(sandbox, "ls -A /run/secrets /run/secrets/db")
    assert code == 0 and out.split() == ["/run/secrets:", "db", "moved", "session", "/run/secrets/db:", "password"], out
    # The session secrets' tmpfs is still mounted in the running sandbox: the re-seed kept its mount point.
    code, out = sh(sandbox, "awk '$2 == \"/run/secrets/session\" {print $3}' /proc/mounts")
    assert out.strip() == "tmpfs", out
    code, out = python(sandbox, "print(open('/run/secrets/moved').read(), end='')")
    assert code == 0 and out == FILE_VALUE, out
