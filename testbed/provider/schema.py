"""Field tables: how the harness maps each pulumi-docker input onto the Docker Engine API.

Docker-independent (no daemon, no Docker SDK), so the recording mocks in
``testbed/provider/mocks.py`` use the same tables as the engine harness.

Each resource type has ONE ``ResourceMapping``: a tuple of ``Field`` rows, one per input the harness
understands, keyed by its wire name (camelCase, as ``Mocks.new_resource`` receives it). Everything else
is derived from that table: the supported-field list, the "unmapped field" refusal, the change class
used to decide same / update / replace, and the coverage report.

Values are translated the way terraform-provider-docker v4.5.0 does it (the upstream of pulumi-docker
5.2); the handler of each non-obvious field cites the function/lines it mirrors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NoReturn

from testbed.provider.mocks import InputValueError, UnmappedFieldError, contains_unknown

#: Upstream source the mappings mirror (the pulumi-docker 5.2 upstream submodule is at this tag).
MIRRORED_UPSTREAM = "kreuzwerker/terraform-provider-docker v4.5.0 (commit 5074970c)"

# How a change of the field is applied by `pulumi up` (docs/design/change-table.md).
REPLACE = "replace"        # ForceNew upstream: the resource is replaced
UPDATE = "update"          # the provider's Update applies it to the existing object
STATE_ONLY = "state-only"  # shown as an update, stored in state, never applied to the object

MiB = 1024 * 1024
#: Daemon API version assumed when no daemon is asked (the project's host kind runs Docker 20.10).
DEFAULT_API_VERSION = "1.41"


def snake(name: str) -> str:
    """Wire name -> Python SDK name (`memorySwap` -> `memory_swap`), for error messages."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Field:
    """One input of a resource type the harness understands.

    ``apply(plan, value, ctx)`` writes the input into the plan (the Engine API body being built);
    ``None`` means the input has no effect on the object (its doc says why). ``sub`` lists the keys of
    an object / list-of-objects value (nested ``dict`` for deeper objects, ``None`` for leaves); keys
    not listed there are refused like unmapped fields. ``change`` says how `pulumi up` applies a change.
    """

    name: str
    apply: Callable[[Any, Any, "Ctx"], None] | None
    change: str = REPLACE
    sub: dict | None = None
    doc: str = ""

    @property
    def python_name(self) -> str:
        return snake(self.name)


@dataclass
class Ctx:
    """What a field handler may know besides the value: which resource, all inputs, the daemon API."""

    token: str
    urn: str
    inputs: dict
    api_version: str = DEFAULT_API_VERSION
    autoname: str | None = None

    def fail(self, path: str, value: Any, reason: str) -> NoReturn:
        raise InputValueError(
            f"{self.token} {self.urn}: input '{path}' ({snake(path.split('[')[0])}) = {short(value)}: {reason}"
        )

    def as_int(self, path: str, value: Any, minimum: int | None = None) -> int:
        # Numbers arrive as floats on the wire (64.0); the provider's schema types them as int.
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            self.fail(path, value, "expected an integer")
        number = int(value)
        if minimum is not None and number < minimum:
            self.fail(path, value, f"must be >= {minimum} (provider validateIntegerGeqThan({minimum}))")
        return number

    def as_bool(self, path: str, value: Any) -> bool:
        if not isinstance(value, bool):
            self.fail(path, value, "expected a boolean")
        return value

    def as_str(self, path: str, value: Any) -> str:
        if not isinstance(value, str):
            self.fail(path, value, "expected a string")
        return value

    def as_list(self, path: str, value: Any) -> list:
        if not isinstance(value, list):
            self.fail(path, value, "expected a list")
        return value

    def as_map(self, path: str, value: Any) -> dict[str, str]:
        if not isinstance(value, dict):
            self.fail(path, value, "expected a map of strings")
        return {str(k): self.as_str(f"{path}.{k}", v) for k, v in value.items()}

    def api_at_least(self, version: str) -> bool:
        return tuple(map(int, self.api_version.split("."))) >= tuple(map(int, version.split(".")))


@dataclass(frozen=True)
class ResourceMapping:
    """The table of one resource type: type token, fields, and how to start a plan."""

    token: str
    fields: tuple[Field, ...]
    new_plan: Callable[[Ctx], Any]
    autoname: bool = False  # pulumi-docker sets autonaming on `name` (provider/resources.go SetAutonaming)
    module: str = ""        # where the table lives, named in "unmapped field" errors
    by_name: dict[str, Field] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {f.name: f for f in self.fields})

    @property
    def title(self) -> str:
        return self.token.rsplit(":", 1)[-1]

    def supported_fields(self) -> list[str]:
        """Every field path the table maps, nested ones as `uploads.content`."""
        paths: list[str] = []
        for f in self.fields:
            paths.append(f.name)
            paths.extend(f"{f.name}.{p}" for p in _sub_paths(f.sub))
        return paths

    def check(self, urn: str, inputs: dict) -> list[str]:
        """Paths of the present inputs (for coverage); refuses every unmapped one at once."""
        present, unmapped = [], []
        for key, value in inputs.items():
            if value is None:
                continue
            spec = self.by_name.get(key)
            if spec is None:
                unmapped.append(f"'{key}' ({snake(key)}) = {short(value, 60)}")
                continue
            present.append(key)
            _walk(key, value, spec.sub, present, unmapped)
        if unmapped:
            raise UnmappedFieldError(
                f"{self.token} {urn}: input field(s) not mapped by the engine harness: {'; '.join(unmapped)}. "
                f"Map them in {self.module or 'testbed/harness'} (mirroring {MIRRORED_UPSTREAM}) "
                f"before a component emits them."
            )
        return sorted(set(present))

    def translate(self, ctx: Ctx) -> tuple[Any, list[str]]:
        """Runs every present field's handler; returns (plan, fields skipped because still unknown)."""
        plan = self.new_plan(ctx)
        unknown = []
        for key, value in ctx.inputs.items():
            spec = self.by_name.get(key)
            if value is None or spec is None or spec.apply is None:
                continue
            if contains_unknown(value):  # preview: the value is not known yet
                unknown.append(key)
                continue
            spec.apply(plan, value, ctx)
        return plan, unknown

    def classify(self, changed: Iterable[str], replace_on_changes: Iterable[str] = ()) -> str:
        """`replace` / `update` / `same` for a set of changed top-level fields."""
        changed = set(changed)
        if not changed:
            return "same"
        forced = set(replace_on_changes)
        if "*" in forced or changed & {p.split(".")[0].split("[")[0] for p in forced}:
            return "replace"
        kinds = {self.by_name[name].change if name in self.by_name else REPLACE for name in changed}
        return "replace" if REPLACE in kinds else "update"


def _sub_paths(sub: dict | None) -> list[str]:
    out: list[str] = []
    for key, nested in (sub or {}).items():
        out.append(key)
        out.extend(f"{key}.{p}" for p in _sub_paths(nested))
    return out


def _walk(path: str, value: Any, sub: dict | None, present: list[str], unmapped: list[str]) -> None:
    """Checks object / list-of-object values against `sub`, collecting present and unknown keys."""
    if sub is None:
        return
    items = value if isinstance(value, list) else [value]
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        for key, nested in item.items():
            if nested is None:
                continue
            where = f"{path}[{index}].{key}" if isinstance(value, list) else f"{path}.{key}"
            if key not in sub:
                unmapped.append(f"'{where}' ({snake(key)}) = {short(nested, 60)}")
                continue
            present.append(re.sub(r"\[\d+\]", "", where))
            _walk(where, nested, sub[key], present, unmapped)


# --- small value helpers shared by the tables -------------------------------------------------------

_DURATION_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9,
                   "h": 3600 * 10**9}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def go_duration_ns(text: str) -> int | None:
    """Go's time.ParseDuration ("1m30s", "500ms", "0") in nanoseconds; None when Go would refuse it."""
    text = text.strip()
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    if body == "0":
        return 0
    if not body or _DURATION_PART.sub("", body):
        return None
    total = sum(float(num) * _DURATION_UNITS[unit] for num, unit in _DURATION_PART.findall(body))
    return sign * int(round(total))


def label_map(ctx: Ctx, path: str, value: Any) -> dict[str, str]:
    """`[{label, value}]` -> map (helpers.go labelSetToMap)."""
    out = {}
    for index, item in enumerate(ctx.as_list(path, value)):
        out[ctx.as_str(f"{path}[{index}].label", item.get("label"))] = ctx.as_str(
            f"{path}[{index}].value", item.get("value", ""))
    return out


LABEL_SUB = {"label": None, "value": None}
