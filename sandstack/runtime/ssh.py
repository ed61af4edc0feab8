"""SSH and SFTP into a session's sandbox (docs/design/ssh.md): an asyncssh server beside the HTTP API.

A login names the session as its user name and proves it with the session's token as its password, or with a public
key its claim registered (sandstack.runtime.ssh_keys). Either opens that session's binding alone: its sandbox, while
the session holds it (a released session's token and keys open nothing; there is no user name that reaches another
session). What a login then gets runs the way every command of the runtime does, as a Docker exec of the sandbox's
own user (sandstack.runtime.processes, with its marker, its session's run-scoped secrets and its kill): a shell on a
pseudo-terminal, a command (`ssh host cmd`, its exit status returned), and SFTP (sandstack.runtime.sftp: the
workspace, through the file operations' scripts). Nothing runs in the image but what the HTTP API runs: no daemon.

Forwarding (sandstack.runtime.forwarding): where the host declares `forwarding: local`, a login may forward local
ports (`ssh -L`, `ssh -D`) into its own sandbox — its address on the pool's network, its loopback and its sockets
(these two through a relay exec'd in it, sandstack.runtime.ssh_relay) — and nowhere else; remote forwards, the
agent and X11 are refused. A source address holds at most its declared number of connections. Every
login, accepted or refused, is one audit line with its scope (`session:<scope>/<id>`), its method and,
for a key, its fingerprint; never a token. Each shell, command and SFTP channel is audited as a terminal is (opened,
closed with its exit status), never its input or output.

The server runs on its own event loop in a thread of its own (`start`), so nothing of it waits on uvicorn's loop,
nor uvicorn's on it; the runtime's parts it calls block, so it calls them in that loop's executor — briefly: an open
channel waits for its exec on a thread of its own (ssh_relay.when_ended).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

import asyncssh

from sandstack.runtime.backend import BackendError
from sandstack.runtime.errors import ApiError
from sandstack.runtime.processes import Command, Process
from sandstack.runtime.session_keys import shown
from sandstack.runtime.forwarding import Forwards
from sandstack.runtime.sftp import SandboxSFTP
from sandstack.runtime.ssh_keys import fingerprint
from sandstack.runtime.output_window import OutputWindow
from sandstack.runtime.ssh_relay import send_all, when_ended
from sandstack.runtime.ssh_server import Login, Refused, SourceBound, SshConnection, peer_of
from sandstack.runtime.store import SandboxRow

if TYPE_CHECKING:
    from sandstack.runtime.audit import AuditLog
    from sandstack.runtime.service import Runtime

log = logging.getLogger("sandstack.runtime.ssh")
LOGIN_TIMEOUT = 30  # seconds a connection may take to log in
# A shell: bash, else sh, interactive on a terminal (the HTTP terminal's); without one, sh reads the client's stdin.
TTY_SHELL = ["sh", "-c", "command -v bash >/dev/null 2>&1 && exec bash -i; exec sh -i"]
PLAIN_SHELL = ["sh"]
TERM = "xterm-256color"


class SshEndpoint:
    def __init__(self, runtime: Runtime, audit: AuditLog | None, host_key: str, listen: list[str], port: int):
        """`audit`: None, no audit lines; `host_key`: the host key's OpenSSH or PEM private key text (a secret:
        never printed)."""
        self.runtime, self.audit, self.listen, self.port = runtime, audit, listen, port
        try:
            self.host_key = asyncssh.import_private_key(host_key)
        except (asyncssh.KeyImportError, ValueError) as error:
            # asyncssh's message names the format it could not read, never the key's bytes.
            raise ValueError(f"the SSH host key is not a private key asyncssh reads ({error})") from None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._acceptors: list[Any] = []
        self._logins: dict[Any, Login] = {}  # connection → its login
        self.sources = SourceBound()  # open connections per source address (on the event loop only)
        self.forwards = Forwards(self)
        runtime.sandboxes.on_session_end(self._session_ended)

    # Serving

    def start(self) -> None:
        """Listens in a thread of its own; returns once listening (OSError when a port cannot be bound)."""
        ready: Future[None] = Future()
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.serve())
            except BaseException as error:  # noqa: BLE001 - handed to the starting thread
                ready.set_exception(error)
                return
            ready.set_result(None)
            loop.run_forever()

        threading.Thread(target=run, daemon=True, name="sandstack-ssh").start()
        ready.result()

    async def serve(self) -> int:
        """Listens on each address on the event loop running now; the port (the one bound, when `port` is 0)."""
        self.loop = asyncio.get_running_loop()
        for address in self.listen:
            acceptor = await asyncssh.listen(
                address, self.port, server_factory=partial(SshConnection, self), server_host_keys=[self.host_key],
                process_factory=self._process, sftp_factory=partial(SandboxSFTP, self), encoding=None,
                line_editor=False, allow_pty=True, agent_forwarding=False, x11_forwarding=False,
                login_timeout=LOGIN_TIMEOUT, keepalive_interval=30, keepalive_count_max=4)
            self._acceptors.append(acceptor)
            # Its asyncio server's sockets (2.10's get_port() asks asyncio's Server for a method it lacks).
            self.port = acceptor.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        for acceptor in self._acceptors:
            acceptor.close()
            await acceptor.wait_closed()
        for conn in list(self._logins):
            conn.close()

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A blocking call of the runtime's parts, off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, partial(fn, *args))

    # Logins

    def by_token(self, username: str, token: str) -> Login:
        scope = self.runtime.session_tokens.scope(token)
        if scope is None:
            raise Refused("password: not a live session token")
        if shown(scope.session) != username:
            raise Refused(f"password: a session token of another session than {username!r}")
        row = self._holding(scope.session, scope.sandbox, scope.bound_at)
        return Login(scope.session, row.name, row.bound_at, "password", token=token)

    def by_key(self, username: str, key: str) -> Login:
        holders = self.runtime.ssh_keys.holders(username, key)
        live = []
        for held in holders:
            try:
                live.append((held, self._holding(held.session, held.sandbox, held.bound_at)))
            except Refused:
                continue
        shown_key = fingerprint(key)
        if not live:
            raise Refused(f"publickey {shown_key}: not registered by a claim of session {username!r} that is live")
        if len(live) > 1:  # one id in several scopes, each with this key: which one is not the key's to say
            raise Refused(f"publickey {shown_key}: registered by {len(live)} sessions {username!r} (several token "
                          "scopes); log in with the session's token")
        held, row = live[0]
        return Login(held.session, row.name, row.bound_at, f"publickey {shown_key}", key=key)

    def _holding(self, session: str | None, sandbox: str | None, bound_at: float | None) -> SandboxRow:
        row = self.runtime.store.by_session(session) if session else None
        if row is None or (row.name, row.bound_at) != (sandbox, bound_at):
            raise Refused(f"session {shown(session)!r} has no live binding (released, or its sandbox was reset)")
        return row

    def still(self, login: Login) -> SandboxRow:
        """The login's sandbox, if what proved it still stands (a new channel's check); else Refused."""
        if login.token is not None:
            scope = self.runtime.session_tokens.scope(login.token)
            if scope is None or scope.session != login.session or scope.bound_at != login.bound_at:
                raise Refused("the session's token has ended (released, or past its lifetime)")
        elif login.key is None or not any(h.session == login.session and h.bound_at == login.bound_at
                                          for h in self.runtime.ssh_keys.holders(shown(login.session), login.key)):
            raise Refused("the key is no longer registered for this session")
        return self._holding(login.session, login.sandbox, login.bound_at)

    def record(self, who: str, operation: str, outcome: str, status: int, *, session: str | None,
               sandbox: str | None, scope: str | None) -> None:
        if self.audit is not None:
            self.audit.record(who=who, operation=operation, outcome=outcome, status=status, session=session,
                              sandbox=sandbox, scope=scope)

    def login_of(self, conn: Any) -> Login:
        return self._logins[conn]

    def logged_in(self, conn: Any, login: Login) -> None:
        self._logins[conn] = login

    def forget(self, conn: Any) -> Login | None:
        """The connection closed: its login, if it had one."""
        return self._logins.pop(conn, None)

    def _session_ended(self, sandbox: str) -> None:
        """A session on `sandbox` ended: its SSH connections close (called from any thread)."""
        loop = self.loop
        for conn, login in list(self._logins.items()):
            if login.sandbox == sandbox and loop is not None:
                loop.call_soon_threadsafe(conn.close)

    # Shells and commands

    async def _process(self, process: Any) -> None:
        conn = process.channel.get_connection()
        login = self._logins.get(conn)
        peer = peer_of(conn)
        if login is None:  # asyncssh opens no session before a login; kept as a refusal all the same
            process.exit(255)
            return
        command, tty = process.command, process.get_terminal_type() is not None
        if process.subsystem is not None:
            await self._refuse(process, login, peer, f"subsystem {process.subsystem!r} is not offered (only sftp)")
            return
        operation = "ssh_exec" if command is not None else "ssh_shell"
        try:
            row = await self.call(self.still, login)
        except Refused as why:
            await self._refuse(process, login, peer, str(why))
            return
        out, err = OutputWindow(self.loop, "the SSH client"), OutputWindow(self.loop, "the SSH client")
        argv = ["sh", "-c", command] if command is not None else TTY_SHELL if tty else PLAIN_SHELL
        try:
            proc = await self.call(self._spawn, row, argv, tty, out, err)
            if tty:
                width, height = process.get_terminal_size()[:2]
                await self.call(proc.handle.resize, height or 24, width or 80)
        except (ApiError, BackendError) as error:
            message = error.message if isinstance(error, ApiError) else str(error)
            await self._refuse(process, login, peer, message, operation, getattr(error, "status", 502))
            return
        self.record(peer, operation, "opened", 101, session=shown(login.session), sandbox=row.name,
                    scope=login.scope)
        code: int | None = None
        pumps = [asyncio.ensure_future(out.pump(process.stdout)),
                 asyncio.ensure_future(err.pump(process.stderr))]
        feeding = asyncio.ensure_future(self._feed(process, proc, tty))
        try:
            await when_ended(proc.handle)  # a thread of its own: an open channel holds none of the executor's
            code = proc.handle.exit_code
            out.end()
            err.end()
            await asyncio.wait(pumps, timeout=5)  # what it wrote before it ended, sent
        finally:
            feeding.cancel()
            out.close()
            err.close()
            for pump in pumps:
                pump.cancel()
            await self.call(self.runtime.processes.close, proc)
            self.record(peer, operation, f"closed (exit {code})" if code is not None else "closed by the client",
                        200, session=shown(login.session), sandbox=row.name, scope=login.scope)
        process.exit(code if code is not None else 255)

    def _spawn(self, row: SandboxRow, argv: list[str], tty: bool, out: OutputWindow, err: OutputWindow) -> Process:
        runtime = self.runtime
        root = runtime.sandboxes.pool(row.pool).workspace_root
        env = {**runtime.credentials.env(row.name, row.session), **({"TERM": TERM} if tty else {})}
        # Counted among the sandbox's processes while it runs (processes.MAX_RUNNING), as a terminal is.
        return runtime.processes.spawn(row.name, Command(argv, root, env), limit=1, stdin=True, tty=tty, keep=False,
                                       counted=True, sink=out, err_sink=err)

    async def _feed(self, process: Any, proc: Process, tty: bool) -> None:
        """The client's bytes to the command's stdin; a window change to its terminal; EOF closes its stdin."""
        assert proc.handle is not None
        while True:
            try:
                data = await process.stdin.read(65536)
            except asyncssh.TerminalSizeChanged as change:
                await self.call(proc.handle.resize, change.height or 24, change.width or 80)
                continue
            except (asyncssh.BreakReceived, asyncssh.SignalReceived):
                continue
            except (asyncssh.DisconnectError, ConnectionError, BrokenPipeError):
                return
            try:
                if not data:
                    await self.call(proc.handle.close_stdin)
                    return
                await self.call(send_all, proc.handle, data)  # all of it, however long it takes to read
            except BackendError:
                return  # the command ended (or stopped reading): its exit says the rest

    async def _refuse(self, process: Any, login: Login, peer: str, why: str, operation: str = "ssh_channel",
                      status: int = 403) -> None:
        self.record(peer, operation, f"refused: {why}", status, session=shown(login.session), sandbox=login.sandbox,
                    scope=login.scope)
        process.stderr.write(f"sandstack: {why}\r\n".encode())
        process.exit(1)
