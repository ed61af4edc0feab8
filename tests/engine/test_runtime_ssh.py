"""SSH and SFTP into a session's sandbox on the real engine (issue 39 item 4; docs/design/ssh.md): this machine's own
`ssh`, `sftp` and `scp` log in to the runtime's SSH endpoint with a key the claim registered or with the session's
token (SSH_ASKPASS), run a command in the session's sandbox as its user (exit status returned), put and get a file
both ways, and are refused with another session's name, and with a released session's key and token. The audit log
names each login's scope and never a token. `ssh -L` reaches a server in the session's own sandbox (forwarding:
local), and a forward to another sandbox or the pool's gateway is refused."""

from __future__ import annotations

import subprocess
import time
import urllib.request

import pytest
import yaml

from sandstack.client import Client
from testbed import ssh_clients
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
def stack(debian_image, harness_sweep_orphans, tmp_path_factory, keys):
    with shared_deployment(__file__, tmp_path_factory.mktemp("runtime-ssh"), _spec(debian_image),
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
        (200, f"accepted: localhost:8000 -> {mine}:8000"), (200, f"accepted: {mine}:8000 -> {mine}:8000"),
        (403, f"refused: {theirs}:8000: {theirs}:8000 is not this session's sandbox: a forward reaches only its own "
              f"ports, at {mine} (or localhost, which names it)"),
        (403, f"refused: {gateway}:{PORT}: {gateway}:{PORT} is not this session's sandbox: a forward reaches only "
              f"its own ports, at {mine} (or localhost, which names it)")]
    assert {l["session"] for l in lines[-4:]} == {"ssh-f1"}
