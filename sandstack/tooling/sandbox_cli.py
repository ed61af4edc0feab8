"""`sandstack sandbox …`: the runtime's API from the command line, through `sandstack.client`.

The stack outputs (`pulumi stack output --json --show-secrets > outputs.json`) come from `--outputs FILE` or
SANDSTACK_OUTPUTS. A claim prints the sandbox as HOST/SANDBOX; the other commands take that reference.
Exit 0 on success, 1 when the runtime refused (its message on stderr), 2 on usage or unreadable outputs;
`exec` exits with the command's own exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from sandstack.tooling.helptext import command

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2
OUTPUTS_ENV = "SANDSTACK_OUTPUTS"
SCRIPT_LIMIT = 4 * 1024 * 1024  # an exec's script travels in its request (files go with `put`, streamed)


def _client(args: argparse.Namespace):
    from sandstack.client import Client

    path = args.outputs or os.environ.get(OUTPUTS_ENV)
    if not path:
        raise ValueError(f"give the stack outputs with --outputs FILE or {OUTPUTS_ENV}")
    try:
        return Client.from_file(path, actor=args.actor)
    except OSError as error:
        raise ValueError(f"{path}: {error.strerror}") from error


def _print(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


def cmd_claim(client, args) -> int:
    sandbox = client.claim(args.pool, args.session, from_snapshot=args.from_snapshot, size=args.size)
    print(sandbox.ref)
    return EXIT_OK


def cmd_release(client, args) -> int:
    _print(client.host(args.host).release(args.session))
    return EXIT_OK


def cmd_status(client, args) -> int:
    _print(client.sandbox(args.sandbox).info)
    return EXIT_OK


def cmd_exec(client, args) -> int:
    command = args.command
    if bool(command) == bool(args.script):
        raise ValueError("give a command after '--' or --script, not both")
    script = _script(args.script) if args.script else None
    env = dict(item.split("=", 1) for item in args.env)
    if args.stream:
        return _stream(client.sandbox(args.sandbox), command or None, script, args, env)
    result = client.sandbox(args.sandbox).exec(command or None, script=script, lang=args.lang, cwd=args.cwd,
                                               env=env, timeout=args.timeout)
    sys.stdout.write(result["stdout"])
    sys.stderr.write(result["stderr"])
    if result.get("message"):
        print(f"sandstack: {result['message']}", file=sys.stderr)
    return result["exit_code"]


def _script(path: str) -> str:
    """A --script file's text, read as every command reads a file (sandstack.files: a regular file, bounded)."""
    from sandstack.files import read_text

    return read_text(path, SCRIPT_LIMIT, "a script")


def _stream(sandbox, command, script, args, env) -> int:
    """The command's output as it is written (a background process followed); Ctrl-C kills it."""
    proc = sandbox.start(command, script=script, lang=args.lang, cwd=args.cwd, env=env, timeout=args.timeout)
    out = {"stdout": sys.stdout, "stderr": sys.stderr}
    try:
        for event in proc:
            if event.kind in out:
                out[event.kind].write(event.text)
                out[event.kind].flush()
            elif event.kind == "truncated":
                print(f"sandstack: {event.data.get('stream')} passed the output limit; the rest is not kept",
                      file=sys.stderr)
    except KeyboardInterrupt:
        proc.kill()
        print(f"sandstack: interrupted: process {proc.id} killed", file=sys.stderr)
        return 130
    info = proc.wait()
    if info.message:
        print(f"sandstack: {info.message}", file=sys.stderr)
    return info.exit_code if info.exit_code is not None else EXIT_REFUSED


def cmd_shell(client, args) -> int:
    """A terminal in the sandbox on this one: raw keystrokes in, its output out, its size kept in step."""
    import shutil
    import signal
    import termios
    import threading
    import tty

    size = shutil.get_terminal_size()
    interactive = sys.stdin.isatty()
    saved = termios.tcgetattr(sys.stdin.fileno()) if interactive else None
    command = args.command
    with client.sandbox(args.sandbox).terminal(size.lines, size.columns, command or None) as term:
        def keys() -> None:
            while data := os.read(sys.stdin.fileno(), 4096):
                term.send(data)

        if interactive:
            tty.setraw(sys.stdin.fileno())
            signal.signal(signal.SIGWINCH, lambda *_: term.resize(*reversed(shutil.get_terminal_size())))
        threading.Thread(target=keys, daemon=True).start()
        try:
            while True:
                sys.stdout.buffer.write(term.recv())
                sys.stdout.buffer.flush()
        except EOFError:
            pass
        finally:
            if saved is not None:
                termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, saved)
    return term.exit_code if term.exit_code is not None else EXIT_OK


def _terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except ValueError:  # closed
        return False


class _Bar:
    """A transfer's progress bar on stderr (rich: bytes, speed, time left), drawn from its first report on (a
    refusal before any byte draws nothing)."""

    def __init__(self, label: str):
        self.label, self.bar, self.task = label, None, None

    def __call__(self, done: int, total: int | None) -> None:
        if self.bar is None:
            from rich.console import Console
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                       TransferSpeedColumn)

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                TimeRemainingColumn(), console=Console(stderr=True))
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=total)
        self.bar.update(self.task, completed=done, total=total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@contextmanager
def _progress(label: str | None) -> Iterator[_Bar | None]:
    """A bar where someone watches stderr (a terminal); None elsewhere (a pipe, CI: no control characters), or
    when the label is None."""
    if label is None or not _terminal():
        yield None
        return
    bar = _Bar(label)
    try:
        yield bar
    finally:
        bar.close()


def cmd_get(client, args) -> int:
    from sandstack.client import Conflict

    sandbox = client.sandbox(args.sandbox)
    try:  # streamed: a file of any size, in a few MiB of memory; -o FILE is replaced only once all of it came
        # Written to stdout, the bytes would share the terminal with the bar: it is drawn for -o FILE only.
        with _progress(f"get {args.path}" if args.output else None) as progress:
            sandbox.download(args.path, args.output or sys.stdout.buffer, progress)
    except Conflict as error:
        if error.body.get("type") != "dir":
            raise
        for entry in sandbox.list_dir(args.path):
            print(f"{entry.type:5} {entry.size:>10} {entry.name}")
    return EXIT_OK


def cmd_put(client, args) -> int:
    if args.source != "-":  # the local file first: a pipe or a device is refused before the runtime is asked
        from sandstack.files import check_regular

        check_regular(args.source, what="a file to upload")
    sandbox = client.sandbox(args.sandbox)
    source = sys.stdin.buffer if args.source == "-" else args.source
    with _progress(f"put {args.path}") as progress:
        sandbox.upload(args.path, source, progress)  # streamed, as get
    return EXIT_OK


def cmd_rm(client, args) -> int:
    client.sandbox(args.sandbox).delete_file(args.path)
    return EXIT_OK


def cmd_archive(client, args) -> int:
    if args.output and args.legacy_output:
        raise ValueError("give the archive's file once: -o FILE")
    data = client.sandbox(args.sandbox).archive(args.format)
    output = args.output or args.legacy_output  # `archive HOST/SANDBOX FILE`, as before -o (still accepted)
    if output:
        Path(output).write_bytes(data)
    else:
        sys.stdout.buffer.write(data)
    return EXIT_OK


def cmd_snapshot(client, args) -> int:
    print(client.sandbox(args.sandbox).snapshot())
    return EXIT_OK


def cmd_restore(client, args) -> int:
    snapshot = args.snapshot.split("/", 1)[-1]
    _print(client.sandbox(args.sandbox).restore(snapshot))
    return EXIT_OK


def cmd_pause(client, args) -> int:
    _print(client.sandbox(args.sandbox).pause().to_dict())
    return EXIT_OK


def cmd_resume(client, args) -> int:
    _print(client.sandbox(args.sandbox).resume().to_dict())
    return EXIT_OK


def cmd_list(client, args) -> int:
    hosts = [args.host] if args.host else list(client.hosts)
    for name in hosts:
        for row in client.host(name).sandboxes(args.pool):
            print(f"{name}/{row['sandbox']} {row['pool']} {row['status']} {row['session'] or '-'}")
    return EXIT_OK


def cmd_audit(client, args) -> int:
    for line in client.host(args.host).audit(args.limit):
        print(json.dumps(line, sort_keys=True))
    return EXIT_OK


def _run(func: Callable[..., int]) -> Callable[[argparse.Namespace], int]:
    """Runtime refusals and unreachable hosts as one line on stderr and an exit status, never a traceback."""

    def run(args: argparse.Namespace) -> int:
        # Imported here: the rest of the CLI (validate, check, …) starts without the HTTP client.
        import httpx

        from sandstack.client import SandstackError

        try:
            return func(_client(args), args)
        except ValueError as error:
            print(f"sandstack sandbox: {error}", file=sys.stderr)
            return EXIT_USAGE
        except SandstackError as error:
            print(f"sandstack sandbox: {error} (HTTP {error.status})", file=sys.stderr)
            return EXIT_REFUSED
        except httpx.TransportError as error:
            print(f"sandstack sandbox: the runtime does not answer ({type(error).__name__})", file=sys.stderr)
            return EXIT_REFUSED
        except OSError as error:  # a local file: put's SOURCE, get's -o FILE
            where = f"{error.filename}: " if error.filename else ""
            print(f"sandstack sandbox: {where}{error.strerror or error}", file=sys.stderr)
            return EXIT_USAGE

    return run


def _exec_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--script", metavar="FILE", help="run this local file's text instead of a command")
    p.add_argument("--lang", choices=("bash", "python"), default="bash", help="the --script's language "
                                                                              "(default: bash)")
    p.add_argument("--cwd", metavar="PATH", help="the working directory in the sandbox (default: its workspace)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable for the command; repeatable")
    p.add_argument("--timeout", type=int, metavar="SECONDS", help="stop the command after this many seconds")
    p.add_argument("--stream", action="store_true", help="print the output as the command writes it")


class _OptionsThenCommand(argparse.Action):
    """`HOST/SANDBOX [OPTIONS] [-- COMMAND…]`: argparse's REMAINDER takes every word after the sandbox, options too,
    so `exec HOST/SANDBOX --stream -- make build` once ran `--stream` as the command (exit 127). Here the words
    up to `--` are read as the command's options (by a parser of those options alone: a stray word is a usage
    error, never part of a command) and the words after it are the command; words that do not start with an
    option are the command as they are (`exec HOST/SANDBOX ls -la`)."""

    def __init__(self, *args, options: Callable[[argparse.ArgumentParser], None], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.options = options

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        words = list(values or [])
        if words[:1] == ["--"]:
            options, command = [], words[1:]
        elif words[:1] and words[0].startswith("-"):
            cut = words.index("--") if "--" in words else len(words)
            options, command = words[:cut], words[cut + 1:]
        else:
            options, command = [], words
        if options:
            own = argparse.ArgumentParser(prog=parser.prog, add_help=False)
            self.options(own)
            own.parse_args(options, namespace)
        setattr(namespace, self.dest, command)


def add_sandbox_commands(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Adds `sandbox` and its subcommands to the `sandstack` parser's subcommands.

    The same thing has the same name everywhere: HOST/SANDBOX (what `claim` prints), HOST, POOL, SESSION, PATH (in
    the workspace), and `-o/--output FILE` for what a command writes to a file (stdout without it)."""
    sandbox = command(subparsers, "sandbox", "claim and use sandboxes through the hosts' runtimes (exit 0, 1 refused, "
                      "2 usage; exec: the command's status)",
                      "sandstack sandbox --outputs outputs.json claim python chat-1",
                      "sandstack sandbox exec local/sandstack-dev-python-0 -- python3 -c 'print(1)'",
                      details=f"The stack outputs come from --outputs FILE or ${OUTPUTS_ENV} (`pulumi stack output "
                              "--json --show-secrets > outputs.json`).")
    sandbox.add_argument("--outputs", metavar="FILE",
                         help=f"the stack outputs as JSON (default: ${OUTPUTS_ENV}), e.g. --outputs outputs.json")
    sandbox.add_argument("--actor", metavar="NAME",
                         help="who you act for, recorded in the runtime's audit log, e.g. --actor alice")
    sub = sandbox.add_subparsers(dest="sandbox_command", required=True, metavar="SUBCOMMAND")
    ref = "local/sandstack-dev-python-0"  # what `claim` prints, in the examples

    def add(name: str, func: Callable[..., int], help_text: str, *examples: str) -> argparse.ArgumentParser:
        parser = command(sub, name, help_text, *(f"sandstack sandbox {e}" for e in examples))
        parser.set_defaults(func=_run(func))
        return parser

    def sandbox_arg(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("sandbox", metavar="HOST/SANDBOX", help="the sandbox, as `claim` prints it")

    p = add("claim", cmd_claim, "claim a sandbox of POOL for SESSION; prints HOST/SANDBOX",
            "claim python chat-1", "claim python chat-2 --from-snapshot local/snap-0123456789abcdef0123456789abcdef")
    p.add_argument("pool", metavar="POOL", help="the pool to claim from (a pool of the stack's spec)")
    p.add_argument("session", metavar="SESSION", help="your name for the session: claiming it again returns the "
                                                      "same sandbox")
    p.add_argument("--from-snapshot", metavar="HOST/SNAPSHOT",
                   help="branch: start from this snapshot (what `snapshot` prints)")
    p.add_argument("--size", metavar="CLASS", help="a size class of the pool (`pools.POOL.sizes`): the sandbox gets "
                                                   "its limits for this session; default the pool's own")
    p = add("release", cmd_release, "release SESSION on HOST: its sandbox is reset and returns to the pool",
            "release local chat-1")
    p.add_argument("host", metavar="HOST", help="the host the session's sandbox is on (HOST of HOST/SANDBOX)")
    p.add_argument("session", metavar="SESSION", help="the session named at `claim`")
    p = add("status", cmd_status, "status and session of HOST/SANDBOX, as JSON", f"status {ref}")
    sandbox_arg(p)
    p = add("list", cmd_list, "every sandbox of every host (or --host), with its status and session",
            "list", "list --host local --pool python")
    p.add_argument("--host", metavar="HOST", help="only this host's sandboxes")
    p.add_argument("--pool", metavar="POOL", help="only this pool's sandboxes")
    p = add("exec", cmd_exec, "run a command (after --) or --script FILE in HOST/SANDBOX; exits with its status",
            f"exec {ref} -- python3 -c 'print(1)'", f"exec {ref} --script job.py --lang python --timeout 60",
            f"exec {ref} --cwd /workspace --env MODE=test -- make test", f"exec {ref} --stream -- make build")
    sandbox_arg(p)
    _exec_options(p)
    p.add_argument("command", nargs=argparse.REMAINDER, action=_OptionsThenCommand, options=_exec_options,
                   help="-- then the command and its arguments (options before the --)")
    p = add("shell", cmd_shell, "a terminal in HOST/SANDBOX (a shell, or the command after --)",
            f"shell {ref}", f"shell {ref} -- python3 -i")
    sandbox_arg(p)
    p.add_argument("command", nargs=argparse.REMAINDER, action=_OptionsThenCommand, options=lambda _: None,
                   help="-- then the program to run in the terminal (default: a shell)")
    p = add("get", cmd_get, "print a file (or list a directory) of HOST/SANDBOX's workspace",
            f"get {ref} notes.txt", f"get {ref} out/report.pdf -o report.pdf", f"get {ref}")
    sandbox_arg(p)
    p.add_argument("path", nargs="?", default="", metavar="PATH",
                   help="a file or directory, relative to the workspace (default: the workspace itself)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the file here instead of to stdout")
    p = add("put", cmd_put, "write SOURCE (a local file, or - for stdin) to PATH in HOST/SANDBOX's workspace",
            f"put {ref} data/input.csv input.csv", f"put {ref} notes.txt -")
    sandbox_arg(p)
    p.add_argument("path", metavar="PATH", help="where to write it, relative to the workspace")
    p.add_argument("source", metavar="SOURCE", help="a local file, or - to read stdin")
    p = add("rm", cmd_rm, "delete PATH (a file or directory) in HOST/SANDBOX's workspace", f"rm {ref} out/old.log")
    sandbox_arg(p)
    p.add_argument("path", metavar="PATH", help="a file or directory, relative to the workspace")
    p = add("archive", cmd_archive, "download HOST/SANDBOX's workspace as tar.gz or zip",
            f"archive {ref} -o workspace.tar.gz", f"archive {ref} -o workspace.zip --format zip")
    sandbox_arg(p)
    p.add_argument("legacy_output", nargs="?", metavar="FILE", help=argparse.SUPPRESS)  # the old positional form
    p.add_argument("-o", "--output", metavar="FILE", help="write the archive here instead of to stdout")
    p.add_argument("--format", choices=("tar.gz", "zip"), default="tar.gz", help="the archive's format "
                                                                                  "(default: tar.gz)")
    p = add("snapshot", cmd_snapshot, "snapshot HOST/SANDBOX's writable paths; prints HOST/SNAPSHOT",
            f"snapshot {ref}")
    sandbox_arg(p)
    p = add("restore", cmd_restore, "roll HOST/SANDBOX back to a snapshot of its host",
            f"restore {ref} local/snap-0123456789abcdef0123456789abcdef")
    sandbox_arg(p)
    p.add_argument("snapshot", metavar="[HOST/]SNAPSHOT", help="the snapshot, as `snapshot` prints it")
    p = add("pause", cmd_pause, "freeze every process of HOST/SANDBOX", f"pause {ref}")
    sandbox_arg(p)
    p = add("resume", cmd_resume, "unfreeze HOST/SANDBOX", f"resume {ref}")
    sandbox_arg(p)
    p = add("audit", cmd_audit, "the newest audit lines of HOST's runtime, one JSON object a line",
            "audit local", "audit local --limit 20")
    p.add_argument("host", metavar="HOST", help="the host whose runtime to ask")
    p.add_argument("--limit", type=int, default=100, metavar="N", help="at most this many lines (default: 100)")
    return sandbox
