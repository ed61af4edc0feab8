"""Local port forwarding into a session's own sandbox and the bound on SSH connections per source (sandstack.runtime.
forwarding; docs/design/ssh.md), asyncssh's client against the runtime's endpoint over the fake backend.

The fake sandboxes' addresses are loopback addresses of this machine (127.0.0.3, 127.0.0.4), where the tests listen:
a forward that reached the sandbox gets its server's answer; one that reached the host's 127.0.0.1 would get another.
"""

from __future__ import annotations

import asyncio
import shutil
import socketserver
import threading
from dataclasses import replace

import asyncssh
import pytest

from sandstack.runtime.ssh import SshEndpoint
from tests.runtime.test_ssh import HOST_KEY, audit_lines, connect, run

MINE, OTHER = "127.0.0.3", "127.0.0.4"


def allow(env, **settings) -> None:
    """The configuration in force with SSH `settings` (as a reload gives it: read at each request)."""
    env.runtime.reconfigure(replace(env.runtime.config, **settings), None)


async def answering(host: str, port: int, words: bytes, seen: list[str]) -> asyncio.AbstractServer:
    async def answer(reader, writer):
        seen.append(host)
        writer.write(words)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, host, port)


def claim_at(env, session: str, address: str) -> tuple[str, str]:
    answer = env.claim(session)
    env.backend.addresses[answer["sandbox"]] = address
    return answer["sandbox"], answer["token"]


def forwards(env) -> list[tuple[str, int]]:
    return [(line["outcome"], line["status"]) for line in audit_lines(env, "ssh_forward")]


def relays(env, sandbox: str) -> list[list[str]]:
    """The relays the fake backend ran in `sandbox` (its execs are processes of this machine): their arguments."""
    return [proc.args[proc.args.index("sandstack-relay") + 1:] for proc in env.backend.procs[sandbox]
            if "sandstack-relay" in proc.args]


def test_a_forward_reaches_the_sandbox_s_address_directly_and_its_loopback_through_a_relay_run_in_it(env):
    """The fake sandbox's address is 127.0.0.3 (connected from the runtime); its loopback is this machine's (the
    fake's execs run here), reached only through the relay exec'd in the session's sandbox."""
    allow(env, ssh_forwarding=True)
    sandbox, token = claim_at(env, "fwd-1", MINE)
    seen: list[str] = []

    async def test(port):
        servers = [await answering(MINE, 0, b"sandbox address", seen)]
        target = servers[0].sockets[0].getsockname()[1]
        servers.append(await answering("127.0.0.1", target, b"sandbox loopback", seen))
        try:
            got = []
            async with connect(port, "fwd-1", password=token) as conn:
                for host in (MINE, "localhost", "127.0.0.1"):
                    reader, writer = await conn.open_connection(host, target)
                    got.append(await reader.read())
                    writer.close()
            return target, got
        finally:
            for server in servers:
                server.close()

    target, got = run(env, test)
    assert got == [b"sandbox address", b"sandbox loopback", b"sandbox loopback"]
    assert seen == [MINE, "127.0.0.1", "127.0.0.1"]
    assert forwards(env) == [
        (f"accepted: {MINE}:{target} -> {MINE}:{target}", 200),
        (f"accepted: localhost:{target} -> 127.0.0.1:{target} in the sandbox (relayed by python3)", 200),
        (f"accepted: 127.0.0.1:{target} -> 127.0.0.1:{target} in the sandbox (relayed by python3)", 200)]
    assert {(line["session"], line["sandbox"], line["scope"]) for line in audit_lines(env, "ssh_forward")} == {
        ("fwd-1", sandbox, "session:host/fwd-1")}
    assert [args[:3] for args in relays(env, sandbox)] == [["tcp", "127.0.0.1", str(target)]] * 2


@pytest.mark.parametrize("where", ["another sandbox", "the gateway", "a name"])
def test_a_forward_to_any_other_address_is_refused_audited_and_connects_nothing(env, where):
    allow(env, ssh_forwarding=True)
    _, token = claim_at(env, "fwd-a", MINE)
    claim_at(env, "fwd-b", OTHER)
    seen: list[str] = []

    async def test(port):
        server = await answering(OTHER, 0, b"other sandbox", seen)
        target = server.sockets[0].getsockname()[1]
        host = {"another sandbox": OTHER, "the gateway": "10.213.0.1", "a name": "example.com"}[where]
        try:
            async with connect(port, "fwd-a", password=token) as conn:
                with pytest.raises(asyncssh.ChannelOpenError) as refused:
                    await conn.open_connection(host, target)
            return host, target, refused.value
        finally:
            server.close()

    host, target, refused = run(env, test)
    why = (f"{host}:{target} is not this session's sandbox: a forward reaches only its own ports, at {MINE} (or "
           "localhost, which names it)")
    assert (refused.code, refused.reason) == (asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, why)
    assert seen == []
    assert forwards(env) == [(f"refused: {host}:{target}: {why}", 403)]


def test_forwarding_is_off_unless_declared_and_a_remote_forward_is_always_refused(env):
    _, token = claim_at(env, "fwd-off", MINE)

    async def test(port):
        async with connect(port, "fwd-off", password=token) as conn:
            with pytest.raises(asyncssh.ChannelOpenError) as off:
                await conn.open_connection(MINE, 8080)
            allow(env, ssh_forwarding=True)  # a reload: the next request reads it
            with pytest.raises(asyncssh.ChannelListenError):
                await conn.start_server(lambda *a: None, "127.0.0.1", 0)  # `ssh -R`
            with pytest.raises(asyncssh.ChannelListenError):
                await conn.forward_remote_port("", 0, "localhost", 22)
        return off.value

    off = run(env, test)
    assert off.reason == "forwarding is off on host 'local' (runtime.ssh.forwarding: none)"
    assert forwards(env) == [
        (f"refused: {MINE}:8080: forwarding is off on host 'local' (runtime.ssh.forwarding: none)", 403),
        ("refused: remote forward of 127.0.0.1:0: remote forwarding (ssh -R) is not offered", 403),
        ("refused: remote forward of :0: remote forwarding (ssh -R) is not offered", 403)]


def test_a_connection_past_the_bound_per_source_is_closed_before_its_login(env):
    allow(env, ssh_per_source=2)
    token = env.claim("fwd-n")["token"]

    async def test(port):
        first = await connect(port, "fwd-n", password=token)
        second = await connect(port, "fwd-n", password=token)
        with pytest.raises((asyncssh.Error, OSError)):
            await asyncio.wait_for(connect(port, "fwd-n", password=token), 10)
        second.close()
        await second.wait_closed()
        await asyncio.sleep(0.2)  # the server sees the close
        async with connect(port, "fwd-n", password=token) as again:  # one left: room again
            result = await again.run("echo in", encoding=None)
        first.close()
        await first.wait_closed()
        return result.stdout

    assert run(env, test) == b"in\n"
    assert [(line["outcome"], line["status"], line["who"]) for line in audit_lines(env, "ssh_connection")] == [
        ("refused: 2 connections from 127.0.0.1 are open, its bound (runtime.ssh.max_connections_per_source 2); "
         "closed before its login", 429, "127.0.0.1")]
    assert len(audit_lines(env, "ssh_login")) == 3  # the refused one never reached a login


@pytest.mark.skipif(not all(shutil.which(c) for c in ("ssh", "ssh-keygen")), reason="OpenSSH's client is not installed")
def test_this_machine_s_ssh_l_reaches_the_sandbox_and_not_another(env, tmp_path):
    """OpenSSH's `ssh -L` (its `direct-tcpip` channel) over the fake backend: to the sandbox's address, to its
    loopback (relayed; the fake sandbox's loopback is this machine's), and refused to another sandbox's address."""
    from testbed import ssh_clients

    allow(env, ssh_forwarding=True)
    key, line = ssh_clients.keypair(tmp_path, "user")
    claimed = env.claim("fwd-o", ssh_keys=[line])
    env.backend.addresses[claimed["sandbox"]] = MINE
    mine = socketserver.TCPServer((MINE, 0), _answer(b"from the sandbox\n"))
    target = mine.server_address[1]
    served = [mine, socketserver.TCPServer((OTHER, target), _answer(b"from another\n")),  # another sandbox's
              socketserver.TCPServer(("127.0.0.1", target), _answer(b"from its loopback\n"))]
    for server in served:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = SshEndpoint(env.runtime, env.audit, HOST_KEY.export_private_key().decode(), ["127.0.0.1"], 0)
    endpoint.start()
    try:
        with ssh_clients.local_forward(endpoint.port, "fwd-o", f"{MINE}:{target}", key=key) as local:
            assert ssh_clients.fetch(local) == b"from the sandbox\n"
        with ssh_clients.local_forward(endpoint.port, "fwd-o", f"localhost:{target}", key=key) as local:
            assert ssh_clients.fetch(local) == b"from its loopback\n"
        with ssh_clients.local_forward(endpoint.port, "fwd-o", f"{OTHER}:{target}", key=key) as local:
            assert ssh_clients.fetch(local) == b""  # the channel refused: OpenSSH closes the local connection
    finally:
        for server in served:
            server.shutdown()
            server.server_close()
    assert [status for _, status in forwards(env)] == [200, 200, 403]


def _answer(words: bytes) -> type[socketserver.BaseRequestHandler]:
    class Answer(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.sendall(words)

    return Answer
