"""The relay that reaches a session's sandbox's own loopback and its Unix sockets (sandstack.runtime.ssh_relay;
docs/design/ssh.md, "Forwarding"), without Docker: the fake backend runs the relay as a process of this machine, so
the fake sandbox's loopback and files are this machine's. Its script with each program it may use (python3, perl,
bash), the client's half-close, a transfer larger than every window both ways, nothing listening, a socket path,
OpenSSH's `ssh -D` (VS Code's default tunnel) and `ssh -L PORT:/socket`, and an endpoint whose executor is never
held by open channels."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import asyncssh
import pytest

from sandstack.runtime import ssh_relay
from sandstack.runtime.ssh import SshEndpoint
from tests.runtime.test_ssh import HOST_KEY, audit_lines, connect, run
from tests.runtime.test_ssh_forwarding import allow, forwards, relays

HAS_OPENSSH = all(shutil.which(c) for c in ("ssh", "ssh-keygen"))


async def shouting(host: str | None = None, path: str | None = None) -> asyncio.AbstractServer:
    """Reads until the client's EOF, then answers what it read upper-cased (so an answer proves the half-close)."""

    async def answer(reader, writer):
        data = await reader.read()
        writer.write(data.upper())
        await writer.drain()
        writer.close()

    if path is not None:
        return await asyncio.start_unix_server(answer, path)
    return await asyncio.start_server(answer, host, 0)


def ended(condition, within: float = 30) -> bool:
    """Whether `condition()` holds within `within` seconds (a killed process's end is asynchronous)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_loopback_forward_carries_both_directions_past_every_window_and_the_client_s_half_close(env):
    allow(env, ssh_forwarding=True)
    claimed = env.claim("relay-1")
    payload = bytes(range(97, 123)) * (3 * 1024 * 1024 // 26)  # 3 MiB of a-z: past the channel's and relay's windows

    async def test(port):
        server = await shouting("127.0.0.1")
        target = server.sockets[0].getsockname()[1]
        try:
            async with connect(port, "relay-1", password=claimed["token"]) as conn:
                reader, writer = await conn.open_connection("localhost", target)
                writer.write(payload)
                writer.write_eof()
                got = await reader.read()
                writer.close()
            return got
        finally:
            server.close()

    got = run(env, test)
    assert len(got) == len(payload) and got == payload.upper()
    assert [status for _, status in forwards(env)] == [200]


def test_nothing_listening_on_the_loopback_is_the_client_s_open_failed_and_the_relay_is_gone(env):
    allow(env, ssh_forwarding=True)
    claimed = env.claim("relay-2")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]

    async def test(port):
        async with connect(port, "relay-2", password=claimed["token"]) as conn:
            with pytest.raises(asyncssh.ChannelOpenError) as failed:
                await conn.open_connection("127.0.0.1", free)
            result = await conn.run("echo still here", encoding=None)  # the login goes on
        return failed.value, result.stdout

    failed, after = run(env, test)
    why = f"nothing answered at 127.0.0.1:{free} in the sandbox (Connection refused)"
    assert (failed.code, failed.reason, after) == (asyncssh.OPEN_CONNECT_FAILED, why, b"still here\n")
    assert forwards(env) == [(f"refused: 127.0.0.1:{free}: {why}", 502)]
    assert ended(lambda: all(proc.poll() is not None for proc in env.backend.procs[claimed["sandbox"]]))
    assert env.runtime.processes._unlisted.get(claimed["sandbox"], 0) == 0  # no longer counted


def test_a_unix_socket_in_the_sandbox_is_reached_by_its_path_and_a_relative_or_missing_one_is_refused(env, tmp_path):
    allow(env, ssh_forwarding=True)
    claimed = env.claim("relay-3")
    path = str(tmp_path / "vscode-ipc.sock")

    async def test(port):
        server = await shouting(path=path)
        try:
            async with connect(port, "relay-3", password=claimed["token"]) as conn:
                reader, writer = await conn.open_unix_connection(path)
                writer.write(b"over a socket")
                writer.write_eof()
                got = await reader.read()
                refused = []
                for asked in ("relative.sock", path + ".missing"):
                    with pytest.raises(asyncssh.ChannelOpenError) as error:
                        await conn.open_unix_connection(asked)
                    refused.append((error.value.code, error.value.reason))
                with pytest.raises(asyncssh.ChannelListenError):
                    await conn.start_unix_server(lambda: None, str(tmp_path / "remote.sock"))  # `ssh -R /path`
            return got, refused
        finally:
            server.close()

    got, refused = run(env, test)
    assert got == b"OVER A SOCKET"
    absolute = "a socket is named by its absolute path in the sandbox, at most 107 bytes"
    missing = f"nothing answered at {path}.missing in the sandbox (No such file or directory)"
    assert refused == [(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, absolute), (asyncssh.OPEN_CONNECT_FAILED, missing)]
    assert forwards(env) == [
        (f"accepted: socket {path} -> {path} in the sandbox (relayed by python3)", 200),
        (f"refused: socket relative.sock: {absolute}", 403),
        (f"refused: socket {path}.missing: {missing}", 502),
        (f"refused: remote forward of socket {tmp_path / 'remote.sock'}: remote forwarding (ssh -R) is not offered",
         403)]
    assert [args[:3] for args in relays(env, claimed["sandbox"])] == [["unix", path, "0"], ["unix", f"{path}.missing", "0"]]


def test_forwarding_off_refuses_a_socket_too(env, tmp_path):
    claimed = env.claim("relay-4")

    async def test(port):
        async with connect(port, "relay-4", password=claimed["token"]) as conn:
            with pytest.raises(asyncssh.ChannelOpenError) as off:
                await conn.open_unix_connection(str(tmp_path / "s.sock"))
        return off.value.reason

    assert run(env, test) == "forwarding is off on host 'local' (runtime.ssh.forwarding: none)"
    assert relays(env, claimed["sandbox"]) == []


# The relay's script with each program it may find (a PATH of only these programs).

def _only(folder: Path, *programs: str) -> dict[str, str]:
    folder.mkdir()
    for program in ("sh", *programs):
        # python3: this interpreter itself (a `python3` on PATH may be a wrapper script needing more of PATH)
        found = sys.executable if program == "python3" else shutil.which(program)
        if found is None:
            pytest.skip(f"{program} is not installed here")
        (folder / program).symlink_to(os.path.realpath(found))
    return {"PATH": str(folder)}


class _Shout(threading.Thread):
    """A server (TCP on 127.0.0.1, or a Unix socket) answering one connection with what it read, upper-cased: all
    of it once the client's side is closed, or (`eager`) its first piece at once, then closing."""

    def __init__(self, path: str | None = None, eager: bool = False):
        super().__init__(daemon=True)
        self.eager = eager
        self.sock = socket.socket(socket.AF_UNIX if path else socket.AF_INET)
        self.sock.bind(path or ("127.0.0.1", 0))
        self.sock.listen()
        self.port = 0 if path else self.sock.getsockname()[1]
        self.start()

    def run(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
                if self.eager:
                    break
            conn.sendall(data.upper())


@pytest.mark.parametrize("program,kind", [("python3", "tcp"), ("perl", "tcp"), ("bash", "tcp"),
                                          ("python3", "unix"), ("perl", "unix")])
def test_the_relay_script_connects_with_each_program_it_may_find(program, kind, tmp_path):
    # bash cannot half-close: its server answers without waiting for the client's end (and then closes).
    server = _Shout(str(tmp_path / "s.sock") if kind == "unix" else None, eager=program == "bash")
    where = str(tmp_path / "s.sock") if kind == "unix" else "127.0.0.1"
    extra = ("cat",) if program == "bash" else ()
    ran = subprocess.run(ssh_relay.argv(kind, where, server.port), input=b"relayed", capture_output=True,
                         env=_only(tmp_path / "bin", program, *extra), timeout=30)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, b"RELAYED", f"sandstack-relay: connected {program}\n".encode())


@pytest.mark.parametrize("kind,need", [("tcp", "python3, perl or bash (with cat)"), ("unix", "python3 or perl")])
def test_without_any_program_the_relay_says_what_the_image_needs(kind, need, tmp_path):
    ran = subprocess.run(ssh_relay.argv(kind, "/nowhere" if kind == "unix" else "127.0.0.1", 1), capture_output=True,
                         env=_only(tmp_path / "bin"), timeout=30)
    assert (ran.returncode, ran.stdout, ran.stderr.decode()) == (
        127, b"", f"sandstack-relay: failed: none of {need} is in the sandbox's PATH: the relay to its loopback or a "
                  "socket in it needs one (a template installs it in its image)\n")


@pytest.mark.parametrize("program", ["python3", "perl", "bash"])
def test_a_refused_connection_is_the_relay_s_failed_line(program, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    extra = ("cat",) if program == "bash" else ()
    ran = subprocess.run(ssh_relay.argv("tcp", "127.0.0.1", free), capture_output=True,
                         env=_only(tmp_path / "bin", program, *extra), timeout=30)
    assert (ran.returncode, ran.stdout, ran.stderr) == (1, b"", b"sandstack-relay: failed: Connection refused\n")


# The endpoint's executor.

def test_open_channels_hold_none_of_the_endpoint_s_executor_threads(env):
    """asyncio's default executor has min(32, CPUs + 4) threads, which serve every login's check; as many open
    commands (a VS Code window holds a shell and its tunnels open) must leave a new login and command working."""
    busy = min(32, (os.cpu_count() or 1) + 4)
    holder, other = env.claim("exec-1"), env.claim("exec-2")["token"]

    async def test(port):
        async with connect(port, "exec-1", password=holder["token"]) as conn:
            waiting = [await conn.create_process("cat") for _ in range(busy)]
            await asyncio.sleep(0.5)  # each channel's exec started (the old endpoint waited for it in a thread)

            async def served():
                async with connect(port, "exec-2", password=other) as second:
                    return await second.run("echo served", encoding=None)

            probe = asyncio.ensure_future(served())
            if not (await asyncio.wait([probe], timeout=30))[0]:
                for proc in env.backend.procs[holder["sandbox"]]:  # the threads blocked on them freed: the test ends
                    proc.kill()
                pytest.fail("a new login and its command waited 30 s for the endpoint's executor")
            result = probe.result()
            for process in waiting:
                process.stdin.write_eof()
            codes = [(await process.wait()).exit_status for process in waiting]
        return result.stdout, codes

    stdout, codes = run(env, test)
    assert (stdout, codes) == (b"served\n", [0] * busy)


def test_a_command_s_stdin_is_written_whole_however_long_the_command_takes_to_read_it(env, monkeypatch):
    """A command that reads its stdin only after a while (longer than a write's wait, shortened here) gets all of
    it: the rest of a write is not dropped."""
    monkeypatch.setattr(ssh_relay, "STDIN_TIMEOUT", 0.2)
    monkeypatch.setattr("sandstack.runtime.ssh.STDIN_TIMEOUT", 0.2, raising=False)  # where it was read before
    token = env.claim("stdin-1")["token"]
    data = b"x" * (1024 * 1024)

    async def test(port):
        async with connect(port, "stdin-1", password=token) as conn:
            return await conn.run("sleep 1; wc -c", input=data, encoding=None)

    result = run(env, test)
    assert (result.stdout.strip(), result.exit_status) == (str(len(data)).encode(), 0)


# OpenSSH's own client, as editors drive it.

@pytest.mark.skipif(not HAS_OPENSSH, reason="OpenSSH's client is not installed")
def test_ssh_d_as_vs_code_opens_it_and_ssh_l_to_a_socket_reach_the_sandbox_s_loopback_and_sockets(env, tmp_path):
    """VS Code's Remote-SSH runs `ssh -T -D <port> host bash` and reaches its server (listening on 127.0.0.1 in the
    remote) through that SOCKS port; with `remote.SSH.remoteServerListenOnSocket` it runs `ssh -L PORT:/socket`."""
    from testbed import ssh_clients

    allow(env, ssh_forwarding=True)
    key, line = ssh_clients.keypair(tmp_path, "user")
    env.claim("relay-o", ssh_keys=[line])
    tcp, unix = _Shout(), _Shout(str(tmp_path / "server.sock"))
    endpoint = SshEndpoint(env.runtime, env.audit, HOST_KEY.export_private_key().decode(), ["127.0.0.1"], 0)
    endpoint.start()
    with ssh_clients.dynamic_forward(endpoint.port, "relay-o", key=key) as socks:
        assert ssh_clients.socks_exchange(socks, "127.0.0.1", tcp.port, b"by socks") == b"BY SOCKS"
    with ssh_clients.local_forward(endpoint.port, "relay-o", str(tmp_path / "server.sock"), key=key) as local:
        assert ssh_clients.exchange(local, b"by a socket") == b"BY A SOCKET"
    assert [status for _, status in forwards(env)] == [200, 200]
    assert [line["outcome"] for line in audit_lines(env, "ssh_forward")] == [
        f"accepted: 127.0.0.1:{tcp.port} -> 127.0.0.1:{tcp.port} in the sandbox (relayed by python3)",
        f"accepted: socket {tmp_path / 'server.sock'} -> {tmp_path / 'server.sock'} in the sandbox (relayed by "
        "python3)"]


def test_a_relay_whose_channel_never_opens_is_ended(env, monkeypatch):
    """asyncssh drops a session whose connection closed while the relay connected, without a callback: the relay
    (an exec holding a place among the sandbox's processes) is ended after OPEN_WAIT all the same."""
    monkeypatch.setattr(ssh_relay, "OPEN_WAIT", 0.2, raising=False)
    claimed = env.claim("relay-5")

    async def main():
        server = await shouting("127.0.0.1")
        endpoint = SshEndpoint(env.runtime, env.audit, HOST_KEY.export_private_key().decode(), ["127.0.0.1"], 0)
        await endpoint.serve()
        try:
            row = env.runtime.store.sandbox(claimed["sandbox"])
            relay = await ssh_relay.Relay.start(endpoint, row, "tcp", "127.0.0.1", server.sockets[0].getsockname()[1])
            running = relay.proc.handle.wait(0)
            for _ in range(600):  # its kill is an exec of the sandbox's: slow on a loaded machine
                if relay.proc.handle.wait(0):
                    break
                await asyncio.sleep(0.05)
            return running, relay.proc.handle.wait(0)
        finally:
            await endpoint.close()
            server.close()

    running, ended = asyncio.run(main())
    assert (running, ended) == (False, True)
    assert env.runtime.processes._unlisted.get(claimed["sandbox"], 0) == 0
