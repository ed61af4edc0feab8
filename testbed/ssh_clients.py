"""This machine's OpenSSH clients (`ssh`, `sftp`, `scp`) against a runtime's SSH endpoint (docs/design/ssh.md), for
the engine tests and the benchmarks: keys made by `ssh-keygen`, a password given through SSH_ASKPASS (no sshpass
here), no configuration file, agent or known hosts of the machine's own."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from testbed.waiting import stop_process


def keypair(folder: Path, name: str) -> tuple[Path, str]:
    """A new ed25519 key without a passphrase: (its private key file, its public key line)."""
    private = folder / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(private)], check=True)
    return private, (folder / f"{name}.pub").read_text().strip()


def options(port: int, key: Path | None, *, scp: bool = False) -> list[str]:
    """Options every client takes: the port (`-P` for scp and sftp), nothing of this machine's configuration, the
    host key not pinned (each deployment has its own), and either the key alone or the password alone."""
    auth = (["-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "PreferredAuthentications=publickey",
             "-o", "BatchMode=yes"] if key is not None else
            ["-o", "PubkeyAuthentication=no", "-o", "PreferredAuthentications=password",
             "-o", "NumberOfPasswordPrompts=1"])
    return ["-F", "/dev/null", "-P" if scp else "-p", str(port), "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "IdentityAgent=none",
            "-o", "ConnectTimeout=20", *auth]


def askpass(folder: Path, secret: str) -> dict[str, str]:
    """The environment that makes OpenSSH read its password from a script printing `secret` (mode 0700, in
    `folder`, which the test owns), without a terminal."""
    script = folder / "askpass.sh"
    (folder / "askpass.secret").write_text(secret)
    script.write_text(f"#!/bin/sh\nexec cat {folder / 'askpass.secret'}\n")
    script.chmod(0o700)
    return {**os.environ, "SSH_ASKPASS": str(script), "SSH_ASKPASS_REQUIRE": "force", "DISPLAY": ":0"}


def ssh(port: int, user: str, command: str, *, key: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", *options(port, key), f"{user}@127.0.0.1", command], capture_output=True,
                          stdin=subprocess.DEVNULL, env=env, timeout=timeout)


def sftp_batch(port: int, user: str, lines: list[str], *, key: Path | None = None,
               env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["sftp", *options(port, key, scp=True), "-b", "-", f"{user}@127.0.0.1"],
                          input="\n".join(lines).encode() + b"\n", capture_output=True, env=env, timeout=timeout)


def scp(port: int, source: str, dest: str, *, key: Path | None = None, sftp: bool = True,
        env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """`scp -s` (the SFTP protocol) by default; `sftp=False`: OpenSSH's default, which is SFTP too since 9.0."""
    return subprocess.run(["scp", *(["-s"] if sftp else []), *options(port, key, scp=True), source, dest],
                          capture_output=True, stdin=subprocess.DEVNULL, env=env, timeout=timeout)


@contextlib.contextmanager
def local_forward(port: int, user: str, dest: str, *, key: Path | None = None, env: dict[str, str] | None = None,
                  wait: float = 20) -> Iterator[int]:
    """`ssh -N -L 127.0.0.1:<free port>:<dest>` running (`dest` HOST:PORT, or a socket's path), once it listens on
    its local port: that port. The client is ended when the block ends."""
    with _client(["-L", "127.0.0.1:{local}:" + dest], port, user, key, env, wait) as local:
        yield local


@contextlib.contextmanager
def _client(forward: list[str], port: int, user: str, key: Path | None, env: dict[str, str] | None,
            wait: float) -> Iterator[int]:
    """`ssh -N` with `forward` (its arguments, `{local}` a free port of this machine) running, once it listens on
    that port (read from the kernel's table, not by connecting, which would open a forward): the port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        local = probe.getsockname()[1]
    proc = subprocess.Popen(["ssh", *options(port, key), "-N", "-o", "ExitOnForwardFailure=yes",
                             *(part.replace("{local}", str(local)) for part in forward), f"{user}@127.0.0.1"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + wait
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"ssh {forward[0]} exited {proc.returncode}: {proc.stderr.read().decode()[-500:]}")
            if _listening(local):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"ssh {forward[0]} did not listen on 127.0.0.1:{local} within {wait}s")
            time.sleep(0.1)
        yield local
    finally:
        stop_process(proc)
        if proc.stderr is not None:
            proc.stderr.close()


@contextlib.contextmanager
def dynamic_forward(port: int, user: str, *, key: Path | None = None, env: dict[str, str] | None = None,
                    wait: float = 20) -> Iterator[int]:
    """`ssh -N -D 127.0.0.1:<free port>` running (a SOCKS proxy whose connections are `direct-tcpip` channels, as
    VS Code's Remote-SSH tunnels to its server), once it listens: that port."""
    with _client(["-D", "127.0.0.1:{local}"], port, user, key, env, wait) as local:
        yield local


def socks_exchange(socks: int, host: str, port: int, data: bytes, timeout: float = 20) -> bytes:
    """`data` sent to host:port through the SOCKS5 proxy on this machine's `socks` port (no authentication, the
    destination an IPv4 address or a name), the sending side closed, then what comes back until the other side
    closes; b"" when the proxy refused the destination (OpenSSH's answers success at once, and closes the
    connection when its channel is refused)."""
    with socket.create_connection(("127.0.0.1", socks), timeout=timeout) as conn:
        conn.sendall(b"\x05\x01\x00")
        if _exactly(conn, 2) != b"\x05\x00":
            raise RuntimeError("the SOCKS proxy refused its methods")
        try:
            address = b"\x01" + socket.inet_aton(host)
        except OSError:
            address = b"\x03" + bytes([len(host)]) + host.encode()
        conn.sendall(b"\x05\x01\x00" + address + port.to_bytes(2, "big"))
        try:
            reply = _exactly(conn, 4)
            if reply[1] != 0:
                return b""
            _exactly(conn, {1: 4, 4: 16}.get(reply[3], 0) + 2 if reply[3] != 3 else _exactly(conn, 1)[0] + 2)
            return _send_and_read(conn, data)
        except (ConnectionError, BrokenPipeError):
            return b""


def exchange(port: int, data: bytes, timeout: float = 20) -> bytes:
    """`data` sent to this machine's `port`, the sending side closed, then what comes back until the other side
    closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        return _send_and_read(conn, data)


def _send_and_read(conn: socket.socket, data: bytes) -> bytes:
    conn.sendall(data)
    conn.shutdown(socket.SHUT_WR)
    chunks = []
    while chunk := conn.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the SOCKS proxy closed the connection")
        data += chunk
    return data


def _listening(port: int) -> bool:
    """Whether a TCP socket of this machine listens on 127.0.0.1:`port` (/proc/net/tcp: 0100007F:<hex port>, 0A)."""
    wanted = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as table:
        return any(fields[1] == wanted and fields[3] == "0A" for fields in (line.split() for line in table)
                   if len(fields) > 3)


def fetch(port: int, timeout: float = 20) -> bytes:
    """What a connection to this machine's `port` receives until the other side closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)
