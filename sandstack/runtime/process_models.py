"""Request and response bodies of processes and terminals (the OpenAPI document is generated from them)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from sandstack.runtime.models import CommandFields, Strict

ProcessStatus = Literal["running", "exited", "killed", "timed_out", "ended"]


class ProcessRequest(CommandFields):
    timeout: int | None = Field(None, ge=1, description="Seconds, at most the host's `exec_max_timeout_seconds`; "
                                                        "then every process it started is killed. None: it runs "
                                                        "until it ends, is killed, or its session ends.")
    stdin: bool = Field(False, description="Keep its stdin open for POST .../stdin; otherwise it reads EOF.")
    output_limit: int | None = Field(None, ge=1, description="Bytes kept per stream (at most the host's output "
                                                             "limit, its default); the rest is counted, not kept.")


class ProcessInfo(BaseModel):
    id: str
    sandbox: str
    session: str
    command: list[str] | None = Field(description="Its argv (null for one recorded before a runtime restart).")
    status: ProcessStatus = Field(description="'killed': by a kill request; 'timed_out': at its timeout; 'ended': "
                                              "its session ended, or the runtime restarted while it ran.")
    exit_code: int | None = Field(description="Its exit status once it ended (137: killed).")
    started_at: float
    ended_at: float | None
    duration_ms: int | None
    stdin: bool = Field(description="Its stdin is open for writes.")
    stdin_pending: int = Field(0, description="Bytes of the last stdin write the process has not taken yet: the "
                                              "runtime holds them and writes them as it reads; another write "
                                              "meanwhile is 409.")
    tty: bool
    timeout: int | None
    output_end: int = Field(description="The position after the last character kept: give it as `after` to read "
                                        "on from there.")
    stdout_bytes: int = Field(description="Bytes of stdout kept.")
    stderr_bytes: int
    stdout_dropped: int = Field(description="Bytes of stdout past the output limit: counted, not kept.")
    stderr_dropped: int
    message: str | None


class TerminalSize(Strict):
    rows: int = Field(24, ge=1, le=1000)
    cols: int = Field(80, ge=1, le=1000)
