"""`Harness`: runs Pulumi programs against the daemon like successive `pulumi up`s, then tears down.

    with Harness() as h:                       # or the `docker_harness` pytest fixture
        first = h.run(program, config={...})   # creates everything
        again = h.run(program, config={...})   # same inputs: again.count("create") == again.builds == 0
        h.run(program_with_new_image)          # changed inputs: replace / update per provider semantics
    # leaving the block deletes what state holds, then sweeps the session's labels

See state.py for the same/update/replace/delete rules and README.md for the whole picture.
"""

from __future__ import annotations

import copy
import os
import secrets
import threading
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from testbed.harness import coverage
from testbed.harness.container_ops import PartialCreateError
from testbed.provider.schema import ResourceMapping
from testbed.harness.state import Action, ResourceState, RunLog, StateEntry, changed_fields, with_ignored
from testbed.provider.mocks import (DryBackend, HarnessError, RecordingMocks, Registration, current_test,
                                           run_program)


class HarnessMocks(RecordingMocks):
    """RecordingMocks whose apply step goes through the harness state (same/update/replace)."""

    def __init__(self, harness: "Harness"):
        super().__init__(harness.backend)
        self.harness = harness

    def apply(self, reg: Registration, mapping: ResourceMapping) -> tuple[str, dict]:
        return self.harness._apply(reg, mapping)


@dataclass
class RunResult:
    run: int
    outputs: dict
    secret_outputs: set[str]
    actions: list[Action]
    mocks: HarnessMocks
    error: BaseException | None = None
    traceback: str = ""

    @property
    def registrations(self) -> dict[str, Registration]:
        return self.mocks.registrations

    @property
    def builds(self) -> int:
        return sum(a.built for a in self.actions)

    def count(self, kind: str | None = None, typ: str | None = None) -> int:
        """Actions of a kind ("create", "update", "replace", "delete", "same", or "build"), optionally
        of one type (token or short title such as "Container")."""
        def matches(a: Action) -> bool:
            kind_ok = kind is None or a.kind == kind or (kind == "build" and a.built)
            return kind_ok and (typ is None or typ in (a.typ, a.typ.rsplit(":", 1)[-1]))
        return sum(matches(a) for a in self.actions)

    def summary(self) -> dict[str, int]:
        return {k: self.count(k) for k in ("create", "update", "replace", "delete", "same", "build")}

    def action(self, name: str, kind: str | None = None) -> Action:
        """The action of the resource named `name` (logical name or URN); `kind` picks one of several
        (a create-before-delete replacement also logs the old object's delete)."""
        found = [a for a in self.actions if name in (a.name, a.urn) and kind in (None, a.kind)]
        if len(found) != 1:
            raise KeyError(f"{len(found)} actions for {name!r} in run {self.run}:\n{self}")
        return found[0]

    def __str__(self) -> str:
        return "\n".join(str(a) for a in self.actions) or f"run {self.run}: no actions"


class Harness:
    """Stateful program runner over a backend (the local daemon by default; `Harness.dry()` for none)."""

    def __init__(self, backend=None, *, project: str = "sandstack", stack: str = "test",
                 state_path: str | None = None, session_id: str | None = None):
        self.session_id = session_id or f"{os.getpid()}-{secrets.token_hex(4)}"
        if backend is None:
            from testbed.harness.docker_backend import DockerBackend
            backend = DockerBackend(self.session_id)
        self.backend = backend
        self.project, self.stack = project, stack
        self.state = ResourceState(state_path)
        self.log = RunLog()
        self.runs = 0
        self.last: RunResult | None = None
        self._registered: set[str] = set()
        self._renewed_first: set[str] = set()  # URNs replaced delete-before-replace in this run
        self._lock = threading.Lock()
        self._after_teardown: list[Callable[[], None]] = []

    @classmethod
    def dry(cls, **kwargs: Any) -> "Harness":
        """Same state semantics without a daemon (plausible outputs): for component unit tests."""
        return cls(DryBackend(), **kwargs)

    def fork(self) -> "Harness":
        """A dry harness whose next run starts from this one's state, as a second `pulumi up` of a copy of the stack
        would: each change-matrix case starts from the applied base stack without applying it again
        (tests/changes/runs.py). A daemon's objects cannot be copied, so only a dry harness forks."""
        if getattr(self.backend, "kind", "") != "dry":
            raise HarnessError("only a dry harness forks: a daemon's objects cannot be copied")
        twin = Harness(self.backend, project=self.project, stack=self.stack, session_id=self.session_id)
        with self.state.lock:
            twin.state.entries = copy.deepcopy(self.state.entries)
            twin.state.pending_delete = copy.deepcopy(self.state.pending_delete)
            twin.state._seq = self.state._seq
        twin.runs = self.runs
        return twin

    def __enter__(self) -> "Harness":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.teardown()

    # --- running -----------------------------------------------------------------------------------
    def run(self, program: Callable[[], Any], *, config: dict | None = None, secret_config: dict | None = None,
            check: bool = True) -> RunResult:
        """One `pulumi up`: run the program, apply its registrations, delete what it no longer declares.

        With check=False a failure is returned in RunResult.error instead of raised."""
        self.runs += 1
        self._registered = set()
        self._renewed_first = set()
        getattr(self.backend, "providers", {}).clear()
        if hasattr(self.backend, "begin_run"):  # several daemons (testbed/harness/hosts_backend.py)
            self.backend.begin_run()
        start = len(self.log.actions)
        mocks = HarnessMocks(self)
        outputs, secret, error = {}, set(), None
        try:
            result = run_program(program, mocks, project=self.project, stack=self.stack, config=config,
                                 secret_config=secret_config)
            outputs, secret = result.outputs, result.secret_outputs
        except Exception as failure:  # noqa: BLE001 -- returned or re-raised below, after cleanup
            error = self.backend.run_error(failure) if hasattr(self.backend, "run_error") else failure
        try:
            self._finish(success=error is None)
        except HarnessError as failure:
            error = error or failure
        finally:
            self.state.save()
        self.last = RunResult(self.runs, outputs, secret, self.log.actions[start:], mocks, error)
        if error is not None:
            self.last.traceback = "".join(traceback.format_exception(error))
            if check and isinstance(error, HarnessError):
                # A refusal names its URN and field; the ~20 frames of Pulumi's runtime (worker threads,
                # event loop) add nothing. The full traceback stays in RunResult.traceback.
                raise error.with_traceback(None)
            if check:
                raise error
        return self.last

    def proves(self, *fields: str) -> None:
        """Declares which mapped fields the calling test proves on the engine (e.g. "Container.memory").
        The fixture fails the test if one of them was never applied; COVERAGE.md lists the provers."""
        coverage.claim(current_test(), fields)

    # --- one registration --------------------------------------------------------------------------
    def _apply(self, reg: Registration, mapping: ResourceMapping) -> tuple[str, dict]:
        info, backend = reg.request, self.backend
        host = backend.provider_host(reg.urn, reg.provider) if hasattr(backend, "provider_host") else reg.provider
        with self._lock:
            self._registered.add(reg.urn)
        entry = self.state.get(reg.urn)
        if entry is not None:
            reg.inputs = with_ignored(entry.inputs, reg.inputs, info.ignore_changes)
        kind, changed, start_again = self._decide(reg, mapping, entry, host)
        reg.action = kind
        if kind in ("same", "update"):
            autoname = entry.outputs.get("name") if mapping.autoname else None
            reg.plan, reg.unknown_fields = mapping.translate(backend.ctx(mapping, reg.urn, reg.inputs, autoname))
            if kind == "same":  # Pulumi's same step records the new registration's dependencies
                self.state.put(StateEntry(**{**entry.__dict__, "dependencies": tuple(info.dependencies),
                                             "property_dependencies": _property_deps(info)}))
                self._record(kind, reg)
                return entry.id, entry.outputs
            outputs = backend.update(reg, mapping, entry, changed, start_again)
            self.state.put(StateEntry(**{**entry.__dict__, "inputs": reg.inputs, "outputs": outputs,
                                         "dependencies": tuple(info.dependencies),
                                         "property_dependencies": _property_deps(info)}))
            self._record(kind, reg, changed)
            return entry.id, outputs
        detail = ""
        if kind == "replace":
            if entry.protect:
                raise HarnessError(f"{reg.urn} is protected and would be replaced ({sorted(changed)})")
            if mapping.title == "Container" or info.delete_before_replace or entry.delete_before_replace:
                # pulumi-docker marks docker_container DeleteBeforeReplace (provider/resources.go).
                self._renewed_first.add(reg.urn)
                detail = f"delete-before-replace (old: {backend.delete(entry)})"
                self.state.pop(reg.urn)
            else:
                detail = "create-before-delete (old deleted at the end of the run)"
                self.state.defer_delete(self.state.pop(reg.urn))
        generation = entry.generation + 1 if entry else 0
        autoname = backend.autoname(reg, mapping, generation)
        reg.plan, reg.unknown_fields = mapping.translate(backend.ctx(mapping, reg.urn, reg.inputs, autoname))
        built = mapping.title == "RemoteImage" and getattr(reg.plan, "build", None) is not None
        new = StateEntry(reg.urn, reg.typ, reg.name, "", reg.inputs, {}, host, self.state.next_seq(), generation,
                         built, False, info.delete_before_replace, info.protect, info.retain_on_delete,
                         info.replacement_trigger, tuple(info.dependencies), _property_deps(info))
        try:
            new.id, new.outputs = backend.create(reg, mapping, autoname)
        except Exception as failure:
            if isinstance(failure, PartialCreateError):
                new.id, new.tainted = failure.partial_id, True  # kept so the next run replaces it
                self.state.put(new)
            self._record(kind, reg, changed, False, f"{detail} FAILED: {str(failure)[:200]}".strip())
            raise
        self.state.put(new)
        if entry is not None and entry.id == new.id and "create-before" in detail:
            raise HarnessError(f"{reg.urn}: the replacement got the same object ({new.id}) as the one it replaces "
                               f"(same explicit name?); deleting the old one would delete the new one. Use "
                               f"delete_before_replace=True or let Pulumi autoname it")
        self._record(kind, reg, changed, built, detail)
        return new.id, new.outputs

    def _decide(self, reg: Registration, mapping: ResourceMapping, entry: StateEntry | None,
                host: str) -> tuple[str, set[str], bool]:
        if entry is None:
            return "create", set(), False
        if entry.tainted:
            return "replace", {"<tainted>"}, False
        changed = changed_fields(entry.inputs, reg.inputs)
        # Pulumi's dependent rule (step_generator.go, calculateDependentReplacements): a resource replaced
        # delete-before-replace replaces the dependents whose ForceNew inputs took a value from it, as the last
        # snapshot records them (the dependent's old property dependencies: a dependency the program dropped in
        # this run counts all the same).
        changed |= {prop for prop, urns in entry.property_dependencies
                    if set(urns) & self._renewed_first and mapping.classify({prop}) == "replace"}
        kind = mapping.classify(changed, reg.request.replace_on_changes)
        if host != entry.provider_host:
            kind, changed = "replace", changed | {"<provider>"}
        trigger = reg.request.replacement_trigger
        if trigger is not None and entry.replacement_trigger is not None and trigger != entry.replacement_trigger:
            kind, changed = "replace", changed | {"<replacement_trigger>"}
        start_again = False
        if mapping.title == "Container" and kind != "replace" and entry.outputs.get("mustRun") is False \
                and reg.inputs.get("mustRun", True):
            # The container was found stopped, so state holds must_run=false: the provider "updates"
            # it back to true by starting the container (funcs.go:815-824 and 997-1013).
            kind, changed, start_again = "update", changed | {"mustRun"}, True
        return kind, changed, start_again

    def _record(self, kind: str, reg: Registration, changed=(), built: bool = False, detail: str = "") -> None:
        self.log.add(Action(self.runs, kind, reg.urn, reg.typ, reg.name, tuple(sorted(changed)), built, detail))

    # --- end of a run, destroy, teardown -----------------------------------------------------------
    def _finish(self, success: bool) -> None:
        doomed: list[StateEntry] = []
        if success:  # Pulumi deletes what the program no longer declares only after a successful run
            for urn in [u for u in list(self.state.entries) if u not in self._registered]:
                doomed.append(self.state.pop(urn))
            doomed += self.state.pending_delete
            self.state.pending_delete = []
        self._delete_all(doomed, self.runs)

    def _delete_all(self, entries: list[StateEntry], run: int) -> None:
        errors = []
        for entry in self.state.deletion_order(entries):
            if entry.protect:
                errors.append(f"{entry.urn} is protected and cannot be deleted")
                self.state.put(entry)
                continue
            try:
                detail = "retained (retain_on_delete)" if entry.retain_on_delete else self.backend.delete(entry)
            except Exception as failure:  # noqa: BLE001 -- reported below; the entry stays for teardown
                errors.append(f"deleting {entry.urn}: {failure}")
                self.state.defer_delete(entry)
                continue
            self.log.add(Action(run, "delete", entry.urn, entry.typ, entry.name, detail=detail))
        if errors:
            raise HarnessError("; ".join(errors))

    def destroy(self) -> list[Action]:
        """`pulumi destroy`: delete everything state holds (dependents first)."""
        self.runs += 1
        start = len(self.log.actions)
        entries = list(self.state.entries.values()) + self.state.pending_delete
        self.state.entries, self.state.pending_delete = {}, []
        try:
            self._delete_all([replace_protect(e) for e in entries], self.runs)
        finally:
            self.state.save()
        return self.log.actions[start:]

    def after_teardown(self, check: Callable[[], None]) -> None:
        """Runs `check` once teardown has removed everything (e.g. a deployment's leak guard: its rules go, and
        what it counted fails the teardown)."""
        self._after_teardown.append(check)

    def teardown(self) -> dict[str, list[str]]:
        """destroy(), then remove anything still labelled with this session (failed runs, partial objects),
        then run the `after_teardown` checks (each of them, whatever the others raise; the first failure is
        raised). Returns what the label sweep still found; empty after a clean destroy."""
        error = None
        try:
            self.destroy()
        except HarnessError as failure:
            error = failure
        swept: dict[str, list[str]] = {}
        if hasattr(self.backend, "sweep"):  # several daemons (testbed/harness/hosts_backend.py)
            swept = self.backend.sweep(self.session_id)
        elif hasattr(self.backend, "api"):
            from testbed.harness.teardown import sweep_session
            swept = sweep_session(self.backend.api, self.session_id)
        checks, self._after_teardown = self._after_teardown, []
        failures = []
        for check in checks:
            try:
                check()
            except AssertionError as failure:
                failures.append(failure)
        if error is not None:
            also = "".join(f"; {failure}" for failure in failures)
            raise HarnessError(f"teardown: {error}; label sweep removed {swept}{also}")
        if failures:
            raise failures[0]
        return swept


def _property_deps(info) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((prop, tuple(urns)) for prop, urns in info.property_dependencies)


def replace_protect(entry: StateEntry) -> StateEntry:
    """Teardown ignores `protect` (tests must leave nothing behind)."""
    return StateEntry(**{**entry.__dict__, "protect": False})
