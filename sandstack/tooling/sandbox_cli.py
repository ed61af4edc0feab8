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
from pathlib import Path
from typing import Any, Callable

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2
OUTPUTS_ENV = "SANDSTACK_OUTPUTS"


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
    sandbox = client.claim(args.pool, args.session, from_snapshot=args.from_snapshot)
    print(sandbox.ref)
    return EXIT_OK


def cmd_release(client, args) -> int:
    _print(client.host(args.host).release(args.session))
    return EXIT_OK


def cmd_status(client, args) -> int:
    _print(client.sandbox(args.sandbox).info)
    return EXIT_OK


def cmd_exec(client, args) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if bool(command) == bool(args.script):
        raise ValueError("give a command after '--' or --script, not both")
    script = Path(args.script).read_text(encoding="utf-8") if args.script else None
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
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
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


def cmd_get(client, args) -> int:
    sandbox = client.sandbox(args.sandbox)
    response = sandbox.host.read_file(sandbox.name, args.path)
    if response.headers.get("content-type", "").startswith("application/json"):
        for entry in response.json()["entries"]:
            print(f"{entry['type']:5} {entry['size']:>10} {entry['name']}")
    elif args.output:
        Path(args.output).write_bytes(response.content)
    else:
        sys.stdout.buffer.write(response.content)
    return EXIT_OK


def cmd_put(client, args) -> int:
    data = sys.stdin.buffer.read() if args.source == "-" else Path(args.source).read_bytes()
    client.sandbox(args.sandbox).write_file(args.path, data)
    return EXIT_OK


def cmd_rm(client, args) -> int:
    client.sandbox(args.sandbox).delete_file(args.path)
    return EXIT_OK


def cmd_archive(client, args) -> int:
    Path(args.output).write_bytes(client.sandbox(args.sandbox).archive(args.format))
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

    return run


def add_sandbox_commands(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Adds `sandbox` and its subcommands to the `sandstack` parser's subcommands."""
    sandbox = subparsers.add_parser("sandbox", help="claim and use sandboxes through the hosts' runtimes "
                                                    "(exit 0, 1 refused, 2 usage; exec: the command's status)")
    sandbox.add_argument("--outputs", metavar="FILE", help=f"stack outputs as JSON (default: ${OUTPUTS_ENV})")
    sandbox.add_argument("--actor", help="who you act for, recorded in the audit log")
    sub = sandbox.add_subparsers(dest="sandbox_command", required=True)

    def add(name: str, func: Callable[..., int], help_text: str) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, help=help_text)
        parser.set_defaults(func=_run(func))
        return parser

    p = add("claim", cmd_claim, "claim a sandbox of POOL for SESSION; prints HOST/SANDBOX")
    p.add_argument("pool")
    p.add_argument("session")
    p.add_argument("--from-snapshot", metavar="HOST/SNAPSHOT", help="branch: start from this snapshot")
    p = add("release", cmd_release, "release SESSION on HOST: its sandbox is reset and returns to the pool")
    p.add_argument("host")
    p.add_argument("session")
    p = add("status", cmd_status, "status and session of HOST/SANDBOX")
    p.add_argument("sandbox", metavar="HOST/SANDBOX")
    p = add("list", cmd_list, "every sandbox of every host (or --host), with its status and session")
    p.add_argument("--host")
    p.add_argument("--pool")
    p = add("exec", cmd_exec, "run a command (after --) or --script FILE in HOST/SANDBOX")
    p.add_argument("sandbox", metavar="HOST/SANDBOX")
    p.add_argument("--script", metavar="FILE")
    p.add_argument("--lang", choices=("bash", "python"), default="bash")
    p.add_argument("--cwd")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--timeout", type=int)
    p.add_argument("--stream", action="store_true", help="print the output as the command writes it")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p = add("shell", cmd_shell, "a terminal in HOST/SANDBOX (a shell, or the command after --)")
    p.add_argument("sandbox", metavar="HOST/SANDBOX")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p = add("get", cmd_get, "print a file (or list a directory) of HOST/SANDBOX's workspace")
    p.add_argument("sandbox", metavar="HOST/SANDBOX")
    p.add_argument("path", nargs="?", default="")
    p.add_argument("-o", "--output", metavar="FILE")
    p = add("put", cmd_put, "write SOURCE (a file, or - for stdin) to PATH in the workspace")
    p.add_argument("sandbox", metavar="HOST/SANDBOX")
    p.add_argument("path")
    p.add_argument("source")
    p = add("rm", cmd_rm, "delete PATH (a file or directory) in the workspace")
    p.add_argument("sandbox", metavar="HOST/SANDBOX")
    p.add_argument("path")
    p = add("archive", cmd_archive, "download the workspace as tar.gz or zip")
    p.add_argument("sandbox", metavar="HOST/SANDBOX")
    p.add_argument("output", metavar="FILE")
    p.add_argument("--format", choices=("tar.gz", "zip"), default="tar.gz")
    p = add("snapshot", cmd_snapshot, "snapshot the writable paths; prints HOST/SNAPSHOT")
    p.add_argument("sandbox", metavar="HOST/SANDBOX")
    p = add("restore", cmd_restore, "roll HOST/SANDBOX back to a snapshot of its host")
    p.add_argument("sandbox", metavar="HOST/SANDBOX")
    p.add_argument("snapshot", metavar="[HOST/]SNAPSHOT")
    p = add("pause", cmd_pause, "freeze every process of HOST/SANDBOX")
    p.add_argument("sandbox", metavar="HOST/SANDBOX")
    p = add("resume", cmd_resume, "unfreeze HOST/SANDBOX")
    p.add_argument("sandbox", metavar="HOST/SANDBOX")
    p = add("audit", cmd_audit, "the newest audit lines of HOST's runtime")
    p.add_argument("host")
    p.add_argument("--limit", type=int, default=100)
    return sandbox
