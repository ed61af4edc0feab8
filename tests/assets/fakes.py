"""A fake host for the shell assets: stub commands first on PATH, a cgroup tree, /proc, /sys/class/net and a
clock, all under one temporary folder. Nothing here needs root or Docker, and nothing touches the real
cgroup tree, firewall or processes: the guard is pointed at this tree through its SANDSTACK_GUARD_* variables
and signals through a stub (its default is the shell's kill builtin, which PATH cannot replace)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import importlib.util

from sandstack.plan.contract import CGROUP_ROOT_NAME
from sandstack.plan.guard import GuardPlan
from sandstack.plan.package_files import RELOAD_SOURCE
from sandstack.plan.reload import ConfigSet
from sandstack.plan.stack_host import GUARD_PROGRAM
from sandstack.spec.contract import EXIT_IDLE, EXIT_LIFETIME

# dash on Debian and Ubuntu; SANDSTACK_TEST_SHELL=/path/to/busybox-sh-link runs the same tests under busybox.
SHELL = os.environ.get("SANDSTACK_TEST_SHELL", "/bin/sh")
# Debian's busybox sh runs its own applets (date, sleep, rmdir) before anything on PATH, so the fake clock
# and cgroupfs-like rmdir below cannot apply there: tests that need them run under dash only. (The guard runs
# in the Debian infra image's dash; the supervisor, in images that may well be busybox, needs no stubs.)
needs_path_stubs = pytest.mark.skipif(Path(SHELL).resolve().name == "busybox",
                                      reason="busybox sh runs its date/sleep/rmdir applets, not the stubs on PATH")
T0 = 1_700_000_000  # the fake clock's start (epoch seconds)


def reload_program():
    """components/assets/reload.py as a module: the reload container's own delivery of a configuration."""
    spec = importlib.util.spec_from_file_location("sandstack_reload", RELOAD_SOURCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


RELOAD = reload_program()
BOOT_ID = "4f7c3a52-8d1e-4a36-9b0e-0123456789ab"
IPTABLES = ("iptables-nft", "ip6tables-nft", "iptables-legacy", "ip6tables-legacy")
REAL_SLEEP, REAL_RMDIR = shutil.which("sleep"), shutil.which("rmdir")

# iptables stub: logs its arguments; `-L` succeeds when <name>.present exists (that backend has Docker's
# chain), `-C` answers from <name>.rules (2, as iptables does for a rule it cannot parse, when the rule has an
# option `--bogus`), `-I` appends to it unless <name>.refuse exists, `-D` removes one copy and fails when there is
# none (as iptables does).
IPTABLES_STUB = r"""#!/bin/sh
name=${0##*/}
dir=@DIR@
echo "$name $*" >>"$dir/iptables.log"
[ "$1" = -w ] && shift
op=$1
shift
rules=$dir/$name.rules
touch "$rules"
case "$op" in
    -n) [ -e "$dir/$name.present" ] ;;
    -C) case " $* " in *" --bogus "*) echo 'iptables: unknown option "--bogus"' >&2; exit 2 ;; esac
        grep -qxF -- "$*" "$rules" ;;
    -I) [ ! -e "$dir/$name.refuse" ] || { echo "iptables: refused" >&2; exit 4; }
        echo "$*" >>"$rules" ;;
    -D) grep -qxF -- "$*" "$rules" || exit 1
        awk -v rule="$*" 'gone || $0 != rule { print; next } { gone = 1 }' "$rules" >"$rules.new"
        mv "$rules.new" "$rules" ;;
    *) exit 2 ;;
esac
"""
# The clock: `date +%s` reads it; `sleep` advances it by a second, adds the next line of usage-steps (us)
# to the CPU use of the watched container, and (for tests that stop the guard) really sleeps a little.
DATE_STUB = "#!/bin/sh\ncat @DIR@/clock\n"
SLEEP_STUB = r"""#!/bin/sh
dir=@DIR@
echo $(($(cat "$dir/clock") + 1)) >"$dir/clock"
if [ -s "$dir/usage-steps" ] && [ -e "$dir/usage" ]; then
    read -r step <"$dir/usage-steps"
    sed -i 1d "$dir/usage-steps"
    echo $(($(cat "$(cat "$dir/usage")") + step * 1000)) >"$(cat "$dir/usage")"
fi
[ -e "$dir/real-sleep" ] && exec @SLEEP@ "$(cat "$dir/real-sleep")"
exit 0
"""
# kill: logs the signal, the pid and the watched container's freezer state at that moment.
# rmdir as cgroupfs does it: a cgroup goes with its control files, but not while it has child cgroups.
RMDIR_STUB = r"""#!/bin/sh
echo "rmdir $*" >>@DIR@/rmdir.log
for dir; do
    [ -z "$(find "$dir" -mindepth 1 -type d)" ] || { echo "rmdir: $dir: Device or resource busy" >&2; exit 1; }
    rm -f "$dir"/* && @RMDIR@ "$dir" || exit 1
done
"""
KILL_STUB = r"""#!/bin/sh
dir=@DIR@
freezer=$(cat "$(cat "$dir/freezer")" 2>/dev/null)
echo "$* ${freezer:-none}" >>"$dir/kill.log"
"""


@dataclass(frozen=True)
class Proc:
    """A fake process: host pid, parent, pid inside the container's namespace, start (seconds since boot)."""
    pid: int
    ppid: int
    nspid: int
    started: int = 0


class FakeHost:
    def __init__(self, root: Path, *, cgroup_v2: bool = False, backend: str = "nft"):
        self.root = root
        self.bin, self.stub = root / "bin", root / "stub"
        self.cgroup, self.state, self.proc = root / "cgroup", root / "state", root / "proc"
        self.net, self.tmp = root / "net", root / "tmp"
        self.config, self.workspaces = root / "config", root / "workspaces"
        for d in (self.bin, self.stub, self.cgroup, self.state, self.proc / "sys/kernel/random", self.net, self.tmp,
                  self.config, self.workspaces):
            d.mkdir(parents=True)
        self.cgroup_v2 = cgroup_v2
        if cgroup_v2:
            (self.cgroup / "cgroup.controllers").write_text("cpu io memory pids\n")
        else:
            for controller in ("pids", "cpuacct", "freezer"):
                (self.cgroup / controller).mkdir()
        (self.proc / "sys/kernel/random/boot_id").write_text(BOOT_ID + "\n")
        self.set_boot_time(T0 - 100_000)
        (self.stub / "clock").write_text(f"{T0}\n")
        for name in IPTABLES:
            self._stub(name, IPTABLES_STUB)
        (self.stub / f"iptables-{backend}.present").touch()
        self._stub("date", DATE_STUB)
        self._stub("sleep", SLEEP_STUB)
        self._stub("kill", KILL_STUB)
        self._stub("rmdir", RMDIR_STUB)

    def _stub(self, name: str, text: str) -> None:
        path = self.bin / name
        path.write_text(text.replace("@DIR@", str(self.stub)).replace("@SLEEP@", REAL_SLEEP)
                        .replace("@RMDIR@", REAL_RMDIR))
        path.chmod(0o755)

    @staticmethod
    def started_ago(seconds: int) -> int:
        """Proc.started of a process that started `seconds` before T0 (the host booted at T0 - 100000)."""
        return 100_000 - seconds

    def set_boot_time(self, btime: int) -> None:
        (self.proc / "stat").write_text(f"cpu  1 2 3 4\nbtime {btime}\nprocesses 99\n")

    # --- the guard's environment -------------------------------------------------------------------
    def env(self, *, rules: list[str] = (), pids: dict[str, int] | None = None, bridges: list[str] = (),
            lifecycle: list[str] = (), passes: int | None = None) -> dict[str, str]:
        """The guard's environment, its configuration delivered as its reload container delivers it."""
        self.deliver(GuardPlan("t", tuple(rules), tuple(bridges), tuple((pids or {}).items()), tuple(lifecycle)).config)
        env = {
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "SANDSTACK_STACK": "t",
            # As the guard's plan (sandstack/plan/guard.py) passes them.
            "SANDSTACK_EXIT_LIFETIME": str(EXIT_LIFETIME),
            "SANDSTACK_EXIT_IDLE": str(EXIT_IDLE),
            "SANDSTACK_GUARD_CGROUP": str(self.cgroup),
            "SANDSTACK_GUARD_CGROUP_ROOT": CGROUP_ROOT_NAME,
            "SANDSTACK_GUARD_STATE": str(self.state),
            "SANDSTACK_GUARD_WORKSPACES": str(self.workspaces),
            "SANDSTACK_CONFIG_DIR": str(self.config),
            "SANDSTACK_GUARD_PROC": str(self.proc),
            "SANDSTACK_GUARD_NET": str(self.net),
            # The container's tmpfs, which a restart of the guard wipes (`restart_guard`): nothing may live there.
            "SANDSTACK_GUARD_TMP": str(self.tmp),
            "SANDSTACK_GUARD_KILL": str(self.bin / "kill"),
        }
        if passes is not None:
            env["SANDSTACK_GUARD_PASSES"] = str(passes)
        return env

    def deliver(self, config: ConfigSet) -> str:
        """Writes `config` into the guard's configuration volume and points `want` at it, as its reload container
        does (components/assets/reload.py); returns its digest."""
        RELOAD.deliver(str(self.config), config.digest, dict(config.items))
        RELOAD.point_want(str(self.config), config.digest)
        return config.digest

    def in_force(self) -> str:
        """The digest the guard reports in force ('' before any)."""
        return RELOAD.read_status(str(self.config), "have")

    def restart_guard(self) -> None:
        """What a restart or renewal of the guard's container does to it: a new, empty /tmp (a tmpfs)."""
        shutil.rmtree(self.tmp)
        self.tmp.mkdir()

    def run_guard(self, passes: int, **kwargs) -> subprocess.CompletedProcess:
        """The guard for `passes` passes, as components/host_guard.py runs it: `sh -c SCRIPT sandstack-guard`."""
        return subprocess.run([SHELL, "-c", GUARD_PROGRAM, "sandstack-guard"], env=self.env(passes=passes, **kwargs),
                              capture_output=True, text=True, timeout=60)

    def start_guard(self, **kwargs) -> subprocess.Popen:
        """The guard running until stopped; its clock still advances a second per pass, 20 ms apart."""
        (self.stub / "real-sleep").write_text("0.02\n")
        return subprocess.Popen([SHELL, "-c", GUARD_PROGRAM, "sandstack-guard"], env=self.env(**kwargs),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def stop_guard(self, guard: subprocess.Popen) -> tuple[int, str]:
        """Waits for the guard's first complete pass, sends it TERM (as `docker stop` does) and waits for it."""
        deadline = time.monotonic() + 20
        while not (self.state / "ready").exists():
            assert guard.poll() is None and time.monotonic() < deadline, guard.communicate()[1]
            time.sleep(0.02)
        guard.send_signal(signal.SIGTERM)
        _, err = guard.communicate(timeout=20)
        return guard.returncode, err

    # --- what the stubs saw -------------------------------------------------------------------------
    def iptables_log(self) -> list[str]:
        log = self.stub / "iptables.log"
        return log.read_text().splitlines() if log.exists() else []

    def rules(self, name: str) -> list[str]:
        path = self.stub / f"{name}.rules"
        return path.read_text().splitlines() if path.exists() else []

    def kill_log(self) -> list[str]:
        log = self.stub / "kill.log"
        return log.read_text().splitlines() if log.exists() else []

    # --- a running sandbox container ----------------------------------------------------------------
    def controller_dir(self, controller: str, name: str, cid: str) -> Path:
        if self.cgroup_v2:
            return self.cgroup / "sandstack" / name / cid
        return self.cgroup / controller / "sandstack" / name / cid

    def container(self, name: str, cid: str, procs: list[Proc], *, usage_us: int = 0) -> None:
        """A container of sandbox `name` with the given processes (cgroup.procs in list order), its CPU use and
        an unfrozen freezer; the kill stub and the clock's usage steps watch this container."""
        pids = self.controller_dir("pids", name, cid)
        pids.mkdir(parents=True, exist_ok=True)
        (pids / "cgroup.procs").write_text("".join(f"{p.pid}\n" for p in procs))
        cpu = self.controller_dir("cpuacct", name, cid)
        cpu.mkdir(parents=True, exist_ok=True)
        usage = cpu / ("cpu.stat" if self.cgroup_v2 else "cpuacct.usage")
        freezer = self.controller_dir("freezer", name, cid)
        freezer.mkdir(parents=True, exist_ok=True)
        freeze = freezer / ("cgroup.freeze" if self.cgroup_v2 else "freezer.state")
        if self.cgroup_v2:
            usage.write_text(f"usage_usec {usage_us}\nuser_usec 0\nsystem_usec 0\n")
            freeze.write_text("0\n")
        else:
            usage.write_text(f"{usage_us * 1000}\n")
            (self.stub / "usage").write_text(str(usage))
            freeze.write_text("THAWED\n")
        (self.stub / "freezer").write_text(str(freeze))
        for p in procs:
            d = self.proc / str(p.pid)
            d.mkdir(exist_ok=True)
            nspid = f"{p.pid}\t{p.nspid}"
            (d / "status").write_text(f"Name:\tsh\nState:\tS (sleeping)\nPid:\t{p.pid}\nPPid:\t{p.ppid}\n"
                                      f"NSpid:\t{nspid}\nVmRSS:\t100 kB\n")
            hz = int(subprocess.run(["getconf", "CLK_TCK"], capture_output=True, text=True).stdout or 100)
            # Field 22 (start time in clock ticks since boot); a command name with a space and a ')'.
            fields = ["S", str(p.ppid)] + ["0"] * 17 + [str(p.started * hz)] + ["0"] * 30
            (d / "stat").write_text(f"{p.pid} (my prog) x) {' '.join(fields)}\n")

    def usage_steps(self, steps_us: list[int]) -> None:
        """CPU use (us) the container gains in each of the next seconds of the clock."""
        (self.stub / "usage-steps").write_text("".join(f"{s}\n" for s in steps_us))
