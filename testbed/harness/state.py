"""The harness's stand-in for a Pulumi stack state: what was applied, by URN, across program runs.

Like `pulumi up` without `--refresh`, a new run compares the new inputs with the inputs stored here
(not with the live object), and decides per URN:

* same inputs              -> `same` (nothing created, nothing built; outputs come from state)
* changed fields, all of them updatable in place (schema.UPDATE / STATE_ONLY) -> `update`
* any changed field that forces a new object (schema.REPLACE), a `replace_on_changes` /
  `replacement_trigger` hit, a provider host change, or a tainted entry -> `replace`
* in state but not registered by a successful run -> `delete` at the end of that run
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

# Deletion order: dependents first, as Pulumi deletes in reverse dependency order (each entry keeps the
# URNs it depends on: its inputs' sources and `depends_on`). Among entries free to go, Docker's own
# order breaks ties: containers use networks, volumes and images.
DELETE_PRIORITY = {"Container": 0, "Network": 1, "Volume": 1, "RemoteImage": 2, "RegistryImage": 2}


@dataclass
class StateEntry:
    urn: str
    typ: str
    name: str
    id: str
    inputs: dict
    outputs: dict
    provider_host: str = ""
    seq: int = 0                       # creation order, for reverse-order deletes
    generation: int = 0                # bumped on every replace (fresh autoname)
    built: bool = False                # RemoteImage built by the harness
    tainted: bool = False              # create failed half-way: the next run replaces it
    delete_before_replace: bool = False
    protect: bool = False
    retain_on_delete: bool = False
    replacement_trigger: str | None = None
    dependencies: tuple[str, ...] = ()  # URNs this resource depends on (Pulumi's `dependencies`)
    # Each input → the URNs its value came from (Pulumi's `propertyDependencies`), as last applied: what the dependent
    # rule reads (from the last snapshot, not from the new registration).
    property_dependencies: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def title(self) -> str:
        return self.typ.rsplit(":", 1)[-1]


@dataclass(frozen=True)
class Action:
    """One step of a run, like a line of `pulumi up` output."""

    run: int
    kind: str                           # create | same | update | replace | delete
    urn: str
    typ: str
    name: str
    changed: tuple[str, ...] = ()
    built: bool = False                 # an image was built by this step
    detail: str = ""

    def __str__(self) -> str:
        extra = f" [{', '.join(self.changed)}]" if self.changed else ""
        built = " (built)" if self.built else ""
        return f"run {self.run}: {self.kind:7} {self.typ.rsplit(':', 1)[-1]} {self.name}{extra}{built} {self.detail}".rstrip()


class ResourceState:
    """Thread-safe map URN -> StateEntry, plus replaced objects waiting for deletion."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else None
        self.entries: dict[str, StateEntry] = {}
        self.pending_delete: list[StateEntry] = []
        self.lock = threading.RLock()
        self._seq = 0
        if self.path and self.path.exists():
            data = json.loads(self.path.read_text())
            self.entries = {e["urn"]: StateEntry(**e) for e in data["entries"]}
            self.pending_delete = [StateEntry(**e) for e in data["pending_delete"]]
            self._seq = max([e.seq for e in self.entries.values()] + [0])

    def next_seq(self) -> int:
        with self.lock:
            self._seq += 1
            return self._seq

    def get(self, urn: str) -> StateEntry | None:
        with self.lock:
            return self.entries.get(urn)

    def put(self, entry: StateEntry) -> None:
        with self.lock:
            self.entries[entry.urn] = entry

    def pop(self, urn: str) -> StateEntry | None:
        with self.lock:
            return self.entries.pop(urn, None)

    def defer_delete(self, entry: StateEntry) -> None:
        with self.lock:
            self.pending_delete.append(entry)

    def deletion_order(self, entries: Iterable[StateEntry]) -> list[StateEntry]:
        """Nothing is deleted while an entry still to be deleted depends on it."""
        remaining = sorted(entries, key=lambda e: (DELETE_PRIORITY.get(e.title, 3), -e.seq))
        ordered: list[StateEntry] = []
        while remaining:
            needed = {dep for e in remaining for dep in e.dependencies}
            free = [e for e in remaining if e.urn not in needed] or remaining[:1]  # a cycle: fall back
            ordered.append(free[0])
            remaining.remove(free[0])
        return ordered

    def save(self) -> None:
        if self.path is None:
            return
        with self.lock:
            data = {"entries": [asdict(e) for e in self.entries.values()],
                    "pending_delete": [asdict(e) for e in self.pending_delete]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))


def changed_fields(old: dict, new: dict) -> set[str]:
    """Top-level input fields whose values differ (absent == None; 64 == 64.0)."""
    keys = {k for k in set(old) | set(new) if not k.startswith("__")}
    return {k for k in keys if _canon(old.get(k)) != _canon(new.get(k))}


def with_ignored(old: dict, new: dict, ignore_changes: Iterable[str]) -> dict:
    """`ignore_changes`: keep the stored value of those top-level fields (also for a replacement)."""
    merged = dict(new)
    for path in ignore_changes:
        key = path.split(".")[0].split("[")[0]
        if key in old:
            merged[key] = old[key]
        else:
            merged.pop(key, None)
    return merged


def _canon(value: Any) -> str:
    return json.dumps(_ints(value), sort_keys=True, default=str)


def _ints(value: Any) -> Any:
    # Numbers arrive as floats on the wire; 64.0 and 64 are the same input.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


@dataclass
class RunLog:
    """All actions of a harness, across runs."""

    actions: list[Action] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, action: Action) -> None:
        with self.lock:
            self.actions.append(action)
