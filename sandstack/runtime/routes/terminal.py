"""A terminal in a bound sandbox over a WebSocket: a shell (or the given command) on a pseudo-terminal, as the
sandbox's own user, in the workspace, started the way every process is (sandstack.runtime.processes: its marker,
the sandbox's confinement) and killed, with everything it started, when the socket closes.

    WS /v1/sandboxes/{sandbox}/terminal?rows=24&cols=80[&command=python3&command=-i]
    Authorization: Bearer <token>

Binary messages are the terminal's bytes: keystrokes in, output out, as they are. Text messages are JSON
control: in, {"type": "resize", "rows": R, "cols": C} (integers 1-1000); out, {"type": "exit", "exit_code": N}
before the server closes, and {"type": "error", "error": "..."} for a control message it did not take (a size out of
bounds or not an integer: the terminal keeps its size). A refusal accepts the socket and closes it at once with
4000 + the HTTP status the same request would get (4401 a wrong token, 4404 no such sandbox, 4409 not bound, paused
or at the sandbox's 32 processes, 4422 a query value out of bounds) and the message as the reason (a close before the
accept would reach the client as a bare 403 on uvicorn, which is why the query is checked here, not by FastAPI).
A terminal counts toward the sandbox's processes (sandstack.runtime.processes.MAX_RUNNING) while it is open.

A pool's `session.terminal_idle` closes a terminal with neither input nor output for that long (4408, the reason
naming it; the audit line says so), freeing the process slot an abandoned one holds.

Output waits for the client (sandstack.runtime.output_window): past its window of bytes not yet sent, the reader
stops, and the process blocks on its writes, so a slow client costs the runtime no more than that window. The audit log records a terminal's
opening and closing (who, sandbox, session, exit code), never its input or output.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from fastapi import APIRouter, Depends, Query, WebSocket, WebSocketDisconnect
from fastapi.concurrency import run_in_threadpool

from sandstack.runtime.backend import STDIN_TIMEOUT, BackendError, StdinBlocked
from sandstack.runtime.errors import ApiError
from sandstack.runtime.output_window import OutputWindow
from sandstack.runtime.processes import Command, Process
from sandstack.runtime.routes.common import ACTOR_HEADER, ERRORS, authenticate, require_token, sandbox_param
from sandstack.runtime.service import Runtime
from sandstack.runtime.session_keys import shown
from sandstack.runtime.terminal_marks import SETUP, Marks, synced_line, typed
from sandstack.runtime.tokens import check_sandbox

MODES = ("raw", "command")  # `?mode=`: the terminal's bytes only, or commands' results too (terminal_marks)
MAX_COMMAND = 64 * 1024  # characters of one command-mode command
SYNC_TRIES, SYNC_WAIT = 20, 0.5  # sync lines after a Ctrl-C, and seconds each one's mark is waited for
RESEND_EVERY = 4  # sync lines unanswered after which the Ctrl-C is typed again (_synced)
SHELL = ["sh", "-c", "command -v bash >/dev/null 2>&1 && exec bash -i; exec sh -i"]
# Command mode's: no line editing, whose own output (readline's bracketed-paste switches around every line it reads)
# would land between a command's marks.
COMMAND_SHELL = ["sh", "-c", "command -v bash >/dev/null 2>&1 && exec bash --noediting -i; exec sh -i"]
TERM = "xterm-256color"

router = APIRouter()
MAX_SIZE = 1000  # rows or columns of a terminal at most (a TTY's size is an unsigned short; Docker takes any int)
ROWS = Query(24, ge=1, le=MAX_SIZE, description="The terminal's height.")
COLS = Query(80, ge=1, le=MAX_SIZE, description="The terminal's width.")
COMMAND = Query(None, description="argv to run instead of the login shell (bash, else sh), e.g. python3 -i.")


@router.get("/v1/sandboxes/{sandbox}/terminal", operation_id="terminal", name="terminal_http",
            dependencies=[Depends(require_token)],
            responses={**ERRORS, 426: ERRORS[409], 101: {"description": "Switching to the WebSocket: binary "
                                                                          "messages are the terminal's bytes; see the "
                                                                          "runtime's design notes for the control "
                                                                          "messages."}})
def terminal_http(sandbox: str = sandbox_param(), rows: int = ROWS, cols: int = COLS,
                  command: list[str] | None = COMMAND) -> Any:
    """A terminal (a pseudo-terminal running a shell as the sandbox's user, in the workspace): open this path
    as a WebSocket. A plain GET is answered 426."""
    raise ApiError(426, "open this path as a WebSocket (Upgrade: websocket): it is a terminal")


def _size(name: str, value: Any) -> int:
    """A terminal's rows or columns from a resize's JSON: an integer 1-MAX_SIZE (not a bool, a float, Infinity)."""
    if type(value) is not int or not 1 <= value <= MAX_SIZE:  # noqa: E721 - a bool is an int to isinstance
        shown = value if isinstance(value, float) or type(value) is int else json.dumps(value)[:40]  # noqa: E721
        raise ApiError(422, f"{name} {shown} is not an integer 1-{MAX_SIZE}", field=name)
    return value


def _query_size(name: str, text: str | None, default: int) -> int:
    """The same from the handshake's query (its default when absent)."""
    if text is None:
        return default
    if text.isascii() and text.isdigit() and len(text) <= len(str(MAX_SIZE)) and 1 <= int(text) <= MAX_SIZE:
        return int(text)
    raise ApiError(422, f"query {name} {text[:40]!r} is not an integer 1-{MAX_SIZE}", field=name)


@router.websocket("/v1/sandboxes/{sandbox}/terminal", name="terminal")
async def terminal(websocket: WebSocket, sandbox: str) -> None:
    app = websocket.app
    runtime: Runtime = app.state.runtime
    audit = app.state.audit
    given = websocket.headers.get("authorization", "")
    token = given[7:] if given[:7].lower() == "bearer " else ""
    # The same check as every route (constant time; a scoped token acts only on its pools' sandboxes).
    scope = authenticate(app, token)
    if scope is None:
        await websocket.accept()
        await websocket.close(code=4401, reason="unauthorized")
        return
    query = websocket.query_params
    try:  # here, not in the signature: FastAPI's refusal of a bad value is a close before the accept, a bare 403
        rows = _query_size("rows", query.get("rows"), 24)
        cols = _query_size("cols", query.get("cols"), 80)
    except ApiError as error:
        await websocket.accept()
        await websocket.close(code=4000 + error.status, reason=error.message[:120])
        return
    command = query.getlist("command") or None
    mode = query.get("mode", "raw")
    if mode not in MODES:
        await websocket.accept()
        await websocket.close(code=4422, reason=f"query mode {mode[:40]!r} is not one of: {', '.join(MODES)}")
        return
    marks = Marks() if mode == "command" else None
    actor = websocket.headers.get(ACTOR_HEADER, "")[:64]
    peer = websocket.client.host if websocket.client else "-"
    who = f"{actor}@{peer}" if actor else peer
    loop = asyncio.get_running_loop()
    window = OutputWindow(loop, "the terminal's client")
    session, idle = None, None

    def record(outcome: str, status: int) -> None:
        if audit is not None:
            audit.record(who=who, operation="terminal", outcome=outcome, status=status, session=session,
                         sandbox=sandbox, scope=scope.name)

    def start() -> Process:
        nonlocal session, idle
        row = runtime.sandboxes.get(sandbox)
        check_sandbox(scope, row, runtime.host)  # another pool's (or session's) sandbox: 404, as for every route
        session = shown(row.session)
        pool = runtime.sandboxes.pool(row.pool)
        root, idle = pool.workspace_root, pool.terminal_idle_seconds
        # The session's run-scoped secrets, as for every command of the session.
        cmd = Command(list(command) if command else COMMAND_SHELL if marks is not None else SHELL, root,
                      {**runtime.credentials.env(sandbox, row.session), "TERM": TERM})
        # Counted among the sandbox's processes while it is open (MAX_RUNNING), though not listed.
        proc = runtime.processes.spawn(sandbox, cmd, limit=1, stdin=True, tty=True, keep=False, counted=True,
                                       sink=window)
        try:
            proc.handle.resize(rows, cols)
            if marks is not None:
                _type(proc, SETUP)
        except BaseException:
            runtime.processes.close(proc)
            raise
        return proc

    try:
        proc = await run_in_threadpool(start)
    except (ApiError, BackendError) as error:
        status = error.status if isinstance(error, ApiError) else 502
        message = error.message if isinstance(error, ApiError) else str(error)
        record(message, status)
        await websocket.accept()
        await websocket.close(code=4000 + status, reason=message[:120])
        return
    await websocket.accept()
    record("terminal opened", 101)
    ended = loop.create_task(run_in_threadpool(proc.handle.wait, None))
    pump = loop.create_task(_send_output(websocket, window, marks))
    commands = syncs = 0
    code = None
    receive: asyncio.Task | None = None
    try:
        while True:
            receive = receive or loop.create_task(websocket.receive())
            left = None if idle is None else max(window.active + idle - time.monotonic(), 0.05)
            done, _ = await asyncio.wait({receive, ended}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if ended in done:
                receive.cancel()
                break
            if not done:  # the idle deadline passed, unless output came meanwhile
                if time.monotonic() - window.active >= idle:
                    receive.cancel()
                    reason = f"closed after {idle} s without input or output (session.terminal_idle)"
                    record(reason, 408)
                    await websocket.close(code=4408, reason=reason)
                    code = "idle"
                    break
                continue
            message, receive = receive.result(), None
            window.active = time.monotonic()
            if message["type"] == "websocket.disconnect":
                break
            if message.get("bytes"):
                await run_in_threadpool(_type, proc, message["bytes"])
            elif message.get("text"):
                run = _run_message(message["text"]) if marks is not None else None
                if run is not None:
                    if isinstance(run, str):
                        await websocket.send_text(json.dumps({"type": "error", "error": run}))
                        continue
                    commands += 1
                    if run[1] and (cancelled := marks.cancel()) is not None:
                        await run_in_threadpool(_type, proc, b"\x03")
                        await websocket.send_text(json.dumps(cancelled))
                        syncs = await _synced(proc, marks, syncs)
                    await run_in_threadpool(_type, proc, typed(commands, run[0]))
                    await websocket.send_text(json.dumps({"type": "started", "id": commands}))
                    continue
                refused = await run_in_threadpool(_control, proc, message["text"])
                if refused:
                    await websocket.send_text(json.dumps({"type": "error", "error": refused}))
        if code is None and ended.done():
            code = proc.handle.exit_code
            await _drain(window, pump)
            await websocket.send_text(json.dumps({"type": "exit", "exit_code": code}))
            await websocket.close()
    except (WebSocketDisconnect, RuntimeError, BackendError):
        pass  # the client went away (or a write found the shell gone): the shell ends below
    finally:
        window.close()
        pump.cancel()
        await run_in_threadpool(runtime.processes.close, proc)
        if code != "idle":
            record(f"terminal closed (exit {code})" if code is not None else "terminal closed by the client", 200)


def _type(proc: Process, keys: bytes) -> None:
    """Keystrokes to the terminal, waiting up to STDIN_TIMEOUT for it to read them (then it is closed)."""
    if proc.handle.write(keys, STDIN_TIMEOUT) < len(keys):
        raise StdinBlocked(f"the terminal did not read its input within {STDIN_TIMEOUT}s")


def _control(proc: Process, text: str) -> str | None:
    """Applies a control message; what was wrong with a resize it did not apply (None: applied, or not a control
    message this runtime knows, which is ignored as a terminal ignores an unknown sequence)."""
    try:
        message: Any = json.loads(text)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("type") != "resize":
        return None
    try:
        rows, cols = _size("rows", message.get("rows")), _size("cols", message.get("cols"))
    except ApiError as error:
        return f"resize: {error.message}; the terminal keeps its size"
    proc.handle.resize(rows, cols)
    return None


async def _synced(proc: Process, marks: Marks, number: int) -> int:
    """After a Ctrl-C: sync lines typed until one's mark comes back (terminal_marks.synced_line); the next number."""
    for attempt in range(SYNC_TRIES):
        if attempt and attempt % RESEND_EVERY == 0:
            # Still no mark: the Ctrl-C found nothing to interrupt (it came between two commands of a list, before
            # the next one started, or while SIGINT was ignored) and the command goes on: type it again.
            await run_in_threadpool(_type, proc, b"\x03")
        number += 1
        await run_in_threadpool(_type, proc, synced_line(number))
        for _ in range(int(SYNC_WAIT / 0.02)):
            if number in marks.synced:
                return number
            await asyncio.sleep(0.02)
    return number  # the shell did not answer: the command is typed anyway, and its own result will tell


def _run_message(text: str) -> tuple[str, bool] | str | None:
    """A command mode's `{"type": "run", "command": ..., "cancel": bool}`: (command, cancel), what is wrong with it, or
    None for any other message."""
    try:
        message: Any = json.loads(text)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("type") != "run":
        return None
    command, cancel = message.get("command"), message.get("cancel", False)
    if not isinstance(command, str) or not command.strip() or len(command) > MAX_COMMAND:
        return f"run: command must be a non-empty string of at most {MAX_COMMAND} characters; nothing was run"
    if "\x03" in command or "\x04" in command:
        return "run: command must not hold Ctrl-C or Ctrl-D (use cancel: true); nothing was run"
    if not isinstance(cancel, bool):
        return "run: cancel must be true or false; nothing was run"
    return command, cancel


async def _send_output(websocket: WebSocket, window: OutputWindow, marks: Marks | None = None) -> None:
    while True:
        data = await window.queue.get()
        try:
            # Read before sending: a client that saw these bytes may send its next command (a cancel) at once, and
            # the command they started must be known running by then.
            results = marks.feed(data) if marks is not None else ()
            await websocket.send_bytes(data)
            for result in results:
                await websocket.send_text(json.dumps(result))
        finally:
            window.sent(len(data))


async def _drain(window: OutputWindow, pump: asyncio.Task) -> None:
    """Lets the pump send what the shell wrote before it exited."""
    for _ in range(100):
        if window.queue.empty():
            break
        await asyncio.sleep(0.01)
