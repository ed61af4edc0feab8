"""`sandstack preview|diff --check-hosts`: each host's daemon pinged through its declared transport; an unreachable
host named with its transport and error class, exit 4, no secret printed (tests/engine/test_hosts.py does the same
against real daemons over ssh and tcp+TLS)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import tempfile
import threading
from pathlib import Path

import pytest

from sandstack.tooling.cli import main
from testbed.hosts import _tls_material
from testbed.specs import host, spec, write_spec

TEMPLATES = {"shell": {"base_image": "busybox:1.36", "command": ["sleep", "infinity"]}}
PING = b"HTTP/1.0 200 OK\r\nApi-Version: 1.43\r\nContent-Length: 2\r\n\r\nOK"


@pytest.fixture
def short_dir():
    """A short directory: a unix socket's path has at most 107 bytes, pytest's tmp_path can be longer."""
    path = Path(tempfile.mkdtemp(prefix="ss-reach-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _serve(listener: socket.socket, wrap=None) -> threading.Thread:
    """Answers each connection's request with a Docker daemon's /_ping answer."""
    def loop() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                conn = wrap(conn) if wrap else conn
                conn.recv(4096)
                conn.sendall(PING)
            except (OSError, ssl.SSLError):
                pass
            finally:
                conn.close()
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def _run(tmp_path: Path, monkeypatch, capsys, hosts: dict, *extra: str, command: str = "preview") -> tuple[int, str, str]:
    data = spec(TEMPLATES, {"shell": {"template": "shell", "hosts": [next(iter(hosts))]}}, hosts=hosts)
    write_spec(tmp_path / "spec", data)
    monkeypatch.chdir(tmp_path)
    args = ["spec/stack.yaml"] if command == "preview" else ["spec/stack.yaml", "spec/stack.yaml"]
    # A bound on waiting only: every host here answers or refuses at once, but the stand-in daemons are threads of
    # this process, which a busy machine can keep from answering a TLS handshake within 2 s.
    code = main([command, *args, "--check-hosts", "--host-timeout", "30", *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_unix_hosts_answering_missing_and_refusing(tmp_path, short_dir, monkeypatch, capsys):
    daemon = socket.socket(socket.AF_UNIX)
    daemon.bind(str(short_dir / "up.sock"))
    daemon.listen(4)
    _serve(daemon)
    silent = socket.socket(socket.AF_UNIX)
    silent.bind(str(short_dir / "down.sock"))  # bound, never listening: a daemon that stopped
    try:
        hosts = {"a": host(f"unix://{short_dir}/up.sock"), "b": host(f"unix://{short_dir}/gone.sock"),
                 "c": host(f"unix://{short_dir}/down.sock")}
        code, out, err = _run(tmp_path, monkeypatch, capsys, hosts)
    finally:
        daemon.close()
        silent.close()
    assert code == 4 and out.startswith("stack stack")
    assert err.splitlines() == [
        f"sandstack: host a (unix unix://{short_dir}/up.sock): reachable",
        f"sandstack: host b (unix unix://{short_dir}/gone.sock): unreachable: no-socket (no socket at that path)",
        f"sandstack: host c (unix unix://{short_dir}/down.sock): unreachable: refused (nothing listens at the "
        "address (the daemon is stopped))"]


def test_without_the_flag_nothing_is_contacted(tmp_path, short_dir, monkeypatch, capsys):
    write_spec(tmp_path / "spec", spec(TEMPLATES, hosts={"local": host(f"unix://{short_dir}/gone.sock")}))
    monkeypatch.chdir(tmp_path)
    assert main(["preview", "spec/stack.yaml"]) == 0
    assert capsys.readouterr().err == ""


def _tls_daemon(directory: Path) -> tuple[socket.socket, int, dict[str, str]]:
    """A TLS endpoint on 127.0.0.1 requiring a client certificate from its CA, as dockerd --tlsverify does."""
    secrets = _tls_material(directory, "daemon", "127.0.0.1")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(directory / "ca.pem"))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(directory / "server.pem", directory / "server-key.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    _serve(listener, lambda conn: context.wrap_socket(conn, server_side=True))
    return listener, listener.getsockname()[1], secrets


def _config(path: Path, values: dict[str, str]) -> str:
    path.write_text(json.dumps({f"sandstack:{key}": {"value": value, "secret": True} for key, value in values.items()}))
    return str(path)


def test_tcp_tls_hosts_right_wrong_and_missing_material(tmp_path, monkeypatch, capsys):
    (tmp_path / "daemon").mkdir()
    (tmp_path / "other").mkdir()
    listener, port, right = _tls_daemon(tmp_path / "daemon")
    other = _tls_material(tmp_path / "other", "other", "127.0.0.1")  # a CA and client the daemon never trusted
    values = {"okTls.ca": right["daemonTls.ca"], "okTls.cert": right["daemonTls.cert"],
              "okTls.key": right["daemonTls.key"],
              # the daemon's CA, a client certificate from another CA: the daemon refuses it
              "clientTls.ca": right["daemonTls.ca"], "clientTls.cert": other["otherTls.cert"],
              "clientTls.key": other["otherTls.key"],
              # another CA: this side refuses the daemon
              "serverTls.ca": other["otherTls.ca"], "serverTls.cert": right["daemonTls.cert"],
              "serverTls.key": right["daemonTls.key"],
              "badTls.ca": right["daemonTls.ca"], "badTls.cert": "not a certificate", "badTls.key": "nor a key"}
    endpoint = f"tcp://127.0.0.1:{port}"

    def tls(name: str) -> dict:
        return host(endpoint, tls={part: {"secret": f"{name}Tls.{part}"} for part in ("ca", "cert", "key")})
    hosts = {"ok": tls("ok"), "client": tls("client"), "server": tls("server"), "bad": tls("bad"),
             "unset": tls("unset")}
    try:
        code, out, err = _run(tmp_path, monkeypatch, capsys, hosts, "--config", _config(tmp_path / "c.json", values),
                              command="diff")
    finally:
        listener.close()
    assert code == 4 and out
    assert err.splitlines() == [
        f"sandstack: host bad (tcp+tls {endpoint}): unreachable: tls-material-invalid (the TLS material in the "
        "config is not a usable PEM certificate and key)",
        f"sandstack: host client (tcp+tls {endpoint}): unreachable: tls-client-refused (the daemon refused the "
        "client certificate)",
        f"sandstack: host ok (tcp+tls {endpoint}): reachable",
        f"sandstack: host server (tcp+tls {endpoint}): unreachable: tls-server-untrusted (the daemon's certificate "
        "is not signed by the declared CA (or not for this name))",
        f"sandstack: host unset (tcp+tls {endpoint}): unreachable: tls-material-missing (not checked: its TLS "
        "material is in the stack's secret config (pass --config))"]
    for pem in (*right.values(), *other.values()):
        assert not any(line in out + err for line in pem.splitlines() if len(line) > 8 and "-----" not in line)


def test_ssh_runs_dial_stdio_with_the_hosts_options_and_names_a_refused_key(tmp_path, monkeypatch, capsys):
    """A stand-in `ssh` on PATH records its arguments and refuses the key as OpenSSH words it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {tmp_path}/argv\n"
                                 "echo 'deploy@10.0.0.9: Permission denied (publickey).' >&2\nexit 255\n")
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    opts = ["-i", "/keys/deploy", "-o", "StrictHostKeyChecking=yes"]
    code, _, err = _run(tmp_path, monkeypatch, capsys, {"edge": host("ssh://deploy@10.0.0.9:2222", ssh_opts=opts)})
    assert code == 4
    assert err == ("sandstack: host edge (ssh ssh://deploy@10.0.0.9:2222): unreachable: ssh-auth-refused (the host "
                   "refused the ssh key)\n")
    assert (tmp_path / "argv").read_text().splitlines() == [
        *opts, "-o", "BatchMode=yes", "-o", "ConnectTimeout=30", "-p", "2222", "--", "deploy@10.0.0.9",
        "docker", "system", "dial-stdio"]


def test_an_unreadable_config_names_the_file_not_its_content(tmp_path, monkeypatch, capsys):
    (tmp_path / "c.json").write_text("-----BEGIN PRIVATE KEY----- not json")
    code, _, err = _run(tmp_path, monkeypatch, capsys, {"local": host()}, "--config", str(tmp_path / "c.json"))
    assert code == 2
    assert err == f"sandstack: --config {tmp_path / 'c.json'}:1:1: $: is not JSON: Expecting value\n"
