"""The sync face of the client: each sync class (Client, HostClient, Sandbox, Process, Terminal, Watch) is made
here from its async class, method by method, and holds an instance of it over a sync httpx.Client
(sandstack.client.transport.SyncIO). A sync method calls the async one and runs the coroutine it gets to its end
at once (`run`): nothing it awaits suspends, so no event loop and no thread is involved. That is why a sync client
can be shared by threads (each call runs in its caller's thread, as httpx.Client allows), needs nothing stopped
when closed, and works in a thread whose event loop is running (Jupyter). docs/design/client.md says why this and
not an event loop in a background thread.

What comes out is made sync too (`outward`): an async instance → its sync face (one per instance, so
`process.sandbox is sandbox`), an async iterator → an iterator, an async context manager → a context manager.
What goes in is unwrapped (`inward`): a sync face → the instance it holds."""

from __future__ import annotations

import functools
import inspect
import weakref
from typing import Any, Callable, Iterator

# The sync default of every `http_factory` parameter (the async class's makes an httpx.AsyncClient), and what a
# given one is checked by (sandstack.client.client sets both).
SYNC_DEFAULTS: dict[str, Any] = {}
SYNC_CHECKS: dict[str, Callable[[Any], Any]] = {}
FACES: dict[type, type] = {}  # an async class → its sync face
RENAMED = {"__aenter__": "__enter__", "__aexit__": "__exit__", "__aiter__": "__iter__"}


def run(awaitable: Any) -> Any:
    """The result of a coroutine of the client over a sync port, run to its end here and now."""
    step = awaitable.__await__()
    try:
        step.send(None)
    except StopIteration as done:
        return done.value
    step.close()
    # Only a bug gets here (the client's code awaited something other than its port, or a port of the async face
    # reached a sync face): stopped where it stands, its `finally` blocks run, rather than left half done.
    raise RuntimeError("a sync client's call waited on an event loop: the sync client runs over an httpx.Client, "
                       "whose calls never wait on one")


def iterate(items: Any) -> Iterator[Any]:
    """An async iterator of the client, read as an iterator. Not closed when the reader stops: a watch's events
    are one iterator read by every `for` (a process's output is a new one each time, closed when dropped)."""
    while True:
        try:
            item = run(items.__anext__())
        except StopAsyncIteration:
            return
        yield outward(item)


class Context:
    """An async context manager of the client as a context manager (a terminal, a streamed answer)."""

    def __init__(self, manager: Any):
        self.manager = manager

    def __enter__(self) -> Any:
        return outward(run(self.manager.__aenter__()))

    def __exit__(self, *exc: Any) -> Any:
        return run(self.manager.__aexit__(*exc))


def _face_class(kind: type) -> type | None:
    return next((FACES[k] for k in kind.__mro__ if k in FACES), None)


def outward(value: Any) -> Any:
    if isinstance(value, Face):
        return value
    face = _face_class(type(value))
    if face is not None:
        held = value.__dict__.get("_face")
        return (held and held()) or _bind(object.__new__(face), value)
    if inspect.isawaitable(value):
        return outward(run(value))
    if isinstance(value, dict) and any(_face_class(type(v)) for v in value.values()):
        return {key: outward(item) for key, item in value.items()}
    if hasattr(value, "__aenter__") and hasattr(value, "__aexit__"):
        return Context(value)
    if hasattr(value, "__anext__"):
        return iterate(value)
    return value


def inward(value: Any) -> Any:
    return value.__dict__["_core"] if isinstance(value, Face) else value


def _bind(face: Face, core: Any) -> Face:
    object.__setattr__(face, "_core", core)
    core._face = weakref.ref(face)  # not a cycle: a sync client dropped is freed (its connections closed) at once
    return face


def face_name(core: Any) -> str:
    """The name of the class `core` is seen as: its sync face's, when it has one (for a repr)."""
    held = core.__dict__.get("_face")
    return type((held and held()) or core).__name__


def _wrapped(function: Callable[..., Any], call: Callable[[Any, tuple, dict], Any]) -> Callable[..., Any]:
    """`function`'s sync twin: its arguments unwrapped (`inward`), a sync default for a parameter not given, then
    `call(first, args, kwargs)`; with `function`'s signature, sync defaults shown."""
    signature = inspect.signature(function)
    defaults = {name: SYNC_DEFAULTS[name] for name in signature.parameters if name in SYNC_DEFAULTS}

    @functools.wraps(function)
    def wrapper(first: Any, *args: Any, **kwargs: Any) -> Any:
        given = {key: SYNC_CHECKS.get(key, inward)(value) for key, value in kwargs.items()}
        return call(first, tuple(inward(a) for a in args), {**defaults, **given})

    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p.replace(default=defaults.get(p.name, p.default)) for p in signature.parameters.values()])
    return wrapper


class Face:
    """A sync face: attributes read and written on the async instance it holds."""

    _async_class: type

    def __getattr__(self, name: str) -> Any:
        # Not the async instance's dunders: a sync face must not look awaitable or async-iterable (`__aenter__`).
        if name == "_core" or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return outward(getattr(self.__dict__["_core"], name))

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.__dict__["_core"], name, inward(value))


@functools.cache
def _mirror(kind: type) -> type:
    """The sync face of `kind` and of each class it derives from, so that each sync class holds the same methods
    as its async class (inherited ones from the sync face of the base that defines them)."""
    if kind is object:
        return Face
    namespace: dict[str, Any] = {"__module__": kind.__module__, "__doc__": kind.__doc__, "_async_class": kind}
    for name, member in vars(kind).items():
        if isinstance(member, staticmethod):
            namespace[name] = member
        elif isinstance(member, classmethod):  # `cls` is the sync class: what it makes is sync
            namespace[name] = classmethod(_wrapped(member.__func__, lambda cls, args, kwargs, f=member.__func__:
                                                   outward(f(cls, *args, **kwargs))))
        elif name == "__init__":
            namespace[name] = _wrapped(member, lambda self, args, kwargs: _bind(self, self._async_class(
                *args, **kwargs)) and None)
        elif inspect.isfunction(member) and (not name.startswith("__") or name in RENAMED or name == "__repr__"):
            namespace[RENAMED.get(name, name)] = _wrapped(member, lambda self, args, kwargs, name=name: outward(
                getattr(self.__dict__["_core"], name)(*args, **kwargs)))
    return type(kind.__name__, tuple(_mirror(base) for base in kind.__bases__), namespace)


def sync_face(kind: type, name: str, module: str) -> type:
    """The sync class of async class `kind`, named `name` in `module`."""
    face = _mirror(kind)
    face.__name__ = face.__qualname__ = name
    face.__module__ = module
    FACES[kind] = face
    return face
