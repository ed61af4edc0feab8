"""Recording Pulumi mocks: run component code in-process and see exactly what it registers.

Shared core of two test tools (the dispatch, duplicate-URN and unmapped-field logic live only here):

* ``RecordingMocks()`` -- no daemon. Records every registration (wire inputs, URN, parent, resource
  options), refuses duplicate URNs, refuses resource types and input fields the provider model does
  not map (``testbed/provider/tables.py``), translates the inputs into the Docker Engine API body
  the provider would send (``Registration.plan``), and returns plausible computed outputs.
* ``testbed.harness`` -- the same mocks with a Docker backend that applies every registration to
  the local daemon (a stand-in for the pulumi-docker provider).

Use ``run_program(fn, mocks, ...)`` to run a program in isolation and get its exported outputs, or
``install_mocks(mocks)`` instead of ``pulumi.runtime.set_mocks`` with ``@pulumi.runtime.test``.
Exact URNs need the ``HarnessMonitor`` these helpers install: ``Mocks.new_resource`` alone is not told
the parent, which is part of the URN.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import hashlib
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc, settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from testbed.provider import stack_trace


class HarnessError(Exception):
    """Base of every refusal by the recording mocks or the engine harness."""


class UnsupportedResourceError(HarnessError):
    """A resource type (or invoke) the harness does not map."""


class UnmappedFieldError(HarnessError):
    """An input field the harness does not map: it would go unexercised."""


class DuplicateUrnError(HarnessError):
    """Two registrations with the same URN (the real engine refuses the second)."""


class InputValueError(HarnessError):
    """A mapped input whose value the provider would refuse (or silently mangle)."""


# --- wire values: secrets are wrapped, preview values may be unknown ---------------------------------

def unwrap(value: Any, path: str = "", secret_paths: set[str] | None = None) -> Any:
    """Strips Pulumi's secret wrappers (recording where they were); keeps rpc.UNKNOWN as is."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            if secret_paths is not None:
                secret_paths.add(path)
            return unwrap(value.get("value"), path, secret_paths)
        return {k: unwrap(v, f"{path}.{k}" if path else k, secret_paths) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v, f"{path}[{i}]", secret_paths) for i, v in enumerate(value)]
    return value


def contains_unknown(value: Any) -> bool:
    if isinstance(value, dict):
        return any(contains_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(contains_unknown(v) for v in value)
    return value == rpc.UNKNOWN


# --- the monitor: tells new_resource the URN and resource options ------------------------------------

_REQUEST = threading.local()  # one RegisterResource per worker thread at a time
# Resource operations at once. `pulumi up --parallel` defaults to unbounded: every resource whose inputs are known
# is applied at once. The executor's own default (cpu count + 4: six here) queued one host's chain behind
# another's slow containers, so a stack on three hosts took longer than the engine would.
PARALLEL = 64


@dataclass(frozen=True)
class RequestInfo:
    urn: str
    parent: str
    dependencies: tuple[str, ...] = ()
    delete_before_replace: bool = False
    replace_on_changes: tuple[str, ...] = ()
    ignore_changes: tuple[str, ...] = ()
    protect: bool = False
    retain_on_delete: bool = False
    replacement_trigger: str | None = None
    read_id: str | None = None
    property_dependencies: tuple[tuple[str, tuple[str, ...]], ...] = ()  # input → the URNs its value came from


class HarnessMonitor(pulumi_mocks.MockMonitor):
    """MockMonitor that hands each registration's URN and options to the mocks (thread-locally)."""

    def RegisterResource(self, request):
        trigger = None
        if request.HasField("replacement_trigger"):
            trigger = request.replacement_trigger.SerializeToString(deterministic=True).hex()
        _REQUEST.info = RequestInfo(
            urn=self.make_urn(request.parent, request.type, request.name), parent=request.parent,
            dependencies=tuple(request.dependencies), delete_before_replace=request.deleteBeforeReplace,
            replace_on_changes=tuple(request.replaceOnChanges), ignore_changes=tuple(request.ignoreChanges),
            protect=request.protect, retain_on_delete=request.retainOnDelete, replacement_trigger=trigger,
            property_dependencies=tuple((key, tuple(deps.urns)) for key, deps in request.propertyDependencies.items()))
        try:
            return super().RegisterResource(request)
        finally:
            _REQUEST.info = None

    def ReadResource(self, request):
        _REQUEST.info = RequestInfo(urn=self.make_urn(request.parent, request.type, request.name),
                                    parent=request.parent, read_id=request.id or "?")
        try:
            return super().ReadResource(request)
        finally:
            _REQUEST.info = None

    def RegisterResourceOutputs(self, request):
        record = getattr(self.mocks, "record_component_outputs", None)
        if record is not None and request.outputs is not None:
            record(request.urn, unwrap(rpc.deserialize_properties(request.outputs)))
        return super().RegisterResourceOutputs(request)


@dataclass
class Registration:
    """One `new_resource` call: what the program asked for and what the mocks answered."""

    urn: str
    typ: str
    name: str
    inputs: dict                      # wire names, secrets unwrapped
    custom: bool
    provider: str = ""                # "urn::id" of an explicit provider, "" for the default one
    request: RequestInfo | None = None
    secret_paths: frozenset[str] = frozenset()
    fields: list[str] = field(default_factory=list)  # present input paths (nested: `uploads.content`)
    plan: Any = None                  # Engine API translation (see the harness tables)
    unknown_fields: list[str] = field(default_factory=list)
    id: str | None = None
    outputs: dict = field(default_factory=dict)
    action: str = "create"            # create/same/update/replace (stateful harness), else create


# --- field-use recording: feeds testbed/harness/COVERAGE.md -------------------------------------

FIELD_USE: dict[tuple[str, str], dict[str, set[str]]] = {}
_FIELD_USE_LOCK = threading.Lock()


def current_test() -> str:
    """The pytest node id running now ("" outside pytest); pytest sets PYTEST_CURRENT_TEST."""
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]


def record_field_use(token: str, paths: Iterable[str], backend: str) -> None:
    test = current_test() or "<no test>"
    with _FIELD_USE_LOCK:
        for path in paths:
            FIELD_USE.setdefault((token, path), {}).setdefault(backend, set()).add(test)


# --- backends ----------------------------------------------------------------------------------------
# A backend provides: kind ("dry" | "engine"), mappings (type token -> ResourceMapping), extra_types,
# register_provider(reg), autoname(reg, mapping, generation), ctx(mapping, urn, inputs, autoname),
# create(reg, mapping, autoname) -> (id, outputs), update(reg, mapping, entry, changed, start_again)
# -> outputs, delete(entry) -> detail, invoke(token, args, provider) -> outputs.

def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class DryBackend:
    """Translates like the engine harness but touches no daemon; outputs are plausible and stable."""

    kind = "dry"

    def __init__(self, api_version: str | None = None,
                 extra_types: dict[str, Callable[[Registration], tuple[str, dict]]] | None = None):
        from testbed.provider.schema import DEFAULT_API_VERSION  # lazy: the tables import this module
        from testbed.provider.tables import MAPPINGS

        self.mappings = MAPPINGS
        self.api_version = api_version or DEFAULT_API_VERSION
        self.extra_types = dict(extra_types or {})

    def register_provider(self, reg: Registration) -> tuple[str, dict]:
        return f"provider-{_digest(reg.urn)[:12]}", dict(reg.inputs)

    def autoname(self, reg: Registration, mapping, generation: int) -> str | None:
        """Pulumi autoname `<logical name>-<7 hex>`, stable per URN and generation (replacements get a new one)."""
        if not mapping.autoname or reg.inputs.get("name"):
            return None
        return f"{reg.name}-{_digest(reg.urn, generation)[:7]}"

    def ctx(self, mapping, urn: str, inputs: dict, autoname: str | None):
        from testbed.provider.schema import Ctx

        return Ctx(mapping.token, urn, inputs, self.api_version, autoname)

    def create(self, reg: Registration, mapping, autoname: str | None) -> tuple[str, dict]:
        from testbed.provider.dry_outputs import plausible_outputs

        return plausible_outputs(mapping.title, reg, _digest(reg.urn, autoname, reg.inputs),
                                 reg.inputs.get("name") or autoname)

    def update(self, reg: Registration, mapping, entry, changed: set[str], start_again: bool) -> dict:
        return {**entry.outputs, **reg.inputs}

    def delete(self, entry) -> str:
        return "deleted (dry)"

    def invoke(self, token: str, args: dict, provider: str) -> dict:
        if token == "docker:index/getNetwork:getNetwork":
            return {"id": _digest(args)[:64], "name": args.get("name"), "driver": "bridge",
                    "internal": False, "scope": "local", "options": {}, "ipamConfigs": []}
        if token == "docker:index/getRemoteImage:getRemoteImage":
            return {"id": "sha256:" + _digest(args)[:64], "name": args.get("name"), "repoDigest": ""}
        raise UnsupportedResourceError(f"invoke {token} is not mapped by the recording mocks")


# --- the mocks ---------------------------------------------------------------------------------------

class RecordingMocks(pulumi_mocks.Mocks):
    """Records registrations, refuses duplicates and unmapped types/fields, delegates to a backend."""

    def __init__(self, backend=None):
        self.backend = backend if backend is not None else DryBackend()
        self.registrations: dict[str, Registration] = {}   # by URN, in registration order
        self.component_outputs: dict[str, dict] = {}
        self.invokes: list[tuple[str, dict]] = []
        self._lock = threading.Lock()

    # -- queries for assertions
    def by_type(self, typ: str) -> list[Registration]:
        """Registrations of a type token, or of a short title such as "Container"."""
        return [r for r in self.registrations.values() if r.typ == typ or r.typ.rsplit(":", 1)[-1] == typ]

    def by_name(self, name: str) -> Registration:
        found = [r for r in self.registrations.values() if r.name == name]
        if len(found) != 1:
            raise KeyError(f"{len(found)} registrations named {name!r}: {[r.urn for r in found]}")
        return found[0]

    def record_component_outputs(self, urn: str, outputs: dict) -> None:
        with self._lock:
            self.component_outputs[urn] = outputs

    # -- pulumi.runtime.Mocks
    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str | None, dict]:
        info: RequestInfo | None = getattr(_REQUEST, "info", None)
        if info is None:
            raise HarnessError("RecordingMocks needs its HarnessMonitor for exact URNs: use run_program() or "
                               "install_mocks() instead of pulumi.runtime.set_mocks()")
        if info.read_id is not None:
            raise UnsupportedResourceError(
                f"{args.typ} {info.urn}: reading an existing resource (get/import id {info.read_id!r}) is not "
                f"supported by the harness; create it in the program instead")
        secrets: set[str] = set()
        reg = Registration(urn=info.urn, typ=args.typ, name=args.name, custom=bool(args.custom),
                           inputs=unwrap(args.inputs, "", secrets), provider=args.provider or "", request=info)
        reg.secret_paths = frozenset(secrets)
        with self._lock:
            if reg.urn in self.registrations:
                raise DuplicateUrnError(f"duplicate URN {reg.urn}: {args.typ} named {args.name!r} was already "
                                        f"registered with the same parent type (the engine refuses this)")
            self.registrations[reg.urn] = reg
        if not reg.custom:  # a component resource: nothing to provision
            return "", dict(reg.inputs)
        if reg.typ.startswith("pulumi:providers:"):
            reg.id, reg.outputs = self.backend.register_provider(reg)
            return reg.id, reg.outputs
        if reg.typ in getattr(self.backend, "extra_types", {}):
            reg.id, reg.outputs = self.backend.extra_types[reg.typ](reg)
            return reg.id, reg.outputs
        mapping = self.backend.mappings.get(reg.typ)
        if mapping is None:
            raise UnsupportedResourceError(f"resource type {reg.typ} ({reg.urn}) is not mapped by the engine harness; "
                                           f"mapped: {', '.join(sorted(self.backend.mappings))}")
        reg.fields = mapping.check(reg.urn, reg.inputs)
        try:
            reg.id, reg.outputs = self.apply(reg, mapping)
        except HarnessError as error:
            if getattr(error, "partial_id", None):  # the object exists with these fields, then failed
                record_field_use(reg.typ, reg.fields, self.backend.kind)
            raise
        record_field_use(reg.typ, reg.fields, self.backend.kind)  # only once they took effect
        return reg.id, reg.outputs

    def apply(self, reg: Registration, mapping) -> tuple[str, dict]:
        """Single-run recording: everything is a create. The stateful harness overrides this."""
        autoname = self.backend.autoname(reg, mapping, 0)
        reg.plan, reg.unknown_fields = mapping.translate(self.backend.ctx(mapping, reg.urn, reg.inputs, autoname))
        return self.backend.create(reg, mapping, autoname)

    def call(self, args: pulumi_mocks.MockCallArgs) -> dict:
        # A bare dict: MockMonitor.Invoke iterates the failures of a (result, failures) tuple, so None breaks it.
        plain = unwrap(args.args)
        with self._lock:
            self.invokes.append((args.token, plain))
        return self.backend.invoke(args.token, plain, args.provider or "")


# --- running a program in-process --------------------------------------------------------------------

@dataclass
class ProgramResult:
    outputs: dict                      # exported stack outputs, fully resolved (None where unknown)
    secret_outputs: set[str]           # names of exported outputs that are secret
    mocks: Any


def install_mocks(mocks: pulumi_mocks.Mocks, project: str = "sandstack", stack: str = "test",
                  preview: bool = False) -> None:
    """`pulumi.runtime.set_mocks` with the HarnessMonitor (for `@pulumi.runtime.test` style tests)."""
    stack_trace.install()  # the same stack traces, cheaper (testbed/provider/stack_trace.py)
    pulumi_mocks.set_mocks(mocks, project=project, stack=stack, preview=preview, monitor=HarnessMonitor(mocks))


def _config_key(project: str, key: str) -> str:
    return key if ":" in key else f"{project}:{key}"


def run_program(program: Callable[[], Any], mocks: pulumi_mocks.Mocks, *, project: str = "sandstack",
                stack: str = "test", config: dict[str, Any] | None = None,
                secret_config: dict[str, Any] | None = None, preview: bool = False) -> ProgramResult:
    """Runs `program` (builds components, may call pulumi.export) under `mocks`, isolated.

    Fresh context variables and event loop per call, so runs never see each other's root stack,
    config or pending outputs. Waits for every registration and every outstanding Output (an
    exception inside an `apply` fails the run), then resolves the exported stack outputs.
    Config keys without a namespace get the project's (`"image"` -> `"sandstack:image"`); non-string
    values are JSON-encoded like `pulumi config set --path`; `secret_config` values are secret.
    """
    values = {**(config or {}), **(secret_config or {})}
    encoded = {_config_key(project, k): v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
    secret_keys = [_config_key(project, k) for k in (secret_config or {})]

    def isolated() -> ProgramResult:
        settings.ROOT.set(None)
        settings.SETTINGS.outputs = set()   # MockSettings does not reset these two
        settings.SETTINGS.lock = threading.Lock()
        # The thread's current loop is not a context variable: remember it without creating one
        # (get_event_loop() would), and put it back afterwards for the caller's own Pulumi tests.
        previous_loop = getattr(asyncio.get_event_loop_policy()._local, "_loop", None)
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(_quiet_refusals)
        # Pulumi gives each worker thread its own event loop and never closes it; create them here so
        # they can be closed with the run (else "unclosed event loop" warnings at a later GC).
        worker_loops: list[asyncio.AbstractEventLoop] = []

        def init_worker() -> None:
            worker_loops.append(asyncio.new_event_loop())
            asyncio.set_event_loop(worker_loops[-1])
        loop.set_default_executor(ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="pulumi-mocks",
                                                     initializer=init_worker))
        asyncio.set_event_loop(loop)
        ok = False
        try:
            install_mocks(mocks, project, stack, preview)
            pulumi.runtime.set_all_config(encoded, secret_keys=secret_keys)
            _sync_await(run_pulumi_func(program))
            exported = dict(settings.get_root_resource().outputs)
            outputs, secret = {}, set()
            for name, value in exported.items():
                output = pulumi.Output.from_input(value)
                outputs[name] = _sync_await(output.future())
                if _sync_await(output.is_secret()):
                    secret.add(name)
            ok = True
            return ProgramResult(outputs, secret, mocks)
        finally:
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()
            for worker_loop in worker_loops:
                worker_loop.close()
            asyncio.set_event_loop(previous_loop)
            # A failed registration leaves failed futures nobody awaits. Finalise them now: collected
            # later, their __del__ may run inside pytest's report formatting, where CPython 3.11 turns
            # it into "SystemError: AST constructor recursion depth mismatch" (an INTERNALERROR). Only then:
            # a full collection costs ~70 ms on the suite's heap, and a run that succeeded leaves none.
            if not ok:
                gc.collect()

    return contextvars.copy_context().run(isolated)


def _quiet_refusals(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """Drops asyncio's "Future exception was never retrieved" for harness refusals: the run raises them."""
    if isinstance(context.get("exception"), HarnessError) and "never retrieved" in context.get("message", ""):
        return
    loop.default_exception_handler(context)
