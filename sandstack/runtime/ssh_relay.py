"""A forward to the session's own sandbox's loopback, or to a Unix socket in it (docs/design/ssh.md, "Forwarding"):
a relay run inside the sandbox, as its user, one per forwarded connection, its stdin and stdout the SSH channel's
two directions.

Why a relay: the runtime runs in the host's network namespace, so it cannot connect to the sandbox's 127.0.0.1 (nor
open a socket file in the sandbox's filesystem); entering the sandbox's namespaces would need privileges the runtime
does not have (CAP_SYS_ADMIN and the host's PID namespace). A Docker exec is what it already does for every command:
the relay runs where a login's own command runs, as the same user, and reaches nothing that command could not. Its
destination is fixed by the runtime (the sandbox's 127.0.0.1 or ::1 and the port asked, or the socket path asked),
given as arguments, never as text of the script.

The relay is RELAY below, run by `sh`: the first of python3 or perl in the sandbox's PATH (perl-base is in every
Debian and Ubuntu image), else, for TCP, bash's /dev/tcp with cat (an image VS Code's server runs in has both). It
says on stderr whether it connected (`sandstack-relay: connected <program>`, or `sandstack-relay: failed: <why>`)
before a byte is relayed, so a destination where nothing listens is the client's "open failed" and not a channel
that opens and closes at once.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import TYPE_CHECKING, Any

import asyncssh

from sandstack.runtime.backend import STDIN_TIMEOUT, BackendError, ExecHandle, StdinClosed
from sandstack.runtime.output_window import OutputWindow
from sandstack.runtime.processes import Command, Process

if TYPE_CHECKING:
    from sandstack.runtime.ssh_server import Endpoint
    from sandstack.runtime.store import SandboxRow

INBOUND_WINDOW = 1024 * 1024  # bytes from the client not yet taken by the relay's stdin: past it, the channel waits
STATUS_WAIT = 20  # seconds the relay has to say whether it connected (its exec's start and its interpreter's)
OPEN_WAIT = 30  # seconds from a relay's connection to its channel's opening, past which it is ended
PREFIX = b"sandstack-relay: "
SOCKET_PATH_MAX = 107  # a Unix socket's path, as sockaddr_un holds it (108 bytes with its NUL)

# $1 tcp|unix, $2 the address or the path, $3 the port, $4.. the programs below.
SELECT = r"""
if command -v python3 >/dev/null 2>&1; then exec python3 -c "$4" "$1" "$2" "$3"; fi
if command -v perl >/dev/null 2>&1; then exec perl -e "$5" "$1" "$2" "$3"; fi
if [ "$1" = tcp ] && command -v bash >/dev/null 2>&1 && command -v cat >/dev/null 2>&1; then
    exec bash -c "$6" bash "$2" "$3"
fi
if [ "$1" = tcp ]; then need="python3, perl or bash (with cat)"; else need="python3 or perl"; fi
echo "sandstack-relay: failed: none of $need is in the sandbox's PATH: the relay to its loopback or a socket in it needs one (a template installs it in its image)" >&2
exit 127
"""

PYTHON = r"""
import os, socket, sys, threading
kind, where, port = sys.argv[1:4]
try:
    if kind == "unix":
        s = socket.socket(socket.AF_UNIX)
        s.connect(where)
    else:
        s = socket.create_connection((where, int(port)))
except OSError as e:
    sys.stderr.write("sandstack-relay: failed: %s\n" % (e.strerror or e))
    sys.exit(1)
sys.stderr.write("sandstack-relay: connected python3\n")
sys.stderr.flush()
def up():
    try:
        while True:
            d = os.read(0, 65536)
            if not d:
                break
            s.sendall(d)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
threading.Thread(target=up, daemon=True).start()
try:
    while True:
        d = s.recv(65536)
        if not d:
            break
        while d:
            d = d[os.write(1, d):]
except OSError:
    pass
"""

PERL = r"""
use strict; use Socket; use IO::Socket::IP; use IO::Socket::UNIX;
my ($kind, $where, $port) = @ARGV;
my $s = $kind eq "unix" ? IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => $where)
                        : IO::Socket::IP->new(PeerHost => $where, PeerPort => $port, Proto => "tcp");
unless ($s) { print STDERR "sandstack-relay: failed: $!\n"; exit 1; }
print STDERR "sandstack-relay: connected perl\n";
sub copy { my ($from, $to) = @_; my $b;
    while (sysread($from, $b, 65536)) { my $o = 0;
        while ($o < length $b) { my $w = syswrite($to, $b, length($b) - $o, $o); return unless defined $w; $o += $w; } } }
my $pid = fork();
if (defined $pid && $pid == 0) { copy(\*STDIN, $s); shutdown($s, 1); exit 0; }
copy($s, \*STDOUT);
kill "TERM", $pid if $pid;
exit 0;
"""

# No half-close in bash: the client's EOF ends the writer, the server sees its end when the channel closes.
BASH = r"""
{ exec 3<>"/dev/tcp/$1/$2"; } 2>/dev/null || { echo "sandstack-relay: failed: Connection refused" >&2; exit 1; }
echo "sandstack-relay: connected bash" >&2
cat <&0 >&3 &
cat <&3
kill $! 2>/dev/null
exit 0
"""


def argv(kind: str, where: str, port: int) -> list[str]:
    """The relay's command: `kind` tcp (`where` an address of the sandbox's loopback) or unix (`where` a path)."""
    return ["sh", "-c", SELECT, "sandstack-relay", kind, where, str(port), PYTHON, PERL, BASH]


class RelayFailed(Exception):
    """The relay did not connect: why (its own line, or how its exec ended)."""


class _Status:
    """The relay's stderr: its first `sandstack-relay: ` line (the rest of stderr, and what follows, is dropped)."""

    def __init__(self) -> None:
        self.seen = bytearray()
        self.line: str | None = None
        self.said = threading.Event()

    def write(self, data: bytes) -> int:
        if self.line is None and len(self.seen) < 4096:
            self.seen += data
            for raw in bytes(self.seen).splitlines(keepends=True):
                if raw.startswith(PREFIX) and raw.endswith(b"\n"):
                    self.line = raw[len(PREFIX):].decode(errors="replace").strip()
                    self.said.set()
                    break
        return len(data)

    def wait(self, handle: ExecHandle) -> str:
        """The relay's word (`connected <program>`), or RelayFailed: its own reason, or how its exec ended."""
        deadline = time.monotonic() + STATUS_WAIT
        while not self.said.wait(0.02):
            if handle.wait(0):
                self.said.wait(1)  # its last line, still on its way from the reader thread
                break
            if time.monotonic() > deadline:
                raise RelayFailed(f"the relay did not connect within {STATUS_WAIT}s")
        if self.line is None:
            tail = bytes(self.seen).decode(errors="replace").strip()[-300:]
            raise RelayFailed(f"the relay did not start (exit {handle.exit_code}){': ' + tail if tail else ''}")
        if not self.line.startswith("connected "):
            raise RelayFailed(self.line.removeprefix("failed: "))
        return self.line.removeprefix("connected ")


def send_all(handle: ExecHandle, data: bytes) -> None:
    """All of `data` to the exec's stdin, however long it takes the process to read it (the channel's flow control
    bounds what waits); StdinClosed once the process has ended or closed its stdin."""
    view, sent = memoryview(data), 0
    while sent < len(data):
        sent += handle.write(view[sent:], STDIN_TIMEOUT)
        if sent < len(data) and handle.wait(0):
            raise StdinClosed("the process has ended")


class _ChannelWriter:
    """A channel as OutputWindow.pump writes to it: `drain` waits while asyncssh says the client's window is full."""

    def __init__(self, chan: asyncssh.SSHChannel[bytes]):
        self.chan = chan
        self.ready = asyncio.Event()
        self.ready.set()

    def write(self, data: bytes) -> None:
        self.chan.write(data)

    async def drain(self) -> None:
        await self.ready.wait()


class Relay(asyncssh.SSHTCPSession, asyncssh.SSHUNIXSession):  # type: ignore[misc]
    """One forwarded connection (a `direct-tcpip` or `direct-streamlocal` channel) relayed by its exec."""

    def __init__(self, endpoint: Endpoint, proc: Process, out: OutputWindow, program: str):
        self.endpoint, self.proc, self.out, self.program = endpoint, proc, out, program
        assert proc.handle is not None
        self.handle: ExecHandle = proc.handle
        self.chan: Any = None
        self.writer: _ChannelWriter | None = None
        self.stdin: queue.Queue[bytes | None] = queue.Queue()  # to the relay's stdin, by a thread of its own
        self.queued, self.paused, self.closing = 0, False, False
        self.gone = asyncio.Event()  # the client closed the channel (or the connection)
        self.task: asyncio.Future[None] | None = None
        self.unopened: asyncio.TimerHandle | None = None

    @classmethod
    async def start(cls, endpoint: Endpoint, row: SandboxRow, kind: str, where: str, port: int) -> Relay:
        """The relay's exec in `row`'s sandbox, once it connected; RelayFailed (its exec ended), or the spawn's
        ApiError / BackendError (the sandbox's running processes at their bound, the sandbox gone)."""
        runtime = endpoint.runtime
        out, status = OutputWindow(asyncio.get_running_loop(), "the SSH client"), _Status()
        root = runtime.sandboxes.pool(row.pool).workspace_root
        # Counted among the sandbox's running processes while it runs, as an SSH command is; no secrets: a relay
        # needs none.
        proc = await endpoint.call(partial_spawn(runtime, row.name, Command(argv(kind, where, port), root, {}), out,
                                                 status))
        try:
            program = await endpoint.call(status.wait, proc.handle)
        except BaseException:
            out.close()
            await endpoint.call(runtime.processes.close, proc)
            raise
        relay = cls(endpoint, proc, out, program)
        # asyncssh drops a session whose connection closed meanwhile without a callback: then the relay is ended.
        relay.unopened = asyncio.get_running_loop().call_later(OPEN_WAIT, relay._never_opened)
        return relay

    # asyncssh's session callbacks (on the endpoint's event loop)

    def connection_made(self, chan: Any) -> None:
        if self.unopened is not None:
            self.unopened.cancel()
        self.chan = chan
        self.writer = _ChannelWriter(chan)
        threading.Thread(target=self._feed, daemon=True, name="sandstack-ssh-relay").start()
        self.task = asyncio.ensure_future(self._run())

    def pause_writing(self) -> None:
        if self.writer is not None:
            self.writer.ready.clear()

    def resume_writing(self) -> None:
        if self.writer is not None:
            self.writer.ready.set()

    def data_received(self, data: bytes, datatype: Any) -> None:
        self.queued += len(data)
        self.stdin.put(data)
        if self.queued > INBOUND_WINDOW and not self.paused:
            self.paused = True
            self.chan.pause_reading()

    def eof_received(self) -> bool:
        self.stdin.put(None)
        return True  # half-closed: what the destination still sends reaches the client

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone.set()
        self.out.close()
        self.stdin.put(None)
        if self.task is None:
            asyncio.ensure_future(self._end())

    def _never_opened(self) -> None:
        self.out.close()
        asyncio.ensure_future(self._end())

    # The relay's two directions

    async def _run(self) -> None:
        assert self.writer is not None
        pump = asyncio.ensure_future(self.out.pump(self.writer))
        gone = asyncio.ensure_future(self.gone.wait())
        ended = when_ended(self.handle)
        try:
            await asyncio.wait([ended, gone], return_when=asyncio.FIRST_COMPLETED)
            if self.gone.is_set():
                return  # the client closed the channel: the relay is ended below
            self.out.end()
            await asyncio.wait([pump], timeout=5)  # what it relayed before it ended, sent
            if not self.gone.is_set():
                self.chan.write_eof()
                self.chan.close()
        finally:
            gone.cancel()
            pump.cancel()
            self.out.close()
            await self._end()

    def _feed(self) -> None:
        """The client's bytes to the relay's stdin, in order, however long the relay takes to read them (a thread of
        its own: a destination that does not read holds no thread of the endpoint's executor)."""
        loop = self.out.loop
        while (data := self.stdin.get()) is not None:
            try:
                loop.call_soon_threadsafe(self._taken, len(data))
                send_all(self.handle, data)
            except BackendError:
                return  # the relay ended (its destination closed): its exit closes the channel
            except RuntimeError:
                return  # the endpoint's loop is closed: the runtime is stopping
        try:
            self.handle.close_stdin()
        except BackendError:
            pass

    def _taken(self, size: int) -> None:
        self.queued -= size
        if self.paused and self.queued <= INBOUND_WINDOW // 2 and not self.gone.is_set():
            self.paused = False
            self.chan.resume_reading()

    async def _end(self) -> None:
        if self.closing:
            return
        self.closing = True
        await self.endpoint.call(self.endpoint.runtime.processes.close, self.proc)


def when_ended(handle: ExecHandle) -> asyncio.Future[None]:
    """A future of the running loop, done once the exec has ended: waited for by a thread of its own, so an open
    channel holds no thread of the endpoint's executor (whose few threads serve every login and channel)."""
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def wait() -> None:
        handle.wait(None)
        try:
            loop.call_soon_threadsafe(lambda: ended.done() or ended.set_result(None))
        except RuntimeError:
            pass  # the endpoint's loop is closed: nobody waits any more

    threading.Thread(target=wait, daemon=True, name="sandstack-ssh-exec").start()
    return ended


def partial_spawn(runtime: Any, name: str, command: Command, out: OutputWindow, status: _Status) -> Any:
    def spawn() -> Process:
        return runtime.processes.spawn(name, command, limit=1, stdin=True, tty=False, keep=False, counted=True,
                                       sink=out, err_sink=status)
    return spawn
