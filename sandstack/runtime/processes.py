"""Commands in a bound sandbox: started at once with an id, followed as they write, fed on stdin, waited for,
killed, listed; and the blocking exec, which is one of them run to its end in the request.

Every process runs as a Docker exec of the sandbox's own user (the backend's `spawn`), with its own environment
marker, as a blocking exec always did; a kill ends every process carrying that marker and their descendants
(scripts.KILL_EXEC: the whole process group, and a `setsid` or double-forked child with it). Output is kept per
stream up to the declared cap (sandstack.runtime.output) and counted past it.

A background process outlives the request that started it and ends with its session: a release stops the
container. The runtime keeps a row per process in its state volume, so that after a restart of the runtime it
knows which ones ran: it ends them (an exec's stream cannot be attached again) and reports them as ended.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pathlib import Path

from sandstack.runtime import scripts
from sandstack.runtime.backend import BackendError, ExecHandle, SandboxGone, SandboxNotRunning, Sink, StdinClosed
from sandstack.runtime.errors import ApiError, conflict
from sandstack.runtime.interfaces import Access, Credentials, Execs, Leases, Sandboxes
from sandstack.runtime.leases import holding
from sandstack.runtime.models import ENV_NAME_PATTERN
from sandstack.runtime.output import OutputLog
from sandstack.runtime.process_records import ProcessRecords
from sandstack.runtime.session_keys import shown
from sandstack.runtime.stdin import StdinWriter

log = logging.getLogger("sandstack.runtime")
ENV_NAME = re.compile(ENV_NAME_PATTERN.removeprefix("^").removesuffix("$"))
INTERPRETERS = {"bash": ["bash", "-c"], "python": ["python3", "-c"]}
KILL_WAIT = 10  # seconds a kill waits for the stream to end once the processes are dead
CLOSE_WAIT = 5  # seconds a closed terminal waits for its stream to end once its processes are killed
EXIT_KILLED = 137  # 128 + SIGKILL
MAX_RUNNING = 32  # processes running at once in one sandbox, its open terminals included
MAX_KEPT = 32  # ended processes (their output) kept per sandbox; older ones are forgotten
RESTARTED = ("the runtime restarted while it ran: it was ended (an exec's output stream cannot be attached again)")



@dataclass(frozen=True)
class Command:
    argv: list[str]
    workdir: str
    env: dict[str, str]


@dataclass
class Process:
    id: str
    sandbox: str
    session: str
    argv: list[str] | None
    marker: str
    started_at: float
    started_cs: str  # its start on the kernel's boot clock, for a blocking exec's timeout kill
    log: OutputLog
    tty: bool = False
    timeout: int | None = None
    handle: ExecHandle | None = None
    stdin: bool = False  # started with its stdin attached
    stdin_open: bool = False
    status: str = "running"  # running, exited, killed, timed_out, ended
    exit_code: int | None = None
    ended_at: float | None = None
    message: str | None = None
    reason: tuple[str, str] | None = None  # (status, message) a kill or the session's end set before it ended
    done: threading.Event = field(default_factory=threading.Event)
    counted: bool = False  # not listed, but counted toward MAX_RUNNING until `Processes.release` (a terminal)
    held: Any = b""  # the rest of a stdin write the process has not taken yet (sandstack.runtime.stdin)
    close_held: bool = False  # EOF once `held` is written

    def info(self) -> dict[str, object]:
        duration = None if self.handle is None else self.handle.duration_ms
        return {"id": self.id, "sandbox": self.sandbox, "session": shown(self.session), "command": self.argv,
                "status": self.status, "exit_code": self.exit_code, "started_at": self.started_at,
                "ended_at": self.ended_at, "duration_ms": duration, "stdin": self.stdin_open and self.status == "running",
                "stdin_pending": len(self.held),
                "tty": self.tty, "timeout": self.timeout, "output_end": self.log.end,
                "stdout_bytes": self.log.kept["stdout"], "stderr_bytes": self.log.kept["stderr"],
                "stdout_dropped": self.log.dropped["stdout"], "stderr_dropped": self.log.dropped["stderr"],
                "message": self.message}


class Processes:
    def __init__(self, sandboxes: Sandboxes, access: Access, execs: Execs, credentials: Credentials, leases: Leases,
                 state_dir: Path):
        self.sandboxes, self.access, self.execs, self.credentials = sandboxes, access, execs, credentials
        self.leases = leases
        self.backend, self.store = sandboxes.backend, sandboxes.store
        self._lock = threading.Lock()
        self._procs: dict[str, Process] = {}
        self._unlisted: Counter[str] = Counter()  # sandbox → its counted processes that are not listed (terminals)
        self.stdin = StdinWriter()
        self.records = ProcessRecords(state_dir / "processes.sqlite3")
        self._recover()

    # Commands

    def command(self, name: str, *, command: list[str] | None, script: str | None, lang: str, cwd: str | None,
                env: dict[str, str]) -> Command:
        """The argv, working directory and environment of a request, checked (422s name what is wrong)."""
        if (command is None) == (script is None):
            raise ApiError(422, "give exactly one of 'command' (an argv list) or 'script'")
        if command is not None and not command:
            raise ApiError(422, "'command' must not be empty")
        if script is not None and lang not in INTERPRETERS:
            raise ApiError(422, f"'lang' {lang!r} is not one of {', '.join(INTERPRETERS)}")
        bad = [key for key in env if not ENV_NAME.fullmatch(key) or key == scripts.MARKER_ENV]
        if bad:
            raise ApiError(422, f"env names {bad!r} are not allowed", names=bad)
        row = self.sandboxes.get(name)
        root = self.sandboxes.pool(row.pool).workspace_root
        workdir = root if not cwd else cwd if cwd.startswith("/") else f"{root}/{cwd}"
        # The session's run-scoped secrets (sandstack.runtime.credentials), under what the request itself sets.
        secrets = self.credentials.env(name, row.session)
        return Command(list(command) if command is not None else [*INTERPRETERS[lang], script], workdir,
                       {**secrets, **env})

    def timeout(self, name: str, timeout: int | None, default: int | None) -> int | None:
        """A request's timeout within the pool's declared bound (`session.exec_max_timeout`); `default` when it
        gives none (capped by the bound too)."""
        limit = self.sandboxes.pool(self.sandboxes.get(name).pool).exec_max_timeout_seconds
        if timeout is None:
            return None if default is None else min(default, limit)
        if not 1 <= timeout <= limit:
            raise ApiError(422, f"'timeout' {timeout} must be 1-{limit} seconds (the pool's "
                                "session.exec_max_timeout)", timeout=timeout, limit=limit)
        return timeout

    def output_limit(self, name: str, declared: int | None) -> int:
        """Bytes of output kept per stream: the pool's declared `session.exec_output_limit`, or less if asked."""
        cap = self.sandboxes.pool(self.sandboxes.get(name).pool).output_limit_bytes
        if declared is not None and not 1 <= declared <= cap:
            raise ApiError(422, f"'output_limit' {declared} must be 1-{cap} bytes (the pool's "
                                "session.exec_output_limit)")
        return declared or cap

    def spawn(self, name: str, cmd: Command, *, limit: int, stdin: bool = False, tty: bool = False,
              timeout: int | None = None, keep: bool = True, counted: bool = False, sink: Sink | None = None,
              rolling: bool = False, err_sink: Sink | None = None) -> Process:
        """Starts the command in the bound sandbox; `keep`: listed, and followed by a thread until it ends;
        `counted` (not kept): counted toward MAX_RUNNING all the same until `release` (a terminal, which holds a
        server thread and an exec while it is open); `sink`: where a terminal's output goes (its bytes as they are,
        instead of the kept text; `err_sink`: its stderr's, an SSH command's); `rolling`: its output keeps the last
        `limit` characters, not the first (sandstack.runtime.output)."""
        row = self.access.usable(name)
        counted = counted and not keep
        with self._lock:
            running = [p for p in self._procs.values() if p.sandbox == name and p.status == "running"]
            if (keep or counted) and len(running) + self._unlisted[name] >= MAX_RUNNING:
                raise conflict(f"sandbox {name!r} already runs {MAX_RUNNING} processes (its open terminals "
                               "included); wait for, kill or close one first", sandbox=name)
            if counted:  # taken now, under the lock: two terminals opened at once cannot both pass the bound
                self._unlisted[name] += 1
        marker = uuid.uuid4().hex
        proc = Process(id=f"proc-{uuid.uuid4().hex[:16]}", sandbox=name, session=row.session or "", argv=cmd.argv,
                       marker=marker, started_at=time.time(),
                       # the kernel's boot clock, which the sandbox's process start times count in
                       started_cs=str(int(time.clock_gettime(time.CLOCK_BOOTTIME) * 100)),
                       log=OutputLog(limit, rolling), tty=tty, timeout=timeout, stdin=stdin, stdin_open=stdin,
                       counted=counted)
        self.execs.mark(marker)
        try:
            proc.handle = self.backend.spawn(
                name, list(cmd.argv), workdir=cmd.workdir, env={**cmd.env, scripts.MARKER_ENV: marker},
                stdout=sink or proc.log.sink("stdout"), stderr=err_sink or proc.log.sink("stderr"), stdin=stdin,
                tty=tty)
        except (SandboxNotRunning, SandboxGone) as error:
            self.execs.unmark(marker)
            self.release(proc)
            raise self.sandboxes.died(row, error) from error
        except BaseException:
            self.execs.unmark(marker)
            self.release(proc)
            raise
        if keep:
            with self._lock:
                self._procs[proc.id] = proc
            self.records.started(proc.id, name, proc.session, marker, proc.started_at)
            threading.Thread(target=self._follow, args=(proc,), daemon=True, name=f"sandstack-{proc.id}").start()
        return proc

    def release(self, proc: Process) -> None:
        """A counted process that is not listed (a terminal) has ended: it no longer counts toward MAX_RUNNING."""
        with self._lock:
            if proc.counted:
                proc.counted = False
                self._unlisted[proc.sandbox] -= 1
                if self._unlisted[proc.sandbox] <= 0:
                    del self._unlisted[proc.sandbox]

    def close(self, proc: Process) -> None:
        """A counted process that is not kept (a terminal) is done with: what it started is killed (its shell's
        children included), its stream released, and it no longer counts toward MAX_RUNNING."""
        assert proc.handle is not None
        try:
            if not proc.handle.wait(0):
                self._kill(proc)
                proc.handle.wait(CLOSE_WAIT)
        except BackendError:
            pass  # the sandbox is gone or stopped: nothing it started runs on
        finally:
            proc.handle.close()
            self.execs.unmark(proc.marker)
            self.release(proc)

    def _follow(self, proc: Process) -> None:
        """Waits for a background process to end (or its timeout: then it is killed) and records how it ended."""
        assert proc.handle is not None
        try:
            if not proc.handle.wait(proc.timeout):
                proc.reason = proc.reason or ("timed_out", f"timed out after {proc.timeout}s: every process it "
                                                           "started was killed (SIGKILL)")
                self._kill(proc)
                proc.handle.wait(KILL_WAIT)
        except Exception:  # noqa: BLE001 - the process must still be recorded as ended
            log.exception("following process %s failed", proc.id)
        finally:
            self._ended(proc)

    def _ended(self, proc: Process) -> None:
        handle = proc.handle
        if handle is not None:
            handle.close()
        status, message = proc.reason or ("exited", None)
        code = handle.exit_code if handle is not None else None
        proc.exit_code = EXIT_KILLED if code is None and status != "exited" else code
        proc.status, proc.message, proc.ended_at = status, message, time.time()
        self.execs.unmark(proc.marker)
        proc.done.set()  # before the log closes: a follower woken by the close finds it ended
        proc.log.close()
        # Only a row still running: a final status (a restarted runtime's 'ended') is never written over.
        self.records.ended(proc.id, proc.status, proc.exit_code, proc.ended_at, proc.message)
        self._forget_old(proc.sandbox)

    def _forget_old(self, name: str) -> None:
        with self._lock:
            ended = [p for p in self._procs.values() if p.sandbox == name and p.done.is_set()]
            for old in sorted(ended, key=lambda p: p.started_at)[:max(len(ended) - MAX_KEPT, 0)]:
                del self._procs[old.id]
                self.records.forget(old.id)

    def _kill(self, proc: Process, since: str = "") -> None:
        """SIGKILL to every process carrying its marker and their descendants (with `since`, also what was
        orphaned since it began: scripts.KILL_EXEC)."""
        self.execs.kill(proc.sandbox, proc.marker, since)

    # The blocking exec: a process run to its end in the request

    @holding  # no pause while it runs
    def exec(self, name: str, *, command: list[str] | None, script: str | None, lang: str, cwd: str | None,
             env: dict[str, str], timeout: int | None) -> dict[str, object]:
        """A command run to its end in the request (its session's secrets added: `command`)."""
        cmd = self.command(name, command=command, script=script, lang=lang, cwd=cwd, env=env)
        return self.run(name, cmd, self.timeout(name, timeout, self.sandboxes.live.config.exec_timeout_seconds))

    def run(self, name: str, cmd: Command, timeout: int) -> dict[str, object]:
        row = self.sandboxes.get(name)
        proc = self.spawn(name, cmd, limit=self.output_limit(name, None), keep=False)
        assert proc.handle is not None
        try:
            timed_out = not proc.handle.wait(timeout)
            if timed_out:
                # Its start, so that the kill finds what the command started even where the marker did not follow.
                self._kill(proc, since=proc.started_cs)
                proc.handle.wait(KILL_WAIT)
        except (SandboxNotRunning, SandboxGone) as error:
            raise self.sandboxes.died(row, error) from error
        finally:
            proc.handle.close()
            self.execs.unmark(proc.marker)
            proc.log.close()
        if not timed_out and proc.handle.exit_code is None:  # the stream ended because the container did
            state = self.backend.state(name)
            if not state.running:
                raise self.sandboxes.died(row, SandboxNotRunning(f"container {name!r} is {state.status}"))
        self.store.touch(name)  # its end is the session's activity too (the idle policy reads it)
        result: dict[str, object] = {
            "stdout": _text(proc.log, "stdout"), "stderr": _text(proc.log, "stderr"),
            "exit_code": EXIT_KILLED if timed_out else proc.handle.exit_code, "duration_ms": proc.handle.duration_ms,
            "timed_out": timed_out, "stdout_truncated": proc.log.dropped["stdout"] > 0,
            "stderr_truncated": proc.log.dropped["stderr"] > 0,
        }
        if timed_out:
            result["message"] = f"timed out after {timeout}s: every process the command started was killed (SIGKILL)"
        return result

    # Background processes by id

    def get(self, name: str, process: str) -> Process | dict[str, object]:
        """The process of the sandbox's current session (in memory), or its recorded row (ended before a restart
        of the runtime); 404 for any other id, another session's included."""
        session = self.sandboxes.get(name).session
        with self._lock:
            proc = self._procs.get(process)
        if proc is not None and proc.sandbox == name and proc.session == session:
            return proc
        rows = self.records.rows(name, session or "", process)
        if rows:
            return rows[0]
        raise ApiError(404, f"process {process!r} is not in sandbox {name!r}", process=process, sandbox=name)

    def live(self, name: str, process: str) -> Process:
        found = self.get(name, process)
        if isinstance(found, Process):
            return found
        raise conflict(f"process {process!r} has ended and its output is no longer kept", process=process)

    def list(self, name: str) -> list[dict[str, object]]:
        session = self.sandboxes.get(name).session or ""
        with self._lock:
            procs = {p.id: p.info() for p in self._procs.values() if p.sandbox == name and p.session == session}
        rows = {r["id"]: r for r in self.records.rows(name, session)}
        return sorted({**rows, **procs}.values(), key=lambda p: (p["started_at"], p["id"]))

    def write(self, name: str, process: str, data: bytes, close: bool) -> dict[str, object]:
        proc = self.live(name, process)
        if not proc.stdin:
            raise conflict(f"process {process!r} was started without stdin ('stdin': true keeps it open)",
                           process=process)
        assert proc.handle is not None
        try:
            if not proc.stdin_open or proc.status != "running":
                raise StdinClosed("closed")
            self.stdin.write(proc, data, close)  # at once: what the process does not take now is held
        except StdinClosed as error:
            proc.stdin_open = False
            raise conflict(f"the stdin of process {process!r} is closed ({proc.status})", process=process) from error
        return proc.info()

    def kill(self, name: str, process: str) -> dict[str, object]:
        proc = self.live(name, process)
        if proc.status == "running":
            proc.reason = proc.reason or ("killed", "killed on request: every process it started got SIGKILL")
            self._kill(proc)
            proc.done.wait(KILL_WAIT)
        return proc.info()

    def end_session(self, name: str, why: str) -> None:
        """Its session is over (the sandbox is being reset, which stops the container): what still runs is
        recorded as ended with `why`, and none of its processes is listed or reachable again."""
        with self._lock:
            procs = [p for p in self._procs.values() if p.sandbox == name]
            for proc in procs:
                del self._procs[proc.id]
        for proc in procs:
            if proc.status == "running":
                proc.reason = proc.reason or ("ended", why)
        self.records.forget_sandbox(name)

    # A restart of the runtime

    def _recover(self) -> None:
        """The processes a previous run of the runtime started and did not see end: each is ended (its
        sandbox still bound to its session) and reported as ended with RESTARTED."""
        for pid, name, session, marker in self.records.running():
            message = RESTARTED
            self.records.ended(pid, "ended", None, time.time(), message)
            try:
                row = self.store.sandbox(name)
                if row is not None and row.session == session and self.backend.state(name).running:
                    self.execs.kill(name, marker, spare_running=False)
            except BackendError as error:
                message = f"{RESTARTED}; ending it failed ({error}): the release of its session ends it"
                self.records.note(pid, message)
            log.warning("process %s of sandbox %s: %s", pid, name, message)


def _text(output: OutputLog, stream: str) -> str:
    text = output.text(stream)
    dropped = output.dropped[stream]
    if not dropped:
        return text
    return text + f"\n[sandstack: {stream} truncated: {dropped} bytes dropped after the first {output.limit}]"


def dumps(event: dict[str, object]) -> str:
    return json.dumps(event, ensure_ascii=True, separators=(",", ":"))
