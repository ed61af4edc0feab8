"""The runtime API's request and response bodies: the OpenAPI document is generated from these."""

from __future__ import annotations

from typing import Literal

from pydantic import VERSION, BaseModel, Field

PYDANTIC_2 = VERSION.startswith("2.")


class Strict(BaseModel):
    # Both pydantic 2 and the 1.10 of Debian's python3-fastapi (the infra image's) read this form.
    if PYDANTIC_2:
        model_config = {"extra": "forbid"}
    else:
        class Config:
            extra = "forbid"


class ClaimRequest(Strict):
    pool: str = Field(description="A pool placed on this host.")
    session: str = Field(description="The caller's session id (a chat, a run); the same id gets the same sandbox "
                                     "back while it is bound.")
    from_snapshot: str | None = Field(None, description="Branch: the new session's sandbox starts from this "
                                                        "snapshot (of the same pool).")


class SandboxStatus(BaseModel):
    sandbox: str = Field(description="The sandbox's container name.")
    pool: str
    host: str
    status: Literal["idle", "bound", "paused", "resetting", "unhealthy"]
    session: str | None
    bound_at: float | None = Field(description="When the session claimed it (Unix time).")
    from_snapshot: str | None
    paused_by: Literal["api", "idle"] | None
    idle_seconds: float | None = Field(description="Seconds since its last API or CPU activity.")
    detail: str | None = Field(description="Why it is unhealthy, or what ended its last session.")
    container: str = Field(description="Docker's state of the container ('unknown' when the daemon does not answer).")


class ExecRequest(Strict):
    command: list[str] | None = Field(None, description="argv, run without a shell.")
    script: str | None = Field(None, description="A script run by `lang`'s interpreter.")
    lang: Literal["bash", "python"] = Field("bash", description="The interpreter of `script`.")
    cwd: str | None = Field(None, description="Working directory: absolute, or relative to the workspace root "
                                              "(the default).")
    env: dict[str, str] = Field(default_factory=dict, description="Added to the sandbox's environment.")
    timeout: int | None = Field(None, description="Seconds; default 60. At the timeout every process the "
                                                  "command started is killed.")


class ExecResult(BaseModel):
    stdout: str
    stderr: str
    exit_code: int = Field(description="The command's exit status; 137 when it was killed at its timeout.")
    duration_ms: int
    timed_out: bool
    stdout_truncated: bool = Field(description="Output past the runtime's limit was dropped; the text ends with "
                                               "a '[sandstack: stdout truncated: ...]' marker.")
    stderr_truncated: bool
    message: str | None = None


class Entry(BaseModel):
    name: str
    type: Literal["file", "dir", "link", "other"]
    size: int


class Listing(BaseModel):
    path: str
    entries: list[Entry]


class Snapshot(BaseModel):
    id: str
    pool: str
    sandbox: str
    session: str | None
    created_at: float
    size: int = Field(description="Bytes stored on the host.")
    paths: list[str] = Field(description="The writable paths it holds.")


class RestoreRequest(Strict):
    snapshot: str


class AuditLine(BaseModel):
    time: float
    who: str
    session: str | None
    sandbox: str | None
    operation: str
    status: int
    outcome: str


class Error(BaseModel):
    error: str = Field(description="One sentence naming what was wrong.")


class Health(BaseModel):
    status: Literal["ok"]
    host: str | None
