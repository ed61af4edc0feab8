"""SSH and SFTP into a session's sandbox (sandstack.runtime.ssh, sftp; docs/design/ssh.md), asyncssh's client against
the runtime's server over the fake backend: logins by token and by a claim's key, refusals (a wrong token, another
session's, a released session's, a key of another session), exec with its exit status and stderr apart, a PTY
shell, SFTP put/get/list inside the workspace only, no forwarding, and the audit lines (never a token)."""

from __future__ import annotations

import asyncio
import shutil

import asyncssh
import pytest

from sandstack.runtime.ssh import SshEndpoint

HOST_KEY = asyncssh.generate_private_key("ssh-ed25519")
USER_KEY = asyncssh.generate_private_key("ssh-ed25519")
OTHER_KEY = asyncssh.generate_private_key("ssh-ed25519")


def public(key: asyncssh.SSHKey) -> str:
    return key.export_public_key("openssh").decode().strip()


def run(env, test):
    """`test(port)` against an SSH endpoint of `env`'s runtime on a free loopback port."""

    async def main():
        endpoint = SshEndpoint(env.runtime, env.audit, HOST_KEY.export_private_key().decode(), ["127.0.0.1"], 0)
        port = await endpoint.serve()
        try:
            return await test(port)
        finally:
            await endpoint.close()

    return asyncio.run(main())


def connect(port: int, username: str, **auth):
    return asyncssh.connect("127.0.0.1", port, username=username, known_hosts=None, agent_path=None,
                            client_keys=auth.pop("client_keys", None), password=auth.pop("password", None),
                            preferred_auth=auth.pop("preferred_auth", "publickey,password"), **auth)


def audit_lines(env, operation: str) -> list[dict]:
    return [line for line in env.audit.tail(200) if line["operation"] == operation]


def test_a_session_token_logs_in_and_a_command_returns_its_exit_status_and_stderr_apart(env):
    token = env.claim("ssh-1")["token"]

    async def test(port):
        async with connect(port, "ssh-1", password=token) as conn:
            result = await conn.run("basename \"$(pwd -P)\"; echo to-stderr >&2; exit 3", encoding=None)
            piped = await conn.run("tr a-z A-Z", input=b"fed on stdin\n", encoding=None)
        return result, piped

    result, piped = run(env, test)
    assert (result.stdout, result.stderr, result.exit_status) == (b"workspace\n", b"to-stderr\n", 3)
    assert (piped.stdout, piped.exit_status) == (b"FED ON STDIN\n", 0)
    text = env.state_dir.joinpath("audit.log").read_text()
    assert token not in text
    [login] = audit_lines(env, "ssh_login")
    assert (login["outcome"], login["scope"], login["session"], login["status"]) == (
        "accepted (password)", "session:host/ssh-1", "ssh-1", 200)
    assert [(l["outcome"], l["status"]) for l in audit_lines(env, "ssh_exec")] == [
        ("opened", 101), ("closed (exit 3)", 200), ("opened", 101), ("closed (exit 0)", 200)]


@pytest.mark.parametrize("case", ["wrong-token", "other-session", "released", "host-token"])
def test_a_login_is_refused_with_a_wrong_token_another_session_s_a_released_one_s_or_the_host_s(env, case):
    from tests.runtime.conftest import TOKEN

    mine, other = env.claim("ssh-a")["token"], env.claim("ssh-b")["token"]
    password = {"wrong-token": "sst_" + "x" * 43, "other-session": other, "released": mine,
                "host-token": TOKEN}[case]
    if case == "released":
        assert env.api.delete("/v1/sessions/ssh-a").status_code == 200

    async def test(port):
        with pytest.raises(asyncssh.PermissionDenied):
            async with connect(port, "ssh-a", password=password, preferred_auth="password"):
                pass

    run(env, test)
    [line] = audit_lines(env, "ssh_login")
    why = {"wrong-token": "password: not a live session token",
           "other-session": "password: a session token of another session than 'ssh-a'",
           "released": "password: not a live session token",
           "host-token": "password: not a live session token"}[case]
    assert (line["outcome"], line["status"], line["session"], line["scope"]) == (f"refused: {why}", 401, "ssh-a",
                                                                                    None)
    assert password not in env.state_dir.joinpath("audit.log").read_text()


def test_a_claim_s_key_logs_in_to_its_session_only_and_not_after_its_release(env):
    env.claim("ssh-k", ssh_keys=[public(USER_KEY) + " alice@laptop"])
    env.claim("ssh-other")

    async def test(port):
        async with connect(port, "ssh-k", client_keys=[USER_KEY]) as conn:
            mine = await conn.run("echo $((6 * 7))", encoding=None)
        with pytest.raises(asyncssh.PermissionDenied):  # the key is registered for ssh-k alone
            async with connect(port, "ssh-other", client_keys=[USER_KEY]):
                pass
        with pytest.raises(asyncssh.PermissionDenied):  # a key no claim registered
            async with connect(port, "ssh-k", client_keys=[OTHER_KEY]):
                pass
        assert env.api.delete("/v1/sessions/ssh-k").status_code == 200
        with pytest.raises(asyncssh.PermissionDenied):
            async with connect(port, "ssh-k", client_keys=[USER_KEY]):
                pass
        return mine

    assert run(env, test).stdout == b"42\n"
    fingerprint = USER_KEY.get_fingerprint("sha256")
    lines = [(l["session"], l["outcome"]) for l in audit_lines(env, "ssh_login")]
    assert lines == [
        ("ssh-k", f"accepted (publickey {fingerprint})"),
        ("ssh-other", f"refused: publickey {fingerprint}: not registered by a claim of session 'ssh-other' that is "
                      "live"),
        ("ssh-k", f"refused: publickey {OTHER_KEY.get_fingerprint('sha256')}: not registered by a claim of session "
                  "'ssh-k' that is live"),
        ("ssh-k", f"refused: publickey {fingerprint}: not registered by a claim of session 'ssh-k' that is live")]


def test_a_claim_with_a_bad_key_is_a_422_that_binds_nothing(env):
    bad = "ssh-ed25519 " + public(USER_KEY).split()[1][:-8] + "AAAAAAAA"
    rsa_named = "ssh-rsa " + public(USER_KEY).split()[1]
    for key, message in [
            (rsa_named, f"ssh_keys: the key {public(USER_KEY).split()[1][:16]!r}... is not an ssh-rsa key"),
            ("ssh-dss AAAAB3NzaC1kc3MAAACBAP", None)]:
        response = env.api.post("/v1/sessions", json={"pool": "py", "session": "ssh-bad", "ssh_keys": [key]})
        assert response.status_code == 422, response.text
        if message:
            assert response.json()["error"] == message
    assert env.api.get("/v1/sessions/ssh-bad").status_code == 404
    assert bad  # a key that only fails asyncssh's own parse is refused at login, not at the claim


def test_a_pty_shell_has_the_client_s_size_and_its_exit_status(env):
    token = env.claim("ssh-pty")["token"]

    async def test(port):
        async with connect(port, "ssh-pty", password=token) as conn:
            process = await conn.create_process(term_type="xterm", term_size=(100, 30), encoding=None)
            process.stdin.write(b"stty size; [ -t 0 ] && echo is-$((6 * 7))-tty; exit 4\n")
            output = b""
            while not process.stdout.at_eof():
                chunk = await asyncio.wait_for(process.stdout.read(4096), 20)
                if not chunk:
                    break
                output += chunk
            await process.wait()
            return output, process.exit_status

    output, status = run(env, test)
    assert b"30 100\r\n" in output and b"is-42-tty\r\n" in output
    assert status == 4


def test_sftp_puts_gets_and_lists_in_the_workspace_only(env, tmp_path):
    claimed = env.claim("ssh-sftp")
    token = claimed["token"]
    local = tmp_path / "local.bin"
    local.write_bytes(bytes(range(256)) * 3)  # 768 bytes: under the test pool's upload limit of 1 KiB
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * 2000)
    back = tmp_path / "back.bin"

    async def test(port):
        async with connect(port, "ssh-sftp", password=token) as conn:
            async with conn.start_sftp_client() as sftp:
                cwd = await sftp.realpath(".")
                await sftp.put(str(local), "up.bin", block_size=256)  # several writes, in flight at once
                await sftp.mkdir("dir")
                await sftp.rename("up.bin", "dir/up.bin")
                await sftp.get("dir/up.bin", str(back), block_size=256)
                names = sorted(await sftp.listdir("dir"))
                size = (await sftp.stat("/workspace/dir/up.bin")).size
                with pytest.raises(asyncssh.SFTPPermissionDenied) as outside:
                    await sftp.listdir("/etc")
                with pytest.raises(asyncssh.SFTPNoSuchFile):
                    await sftp.get("nope.txt", str(tmp_path / "nope"))
                with pytest.raises(asyncssh.SFTPFailure) as too_big:
                    await sftp.put(str(big), "big.bin")
                left = sorted(await sftp.listdir("."))
                return cwd, names, size, outside.value.reason, too_big.value.reason, left

    cwd, names, size, outside, too_big, left = run(env, test)
    assert cwd == "/workspace"
    assert back.read_bytes() == local.read_bytes()
    assert names == [".", "..", "up.bin"] and size == 768
    assert env.backend.path(claimed["sandbox"], "/workspace/dir/up.bin").read_bytes() == local.read_bytes()
    assert outside == "/etc is outside the workspace /workspace (SFTP reaches the workspace; the shell reaches the rest)"
    assert too_big == ("writing big.bin: past the pool's upload limit of 1024 bytes (session.upload_limit); nothing "
                       "was written")
    assert left == [".", "..", "dir"]
    assert [l["outcome"] for l in audit_lines(env, "sftp")] == ["opened", "closed"]


def test_no_forwarding_reaches_anything_from_a_login(env):
    token = env.claim("ssh-fwd")["token"]

    async def test(port):
        async with connect(port, "ssh-fwd", password=token) as conn:
            with pytest.raises(asyncssh.ChannelOpenError):
                await conn.open_connection("127.0.0.1", port)  # the runtime's own SSH port, from the host
            with pytest.raises(asyncssh.ChannelListenError):
                await conn.start_server(lambda *a: None, "127.0.0.1", 0)

    run(env, test)


def test_the_runtime_refuses_to_start_ssh_without_its_host_key_naming_the_variable_never_a_key(env):
    from sandstack.runtime.__main__ import start_ssh

    config = env.runtime.config.__class__(**{**env.runtime.config.__dict__, "ssh_port": 2222})
    with pytest.raises(ValueError) as missing:
        start_ssh(env.runtime, env.api.app, config, {})
    assert str(missing.value) == ("SANDSTACK_RUNTIME_SSH_HOST_KEY must hold the SSH host key (runtime.ssh.host_key's "
                                  "secret)")
    with pytest.raises(ValueError) as bad:
        start_ssh(env.runtime, env.api.app, config, {"SANDSTACK_RUNTIME_SSH_HOST_KEY": "not-a-key-0123456789"})
    assert str(bad.value).startswith("the SSH host key is not a private key asyncssh reads (")
    assert "not-a-key-0123456789" not in str(bad.value)


def test_an_ssh_port_change_needs_a_restart_and_the_api_s_port_is_refused(env):
    from dataclasses import replace

    from sandstack.runtime.reload import NeedsRestart

    with pytest.raises(NeedsRestart, match=r"ssh_port None -> 2222"):
        env.runtime.check_config(replace(env.runtime.config, ssh_port=2222))
    with pytest.raises(ValueError, match=r"^ssh_port: 7480 must be 1-65535 and not the API's port 7480$"):
        replace(env.runtime.config, ssh_port=7480)


def test_the_clients_claim_registers_ssh_keys_sync_and_async(env):
    from sandstack.client import AsyncClient, Client
    from tests.runtime.served import serve
    from tests.runtime.test_client_async import outputs

    with serve(env.api.app) as url:
        with Client.from_outputs(outputs(url)) as client:
            sync = client.claim("py", "ssh-sync", ssh_keys=[public(USER_KEY)])

        async def claim_async():
            async with AsyncClient.from_outputs(outputs(url)) as client:
                return await client.claim("py", "ssh-async", ssh_keys=[public(OTHER_KEY)])

        asynced = asyncio.run(claim_async())

    async def test(port):
        results = []
        for user, key in (("ssh-sync", USER_KEY), ("ssh-async", OTHER_KEY)):
            async with connect(port, user, client_keys=[key]) as conn:
                results.append((await conn.run("echo ok", encoding=None)).stdout)
        return results

    assert run(env, test) == [b"ok\n", b"ok\n"]
    assert (sync.session, asynced.session) == ("ssh-sync", "ssh-async")


@pytest.mark.skipif(not all(shutil.which(c) for c in ("ssh", "sftp", "scp", "ssh-keygen")),
                    reason="OpenSSH's clients are not installed")
def test_this_machine_s_openssh_clients_exec_sftp_and_scp_through_the_endpoint(env, tmp_path):
    """OpenSSH's own clients (not asyncssh's) over the fake backend: ssh by key and by token (SSH_ASKPASS), sftp and
    scp -s both ways, and the released session's key refused."""
    from testbed import ssh_clients

    key, line = ssh_clients.keypair(tmp_path, "user")
    claimed = env.claim("ssh-o", ssh_keys=[line])
    endpoint = SshEndpoint(env.runtime, env.audit, HOST_KEY.export_private_key().decode(), ["127.0.0.1"], 0)
    endpoint.start()
    port = endpoint.port
    ran = ssh_clients.ssh(port, "ssh-o", "echo out-$((6 * 7)); echo err >&2; exit 7", key=key)
    assert (ran.returncode, ran.stdout, ran.stderr) == (7, b"out-42\n", b"err\n")
    by_token = ssh_clients.ssh(port, "ssh-o", "basename \"$(pwd)\"", env=ssh_clients.askpass(tmp_path, claimed["token"]))
    assert (by_token.returncode, by_token.stdout) == (0, b"workspace\n"), by_token.stderr
    local = tmp_path / "local.txt"
    local.write_bytes(b"through sftp\n" * 40)  # 520 bytes: under the test pool's 1 KiB upload limit
    done = ssh_clients.sftp_batch(port, "ssh-o", [f"put {local} up.txt", f"get up.txt {tmp_path / 'got.txt'}"],
                                  key=key)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "got.txt").read_bytes() == local.read_bytes()
    assert ssh_clients.scp(port, str(local), "ssh-o@127.0.0.1:scp.txt", key=key).returncode == 0
    back = ssh_clients.scp(port, "ssh-o@127.0.0.1:scp.txt", str(tmp_path / "back.txt"), key=key)
    assert back.returncode == 0, back.stderr
    assert (tmp_path / "back.txt").read_bytes() == local.read_bytes()
    assert env.backend.path(claimed["sandbox"], "/workspace/scp.txt").read_bytes() == local.read_bytes()
    assert env.api.delete("/v1/sessions/ssh-o").status_code == 200
    refused = ssh_clients.ssh(port, "ssh-o", "true", key=key)
    assert refused.returncode == 255 and b"Permission denied" in refused.stderr


def test_a_session_s_release_closes_its_open_ssh_connections(env):
    token = env.claim("ssh-end")["token"]

    async def test(port):
        async with connect(port, "ssh-end", password=token) as conn:
            assert (await conn.run("true")).exit_status == 0
            loop = asyncio.get_running_loop()
            released = await loop.run_in_executor(None, env.api.delete, "/v1/sessions/ssh-end")
            assert released.status_code == 200
            await asyncio.wait_for(conn.wait_closed(), 20)  # closed by the runtime, not by this client
            with pytest.raises((asyncssh.ChannelOpenError, asyncssh.DisconnectError, OSError)):
                await conn.run("true")

    run(env, test)
