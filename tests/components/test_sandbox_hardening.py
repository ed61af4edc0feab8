"""Hardening inputs of a sandbox container, exactly as pulumi-docker receives them: noexec writable paths
(unless opted in), a bounded /dev/shm and a bounded number of open files."""

from __future__ import annotations


from pathlib import Path

from testbed.specs import changed, spec

MiB = 1024**2
# Every sandbox's tmpfs for a claim's secret files (sandstack.plan.sandbox `session_secrets_tmpfs`): noexec too.
SESSION = {"/run/secrets/session": f"rw,nosuid,nodev,noexec,size={4 * MiB},mode=0700,uid=10001,gid=10001"}
BASE = {
    "base_image": "busybox:1.36",
    "command": ["sh", "-c", "sleep 1d"],
    "limits": {"memory": "512MiB"},
    "filesystem": {"writable": [{"path": "/tmp", "size": "64MiB"}, {"path": "/work", "size": "128MiB"}]},
}


def _sandbox(build, template: dict, **spec_extra):
    return build(spec({"t": template}, **spec_extra)).container("sandstack-t.local-0")


def test_writable_paths_are_noexec_by_default(build):
    c = _sandbox(build, BASE)
    assert c.inputs["tmpfs"] == {"/tmp": f"rw,nosuid,nodev,noexec,size={64 * MiB},mode=1777",
                                 "/work": f"rw,nosuid,nodev,noexec,size={128 * MiB},mode=1777", **SESSION}
    assert c.plan.host["Tmpfs"] == c.inputs["tmpfs"]


def test_a_writable_path_that_opts_in_is_exec_and_only_that_one(build):
    template = changed(BASE, "filesystem.writable", [{"path": "/tmp", "size": "64MiB"},
                                                     {"path": "/work", "size": "128MiB", "exec": True}])
    c = _sandbox(build, template)
    assert c.inputs["tmpfs"] == {"/tmp": f"rw,nosuid,nodev,noexec,size={64 * MiB},mode=1777",
                                 "/work": f"rw,nosuid,nodev,exec,size={128 * MiB},mode=1777", **SESSION}


def test_the_built_in_tmp_is_noexec(build):
    template = {k: v for k, v in BASE.items() if k != "filesystem"}
    c = _sandbox(build, template)
    assert c.inputs["tmpfs"] == {"/tmp": f"rw,nosuid,nodev,noexec,size={64 * MiB},mode=1777", **SESSION}


def test_dev_shm_is_16_mib_by_default(build):
    c = _sandbox(build, BASE)
    assert c.inputs["shmSize"] == 16
    assert c.plan.host["ShmSize"] == 16 * MiB


def test_dev_shm_takes_the_declared_size_in_mib(build):
    c = _sandbox(build, changed(BASE, "filesystem.shm_size", "64MiB"))
    assert c.inputs["shmSize"] == 64
    assert c.plan.host["ShmSize"] == 64 * MiB


def test_dev_shm_size_inherits_from_the_stack_defaults(build):
    c = _sandbox(build, BASE, defaults={"filesystem": {"shm_size": "8MiB"}})
    assert c.inputs["shmSize"] == 8


def test_open_files_are_1024_soft_and_hard_by_default(build):
    c = _sandbox(build, BASE)
    assert c.inputs["ulimits"] == [{"name": "nofile", "soft": 1024, "hard": 1024}]
    assert c.plan.host["Ulimits"] == [{"Name": "nofile", "Soft": 1024, "Hard": 1024}]


def test_open_files_take_the_declared_limit_from_a_profile_or_the_template(build):
    template = changed(BASE, "limits", {"profile": "roomy", "memory": "512MiB"})
    c = _sandbox(build, template, profiles={"roomy": {"open_files": 65536}})
    assert c.inputs["ulimits"] == [{"name": "nofile", "soft": 65536, "hard": 65536}]
    c = _sandbox(build, changed(template, "limits.open_files", 256), profiles={"roomy": {"open_files": 65536}})
    assert c.inputs["ulimits"] == [{"name": "nofile", "soft": 256, "hard": 256}]


def test_sudo_adds_its_passwd_entry_and_sudoers_rule_to_the_snapshot_and_loosens_only_what_it_needs(build):
    template = {**BASE, "security": {"sudo": True}}
    built = build(spec({"t": template}))
    c = built.container("sandstack-t.local-0")
    assert c.inputs["capabilities"] == {"drops": ["ALL"], "adds": ["SETUID", "SETGID", "AUDIT_WRITE", "CHOWN",
                                                                   "DAC_OVERRIDE", "FOWNER"]}
    assert "securityOpts" not in c.inputs and c.inputs["user"] == "10001:10001" and c.inputs["readOnly"] is True
    build_context = Path(built.reg("sandstack-t.local-image").inputs["build"]["context"])
    dockerfile = (build_context / "Dockerfile").read_text()
    assert "echo '#10001 ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/sandstack" in dockerfile
    assert "echo 'sandbox:x:10001:10001:sandbox:/tmp:/bin/sh' >> /etc/passwd" in dockerfile
