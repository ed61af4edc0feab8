"""The routes of commands in a bound sandbox: the blocking exec, and processes: start, list, follow (Server-Sent
Events), stdin, wait, kill.

Output is streamed as Server-Sent Events, not over a WebSocket: a process's output flows one way, so plain HTTP
carries it through any proxy or TLS terminator in front of the runtime, needs nothing beyond Debian's uvicorn
(which speaks WebSocket only with an extra package), reads in a few lines with httpx, sync and async, and resumes
after a dropped connection from the last event id (a position in the output). Input is rare and small, one
POST per write. A terminal, where every keystroke goes in and its echo comes back, is the WebSocket
(sandstack.runtime.routes.terminal).
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from sandstack.runtime.errors import ApiError
from sandstack.runtime.models import ExecRequest, ExecResult
from sandstack.runtime.process_models import ProcessInfo, ProcessRequest
from sandstack.runtime.processes import Process, dumps
from sandstack.runtime.routes.common import BINARY, ERRORS, bound, path_param, require_token, sandbox_param

PROCESS_PATTERN = r"^proc-[0-9a-f]{16}$"
KEEPALIVE = 15  # seconds between SSE comments on a quiet stream: proxies keep it open, a gone client is noticed
STDIN_MAX = 1024 * 1024  # bytes in one stdin write
WAIT_MAX = 3600  # seconds one wait request may take
# One event of the stream (OpenAPI 3.1: a text/event-stream's schema describes each event, as its fields).
SSE = {"text/event-stream": {"schema": {
    "type": "object", "required": ["event", "data"], "properties": {
        "event": {"enum": ["stdout", "stderr", "truncated", "skipped", "exit"]},
        "data": {"type": "string", "contentMediaType": "application/json", "description": "One JSON object."},
        "id": {"type": "string", "pattern": "^[0-9]+$", "description": "The position after it (stdout, stderr)."},
    }}}}

router = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], responses=ERRORS)


def process_param() -> Any:
    return path_param("The process id (from its start).", PROCESS_PATTERN)


@router.post("/sandboxes/{sandbox}/exec", response_model=ExecResult, operation_id="exec", name="exec")
def exec_(body: ExecRequest, request: Request, sandbox: str = sandbox_param()) -> Any:
    """Run a command (argv) or a script; stdout, stderr, exit code and duration come back."""
    processes = bound(request, sandbox).processes
    # The session's run-scoped secrets are added by the process layer (sandstack.runtime.processes.command).
    result = processes.exec(sandbox, command=body.command, script=body.script, lang=body.lang, cwd=body.cwd,
                            env=body.env, timeout=body.timeout)
    request.state.exec_outcome = "timed_out" if result.get("timed_out") else "ok"
    return result


@router.post("/sandboxes/{sandbox}/processes", response_model=ProcessInfo, status_code=201,
             operation_id="start_process", name="start_process")
def start_process(body: ProcessRequest, request: Request, sandbox: str = sandbox_param()) -> Any:
    """Start a command and answer at once with its id; it runs on after this request (until it ends, is killed,
    times out, or its session ends). Follow its output with GET .../output."""
    processes = bound(request, sandbox).processes
    cmd = processes.command(sandbox, command=body.command, script=body.script, lang=body.lang, cwd=body.cwd,
                            env=body.env)
    proc = processes.spawn(sandbox, cmd, limit=processes.output_limit(sandbox, body.output_limit), stdin=body.stdin,
                           timeout=processes.timeout(sandbox, body.timeout, None))
    return proc.info()


@router.get("/sandboxes/{sandbox}/processes", response_model=list[ProcessInfo], operation_id="list_processes",
            name="list_processes")
def list_processes(request: Request, sandbox: str = sandbox_param()) -> Any:
    """The processes of the sandbox's current session, running and ended, oldest first."""
    return bound(request, sandbox).processes.list(sandbox)


def _info(found: Process | dict[str, Any]) -> dict[str, Any]:
    return found.info() if isinstance(found, Process) else found


@router.get("/sandboxes/{sandbox}/processes/{process}", response_model=ProcessInfo, operation_id="get_process",
            name="get_process")
def get_process(request: Request, sandbox: str = sandbox_param(), process: str = process_param()) -> Any:
    return _info(bound(request, sandbox).processes.get(sandbox, process))


@router.get("/sandboxes/{sandbox}/processes/{process}/output", operation_id="process_output",
            name="process_output", responses={200: {"content": SSE, "description": (
                "Server-Sent Events: `stdout` and `stderr` (data: {\"text\": ...}, id: the position after it), "
                "`truncated` once per stream past the output limit (data: {\"stream\", \"kept\"}), `skipped` "
                "when a watch's output moved on past what the follower read (data: {\"from\", \"to\"}), and `exit` "
                "last (data: the process as GET .../processes/{process} gives it).")}})
async def process_output(request: Request, sandbox: str = sandbox_param(), process: str = process_param(),
                         after: int = Query(0, ge=0, description="Read on from this position (an event id)."),
                         follow: bool = Query(True, description="Stay until the process ends; otherwise answer "
                                                                "what is kept now."),
                         last_event_id: str | None = Header(None, description="A reconnecting EventSource's "
                                                                              "last id: read on from it.")) -> Any:
    runtime = await run_in_threadpool(bound, request, sandbox)
    found = await run_in_threadpool(runtime.processes.get, sandbox, process)
    if last_event_id is not None and last_event_id.isdigit():
        after = int(last_event_id)
    return StreamingResponse(_events(found, after, follow), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def _events(found: Process | dict[str, Any], after: int, follow: bool) -> AsyncIterator[bytes]:
    if not isinstance(found, Process):
        yield _event("exit", found)
        return
    proc, loop, more = found, asyncio.get_running_loop(), asyncio.Event()
    stop = proc.log.listen(lambda: loop.call_soon_threadsafe(more.set))
    announced: set[str] = set()
    try:
        while True:
            more.clear()
            if after < proc.log.start:  # a rolling log let go of it before this follower read it
                yield _event("skipped", {"from": after, "to": proc.log.start})
            for end, stream, text in proc.log.read(after):
                after = end
                yield _event(stream, {"text": text}, end)
            for stream, dropped in proc.log.dropped.items():
                if dropped and stream not in announced:
                    announced.add(stream)
                    yield _event("truncated", {"stream": stream, "kept": proc.log.kept[stream]})
            if proc.log.closed and after >= proc.log.end:
                yield _event("exit", proc.info())
                return
            if not follow:
                return
            try:
                await asyncio.wait_for(more.wait(), KEEPALIVE)
            except asyncio.TimeoutError:
                yield b": keepalive\n\n"
    finally:
        stop()


def _event(kind: str, data: dict[str, Any], event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: {dumps(data)}\n\n".encode("ascii")


@router.post("/sandboxes/{sandbox}/processes/{process}/stdin", response_model=ProcessInfo,
             operation_id="write_stdin", name="write_stdin",
             openapi_extra={"requestBody": {"required": False, "content": BINARY}})
async def write_stdin(request: Request, sandbox: str = sandbox_param(), process: str = process_param(),
                      close: bool = Query(False, description="Close its stdin after these bytes (EOF).")) -> Any:
    """Bytes to the process's stdin (at most 1 MiB per request), answered at once: what the process does not take
    now is held and written as it reads (`stdin_pending`), and a write while any is held is 409; the audit line
    records the call, never the bytes."""
    runtime = await run_in_threadpool(bound, request, sandbox)
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > STDIN_MAX:
            raise ApiError(413, f"a stdin write is at most {STDIN_MAX} bytes; send more in several", limit=STDIN_MAX)
    return await run_in_threadpool(runtime.processes.write, sandbox, process, bytes(data), close)


@router.post("/sandboxes/{sandbox}/processes/{process}/wait", response_model=ProcessInfo,
             operation_id="wait_process", name="wait_process")
async def wait_process(request: Request, sandbox: str = sandbox_param(), process: str = process_param(),
                       timeout: float = Query(30, ge=0, le=WAIT_MAX, description="Seconds to wait at most; the "
                                                                                  "answer says whether it ended.")) -> Any:
    """The process once it has ended, or as it is when `timeout` passed (status 'running')."""
    runtime = await run_in_threadpool(bound, request, sandbox)
    found = await run_in_threadpool(runtime.processes.get, sandbox, process)
    if isinstance(found, Process) and not found.done.is_set():
        loop, more = asyncio.get_running_loop(), asyncio.Event()
        stop = found.log.listen(lambda: loop.call_soon_threadsafe(more.set))
        try:
            deadline = loop.time() + timeout
            while not found.done.is_set() and loop.time() < deadline:
                more.clear()
                try:
                    await asyncio.wait_for(more.wait(), max(deadline - loop.time(), 0))
                except asyncio.TimeoutError:
                    break
        finally:
            stop()
    return _info(found)


@router.post("/sandboxes/{sandbox}/processes/{process}/kill", response_model=ProcessInfo,
             operation_id="kill_process", name="kill_process")
def kill_process(request: Request, sandbox: str = sandbox_param(), process: str = process_param()) -> Any:
    """SIGKILL to every process the command started (its marker's and their descendants: the whole group)."""
    return bound(request, sandbox).processes.kill(sandbox, process)
