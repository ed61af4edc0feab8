"""What the client's calls return: dataclasses with the runtime's fields, typed. They also answer `result["field"]`
and `.get("field")` as the dicts returned before did; that form is deprecated (use the attributes)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, TypeVar

T = TypeVar("T")


class _Fields:
    """Dict-style reads of a result's fields, for callers written against the dicts of earlier versions."""

    def __getitem__(self, key: str) -> Any:
        if key in self._names():
            return getattr(self, key)
        return self.extra[key]  # type: ignore[attr-defined]

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: str) -> bool:
        return self.get(key, ...) is not ...

    @classmethod
    def _names(cls) -> set[str]:
        return {f.name for f in dataclasses.fields(cls)} - {"extra"}  # type: ignore[arg-type]

    @classmethod
    def of(cls: type[T], data: Mapping[str, Any]) -> T:
        """From the runtime's JSON: known fields as attributes, any newer ones kept in `extra`."""
        names = cls._names()  # type: ignore[attr-defined]
        known = {k: v for k, v in data.items() if k in names}
        return cls(**known, extra={k: v for k, v in data.items() if k not in names})  # type: ignore[call-arg]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):  # as the dicts of earlier versions compared
            return self.to_dict() == dict(other)
        if type(other) is type(self):
            return all(getattr(self, name) == getattr(other, name) for name in self._names())
        return NotImplemented

    __hash__ = object.__hash__

    def to_dict(self) -> dict[str, Any]:
        return {**{name: getattr(self, name) for name in self._names()}, **self.extra}  # type: ignore[attr-defined]


@dataclass(frozen=True, eq=False)
class ExecResult(_Fields):
    stdout: str
    stderr: str
    exit_code: int
    duration_ms: int
    timed_out: bool
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    message: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True, eq=False)
class SandboxInfo(_Fields):
    sandbox: str
    pool: str
    host: str
    status: str
    session: str | None = None
    bound_at: float | None = None
    from_snapshot: str | None = None
    paused_by: str | None = None
    idle_seconds: float | None = None
    detail: str | None = None
    container: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, eq=False)
class NetworkProfile(_Fields):
    """A session's network profile (docs/design/network-profiles.md)."""

    session: str
    sandbox: str
    pool: str
    profile: str  # in force: the gateway applies it to the sandbox's next request
    start: str  # where a session starts (a released or reset sandbox is back in it)
    profiles: list[str]  # every profile the template declares, in the spec's order
    previous: str | None = None  # a switch's: the profile before it
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, eq=False)
class ProcessInfo(_Fields):
    id: str
    sandbox: str
    session: str
    status: str  # running, exited, killed, timed_out, ended
    command: list[str] | None = None
    exit_code: int | None = None
    started_at: float | None = None
    ended_at: float | None = None
    duration_ms: int | None = None
    stdin: bool = False
    stdin_pending: int = 0  # bytes of the last stdin write the process has not taken yet (the runtime holds them)
    tty: bool = False
    timeout: int | None = None
    output_end: int = 0
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    message: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def running(self) -> bool:
        return self.status == "running"


@dataclass(frozen=True)
class OutputEvent:
    """One piece of a process's output as it was written ('stdout' or 'stderr'), and its position after it
    (give it as `after` to read on from there); or kind 'truncated' (a stream passed its limit) or 'exit'."""

    kind: str
    text: str = ""
    position: int | None = None
    data: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, eq=False)
class FileEntry(_Fields):
    name: str
    type: str  # file, dir, link, other
    size: int
    mode: str | None = None  # chmod's octal, '0644'
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
