"""Local forwarding into a session's own sandbox, and the bound on SSH connections per source address
(docs/design/ssh.md, "Forwarding" and "Connections per source").

A local forward (`ssh -L`, `ssh -D`, editors' remote SSH) names a destination: a host and port (a `direct-tcpip`
channel) or a Unix socket's path (`direct-streamlocal@openssh.com`). The runtime runs in the host's network namespace,
so honouring the name as asked would connect from the host: to its loopback, the gateway, another sandbox. Instead
the only destination is the login's own sandbox: its address on its pool's network (Docker's, asked at each request),
connected from here; its loopback (`localhost`, `127.0.0.1`, `::1`: the session's own machine as the client sees it,
where VS Code's server listens) and a socket path in it, reached by a relay run inside the sandbox as its user
(sandstack.runtime.ssh_relay). Any other name or address is refused without a lookup or a connection. The host must
declare `runtime.ssh.forwarding: local` (read at each request from the configuration in force). Each request is
checked as a new channel is (the login's proof still stands) and resumes a hibernated or idle-paused sandbox as any
use does. Every request is one audit line, `operation: ssh_forward`: accepted (200, where it reached) or refused
(403; 502 when nothing answered there), with the reason. A remote forward (`ssh -R`, of a port or a socket) is
refused and audited: nothing listens on the host for a session.

Connections per source: a connection from an address that holds `runtime.ssh.max_connections_per_source` open
connections already is aborted as it is accepted, before the protocol's version exchange (so before any login), and
audited (`ssh_connection`, 429). Everything here runs on the endpoint's event loop, one thread: no lock.
"""

from __future__ import annotations

from typing import Any, NoReturn

import asyncssh

from sandstack.runtime.backend import BackendError
from sandstack.runtime.errors import ApiError
from sandstack.runtime.session_keys import shown
from sandstack.runtime.ssh_relay import SOCKET_PATH_MAX, Relay, RelayFailed
from sandstack.runtime.ssh_server import Endpoint, Login, Refused

# What a client names the sandbox's own machine by (VS Code's server asks for 127.0.0.1): its loopback, relayed.
LOOPBACK = {"localhost": "127.0.0.1", "127.0.0.1": "127.0.0.1", "::1": "::1"}


class Forwards:
    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint

    def admit(self, peer: str) -> bool:
        """A new connection from `peer`, counted; False (and audited) past the declared bound."""
        bound = self.endpoint.runtime.config.ssh_per_source
        if self.endpoint.sources.admit(peer, bound):
            return True
        self.endpoint.record(peer, "ssh_connection", f"refused: {bound} connections from {peer} are open, its "
                             f"bound (runtime.ssh.max_connections_per_source {bound}); closed before its login", 429,
                             session=None, sandbox=None, scope=None)
        return False

    def local(self, conn: Any, peer: str, host: str, port: int) -> Any:
        """asyncssh's answer to a `direct-tcpip` request: an awaitable session, which raises ChannelOpenError (the
        client's 'open failed') when refused."""
        return self._local(conn, peer, host, port)

    async def _local(self, conn: Any, peer: str, host: str, port: int) -> Any:
        login = self.endpoint.login_of(conn)
        asked = f"{host}:{port}"
        row, address = await self._sandbox(peer, login, asked)
        loopback = LOOPBACK.get(host.lower())
        if loopback is not None:
            if not 0 < port < 65536:
                self._refuse(peer, login, asked, f"port {port} is not a TCP port (1-65535)")
            return await self._relay(peer, login, row, asked, "tcp", loopback, port,
                                     f"{loopback}:{port} in the sandbox")
        if host != address:
            self._refuse(peer, login, asked, f"{asked} is not this session's sandbox: a forward reaches only its "
                         f"own ports, at {address} (or localhost, which names it)")
        try:
            session = await conn.forward_connection(address, port)
        except asyncssh.ChannelOpenError as error:
            self._refuse(peer, login, asked, f"nothing answered at {address}:{port} ({error.reason})", 502)
        self.endpoint.record(peer, "ssh_forward", f"accepted: {asked} -> {address}:{port}", 200,
                             session=shown(login.session), sandbox=login.sandbox, scope=login.scope)
        return session

    def unix(self, conn: Any, peer: str, path: str) -> Any:
        """asyncssh's answer to a `direct-streamlocal@openssh.com` request (`ssh -L PORT:/path`, VS Code's
        `remote.SSH.remoteServerListenOnSocket`): a socket in the session's own sandbox, through the relay."""
        return self._unix(conn, peer, path)

    async def _unix(self, conn: Any, peer: str, path: str) -> Any:
        login = self.endpoint.login_of(conn)
        asked = f"socket {path}"
        row, _ = await self._sandbox(peer, login, asked)
        if not path.startswith("/") or "\0" in path or len(path.encode()) > SOCKET_PATH_MAX:
            self._refuse(peer, login, asked, f"a socket is named by its absolute path in the sandbox, at most "
                         f"{SOCKET_PATH_MAX} bytes")
        return await self._relay(peer, login, row, asked, "unix", path, 0, f"{path} in the sandbox")

    async def _sandbox(self, peer: str, login: Login, asked: str) -> tuple[Any, str]:
        """The login's sandbox, running, and its address on its pool's network; refused (audited) otherwise."""
        endpoint = self.endpoint
        if not endpoint.runtime.config.ssh_forwarding:
            self._refuse(peer, login, asked, f"forwarding is off on host {endpoint.runtime.host!r} "
                         "(runtime.ssh.forwarding: none)")
        try:
            row = await endpoint.call(endpoint.still, login)
            row = await endpoint.call(endpoint.runtime.access.usable, row.name)  # resumes a hibernated one
            address = await endpoint.call(endpoint.runtime.sandboxes.backend.address, row.name)
        except Refused as why:
            self._refuse(peer, login, asked, str(why))
        except ApiError as error:  # paused by the API (409), its resume failed (502)...
            self._refuse(peer, login, asked, error.message, error.status)
        except BackendError as error:
            self._refuse(peer, login, asked, str(error), 502)
        if address is None:
            self._refuse(peer, login, asked, f"sandbox {row.name!r} has no address on its pool's network", 502)
        return row, address

    async def _relay(self, peer: str, login: Login, row: Any, asked: str, kind: str, where: str, port: int,
                     shown_where: str) -> Relay:
        try:
            relay = await Relay.start(self.endpoint, row, kind, where, port)
        except RelayFailed as why:
            self._refuse(peer, login, asked, f"nothing answered at {shown_where} ({why})", 502)
        except ApiError as error:  # the sandbox runs its bound of processes (409)...
            self._refuse(peer, login, asked, error.message, error.status)
        except BackendError as error:
            self._refuse(peer, login, asked, str(error), 502)
        self.endpoint.record(peer, "ssh_forward", f"accepted: {asked} -> {shown_where} (relayed by {relay.program})",
                             200, session=shown(login.session), sandbox=login.sandbox, scope=login.scope)
        return relay

    def _refuse(self, peer: str, login: Login, asked: str, why: str, status: int = 403) -> NoReturn:
        self.endpoint.record(peer, "ssh_forward", f"refused: {asked}: {why}", status, session=shown(login.session),
                             sandbox=login.sandbox, scope=login.scope)
        code = asyncssh.OPEN_CONNECT_FAILED if status >= 500 else asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED
        raise asyncssh.ChannelOpenError(code, why)

    def remote_refused(self, conn: Any, peer: str, where: str) -> None:
        """`where`: `host:port`, or `socket <path>`."""
        login = self.endpoint.login_of(conn)
        self.endpoint.record(peer, "ssh_forward", f"refused: remote forward of {where}: remote forwarding "
                             "(ssh -R) is not offered", 403, session=shown(login.session), sandbox=login.sandbox,
                             scope=login.scope)
