"""A watch of a workspace directory: change events for agents that wait on files.

`POST /v1/sandboxes/{s}/watch {path, interval}` checks the path as every file operation does (inside the root, no
symlink out, a directory) and starts a process that polls it, as the sandbox's user, every `interval` seconds:
`find` and `stat` (GNU's or busybox's), compared with the last pass by awk. Each change is one output line,
`created|modified|deleted<TAB>path` (relative to the workspace root), after a first `ready<TAB>.` once the
directory's first state is taken (a change before it is not reported: the client waits for it), streamed like any process's output
(GET .../processes/{id}/output) and ended with a kill or the session. Its output log rolls (the last output
limit's worth is kept), so a watch reports for as long as it runs; a follower that falls further behind gets a
`skipped` event. Polling, not inotify: nothing in a sandbox's
image is assumed beyond what the file scripts need, and inotify does not see what another mount namespace writes.
A change within one second that keeps a file's size is seen only if its inode changes (stat's seconds).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import Field

from sandstack.runtime import scripts
from sandstack.runtime.files import clean_path
from sandstack.runtime.models import NO_NUL, PATH_MAX, Strict, pattern
from sandstack.runtime.process_models import ProcessInfo
from sandstack.runtime.processes import Command
from sandstack.runtime.routes.common import ERRORS, bound, require_token, sandbox_param

router = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], responses=ERRORS)


class WatchRequest(Strict):
    path: str = Field("", description="The directory, relative to the workspace root ('' is the root).",
                      max_length=PATH_MAX, **pattern(NO_NUL))
    interval: float = Field(0.5, ge=0.1, le=60, description="Seconds between two looks.")


@router.post("/sandboxes/{sandbox}/watch", response_model=ProcessInfo, status_code=201, operation_id="watch",
             name="watch")
def watch(body: WatchRequest, request: Request, sandbox: str = sandbox_param()) -> Any:
    """Watch a directory: a process whose output lines are `created|modified|deleted<TAB>path` (follow it with
    GET .../processes/{id}/output; kill it to stop)."""
    runtime = bound(request, sandbox)
    rel = clean_path(body.path) or "."
    root = runtime.files.root(sandbox)
    code, stderr = runtime.transfers.run(sandbox, scripts.sh(scripts.IS_DIR, rel), root)
    if code != 0:
        raise runtime.transfers.fail(code, stderr, body.path, sandbox, "watching")
    cmd = Command(scripts.sh(scripts.WATCH, rel, f"{body.interval:g}"), root, {"PATH": scripts.SYSTEM_PATH})
    processes = runtime.processes
    # Rolling: a watch runs as long as the session may, and reports on past the output limit (the last
    # `limit` characters are kept for a follower that reconnects).
    return processes.spawn(sandbox, cmd, limit=processes.output_limit(sandbox, None), rolling=True).info()
