"""SSH and SFTP into a session's sandbox on the real engine (issue 39 item 4; docs/design/ssh.md): this machine's own
`ssh`, `sftp` and `scp` log in to the runtime's SSH endpoint with a key the claim registered or with the session's
token (SSH_ASKPASS), run a command in the session's sandbox as its user (exit status returned), put and get a file
both ways, and are refused with another session's name, and with a released session's key and token. The audit log
names each login's scope and never a token. `ssh -L` reaches a server in the session's own sandbox (forwarding:
local), and a forward to another sandbox or the pool's gateway is refused. VS Code's Remote-SSH sequence, simulated
(no VS Code here): a script over `ssh -T ... bash` starts a server on the sandbox's 127.0.0.1 and one on a Unix
socket, reached through `ssh -D` (SOCKS, VS Code's default) and `ssh -L PORT:/socket` by the relay, and not from
another session. `rsync -e ssh` of a directory both ways (the image has rsync: the debian-rsync test image)."""

from __future__ import annotations

import filecmp
import shlex
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from sandstack.client import Client
from testbed import images, ssh_clients
from testbed.deploy import engine_spec, shared_deployment
from tests.engine.runtime_helpers import answers, release_all

pytestmark = pytest.mark.docker

PORT, SSH_PORT = 17495, 17496
TOKEN = "engine-test-runtime-token-ssh-0001"


def _spec(image: str) -> str:
    agent = {"base_image": image, "command": ["sleep", "infinity"], "limits": {"memory": "64MiB"},
             "workdir": "/workspace", "filesystem": {"writable": [{"path": "/workspace", "size": "16MiB"}]},
             "session": {"idle": "never"}}
    data = yaml.safe_load(engine_spec(image, {"agent": agent},
                                      {"agent": {"template": "agent", "hosts": ["local"], "replicas": 2}}))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"},
                                         "ssh": {"port": SSH_PORT, "host_key": {"secret": "sshHostKey"},
                                                 "forwarding": "local"}}
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ssh-keys")
    host_private, _ = ssh_clients.keypair(folder, "host")
    user_private, user_line = ssh_clients.keypair(folder, "user")
    return folder, host_private.read_text(), user_private, user_line


@pytest.fixture(scope="module")
def rsync_image(docker_client) -> str:
    """The debian test image with rsync (testbed/images.py): what a template must install for `rsync -e ssh`."""
    return images.debian_rsync_image(docker_client)


@pytest.fixture(scope="module")
def stack(rsync_image, harness_sweep_orphans, tmp_path_factory, keys):
    with shared_deployment(__file__, tmp_path_factory.mktemp("runtime-ssh"), _spec(rsync_image),
                           secret_config={"runtimeToken": TOKEN, "sshHostKey": keys[1]}) as shared:
        yield shared


@pytest.fixture
def client(stack):
    c = Client.from_outputs({"hosts": {"local": {"url": f"http://127.0.0.1:{PORT}", "token": TOKEN}},
                             "pools": {"agent": ["local"]}}, actor="engine-test")
    yield c
    if answers(PORT):
        release_all(c.host("local"))
    c.close()


def test_ssh_sftp_and_scp_reach_the_session_s_sandbox_and_a_released_session_is_refused(client, keys, tmp_path):
    folder, _, key, line = keys
    box = client.claim("agent", "ssh-e1", ssh_keys=[line])
    other = client.claim("agent", "ssh-e2")
    ran = ssh_clients.ssh(SSH_PORT, "ssh-e1", "id -u; pwd; echo err >&2; exit 7", key=key)
    assert (ran.returncode, ran.stdout, ran.stderr) == (7, b"10001\n/workspace\n", b"err\n"), ran.stderr
    by_token = ssh_clients.ssh(SSH_PORT, "ssh-e1", "cat /etc/hostname >/dev/null && echo token-ok",
                               env=ssh_clients.askpass(tmp_path, box.token))
    assert (by_token.returncode, by_token.stdout) == (0, b"token-ok\n"), by_token.stderr

    local = tmp_path / "local.bin"
    local.write_bytes(bytes(range(256)) * 4096)  # 1 MiB, every byte value
    sftp = ssh_clients.sftp_batch(SSH_PORT, "ssh-e1", [f"put {local} up.bin", f"get up.bin {tmp_path / 'got.bin'}"],
                                  key=key)
    assert sftp.returncode == 0, sftp.stderr
    assert (tmp_path / "got.bin").read_bytes() == local.read_bytes()
    assert box.read_file("up.bin") == local.read_bytes()  # the session's sandbox holds it, as its user
    assert box.exec(["stat", "-c", "%u", "up.bin"]).stdout == "10001\n"
    for sftp_mode in (True, False):  # `scp -s`, and OpenSSH's default (SFTP too since 9.0)
        up = ssh_clients.scp(SSH_PORT, str(local), "ssh-e1@127.0.0.1:scp.bin", key=key, sftp=sftp_mode)
        assert up.returncode == 0, up.stderr
        down = ssh_clients.scp(SSH_PORT, "ssh-e1@127.0.0.1:scp.bin", str(tmp_path / "scp.bin"), key=key,
                               sftp=sftp_mode)
        assert down.returncode == 0, down.stderr
        assert (tmp_path / "scp.bin").read_bytes() == local.read_bytes()

    # The key opens its own session only; another session's id with it is refused.
    crossed = ssh_clients.ssh(SSH_PORT, "ssh-e2", "true", key=key)
    assert crossed.returncode == 255 and b"Permission denied" in crossed.stderr
    assert other.exec(["ls", "/workspace"]).stdout == ""

    token = box.token
    client.host("local").release("ssh-e1")
    for refused in (ssh_clients.ssh(SSH_PORT, "ssh-e1", "true", key=key),
                    ssh_clients.ssh(SSH_PORT, "ssh-e1", "true", env=ssh_clients.askpass(tmp_path, token))):
        assert refused.returncode == 255 and b"Permission denied" in refused.stderr
    with pytest.raises(subprocess.CalledProcessError):
        subprocess.run(["sftp", *ssh_clients.options(SSH_PORT, key, scp=True), "-b", "-", "ssh-e1@127.0.0.1"],
                       input=b"ls\n", capture_output=True, check=True, timeout=60)

    lines = [l for l in client.host("local").audit(limit=200) if l["operation"] == "ssh_login"]
    assert [(l["session"], l["status"], l["scope"]) for l in lines][:2] == [
        ("ssh-e1", 200, "session:host/ssh-e1"), ("ssh-e1", 200, "session:host/ssh-e1")]
    assert ("ssh-e2", 401, None) in [(l["session"], l["status"], l["scope"]) for l in lines]
    assert sum(l["status"] == 401 and l["session"] == "ssh-e1" for l in lines) == 3
    assert not any(token in str(l) for l in client.host("local").audit(limit=500))


def _serve(box, words: bytes) -> str:
    """`python3 -m http.server` on every address of the sandbox, port 8000, serving its workspace (with `words` in
    hello.txt), once it answers inside; the sandbox's address on its pool's network."""
    box.write_file("hello.txt", words)
    box.start(["python3", "-m", "http.server", "8000", "--bind", "0.0.0.0"])
    probe = ("import socket,time\nfor _ in range(100):\n    try:\n        socket.create_connection(('127.0.0.1', "
             "8000), 1).close(); break\n    except OSError: time.sleep(0.1)\n"
             "print(socket.gethostbyname(socket.gethostname()))")
    return box.exec(["python3", "-c", probe]).stdout.strip()


def test_ssh_l_reaches_a_server_in_the_session_s_sandbox_and_nothing_else(client, keys):
    _, _, key, line = keys
    box = client.claim("agent", "ssh-f1", ssh_keys=[line])
    other = client.claim("agent", "ssh-f2")
    mine = _serve(box, b"from the session's sandbox\n")
    theirs = _serve(other, b"from another sandbox\n")
    assert mine != theirs and mine.count(".") == 3
    gateway = mine.rsplit(".", 1)[0] + ".1"  # the pool network's bridge: the host's address on it
    started = time.monotonic()
    with ssh_clients.local_forward(SSH_PORT, "ssh-f1", "localhost:8000", key=key) as local:
        with urllib.request.urlopen(f"http://127.0.0.1:{local}/hello.txt", timeout=30) as answer:
            assert answer.read() == b"from the session's sandbox\n"
    with ssh_clients.local_forward(SSH_PORT, "ssh-f1", f"{mine}:8000", key=key) as local:
        with urllib.request.urlopen(f"http://127.0.0.1:{local}/hello.txt", timeout=30) as answer:
            assert answer.read() == b"from the session's sandbox\n"
    print(f"ssh -L to a server in the sandbox, two forwards: {time.monotonic() - started:.2f}s")
    for refused in (f"{theirs}:8000", f"{gateway}:{PORT}"):
        with ssh_clients.local_forward(SSH_PORT, "ssh-f1", refused, key=key) as local:
            assert ssh_clients.fetch(local) == b""  # the channel refused: OpenSSH closes the local connection
    lines = [l for l in client.host("local").audit(limit=200) if l["operation"] == "ssh_forward"]
    assert [(l["status"], l["outcome"]) for l in lines[-4:]] == [
        (200, "accepted: localhost:8000 -> 127.0.0.1:8000 in the sandbox (relayed by python3)"),
        (200, f"accepted: {mine}:8000 -> {mine}:8000"),
        (403, f"refused: {theirs}:8000: {theirs}:8000 is not this session's sandbox: a forward reaches only its own "
              f"ports, at {mine} (or localhost, which names it)"),
        (403, f"refused: {gateway}:{PORT}: {gateway}:{PORT} is not this session's sandbox: a forward reaches only "
              f"its own ports, at {mine} (or localhost, which names it)")]
    assert {l["session"] for l in lines[-4:]} == {"ssh-f1"}


# VS Code's Remote-SSH, simulated: its install script runs in `bash` over `ssh -T`, starts the server on the remote's
# loopback (or, with remote.SSH.remoteServerListenOnSocket, on a socket), prints where it listens, and keeps the
# channel open; the client reaches it through `ssh -D` (SOCKS) or `ssh -L PORT:/socket`.
EDITOR_SCRIPT = """
cd /workspace && printf 'editor server\\n' > editor.txt
python3 -m http.server 8123 --bind 127.0.0.1 >/dev/null 2>&1 &
python3 -c '
import os, socket
s = socket.socket(socket.AF_UNIX); s.bind("/workspace/.editor-ipc.sock"); s.listen()
while True:
    c, _ = s.accept(); d = b""
    while True:
        x = c.recv(65536)
        if not x: break
        d += x
    c.sendall(d.upper()); c.close()
' &
python3 -c '
import socket, time, os
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", 8123), 1).close()
        if os.path.exists("/workspace/.editor-ipc.sock"): break
    except OSError: pass
    time.sleep(0.1)
'
echo "listeningOn==127.0.0.1:8123=="
cat >/dev/null
"""


def _socks_get(socks: int, path: str) -> bytes:
    request = f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode()
    return ssh_clients.socks_exchange(socks, "127.0.0.1", 8123, request)


def test_an_editor_s_server_on_the_sandbox_s_loopback_and_socket_is_reached_and_not_from_another_session(client,
                                                                                                          keys):
    _, _, key, line = keys
    client.claim("agent", "ssh-v1", ssh_keys=[line])
    client.claim("agent", "ssh-v2", ssh_keys=[line])
    editor = subprocess.Popen(["ssh", *ssh_clients.options(SSH_PORT, key), "-T", "ssh-v1@127.0.0.1", "bash"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        editor.stdin.write(EDITOR_SCRIPT.encode())
        editor.stdin.flush()
        assert editor.stdout.readline() == b"listeningOn==127.0.0.1:8123==\n"
        started = time.monotonic()
        with ssh_clients.dynamic_forward(SSH_PORT, "ssh-v1", key=key) as socks:
            opened = time.monotonic()
            answer = _socks_get(socks, "/editor.txt")
            first = time.monotonic() - opened
            timings = []
            for _ in range(5):  # each a new forwarded connection: its relay's exec, connect, one request
                began = time.monotonic()
                assert _socks_get(socks, "/editor.txt").endswith(b"editor server\n")
                timings.append(time.monotonic() - began)
        assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(b"editor server\n"), answer[:200]
        with ssh_clients.local_forward(SSH_PORT, "ssh-v1", "/workspace/.editor-ipc.sock", key=key) as local:
            assert ssh_clients.exchange(local, b"over the socket") == b"OVER THE SOCKET"
        print(f"editor tunnel: ssh -D start {opened - started:.2f}s, first forwarded request {first:.3f}s, "
              f"next five {', '.join(f'{t:.3f}' for t in timings)}s")
        # Another session: its own loopback and /tmp, where nothing of ssh-v1's listens.
        with ssh_clients.dynamic_forward(SSH_PORT, "ssh-v2", key=key) as socks:
            assert _socks_get(socks, "/editor.txt") == b""
        with ssh_clients.local_forward(SSH_PORT, "ssh-v2", "/workspace/.editor-ipc.sock", key=key) as local:
            assert ssh_clients.fetch(local) == b""
    finally:
        editor.stdin.close()
        editor.wait(timeout=30)
    lines = [l for l in client.host("local").audit(limit=300) if l["operation"] == "ssh_forward"]
    mine = [(l["status"], l["outcome"]) for l in lines if l["session"] == "ssh-v1"]
    assert mine == [(200, "accepted: 127.0.0.1:8123 -> 127.0.0.1:8123 in the sandbox (relayed by python3)")] * 6 + [
        (200, "accepted: socket /workspace/.editor-ipc.sock -> /workspace/.editor-ipc.sock in the sandbox (relayed by python3)")]
    theirs = [(l["status"], l["outcome"]) for l in lines if l["session"] == "ssh-v2"]
    assert theirs == [
        (502, "refused: 127.0.0.1:8123: nothing answered at 127.0.0.1:8123 in the sandbox (Connection refused)"),
        (502, "refused: socket /workspace/.editor-ipc.sock: nothing answered at /workspace/.editor-ipc.sock in the sandbox (No such "
              "file or directory)")]


def _tree(root: Path) -> None:
    (root / "src" / "deep").mkdir(parents=True)
    (root / "src" / "a.txt").write_text("alpha\n")
    (root / "src" / "deep" / "b.bin").write_bytes(bytes(range(256)) * 2048)  # 512 KiB
    (root / "src" / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "src" / "run.sh").chmod(0o755)


def _same(left: Path, right: Path) -> bool:
    compared = filecmp.dircmp(left, right)
    return (not compared.left_only and not compared.right_only and not compared.diff_files
            and not compared.funny_files and all(_same(left / d, right / d) for d in compared.common_dirs))


def test_rsync_over_ssh_copies_a_directory_into_the_sandbox_and_back(client, keys, tmp_path):
    _, _, key, line = keys
    box = client.claim("agent", "ssh-r1", ssh_keys=[line])
    _tree(tmp_path)
    rsync = images.rsync_program()
    remote_shell = shlex.join(["ssh", *ssh_clients.options(SSH_PORT, key)])

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([rsync, "-a", "--stats", "-e", remote_shell, *args], capture_output=True, timeout=120)

    started = time.monotonic()
    up = run(f"{tmp_path / 'src'}/", "ssh-r1@127.0.0.1:copy/")
    assert up.returncode == 0, up.stderr
    took = time.monotonic() - started
    assert box.read_file("copy/a.txt") == b"alpha\n"
    assert box.exec(["stat", "-c", "%u %a", "copy/run.sh"]).stdout == "10001 755\n"  # the sandbox's user, the mode
    box.write_file("copy/new.txt", b"made in the sandbox\n")
    (tmp_path / "src" / "a.txt").write_text("alpha, changed\n")
    again = run(f"{tmp_path / 'src'}/", "ssh-r1@127.0.0.1:copy/")
    assert again.returncode == 0, again.stderr
    assert b"Number of regular files transferred: 1" in again.stdout  # only the changed file
    down = run("ssh-r1@127.0.0.1:copy/", f"{tmp_path / 'back'}/")
    assert down.returncode == 0, down.stderr
    assert (tmp_path / "back" / "new.txt").read_bytes() == b"made in the sandbox\n"
    (tmp_path / "back" / "new.txt").unlink()
    assert _same(tmp_path / "src", tmp_path / "back")
    print(f"rsync -e ssh of 3 files (513 KiB) into the sandbox: {took:.2f}s")
    lines = [l for l in client.host("local").audit(limit=300) if l["operation"] == "ssh_exec" and
             l["session"] == "ssh-r1"]
    assert [l["outcome"] for l in lines] == ["opened", "closed (exit 0)"] * 3
