"""The `sandstack` console script. Ctrl-C at any moment once it runs, its imports included, exits 130 with one line
and no traceback.

The command's imports (pydantic, rich, the models) take a few hundred milliseconds, more on a busy machine: a
KeyboardInterrupt raised inside them came out of the console script as a traceback. So this module imports only
what the interpreter has already loaded (`_signal`, the built-in module that `signal` wraps: importing `signal`
builds its enums, 10 ms or more on a busy machine; no `from __future__`), and takes SIGINT before anything else
is imported:
- while the command starts, an interrupt ends the process at once (nothing has been written, nothing to undo);
- while it works, the interrupt is a KeyboardInterrupt, so `with` blocks and `finally` clauses run on the way out
  (temporary folders of git inputs are removed), and `cli.main` prints one line and returns 130;
- once it has finished, an interrupt during the interpreter's shutdown ends the process too.
Python cannot raise an exception everywhere: in a finalizer, a weakref callback or a callback from compiled code
(pydantic-core building a pattern) a KeyboardInterrupt is "ignored" (printed with a traceback by
`sys.unraisablehook`) and the command went on. While the command works, such a lost interrupt is delivered again a
millisecond later (SIGALRM, whose handler is the same), by which time the program is almost always back where an
exception can unwind; if not, the same happens again. Compiled code may also catch the KeyboardInterrupt and raise
an error of its own (pydantic-core building a validator: a SchemaError): an error that ends the command after an
interrupt was raised ends it as the interrupt.
The handler is installed when this module is imported: the console script imports it and calls `main()`, and
nothing else imports it. An interrupt before that (the interpreter starting, the wrapper that pip writes importing
`re`: a few milliseconds) is Python's own.
"""

import _signal
import os
import sys

EXIT_INTERRUPTED = 130  # cli.EXIT_INTERRUPTED, which this module cannot import before it takes SIGINT
_working = False
_interrupted = False  # a KeyboardInterrupt was raised while the command worked


def _on_interrupt(signum: int, frame: object) -> None:
    global _interrupted
    if _working:
        _interrupted = True
        raise KeyboardInterrupt
    os.write(2, b"sandstack: interrupted\n")
    os._exit(EXIT_INTERRUPTED)


def _on_unraisable(unraisable: object) -> None:
    if _working and issubclass(getattr(unraisable, "exc_type", type(None)), KeyboardInterrupt):
        while True:
            try:
                # 1 ms: late enough that the alarm is not handled inside this hook (where raising is lost again)
                _signal.setitimer(_signal.ITIMER_REAL, 0.001)
                return
            except KeyboardInterrupt:  # the alarm came before the hook returned: set it again
                continue
    sys.__unraisablehook__(unraisable)


def _take_sigint() -> None:
    try:
        _signal.signal(_signal.SIGINT, _on_interrupt)
        _signal.signal(_signal.SIGALRM, _on_interrupt)
        sys.unraisablehook = _on_unraisable
    except ValueError:  # imported outside the main thread: not the console script, leave the handler alone
        pass


_take_sigint()


def main() -> int:
    global _working
    _take_sigint()
    # pydantic looks for plugins in every installed distribution's entry points when it builds the first model
    # (importlib.metadata, a scan of site-packages: a tenth of `validate`'s CPU); sandstack's models use none.
    # An explicit setting is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from sandstack.tooling.cli import main as run

    try:
        _working = True
        return run()
    except KeyboardInterrupt:  # raised before cli.main's own handler, or inside it
        _working = False
        print("sandstack: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception:
        if not _interrupted:
            raise
        # Compiled code that called back into Python turned the interrupt into an error of its own (pydantic-core
        # building a model's validator: a SchemaError whose message ends in "KeyboardInterrupt").
        _working = False
        print("sandstack: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        _working = False
