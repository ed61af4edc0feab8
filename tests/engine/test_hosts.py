"""One stack on three real Docker hosts — a unix socket, ssh:// and tcp:// with TLS (testbed/hosts.py) — applied
through one provider per host (testbed/harness/hosts_backend.py), then one host lost and back.

Proven on each host kind (the properties that can differ per host; the rest of the single-host engine suite is
host-independent and stays there): the guard, gateway and runtime up; the egress modes (allow-all reaches this
machine's side of the host's link, deny-all does not); isolation between pools; the host closed to sandboxes (its
runtime port, from a sandbox); the memory limit. Then the faults: a host's daemon stopped → claims fail over to the
pool's other hosts in bounded time, its sessions are reported lost, a re-apply names the unreachable host and
changes nothing elsewhere; the host back is reconciled. Wrong TLS material or ssh key: an error naming the host,
no secret in it.
"""

from __future__ import annotations

import time

import pytest

from sandstack.client.client import HostUnavailable
from testbed.harness.hosts_backend import HostsBackend, HostUnreachable
from testbed.hosts import _tls_material
from testbed.hosts_stack import ECHO_PORT, PORT, STACK, claim_seconds, fleet_deployed
from testbed.waiting import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.slow]

KINDS = ["local", "ssh", "tcp"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with fleet_deployed(KINDS, tmp_path_factory.mktemp("hosts")) as deployed:
        yield deployed


def _probe(container, address: str, port: int) -> bool:
    """Whether a TCP connection from inside the sandbox (as its user) to address:port succeeds."""
    code = (f"import socket\ntry:\n socket.create_connection(({address!r}, {port}), timeout=2).close(); print('open')\n"
            "except OSError as e:\n print('shut', e)")
    result = container.exec_run(["python3", "-c", code])
    return result.output.decode().startswith("open")


def _ip(container, network_suffix: str) -> str:
    networks = container.attrs["NetworkSettings"]["Networks"]
    return next(n["IPAddress"] for name, n in networks.items() if name.endswith(network_suffix))


@pytest.mark.parametrize("host", KINDS)
def test_each_host_kind_runs_the_stack_and_enforces_it(fleet, host):
    opened = fleet.container(host, f"sandstack-{STACK}-open-0")
    closed = fleet.container(host, f"sandstack-{STACK}-closed-0")
    roles = {c.name for c in fleet.hosts[host].client().containers.list() if "_" in c.name}
    assert {f"sandstack-{STACK}_{r}" for r in ("guard", "gateway", "logger", "runtime")} <= roles, roles
    logged = fleet.container(host, f"sandstack-{STACK}-logged-0")
    via = logged.exec_run(["curl", "-sS", "--max-time", "5", f"http://{fleet.hosts[host].peer_address}:{ECHO_PORT}/"])
    assert (via.exit_code, via.output) == (0, b"echo\n")  # logged allow-all: through the host's gateway
    peer, me = fleet.hosts[host].peer_address, fleet.hosts[host].address
    # Egress modes: allow-all leaves the host (to this machine's end of the link), deny-all does not.
    seen = len(fleet.echo.peers)
    assert _probe(opened, peer, ECHO_PORT)
    assert not _probe(closed, peer, ECHO_PORT)
    assert fleet.echo.peers[seen:] == [me]  # the direct one, masqueraded by the host; the closed one never arrived
    # Isolation between pools (a server in the other pool's sandbox, which answers on its own network), and the
    # host closed to its sandboxes (its own address, where its runtime listens).
    closed.exec_run(["python3", "-m", "http.server", str(ECHO_PORT)], detach=True)
    target = _ip(closed, "closed")
    assert wait_until(lambda: _probe(closed, target, ECHO_PORT), timeout=10, what="the server in the closed pool")
    assert not _probe(opened, target, ECHO_PORT)
    assert not _probe(opened, me, PORT)
    # Limits, from inside (the kernel's cgroup of the sandbox).
    limit = opened.exec_run(["cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]).output.decode().strip()
    assert limit == str(128 * 2**20)


def test_every_host_answers_claims_through_its_runtime(fleet):
    client = fleet.client()
    try:
        seen = {}
        for i in range(12):
            sandbox = client.claim("open", f"spread-{i}")
            seen.setdefault(sandbox.host.name, sandbox)
            if len(seen) == 3:
                break
        assert sorted(seen) == sorted(KINDS)
        for name, sandbox in seen.items():
            assert sandbox.exec(["sh", "-c", "echo hi"])["stdout"] == "hi\n"
    finally:
        for name in KINDS:
            for sandbox in client.host(name).sandboxes():
                if sandbox.get("session"):
                    client.host(name).release(sandbox["session"])
        client.close()


def test_wrong_credentials_name_the_host_and_no_secret(fleet, tmp_path):
    backend = HostsBackend("wrong-credentials")
    try:
        ssh, tcp = fleet.hosts["ssh"], fleet.hosts["tcp"]
        backend.providers["ssh"] = {"host": ssh.endpoint, "sshOpts": ssh.ssh_opts(ssh.dir / "wrong_key")}
        with pytest.raises(HostUnreachable) as failure:
            backend.provider_host("urn:ssh", "ssh")
        assert str(failure.value) == f"host {ssh.endpoint}: ssh failed (root@{ssh.address}: Permission denied (publickey).)"
        wrong = _tls_material(tmp_path, "other", tcp.address)  # a CA and client the daemon never trusted
        backend.providers["tcp"] = {"host": tcp.endpoint, "caMaterial": wrong["otherTls.ca"],
                                    "certMaterial": wrong["otherTls.cert"], "keyMaterial": wrong["otherTls.key"]}
        with pytest.raises(HostUnreachable) as failure:
            backend.provider_host("urn:tcp", "tcp")
        message = str(failure.value)
        assert message.startswith(f"host {tcp.endpoint}: the Docker daemon does not answer (")
        assert "CERTIFICATE_VERIFY_FAILED" in message
        for pem in wrong.values():
            assert not any(line in message for line in pem.splitlines() if len(line) > 8)
    finally:
        backend.close()


def test_a_host_lost_then_back(fleet):
    client = fleet.client()
    tcp = fleet.hosts["tcp"]
    try:
        # A session the pool's rotation sends to the tcp host first, bound there before the loss.
        session = next(f"lost-{i}" for i in range(100) if client.hosts_for("open", f"lost-{i}")[0] == "tcp")
        held = client.claim("open", session)
        assert held.host.name == "tcp"
        healthy = claim_seconds(client, "open", "healthy", 5)
        tcp.stop_daemon()
        # The session on the lost host is reported lost, naming its host.
        with pytest.raises(HostUnavailable) as lost:
            client.sandbox(f"tcp/{held.name}")
        assert (lost.value.host, lost.value.message) == ("tcp", "does not answer (ConnectError)")
        # Claims that would go to the tcp host first fail over to the pool's other hosts, in bounded time; the
        # first one detects the loss.
        again = next(f"again-{i}" for i in range(100) if client.hosts_for("open", f"again-{i}")[0] == "tcp")
        started = time.monotonic()
        moved = client.claim("open", again)
        detect = time.monotonic() - started
        assert moved.host.name in ("local", "ssh") and detect < 5 and "tcp" in client.down
        failover = claim_seconds(client, "open", "failover", 5, prefer="tcp")
        print(f"\n[hosts] deploy 3 hosts {fleet.deploy_seconds:.1f}s; claim p50 healthy {healthy*1000:.0f}ms, "
              f"through failover {failover*1000:.0f}ms; lost host detected in {detect*1000:.0f}ms")
        assert failover <= max(2 * healthy, 0.05)
        # A re-apply names the unreachable host and changes nothing on the others.
        reapplied = fleet.up(check=False)
        assert isinstance(reapplied.error, HostUnreachable)
        assert str(reapplied.error).startswith(f"host {tcp.endpoint}: the Docker daemon does not answer")
        assert reapplied.count("same") > 0 and {a.kind for a in reapplied.actions} == {"same"}, str(reapplied)
        # Back: the daemon restarts its containers; a re-apply reconciles what is missing and the runtime answers.
        tcp.start_daemon()
        back = fleet.up()
        assert back.count("create") == back.count("delete") == 0, str(back)
        assert wait_until(lambda: _pools(client, "tcp"), timeout=60, what="the tcp host's runtime back")
    finally:
        for name in KINDS:
            try:
                for sandbox in client.host(name).sandboxes():
                    if sandbox.get("session"):
                        client.host(name).release(sandbox["session"])
            except HostUnavailable:
                pass
        client.close()


def _pools(client, host: str) -> list | None:
    try:
        return client.host(host).pools()
    except HostUnavailable:
        return None
