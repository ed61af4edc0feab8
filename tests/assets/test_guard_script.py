"""components/assets/guard.sh run by /bin/sh against a fake host (tests/assets/fakes.py): the firewall rules
it keeps, the pids limits it writes, its ready marker, what it leaves behind when stopped, and how it ends
sandboxes at their max lifetime and idle timeout. No Docker, no root: the real host is never touched."""

from __future__ import annotations

import subprocess
import time

import pytest

from sandstack.plan.guard import GuardPlan
from sandstack.plan.stack_host import GUARD_PROGRAM
from sandstack.spec.contract import EXIT_IDLE, EXIT_LIFETIME
from tests.assets.fakes import BOOT_ID, RELOAD, SHELL, T0, FakeHost, Proc, needs_path_stubs

TAG = "-m comment --comment sandstack:t"
INPUT = "INPUT -i br-a -m conntrack ! --ctstate ESTABLISHED,RELATED -j DROP"
FORWARD = "DOCKER-USER -i br-a -o br-a -d 10.213.99.254/32 -p tcp --dport 3128 -j ACCEPT"
RULES = [INPUT, FORWARD]
NAME = "sandstack-t-t-0"
CID = "0123456789abcdef" * 4  # the container's cgroup under its sandbox's parent
# cgroup.procs in no particular order: Docker's init (pid 1 inside), the supervisor (init's first child, so
# the lowest of its children), the command and its child, and an orphan init adopted later (listed last: the
# supervisor is the lowest pid among init's children, not the last one read).
INIT, SUP = 4242, 4243
PROCS = [4251, SUP, INIT, 4250, 4260]
OTHERS = [4251, 4250, 4260]


@pytest.fixture
def host(tmp_path) -> FakeHost:
    return FakeHost(tmp_path)


def _checks_and_inserts(cmd: str, op: str, rule: str) -> str:
    return f"{cmd} -w {op} {rule} {TAG}"


# --- firewall rules ---------------------------------------------------------------------------------------

def test_each_rule_is_inserted_once_tagged_with_the_stack_and_input_rules_for_ipv6_too(host):
    # Four passes: rules are applied on the first and the fourth (every 3 s); the second application only checks.
    # The configuration's rules are checked once when it is loaded (one iptables cannot parse refuses it whole).
    result = host.run_guard(4, rules=RULES)
    assert result.returncode == 0, result.stderr
    loaded = [_checks_and_inserts("iptables-nft", "-C", INPUT), _checks_and_inserts("iptables-nft", "-C", FORWARD)]
    first = [
        _checks_and_inserts("iptables-nft", "-C", INPUT), _checks_and_inserts("iptables-nft", "-I", INPUT),
        _checks_and_inserts("ip6tables-nft", "-C", INPUT), _checks_and_inserts("ip6tables-nft", "-I", INPUT),
        _checks_and_inserts("iptables-nft", "-C", FORWARD), _checks_and_inserts("iptables-nft", "-I", FORWARD),
    ]
    again = [line for line in first if " -C " in line]
    assert host.iptables_log() == ["iptables-nft -w -n -L DOCKER-USER", *loaded, *first, *again]
    assert host.rules("iptables-nft") == [f"{INPUT} {TAG}", f"{FORWARD} {TAG}"]
    assert host.rules("ip6tables-nft") == [f"{INPUT} {TAG}"]
    assert "sandstack-guard: using iptables-nft" in result.stderr


def test_the_legacy_backend_is_used_when_dockers_chain_is_there(tmp_path):
    host = FakeHost(tmp_path, backend="legacy")
    result = host.run_guard(1, rules=[INPUT], bridges=["br-a"])
    assert result.returncode == 0, result.stderr
    assert host.iptables_log() == [
        "iptables-nft -w -n -L DOCKER-USER", "iptables-legacy -w -n -L DOCKER-USER",
        _checks_and_inserts("iptables-legacy", "-C", INPUT),  # the configuration's rule checked as it is loaded
        _checks_and_inserts("iptables-legacy", "-C", INPUT), _checks_and_inserts("iptables-legacy", "-I", INPUT),
        _checks_and_inserts("ip6tables-legacy", "-C", INPUT), _checks_and_inserts("ip6tables-legacy", "-I", INPUT),
    ]
    assert host.rules("iptables-nft") == []


def test_without_dockers_chain_in_either_backend_the_guard_refuses_to_start(host):
    (host.stub / "iptables-nft.present").unlink()
    result = host.run_guard(1, rules=RULES)
    assert result.returncode == 1
    assert "no DOCKER-USER chain in either iptables backend" in result.stderr
    assert host.iptables_log() == ["iptables-nft -w -n -L DOCKER-USER", "iptables-legacy -w -n -L DOCKER-USER"]
    assert not (host.state / "ready").exists()


def test_without_the_expiry_statuses_the_guard_does_not_start(host):
    env = host.env(rules=RULES, passes=1)
    del env["SANDSTACK_EXIT_IDLE"]
    result = subprocess.run([SHELL, "-c", GUARD_PROGRAM, "sandstack-guard"], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode != 0 and "SANDSTACK_EXIT_IDLE" in result.stderr
    assert host.iptables_log() == []


# --- pids limits and the ready marker ------------------------------------------------------------------

@pytest.mark.parametrize("v2", [False, True], ids=["cgroup-v1", "cgroup-v2"])
def test_pids_max_is_written_for_each_sandbox_and_the_ready_marker_holds_the_boot_id(tmp_path, v2):
    host = FakeHost(tmp_path, cgroup_v2=v2)
    result = host.run_guard(1, rules=RULES, pids={"sandstack-t-a-0": 64, "sandstack-t_gateway": 512})
    assert result.returncode == 0, result.stderr
    parents = host.cgroup / "sandstack" if v2 else host.cgroup / "pids" / "sandstack"
    assert {d.name: (d / "pids.max").read_text() for d in parents.iterdir() if d.is_dir()} == {
        "sandstack-t-a-0": "64\n", "sandstack-t_gateway": "512\n"}
    if v2:
        # The pids controller enabled down to the sandboxes' parents.
        assert (host.cgroup / "cgroup.subtree_control").read_text() == "+pids\n"
        assert (host.cgroup / "sandstack" / "cgroup.subtree_control").read_text() == "+pids\n"
    assert (host.state / "ready").read_text() == BOOT_ID + "\n"


def test_a_changed_pids_max_is_put_back(host):
    assert host.run_guard(1, pids={NAME: 64}).returncode == 0
    (host.cgroup / "pids" / "sandstack" / NAME / "pids.max").write_text("max\n")
    assert host.run_guard(1, pids={NAME: 64}).returncode == 0
    assert (host.cgroup / "pids" / "sandstack" / NAME / "pids.max").read_text() == "64\n"


def test_the_ready_marker_is_removed_when_a_rule_cannot_be_inserted(host):
    (host.state / "ready").write_text(BOOT_ID + "\n")  # from an earlier, complete pass
    (host.stub / "iptables-nft.refuse").touch()
    result = host.run_guard(1, rules=RULES, pids={NAME: 64})
    assert result.returncode == 0, result.stderr
    assert not (host.state / "ready").exists()
    assert f"sandstack-guard: cannot insert: {INPUT}" in result.stderr
    assert f"sandstack-guard: cannot insert: {FORWARD}" in result.stderr
    # The other backend command still went in: as much of the host is closed as can be.
    assert host.rules("ip6tables-nft") == [f"{INPUT} {TAG}"]


def test_the_ready_marker_is_removed_without_a_pids_controller(host):
    (host.state / "ready").write_text(BOOT_ID + "\n")
    (host.cgroup / "pids").rmdir()
    result = host.run_guard(1, rules=RULES, pids={NAME: 64})
    assert "no pids cgroup controller" in result.stderr
    assert not (host.state / "ready").exists()


# --- stopping ----------------------------------------------------------------------------------------

def _runc_made_the_parents(host: FakeHost) -> list:
    # runc makes the sandbox's parent in every controller; the guard made the pids one already.
    dirs = [host.cgroup / c / "sandstack" / NAME for c in ("pids", "cpuacct", "freezer")]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    return dirs


def test_stopped_while_a_bridge_exists_the_guard_removes_nothing(host):
    (host.net / "br-b").mkdir()
    guard = host.start_guard(rules=RULES, pids={NAME: 64}, bridges=["br-a", "br-b"])
    dirs = _runc_made_the_parents(host)
    code, err = host.stop_guard(guard)
    assert code == 0, err
    assert "stopping; bridge br-b still exists, so rules and limits stay in place" in err
    assert [line for line in host.iptables_log() if " -D " in line] == []
    assert host.rules("iptables-nft") == [f"{INPUT} {TAG}", f"{FORWARD} {TAG}"]
    assert host.rules("ip6tables-nft") == [f"{INPUT} {TAG}"]
    assert all(d.is_dir() for d in dirs)
    assert (host.state / "ready").read_text() == BOOT_ID + "\n"


@needs_path_stubs
def test_stopped_with_every_bridge_gone_the_guard_deletes_every_copy_of_its_rules_and_its_cgroups(host):
    # A copy left by an earlier guard goes too: deletion repeats until iptables finds none.
    (host.stub / "iptables-nft.rules").write_text(f"{INPUT} {TAG}\n{INPUT} {TAG}\n")
    guard = host.start_guard(rules=RULES, pids={NAME: 64}, bridges=["br-a", "br-b"])
    dirs = _runc_made_the_parents(host)
    code, err = host.stop_guard(guard)
    assert code == 0, err
    assert "stopping; the stack's networks are gone, rules and cgroups removed" in err
    delete = [
        *[_checks_and_inserts("iptables-nft", "-D", INPUT)] * 3,  # two copies, then "no such rule"
        *[_checks_and_inserts("ip6tables-nft", "-D", INPUT)] * 2,
        *[_checks_and_inserts("iptables-nft", "-D", FORWARD)] * 2,
    ]
    assert [line for line in host.iptables_log() if " -D " in line] == delete
    assert (host.rules("iptables-nft"), host.rules("ip6tables-nft")) == ([], [])
    assert not any(d.exists() for d in dirs)
    assert sorted((host.stub / "rmdir.log").read_text().splitlines()) == sorted(f"rmdir {d}" for d in dirs)
    assert not (host.state / "ready").exists()


@needs_path_stubs
def test_a_container_cgroup_left_under_a_sandbox_parent_is_removed_before_the_parent(host):
    # runc may leave a container's cgroup behind, empty, for a moment after the container is gone (seen on the
    # engine: the parent stayed, a teardown found it): the guard removes the child first, then the parent.
    guard = host.start_guard(rules=RULES, pids={NAME: 64}, bridges=["br-a"])
    dirs = _runc_made_the_parents(host)
    left = host.cgroup / "cpuacct" / "sandstack" / NAME / CID
    left.mkdir()
    (left / "cpuacct.usage").write_text("0\n")
    code, err = host.stop_guard(guard)
    assert code == 0, err
    assert not any(d.exists() for d in dirs)
    log = (host.stub / "rmdir.log").read_text().splitlines()
    assert log.index(f"rmdir {left}") < log.index(f"rmdir {dirs[1]}")


# --- lifetimes and idle timeouts -----------------------------------------------------------------------

def _sandbox(host: FakeHost, *, age: int = 0, usage_us: int = 0) -> None:
    start = host.started_ago(age)
    procs = {INIT: Proc(INIT, 4000, 1, start), SUP: Proc(SUP, INIT, 7, start), 4250: Proc(4250, SUP, 8, start + 1),
             4251: Proc(4251, 4250, 9, start + 1), 4260: Proc(4260, INIT, 10, start + 50)}
    host.container(NAME, CID, [procs[pid] for pid in PROCS], usage_us=usage_us)


def _expiry(signal: str, freezer: str = "FROZEN") -> list[str]:
    # Frozen: every process but init and the supervisor killed, three times over; then the supervisor is
    # continued (it may have been stopped) and told why.
    return [f"-KILL {pid} {freezer}" for _ in range(3) for pid in OTHERS] + [
        f"-CONT {SUP} {freezer}", f"-{signal} {SUP} {freezer}"]


def _freezer(host: FakeHost) -> str:
    return (host.cgroup / "freezer" / "sandstack" / NAME / CID / "freezer.state").read_text()


def _expired(host: FakeHost) -> list[tuple[str, str]]:
    return [(p.name, p.read_text()) for p in (host.state / "expired").iterdir()]


@needs_path_stubs
def test_a_sandbox_short_of_its_max_lifetime_is_left_alone(host):
    _sandbox(host, age=3599)
    result = host.run_guard(1, pids={NAME: 64}, lifecycle=[f"{NAME} 3600 0 stop 20000 0"])
    assert result.returncode == 0, result.stderr
    assert host.kill_log() == []
    assert _expired(host) == []


@needs_path_stubs
def test_at_its_max_lifetime_a_stop_sandbox_is_frozen_emptied_told_and_marked_expired(host):
    _sandbox(host, age=3599)
    # The second pass is one second later: exactly max_lifetime after its init started.
    result = host.run_guard(2, pids={NAME: 64}, lifecycle=[f"{NAME} 3600 0 stop 20000 0"])
    assert result.returncode == 0, result.stderr
    assert host.kill_log() == _expiry("USR1")
    assert _freezer(host) == "THAWED\n"
    assert _expired(host) == [(CID, "lifetime\n")]
    # The guard's record, by its own clock: the sandbox started 3599 s before the first pass, which looked at
    # it (short of the limit); the second, one second later, acted.
    assert (f"sandbox {NAME} (0123456789ab): max lifetime of 3600s reached; stopping it (exit {EXIT_LIFETIME}) "
            f"[since={T0 - 3599} checked={T0} now={T0 + 1}]") in result.stderr.splitlines()[-1]


@needs_path_stubs
def test_at_its_max_lifetime_a_restart_sandbox_is_stopped_but_not_marked_expired(host):
    _sandbox(host, age=3600)
    result = host.run_guard(1, pids={NAME: 64}, lifecycle=[f"{NAME} 3600 0 restart 20000 0"])
    assert result.returncode == 0, result.stderr
    assert host.kill_log() == _expiry("USR1")
    assert _freezer(host) == "THAWED\n"
    assert _expired(host) == []
    # Its first check was already past the limit: the record says it had never looked at it before.
    assert f"max lifetime of 3600s reached; stopping it (exit {EXIT_LIFETIME}) [since={T0 - 3600} checked=- now={T0}]" \
        in result.stderr


@needs_path_stubs
@pytest.mark.parametrize("mode, record", [
    # A crash restart buys a 'stop' sandbox no time: its clock and the record's `since` are its first start's.
    ("stop", f"max lifetime of 3600s reached; stopping it (exit {EXIT_LIFETIME}) [since={T0 - 3590} checked={T0} "
             f"now={T0 + 10}]"),
    # A 'restart' sandbox's new run is a fresh sandbox with a fresh clock: 5 s old, left alone.
    ("restart", None),
])
def test_a_stop_sandbox_restarted_after_a_crash_keeps_its_first_clock_in_the_record(host, mode, record):
    _sandbox(host, age=3590)
    line = f"{NAME} 3600 0 {mode} 20000 0"
    assert host.run_guard(1, pids={NAME: 64}, lifecycle=[line]).returncode == 0
    # Docker restarts the crashed container (same id, so the same cgroup) 10 s later with a new init.
    start = host.started_ago(-5)  # at T0 + 5
    host.container(NAME, CID, [Proc(5001, 4000, 1, start), Proc(5002, 5001, 7, start)])
    (host.stub / "clock").write_text(f"{T0 + 10}\n")
    result = host.run_guard(1, pids={NAME: 64}, lifecycle=[line])
    assert result.returncode == 0, result.stderr
    assert (record in result.stderr) if record else "reached" not in result.stderr, result.stderr


@needs_path_stubs
def test_a_supervisor_that_does_not_answer_is_told_again_each_second_and_killed_at_10_s(host):
    _sandbox(host, age=3600)
    result = host.run_guard(11, pids={NAME: 64}, lifecycle=[f"{NAME} 3600 0 stop 20000 0"])
    assert result.returncode == 0, result.stderr
    # For 9 s each pass says it again (everything but init and the supervisor killed, the supervisor continued
    # and signalled); at 10 s (Docker's stop grace), every process in cgroup.procs order, init and supervisor.
    again = [f"-KILL {pid} THAWED" for pid in OTHERS] + [f"-CONT {SUP} THAWED", f"-USR1 {SUP} THAWED"]
    assert host.kill_log() == _expiry("USR1") + again * 9 + [f"-KILL {pid} THAWED" for pid in PROCS]
    assert f"sandbox {NAME}: its supervisor did not stop it; killing it (exit 137)" in result.stderr


IDLE_ONLY = f"{NAME} 0 3 stop 20000 0"


@needs_path_stubs
def test_the_clocks_of_containers_not_seen_for_a_week_are_dropped(host):
    clocks = host.state / "clocks"
    clocks.mkdir()
    week = 7 * 24 * 3600
    (clocks / "old").write_text(f"1 2 - - - - {T0 - week - 1}\n")
    (clocks / "recent").write_text(f"1 2 - - - - {T0 - week}\n")
    assert host.run_guard(1, pids={NAME: 64}, lifecycle=[IDLE_ONLY]).returncode == 0
    assert sorted(p.name for p in clocks.iterdir()) == ["recent"]


@needs_path_stubs
def test_the_idle_clock_survives_a_restart_of_the_guard(host):
    _sandbox(host, usage_us=5_000_000)
    host.usage_steps([0] * 5)
    assert host.run_guard(2, pids={NAME: 64}, lifecycle=[IDLE_ONLY]).returncode == 0  # idle since T0
    # A new guard container: a fresh /tmp, the same state volume. It goes on from the idle clock it kept.
    host.restart_guard()
    (host.stub / "clock").write_text(f"{T0 + 3}\n")
    result = host.run_guard(1, pids={NAME: 64}, lifecycle=[IDLE_ONLY])
    assert result.returncode == 0, result.stderr
    assert host.kill_log() == _expiry("USR2")
    assert f"idle timeout of 3s reached; stopping it (exit {EXIT_IDLE}) [since={T0} checked={T0 + 1} now={T0 + 3}]" \
        in result.stderr
    assert oct((host.state / "clocks").stat().st_mode & 0o777) == "0o700"


@needs_path_stubs
@pytest.mark.parametrize("passes, signals", [(3, []), (4, _expiry("USR2"))], ids=["2s-idle", "3s-idle"])
def test_an_idle_timeout_ends_a_sandbox_that_used_no_more_than_the_idle_share(host, passes, signals):
    _sandbox(host, usage_us=5_000_000)
    host.usage_steps([20_000] * 5)  # 20 ms each second: idle
    result = host.run_guard(passes, pids={NAME: 64}, lifecycle=[IDLE_ONLY])
    assert result.returncode == 0, result.stderr
    assert host.kill_log() == signals
    assert _expired(host) == ([(CID, "idle\n")] if signals else [])
    if signals:
        # Idle since its first check (T0), looked at again at T0+1 and T0+2, ended at T0+3.
        assert (f"idle timeout of 3s reached; stopping it (exit {EXIT_IDLE}) "
                f"[since={T0} checked={T0 + 2} now={T0 + 3}]") in result.stderr


@needs_path_stubs
@pytest.mark.parametrize("passes, signals", [(6, []), (7, _expiry("USR2"))])
def test_cpu_use_above_the_idle_share_restarts_the_idle_clock(host, passes, signals):
    _sandbox(host)
    # 1 us over 3 s of idle share at the fourth pass: active then, so idle from there for another 3 s.
    host.usage_steps([20_000, 20_000, 20_001, 0, 0, 0, 0])
    result = host.run_guard(passes, pids={NAME: 64}, lifecycle=[IDLE_ONLY])
    assert result.returncode == 0, result.stderr
    assert host.kill_log() == signals


@needs_path_stubs
@pytest.mark.parametrize("line, signals", [
    # A readiness probe every 4 s with 100 ms of budget: 45 ms/s and a 100 ms burst of allowance, so a probe's
    # run counts as idle...
    (f"{NAME} 0 3 stop 45000 100000", _expiry("USR2")),
    # ...where the same CPU use without a probe to allow for is activity.
    (IDLE_ONLY, []),
], ids=["with-readiness-allowance", "without"])
def test_the_readiness_allowance_keeps_a_probe_from_counting_as_activity(host, line, signals):
    _sandbox(host)
    host.usage_steps([20_000, 20_000, 120_000])  # the probe ran in the third second
    result = host.run_guard(4, pids={NAME: 64}, lifecycle=[line])
    assert result.returncode == 0, result.stderr
    assert host.kill_log() == signals


@needs_path_stubs
def test_on_cgroup_v2_the_sandbox_is_frozen_through_cgroup_freeze(tmp_path):
    host = FakeHost(tmp_path, cgroup_v2=True)
    _sandbox(host, age=3600)
    result = host.run_guard(1, pids={NAME: 64}, lifecycle=[f"{NAME} 3600 0 stop 20000 0"])
    assert result.returncode == 0, result.stderr
    assert host.kill_log() == [line.replace("FROZEN", "1") for line in _expiry("USR1")]
    assert (host.cgroup / "sandstack" / NAME / CID / "cgroup.freeze").read_text() == "0\n"


# --- its configuration, taken in place (sandstack/plan/reload.py) ------------------------------------------------

OTHER = "DOCKER-USER -i br-b -o br-b -d 10.213.97.254/32 -p tcp --dport 3129 -j ACCEPT"


def _config(rules: list[str], pids: dict[str, int] | None = None, lifecycle: list[str] = ()):
    return GuardPlan("t", tuple(rules), ("br-a",), tuple((pids or {}).items()), tuple(lifecycle)).config


def _wait_for(predicate, what: str, guard) -> None:
    deadline = time.monotonic() + 20
    while not predicate():
        assert guard.poll() is None and time.monotonic() < deadline, (what, guard.communicate()[1])
        time.sleep(0.02)


@needs_path_stubs
def test_a_new_configuration_is_taken_at_the_next_pass_and_reported_and_the_rules_it_drops_are_removed(host):
    guard = host.start_guard(rules=RULES, pids={NAME: 64}, bridges=["br-a"])
    first = host.in_force
    _wait_for(lambda: first() == _config(RULES, {NAME: 64}).digest, "the first configuration in force", guard)
    new = _config([INPUT, OTHER], {NAME: 128})
    host.deliver(new)
    _wait_for(lambda: host.in_force() == new.digest, "the new configuration in force", guard)
    # In force means applied: the dropped rule gone, the new one in, the new pids limit written.
    assert host.rules("iptables-nft") == [f"{INPUT} {TAG}", f"{OTHER} {TAG}"]
    assert (host.cgroup / "pids" / "sandstack" / NAME / "pids.max").read_text() == "128\n"
    code, err = host.stop_guard(guard)
    assert code == 0 and f"sandstack-guard: loaded configuration {new.digest}" in err


@needs_path_stubs
def test_a_configuration_with_a_rule_iptables_cannot_parse_is_refused_and_the_one_in_force_stays(host):
    guard = host.start_guard(rules=RULES, pids={NAME: 64}, bridges=["br-a"])
    old = _config(RULES, {NAME: 64})
    _wait_for(lambda: host.in_force() == old.digest, "the first configuration in force", guard)
    bad = _config([INPUT, "DOCKER-USER -i br-a --bogus -j ACCEPT"], {NAME: 8})
    host.deliver(bad)
    _wait_for(lambda: RELOAD.read_status(str(host.config), "refused").startswith(bad.digest), "a refusal", guard)
    assert RELOAD.read_status(str(host.config), "refused") == \
        f"{bad.digest} iptables cannot parse the rule: DOCKER-USER -i br-a --bogus -j ACCEPT"
    time.sleep(0.2)  # several passes later: nothing of it applied
    assert host.in_force() == old.digest
    assert host.rules("iptables-nft") == [f"{INPUT} {TAG}", f"{FORWARD} {TAG}"]
    assert (host.cgroup / "pids" / "sandstack" / NAME / "pids.max").read_text() == "64\n"
    host.stop_guard(guard)


def test_a_guard_restarted_with_a_new_configuration_removes_the_rules_of_the_one_in_force_before(host):
    assert host.run_guard(1, rules=RULES, bridges=["br-a"]).returncode == 0
    assert host.in_force() == _config(RULES).digest
    host.restart_guard()
    # Its reload container delivered a set without FORWARD while it was down: the set in force before is the one
    # whose rules the new set replaces.
    result = host.run_guard(1, rules=[INPUT], bridges=["br-a"])
    assert result.returncode == 0, result.stderr
    assert host.rules("iptables-nft") == [f"{INPUT} {TAG}"]
    assert host.in_force() == _config([INPUT]).digest
