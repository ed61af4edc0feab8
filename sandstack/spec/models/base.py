"""Scalar types and the field helper shared by every spec model.

Each constrained type carries its own JSON Schema (pattern, title, examples), so the
published schema, the editor completion and the Python validation accept the same text.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, WithJsonSchema
from pydantic.fields import FieldInfo

from sandstack.spec import units
from sandstack.spec.access import Access, loosens
from sandstack.spec.changes import Effect, effect_of


class ChangeNote:
    """A field's declared change effect (sandstack.spec.changes), written into its schema as `x-change`, and
    whether a change of it loosens access (sandstack.spec.access)."""

    def __init__(self, effect: Effect, access: Access, whole: bool = False):
        self.effect = effect
        self.access = access
        # One unit of change: the fields of the models it holds are not walked (sandstack.spec.walk), so their own
        # declarations, written for another place, never speak for them here.
        self.whole = whole

    def __call__(self, schema: dict[str, Any]) -> None:
        schema["x-change"] = self.effect.label


def field(default: Any = ..., *, description: str, change: str | Effect, access: Access, whole: bool = False,
          **kwargs: Any) -> Any:
    """A pydantic Field that declares what changing it does on the next `pulumi up` (the change table) and whether
    that loosens access (the access table). `whole`: any change inside it is a change of it (its declaration speaks
    for the models it holds)."""
    if not isinstance(access, Access):
        raise TypeError(f"a field's access is a sandstack.spec.access.Access, not {access!r}")
    return Field(default, description=description, json_schema_extra=ChangeNote(effect_of(change), access, whole),
                 **kwargs)


def change_of(info: FieldInfo) -> Effect:
    """The declared change effect of a model field."""
    note = info.json_schema_extra
    if not isinstance(note, ChangeNote):
        raise TypeError("a spec field declared without sandstack.spec.models.base.field()")
    return note.effect


def access_of(info: FieldInfo) -> Access:
    """Whether and when a change of a model field loosens access."""
    note = info.json_schema_extra
    if not isinstance(note, ChangeNote):
        raise TypeError("a spec field declared without sandstack.spec.models.base.field()")
    return note.access


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo must never be silently ignored in a security spec."""

    # python-re: the path patterns need look-ahead, which the default Rust engine lacks.
    # validate_default: defaults written in units ('64MiB', '10s') are parsed like values in a file,
    # so an unset field holds bytes or seconds too, never the raw string.
    model_config = ConfigDict(extra="forbid", frozen=True, regex_engine="python-re", validate_default=True)


def _unit(parser):
    def validate(value: object) -> object:
        try:
            return parser(value)
        except units.UnitError as exc:
            raise ValueError(str(exc)) from None

    return BeforeValidator(validate)


def text(pattern: str, title: str, hint: str, max_length: int | None = None) -> type[str]:
    """A string type with a pattern, whose schema carries a title and a hint for error messages."""
    schema: dict[str, Any] = {"type": "string", "pattern": pattern, "title": title, "x-hint": hint}
    if max_length is not None:
        schema["maxLength"] = max_length
    return Annotated[str, StringConstraints(pattern=pattern, max_length=max_length), WithJsonSchema(schema)]  # type: ignore[return-value]


NAME_PATTERN = r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$"
NAME_HINT = "lowercase letters, digits and '-', starting with a letter, at most 32 characters"
Name = text(NAME_PATTERN, "name", NAME_HINT)

Size = Annotated[
    int,
    _unit(units.parse_size),
    WithJsonSchema(
        {
            "title": "size",
            "x-hint": units.SIZE_HINT,
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": units.MAX_BYTES},
                {"type": "string", "pattern": units.SIZE_PATTERN},
            ],
            "examples": ["512MiB", "2GiB"],
        }
    ),
]

Duration = Annotated[
    int,
    _unit(units.parse_duration),
    WithJsonSchema(
        {
            "title": "duration",
            "x-hint": units.DURATION_HINT,
            "type": "string",
            "pattern": units.DURATION_PATTERN,
            "examples": ["90s", "45m", "24h"],
        }
    ),
]

Cpus = Annotated[
    float,
    _unit(units.parse_cpus),
    WithJsonSchema(
        {
            "title": "CPU amount",
            "x-hint": units.CPUS_HINT,
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0, "maximum": units.MAX_CPUS},
                {"type": "string", "pattern": units.CPUS_PATTERN},
            ],
            "examples": [0.5, "1.5", "250m"],
        }
    ),
]

# [registry[:port]/]path[:tag][@sha256:digest], the grammar Docker's reference package accepts.
IMAGE_PATTERN = (
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
IMAGE_HINT = "an image reference such as 'python:3.12-slim' or 'repo/name@sha256:<64 hex digits>'"
ImageRef = text(IMAGE_PATTERN, "image reference", IMAGE_HINT, max_length=512)

# Absolute container path; no '.' or '..' segments, no spaces or shell metacharacters.
PATH_PATTERN = r"^/$|^(/(?!\.{1,2}(/|$))[A-Za-z0-9._@+-]+)+$"
PATH_HINT = "an absolute path such as '/workspace', without '.' or '..' segments or spaces"
AbsPath = text(PATH_PATTERN, "path", PATH_HINT, max_length=1024)

CONFIG_KEY_PATTERN = r"^([A-Za-z][A-Za-z0-9_-]*:)?[A-Za-z][A-Za-z0-9_.-]{0,127}$"
CONFIG_KEY_HINT = "a Pulumi config key such as 'apiToken' or 'myproject:apiToken'"
ConfigKey = text(CONFIG_KEY_PATTERN, "config key", CONFIG_KEY_HINT)

ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
ENV_NAME_HINT = "letters, digits and '_', not starting with a digit"
EnvName = text(ENV_NAME_PATTERN, "variable name", ENV_NAME_HINT)

# The platforms a template may be built for and a host may run (Docker's `os/arch`): a closed set, an enum in the
# schema. docs/design/platforms.md says why these two and how a host runs the one it is not (emulation).
PLATFORMS = ("linux/amd64", "linux/arm64")
Platform = Literal[PLATFORMS]  # type: ignore[valid-type]

LABEL_KEY_PATTERN = r"^[a-z0-9]([a-z0-9._/-]{0,62}[a-z0-9])?$"
LabelKey = text(
    LABEL_KEY_PATTERN,
    "label key",
    "lowercase letters, digits, '.', '_', '/' and '-', at most 64 characters",
)


class SecretRef(StrictModel):
    """A value kept out of the spec: the name of a Pulumi secret config value.

    Set it with `pulumi config set --secret <key> <value>`; the value stays encrypted in the
    stack's config and in Pulumi's state and is never written into the spec or a diff.
    """

    secret: ConfigKey = field(description="Pulumi config key holding the secret value.", change="replace",
                              access=loosens("secrets", "re-pointed to another secret", "apiToken", "apiToken2"))


def one_of(*values: str) -> str:
    return ", ".join(repr(v) for v in values)
