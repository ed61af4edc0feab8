"""Privileges of real sandboxes: capabilities dropped, no-new-privileges, a declared capability added back.

One stack for the module. The snapshot of `locked` and `nnpoff` carries a setuid-root copy of `id` made by
a setup step; `nnpoff` declares `no_new_privileges: false` and is the control that shows the binary
really would raise its euid where the option is off.
"""

from __future__ import annotations

import pytest

from testbed.deploy import Deployment, engine_spec, shared_deployment
from tests.engine.sandbox_helpers import ATTEMPT, python, sh

pytestmark = pytest.mark.docker

SUID_ID = "/usr/local/bin/suid-id"
SUID_SETUP = {"version": "1", "setup": [f"cp /usr/bin/id {SUID_ID} && chown 0:0 {SUID_ID} && chmod 4755 {SUID_ID}"]}
CAP_CHOWN = 1 << 0
CAP_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


@pytest.fixture(scope="module")
def stack(debian_image, harness_sweep_orphans, tmp_path_factory):
    templates = {
        "locked": {"base_image": debian_image, "command": ["sleep", "infinity"], "snapshot": SUID_SETUP,
                   "limits": {"memory": "48MiB"}},
        "nnpoff": {"base_image": debian_image, "command": ["sleep", "infinity"], "snapshot": SUID_SETUP,
                   "limits": {"memory": "48MiB"}, "security": {"no_new_privileges": False}},
        "chowner": {"base_image": debian_image, "command": ["sleep", "infinity"], "user": "0:0",
                    "limits": {"memory": "48MiB"}, "security": {"capabilities": ["CHOWN"]}},
    }
    spec = engine_spec(debian_image, templates)
    with shared_deployment(__file__, tmp_path_factory.mktemp("privileges"), spec) as shared:
        yield shared


def _status_of_all(container, user: str | None = None) -> dict[str, dict[str, str]]:
    """Capability sets and NoNewPrivs of every process in the sandbox (plus the exec'd reader)."""
    code, out = python(container, (
        "import os\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n"
        "        lines = open(f'/proc/{pid}/status').read().splitlines()\n"
        "    except OSError:\n"
        "        continue\n"
        "    fields = dict(l.split(':\\t', 1) for l in lines if ':\\t' in l)\n"
        "    keep = ('Name', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs')\n"
        "    print(pid, ' '.join(f'{k}={fields[k].strip()}' for k in keep))\n"
    ), user=user)
    assert code == 0, out
    procs = {}
    for line in out.splitlines():
        pid, *pairs = line.split()
        procs[pid] = dict(p.split("=", 1) for p in pairs)
    return procs


def _probe_privileged_calls(container, user: str | None = None) -> dict[str, str]:
    code, out = python(container, (
        ATTEMPT +
        "open('/tmp/owned', 'w').close()\n"
        "attempt('chown', lambda: os.chown('/tmp/owned', 4242, 4242))\n"
        "attempt('raw-icmp', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))\n"
        "attempt('packet', lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))\n"
        "attempt('setuid', lambda: os.setuid(0) if os.getuid() else os.setuid(4242))\n"
        "attempt('mknod', lambda: os.mknod('/tmp/null', 0o20666, os.makedev(1, 3)))\n"
        "os.remove('/tmp/owned')\n"
    ), user=user)
    assert code == 0, out
    return dict(line.split() for line in out.splitlines())


def test_all_capabilities_are_dropped_for_every_sandbox_process(stack):
    stack.proves("Container.capabilities", "Container.capabilities.drops")
    sandbox = stack.container("locked")
    # Every process (docker-init, supervisor, command, this reader): no capability in any set.
    procs = _status_of_all(sandbox)
    assert len(procs) >= 4, procs
    for pid, status in procs.items():
        assert {k: status[k] for k in CAP_FIELDS} == {k: "0000000000000000" for k in CAP_FIELDS}, (pid, status)
    # So privileged calls fail: chown to another owner, raw and packet sockets, setuid, mknod.
    assert _probe_privileged_calls(sandbox) == {
        "chown": "EPERM", "raw-icmp": "EPERM", "packet": "EPERM", "setuid": "EPERM", "mknod": "EPERM"}
    # Even uid 0 inside the sandbox (docker exec -u 0) has no capability and fails the same way.
    root_status = _status_of_all(sandbox, user="0")
    assert all(s["CapEff"] == "0000000000000000" for s in root_status.values()), root_status
    root_calls = _probe_privileged_calls(sandbox, user="0")
    assert root_calls == {"chown": "EPERM", "raw-icmp": "EPERM", "packet": "EPERM", "setuid": "EPERM",
                          "mknod": "EPERM"}, root_calls


def test_setuid_root_binary_gains_nothing_under_no_new_privileges(stack):
    stack.proves("Container.securityOpts")
    sandbox = stack.container("locked")
    code, out = sh(sandbox, f"stat -c '%u %a' {SUID_ID}; {SUID_ID} -u; {SUID_ID} -ur; grep NoNewPrivs /proc/self/status")
    assert code == 0, out
    owner_mode, euid, ruid, nnp = out.strip().splitlines()
    assert owner_mode == "0 4755"  # really a setuid-root binary, built into the snapshot
    assert (euid, ruid) == ("10001", "10001"), out  # the setuid bit gave nothing
    assert nnp.split() == ["NoNewPrivs:", "1"]
    # Every process of the sandbox carries the flag, not just this exec.
    assert {s["NoNewPrivs"] for s in _status_of_all(sandbox).values()} == {"1"}


def test_control_without_no_new_privileges_the_setuid_binary_does_become_root(stack):
    # The control for the test above: the same snapshot with `no_new_privileges: false` raises its euid
    # to 0 (with no capabilities: all of them are still dropped from the bounding set).
    sandbox = stack.container("nnpoff")
    code, out = sh(sandbox, f"{SUID_ID} -u; grep -E 'NoNewPrivs' /proc/self/status")
    assert code == 0, out
    euid, nnp = out.strip().splitlines()
    assert euid == "0", out
    assert nnp.split() == ["NoNewPrivs:", "0"]


def test_declared_capability_is_present_and_nothing_else(stack):
    stack.proves("Container.capabilities.adds", "Container.capabilities.drops")
    sandbox = stack.container("chowner")
    procs = _status_of_all(sandbox)
    for pid, status in procs.items():
        # CHOWN in the effective, permitted and bounding sets, no other bit anywhere.
        assert int(status["CapEff"], 16) == CAP_CHOWN, (pid, status)
        assert int(status["CapPrm"], 16) == CAP_CHOWN, (pid, status)
        assert int(status["CapBnd"], 16) == CAP_CHOWN, (pid, status)
        assert int(status["CapAmb"], 16) == 0 and status["NoNewPrivs"] == "1", (pid, status)
    calls = _probe_privileged_calls(sandbox)
    assert calls == {"chown": "ok", "raw-icmp": "EPERM", "packet": "EPERM", "setuid": "EPERM", "mknod": "EPERM"}, calls


def test_capability_for_a_non_root_user_is_refused_not_silently_ineffective(docker_harness, debian_image, tmp_path):
    # Docker (20.10, and moby to this day: moby#50083) gives a non-root process added capabilities only
    # in its bounding set, never effective; no-new-privileges also blocks file capabilities. Measured:
    # `--user 2345 --cap-drop ALL --cap-add CHOWN` → CapEff 0, chown fails. So the declaration cannot be
    # enforced for the default user, and deploying it must fail naming the property, not run without it.
    spec = engine_spec(debian_image, {
        "nonroot": {"base_image": debian_image, "command": ["sleep", "infinity"],
                    "security": {"capabilities": ["CHOWN"]}},
    })
    deployment = Deployment(docker_harness, tmp_path)
    result = deployment.up(spec, check=False)
    assert result.error is not None, "a non-root sandbox with an added capability was deployed"
    message = str(result.error)
    assert "capabilities" in message and "nonroot" in message and "10001" in message, message
    sandboxes = docker_harness.backend.api.containers(all=True, filters={"name": f"sandstack-{deployment.stack}-nonroot-"})
    assert sandboxes == [], "the sandbox container was created anyway"
