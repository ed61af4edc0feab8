"""One connection of the runtime's SSH endpoint (sandstack.runtime.ssh; docs/design/ssh.md): the login it proves, why
one is refused, and the asyncssh server object of each connection, which hands its forward requests and its bound
per source address to sandstack.runtime.forwarding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

import asyncssh

from sandstack.runtime.errors import ApiError
from sandstack.runtime.session_keys import shown
from sandstack.runtime.session_tokens import scope_name
from sandstack.runtime.ssh_keys import normal

if TYPE_CHECKING:
    from sandstack.runtime.service import Runtime
    from sandstack.runtime.store import SandboxRow


class Refused(Exception):
    """Why a login or a channel is refused: what the audit line says (never a token)."""


@dataclass(frozen=True)
class Login:
    """An accepted login: the binding it opens, and how it proved it (kept in memory for the connection's life, so
    each new channel checks again that it still stands)."""

    session: str  # the session's key (sandstack.runtime.session_keys)
    sandbox: str
    bound_at: float | None
    method: str  # 'password' (the session's token) or 'publickey <fingerprint>'
    token: str | None = None
    key: str | None = None

    @property
    def scope(self) -> str:
        return scope_name(self.session)


class SourceBound:
    """Open SSH connections per source address (on the endpoint's event loop only: no lock)."""

    def __init__(self) -> None:
        self.open: dict[str, int] = {}

    def admit(self, source: str, bound: int) -> bool:
        if self.open.get(source, 0) >= bound:
            return False
        self.open[source] = self.open.get(source, 0) + 1
        return True

    def leave(self, source: str) -> None:
        left = self.open.get(source, 0) - 1
        if left > 0:
            self.open[source] = left
        else:
            self.open.pop(source, None)


class ForwardRequests(Protocol):
    """What a connection hands its bound and its forward requests to (sandstack.runtime.forwarding.Forwards)."""

    def admit(self, peer: str) -> bool: ...
    def local(self, conn: Any, peer: str, host: str, port: int) -> Any: ...
    def unix(self, conn: Any, peer: str, path: str) -> Any: ...
    def remote_refused(self, conn: Any, peer: str, where: str) -> None: ...


class Endpoint(Protocol):
    """What a connection and its forwards use of the endpoint (sandstack.runtime.ssh.SshEndpoint)."""

    runtime: Runtime
    sources: SourceBound
    forwards: ForwardRequests

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any: ...
    def by_token(self, username: str, token: str) -> Login: ...
    def by_key(self, username: str, key: str) -> Login: ...
    def still(self, login: Login) -> SandboxRow: ...
    def login_of(self, conn: Any) -> Login: ...
    def logged_in(self, conn: Any, login: Login) -> None: ...
    def forget(self, conn: Any) -> Login | None: ...
    def record(self, who: str, operation: str, outcome: str, status: int, *, session: str | None,
               sandbox: str | None, scope: str | None) -> None: ...


class SshConnection(asyncssh.SSHServer):
    """One connection: its place among its source address's (closed before its login past the bound), its login
    (password or public key) audited once, success or refusal, and its forward requests (sandstack.runtime.
    forwarding)."""

    def __init__(self, endpoint: Endpoint):
        self.endpoint, self.conn, self.peer = endpoint, None, "-"
        self.tried: list[str] = []  # why each attempt was refused, in order
        self.pending: Login | None = None  # a key accepted before its signature is checked
        self.username: str | None = None
        self.done = False
        self.admitted = False  # counted among its source's open connections

    def connection_made(self, conn: Any) -> None:
        self.conn, self.peer = conn, peer_of(conn)
        if not self.endpoint.forwards.admit(self.peer):
            conn.abort()  # before the version exchange: nothing of the protocol is spoken to it
            return
        self.admitted = True

    def connection_lost(self, exc: Exception | None) -> None:
        if self.admitted:
            self.admitted = False
            self.endpoint.sources.leave(self.peer)
        login = self.endpoint.forget(self.conn)
        if login is None and self.username is not None and not self.done:
            self._refused()

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int) -> Any:
        """A local forward (`ssh -L`, a `direct-tcpip` channel): checked and opened by sandstack.runtime.forwarding;
        refused (and audited) unless it reaches this login's own sandbox and the host allows it."""
        return self.endpoint.forwards.local(self.conn, self.peer, dest_host, dest_port)

    def unix_connection_requested(self, dest_path: str) -> Any:
        """A local forward to a Unix socket (`ssh -L PORT:/path`, a `direct-streamlocal@openssh.com` channel): a
        socket in this login's own sandbox, where the host allows forwarding (sandstack.runtime.forwarding)."""
        return self.endpoint.forwards.unix(self.conn, self.peer, dest_path)

    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        """A remote forward (`ssh -R`): never offered; audited."""
        self.endpoint.forwards.remote_refused(self.conn, self.peer, f"{listen_host}:{listen_port}")
        return False

    def unix_server_requested(self, listen_path: str) -> bool:
        """A remote forward of a socket (`ssh -R /path:...`): never offered; audited."""
        self.endpoint.forwards.remote_refused(self.conn, self.peer, f"socket {listen_path}")
        return False

    def begin_auth(self, username: str) -> bool:
        self.username = username
        return True  # every login is checked

    def password_auth_supported(self) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    async def validate_password(self, username: str, password: str) -> bool:
        try:
            login = await self.endpoint.call(self.endpoint.by_token, username, password)
        except Refused as why:
            self.tried.append(str(why))
            return False
        self.pending = login
        return True

    async def validate_public_key(self, username: str, key: Any) -> bool:
        try:
            line = normal(key.export_public_key("openssh").decode())
            login = await self.endpoint.call(self.endpoint.by_key, username, line)
        except (Refused, ApiError) as why:
            text = str(why) if isinstance(why, Refused) else why.message
            if text not in self.tried:  # asyncssh asks once unsigned, once signed
                self.tried.append(text)
            return False
        self.pending = login
        return True

    def auth_completed(self) -> None:
        login = self.pending
        assert login is not None and self.conn is not None
        self.done = True
        self.endpoint.logged_in(self.conn, login)
        self.endpoint.record(self.peer, "ssh_login", f"accepted ({login.method})", 200, session=shown(login.session),
                             sandbox=login.sandbox, scope=login.scope)

    def _refused(self) -> None:
        self.done = True
        why = "; ".join(self.tried) or "no credential offered"
        # The user name as given is what the client claimed to be; no credential is ever in the line.
        self.endpoint.record(self.peer, "ssh_login", f"refused: {why}", 401, session=(self.username or "")[:128],
                             sandbox=None, scope=None)


def peer_of(conn: Any) -> str:
    peer = conn.get_extra_info("peername") if conn is not None else None
    return str(peer[0]) if peer else "-"

