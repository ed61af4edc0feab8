"""The runtime API's request and response bodies: the OpenAPI document is generated from these, so the limits
the server enforces (patterns, lengths, ranges) are declared here once and the document shows them."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import VERSION, BaseModel, Field, constr

from sandstack.runtime.session_tokens import DEFAULT_LIFETIME, MAX_LIFETIME
from sandstack.runtime.ssh_keys import MAX_KEYS as MAX_SSH_KEYS

PYDANTIC_2 = VERSION.startswith("2.")

# The pool name rule of the spec (sandstack.spec.models.base.NAME_PATTERN, which needs pydantic 2 to import;
# tests/runtime/test_api.py checks the two are equal).
POOL_PATTERN = r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$"
SESSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
SESSION_HINT = "1-128 letters, digits or ._:@- starting with a letter or digit"
SNAPSHOT_PATTERN = r"^snap-[0-9a-f]{32}$"
SANDBOX_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"  # Docker's container name rule
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
# An OpenSSH public key line: '<algorithm> <base64> [comment]' (sandstack.runtime.ssh_keys checks the rest).
SSH_KEY_PATTERN = r"^(ssh|ecdsa|sk)-[A-Za-z0-9@.-]{1,60} [A-Za-z0-9+/]{16,}={0,3}( [^\n\r]{0,256})?$"
SECRET_FILE_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"  # a file name: no '/', not '.' or '..'
NO_NUL = r"^[^\x00]*$"  # an argv string, a path, an env value: the kernel cuts a C string at NUL
PATH_MAX = 4096
# What a pattern allows, in words: the API's 422 names the bad value and this (never for a value that may be
# a secret, such as an env value: those patterns have no hint, and their message does not echo them).
HINTS = {POOL_PATTERN: "lowercase letters, digits and '-', starting with a letter, at most 32 characters",
         SESSION_PATTERN: SESSION_HINT, SNAPSHOT_PATTERN: "'snap-' and 32 hex digits",
         SANDBOX_PATTERN: "a container name: 1-128 letters, digits or _.- starting with a letter or digit",
         ENV_NAME_PATTERN: "letters, digits and '_', not starting with a digit, at most 128 characters",
         SECRET_FILE_PATTERN: "a file name: 1-128 letters, digits or _.- starting with a letter, digit or '_'"}
# What a pattern that may hold a secret (an env value) allows: the message never echoes the value.
RULES = {NO_NUL: "must not contain a NUL byte"}
SURROGATE = re.compile("[\ud800-\udfff]")
NOT_UNICODE = ("is not valid Unicode text: it holds a lone surrogate (a \\ud800-\\udfff escape without its "
               "pair), which no file, argv or log can carry")


def pattern(regex: str) -> dict[str, str]:
    """The pattern keyword of Field, Path and Query: pydantic 2 (FastAPI >= 0.100) says `pattern`, the 1.10 of
    Debian's python3-fastapi (the infra image's) says `regex`."""
    return {"pattern" if PYDANTIC_2 else "regex": regex}


def text(regex: str, max_length: int | None = None) -> Any:
    """A constrained str type, usable as a dict key or a list item in both pydantic versions."""
    return constr(**pattern(regex), max_length=max_length)


def items(minimum: int) -> dict[str, int]:
    return {"min_length" if PYDANTIC_2 else "min_items": minimum}


def schema_extra(**extra: Any) -> dict[str, Any]:
    """Keywords added to a field's JSON Schema, in either pydantic's spelling."""
    return {"json_schema_extra": extra} if PYDANTIC_2 else extra


def has_surrogate(value: object) -> bool:
    """Whether a lone surrogate is anywhere in `value` (a JSON body's \\ud800 escape decodes to one)."""
    if isinstance(value, str):
        return SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(has_surrogate(k) or has_surrogate(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(has_surrogate(v) for v in value)
    return False


def _valid_unicode(cls, value):
    if has_surrogate(value):
        raise ValueError(NOT_UNICODE)
    return value


class Strict(BaseModel):
    # Both pydantic 2 and the 1.10 of Debian's python3-fastapi (the infra image's) read this form.
    if PYDANTIC_2:
        from pydantic import field_validator

        model_config = {"extra": "forbid"}
        _unicode = field_validator("*")(classmethod(_valid_unicode))
    else:
        from pydantic import validator

        class Config:
            extra = "forbid"

        _unicode = validator("*", allow_reuse=True)(_valid_unicode)


class SessionSecrets(Strict):
    env: dict[text(ENV_NAME_PATTERN), text(NO_NUL, 65536)] = Field(
        default_factory=dict, description="Added to the environment of each of the session's execs (under what an "
        "exec's own `env` sets). Kept in the runtime's memory only, never stored or logged (the audit log records "
        "their names); dropped when the session ends.", **schema_extra(additionalProperties=False, maxProperties=64))
    files: dict[text(SECRET_FILE_PATTERN), text(NO_NUL, 65536)] = Field(
        default_factory=dict, description="Written as files <name> (mode 0400, the sandbox's user) to the session "
        "secrets' tmpfs under the secret files' mount (docs/design/ondemand.md): in memory, never in a snapshot or a "
        "hibernation's copy, gone at release. Kept in the runtime's memory to write them again after a resume.", **schema_extra(additionalProperties=False, maxProperties=64))


class ClaimRequest(Strict):
    pool: str = Field(description="A pool placed on this host.", **pattern(POOL_PATTERN))
    session: str = Field(description="The caller's session id (a chat, a run); the same id gets the same sandbox "
                                     "back while it is bound.", **pattern(SESSION_PATTERN))
    from_snapshot: str | None = Field(None, description="Branch: the new session's sandbox starts from this "
                                                        "snapshot (of the same pool).", **pattern(SNAPSHOT_PATTERN))
    secrets: SessionSecrets | None = Field(None, description="Run-scoped credentials for this session only; a claim "
                                                             "of a session that has a sandbox replaces them.")
    size: str | None = Field(None, description="A size class of the pool (`pools.*.sizes`): the sandbox gets its CPUs, "
                                               "memory, disk and pids for this session, and the pool's own limits "
                                               "back at its release. None: the pool's own limits. A class the pool "
                                               "does not declare is a 422 naming its classes.",
                             **pattern(POOL_PATTERN))
    ssh_keys: list[text(SSH_KEY_PATTERN, 16 * 1024)] | None = Field(
        None, **{"max_length" if PYDANTIC_2 else "max_items": MAX_SSH_KEYS},
        description="OpenSSH public key lines that log in to this session over SSH (user name: the session id) on a "
                    "host whose runtime declares `ssh`; they replace the session's keys (an empty list removes them; "
                    "none given leaves them), and open nothing once the session is released (docs/design/ssh.md).")
    token_lifetime: int = Field(DEFAULT_LIFETIME, ge=1, le=MAX_LIFETIME,
                                description="Seconds the session token of this claim's answer acts for at most (it "
                                "ends at the session's release before): default a day, at most 30 days.")


class SandboxStatus(BaseModel):
    sandbox: str = Field(description="The sandbox's container name.")
    pool: str
    host: str
    status: Literal["idle", "bound", "paused", "resetting", "unhealthy", "quarantined", "expired", "absent",
                    "creating", "hibernated"] = Field(
        description="'quarantined': its reset failed (detail says why); the monitor retries it, and it is never "
                    "handed out until a reset succeeds. 'expired': the host guard ended it for good at its max "
                    "lifetime or idle timeout (on_expiry 'stop'); it is not handed out again. 'absent': an "
                    "on-demand place with no container; 'creating': a claim is making it; 'hibernated': stopped with "
                    "its files kept, resumed by the session's next call.")
    session: str | None
    bound_at: float | None = Field(description="When the session claimed it (Unix time).")
    from_snapshot: str | None
    paused_by: Literal["api", "idle", "shutdown"] | None = Field(
        description="Who paused or hibernated it ('shutdown': an on-demand sandbox the runtime hibernated as it "
                    "stopped).")
    idle_seconds: float | None = Field(description="Seconds since its last API or CPU activity.")
    detail: str | None = Field(description="Why it is unhealthy, quarantined or expired, or what ended its last "
                                           "session.")
    container: str = Field(description="Docker's state of the container ('unknown' when the daemon does not answer).")
    size: str | None = Field(None, description="The size class its session claimed (None: the pool's own limits).")


class ClaimAnswer(SandboxStatus):
    token: str = Field(description="The session's own token (shown once; the runtime keeps only its digest): it acts "
                                   "on this session's sandbox alone (exec, processes, terminals, files, snapshots of "
                                   "this session, pause, hibernate, resume), never on a pool or another session, and "
                                   "ends at the session's release or `token_expires_at`. Each claim answers with a "
                                   "new one.")
    token_expires_at: float = Field(description="When the token stops acting (Unix time).")


class CommandFields(Strict):
    """What to run and where: the fields of a blocking exec and of a process (process_models.ProcessRequest)."""

    command: list[text(NO_NUL)] | None = Field(None, description="argv, run without a shell.", **items(1))
    # No declared length: the kernel's limit (128 KiB per argument) is in bytes, and one over it is an exec
    # error (exit 126) as Docker answers it.
    script: str | None = Field(None, description="A script run by `lang`'s interpreter.", **pattern(NO_NUL))
    lang: Literal["bash", "python"] = Field("bash", description="The interpreter of `script`.")
    cwd: str | None = Field(None, description="Working directory: absolute, or relative to the workspace root "
                                              "(the default).", max_length=PATH_MAX, **pattern(NO_NUL))
    env: dict[text(ENV_NAME_PATTERN), text(NO_NUL)] = Field(default_factory=dict,
                                                            description="Added to the sandbox's environment.",
                                                            **schema_extra(additionalProperties=False))


class ExecRequest(CommandFields):
    timeout: int | None = Field(None, ge=1, description="Seconds; default 60, at most the pool's "
                                                        "`session.exec_max_timeout` (default 1h). At "
                                                        "the timeout every process the command started is killed.")


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
    name: str = Field(description="The entry's name; any character but '/' and NUL, newlines included (give it "
                                  "percent-encoded in a file URL).")
    type: Literal["file", "dir", "link", "other"]
    size: int = Field(description="Bytes (0 for what is not a regular file); known even for a file its mode "
                                  "does not let the sandbox read.")
    mode: str | None = Field(None, description="Permission bits as chmod's octal, four digits ('0644', '2755'); "
                                               "null when the sandbox's ls gave none.")


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
    paths: list[str] = Field(description="The writable paths it holds, and `/` when it holds the changes of a "
                                         "writable root too (a template with `read_only_root: false`).")


class SizeClass(BaseModel):
    cpus: float
    memory: int = Field(description="Bytes.")
    disk: int = Field(description="Bytes; a class whose disk is not the pool's is served by a sandbox made on demand.")
    pids: int


class PoolStatus(BaseModel):
    pool: str
    host: str
    sandboxes: dict[str, int] = Field(description="How many of its sandboxes on this host are in each status.")
    snapshots: int = Field(description="Snapshots of the pool kept on this host.")
    snapshot_bytes: int = Field(description="Bytes they take on the host.")
    hibernated_bytes: int = Field(0, description="Bytes its hibernated sessions' copies of their tmpfs paths take on "
                                                 "the host.")
    snapshot_storage: int = Field(description="The most its snapshots and hibernation copies may take together "
                                              "(`session.snapshot_storage`); a snapshot or a hibernation past it is "
                                              "refused with 507.")
    session_snapshot_storage: int | None = Field(None, description="The most one session's may take "
                                                                   "(`session.session_snapshot_storage`).")
    download_limit: int = Field(description="The most one read, archive or snapshot may take (apparent size; "
                                            "`session.download_limit`); past it: 413.")
    upload_limit: int = Field(description="The largest upload (`session.upload_limit`); past it: 413.")
    sizes: dict[str, SizeClass] = Field(default_factory=dict, description=(
        "The pool's size classes (`pools.*.sizes`), which a claim may name: empty when it declares none."))


class RestoreRequest(Strict):
    snapshot: str = Field(**pattern(SNAPSHOT_PATTERN))


class AuditLine(BaseModel):
    time: float
    who: str
    session: str | None
    sandbox: str | None
    operation: str
    status: int
    outcome: str
    scope: str | None = Field(None, description="The token's scope: 'host', or a scoped token's name (never the "
                                                "token).")
    secrets: list[str] | None = Field(None, description="The names of the run-scoped credentials a claim gave.")
    ms: float | None = Field(None, description="Milliseconds from the request's arrival to its answer's start (a "
                                               "streamed body goes on after); none on lines written before it.")


class Error(BaseModel):
    error: str = Field(description="One sentence naming what was wrong.")


class Health(BaseModel):
    status: Literal["ok"]
    host: str | None
    config: str | None = Field(None, description="The digest of the configuration set in force (its "
                                                 "configuration volume's `want`); null: the one from its environment.")


class NetworkRequest(Strict):
    profile: str = Field(description="One of the network profiles the pool's template declares.",
                         **pattern(POOL_PATTERN))


class NetworkAnswer(BaseModel):
    session: str
    sandbox: str
    pool: str
    profile: str = Field(description="The profile in force: the gateway applies it to the sandbox's next request.")
    previous: str | None = Field(None, description="A switch's: the profile before it.")
    start: str = Field(description="The profile a session starts in (a released or reset sandbox is back in it).")
    profiles: list[str] = Field(description="Every profile the template declares, in the spec's order.")
