"""A host lost, seen by the client (failover after the first detection, its sessions reported lost) and by
`sandstack status` (the fleet view, text and JSON), over two hosts' runtimes on the fake backend."""

from __future__ import annotations

import json

import pytest

from sandstack.client import Client, HostUnavailable, Retry
from sandstack.tooling.cli import build_parser
from tests.runtime.test_client import OUTPUTS, two_hosts  # noqa: F401 -- the fixture

pytestmark = pytest.mark.usefixtures("two_hosts")


def _session_for(client: Client, host: str) -> str:
    return next(f"s{i}" for i in range(100) if client.hosts_for("py", f"s{i}")[0] == host)


def test_after_the_first_detection_claims_skip_the_lost_host_and_its_sessions_are_lost(two_hosts):
    envs, down, factory = two_hosts
    calls: list[str] = []

    def counting(endpoint, timeout, headers):
        real = factory(endpoint, timeout, headers)
        original = real.request

        def request(*args, **kwargs):
            calls.append(endpoint.name)
            return original(*args, **kwargs)
        real.request = request
        return real

    client = Client.from_outputs(OUTPUTS, http_factory=counting)
    held = client.claim("py", _session_for(client, "a"))
    assert held.host.name == "a"
    down.add("a")
    client = Client.from_outputs(OUTPUTS, http_factory=counting)
    first = next(f"n{i}" for i in range(100) if client.hosts_for("py", f"n{i}")[0] == "a")
    second = next(f"m{i}" for i in range(100) if client.hosts_for("py", f"m{i}")[0] == "a")
    calls.clear()
    assert client.claim("py", first).host.name == "b"
    # The detection: the host's bounded retries of a connection that was never made (Retry), then the next host.
    assert calls == ["a"] * Retry().attempts + ["b"]
    calls.clear()
    assert client.claim("py", second).host.name == "b"
    assert calls == ["b"]  # after it: the lost host is tried last, not first
    with pytest.raises(HostUnavailable) as lost:
        client.sandbox(f"a/{held.name}")
    assert (lost.value.host, lost.value.message) == ("a", "does not answer (ConnectError)")


def _status(argv, outputs, factory, monkeypatch, capsys):
    import sandstack.client as package

    monkeypatch.setattr(package.Client, "from_file",
                        classmethod(lambda cls, path, **kw: cls.from_outputs(json.loads(open(path).read()),
                                                                             http_factory=factory, **kw)))
    args = build_parser().parse_args(["status", "--outputs", str(outputs), *argv])
    return args.func(args), capsys.readouterr()


def test_status_shows_each_host_and_pool_and_a_lost_host(two_hosts, tmp_path, monkeypatch, capsys):
    envs, down, factory = two_hosts
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(OUTPUTS))
    client = Client.from_outputs(OUTPUTS, http_factory=factory)
    on_b = [client.claim("py", s) for s in [f"s{i}" for i in range(100) if client.hosts_for("py", f"s{i}")[0] == "b"][:2]]
    on_b[0].pause()
    code, out = _status([], outputs, factory, monkeypatch, capsys)
    assert code == 0
    assert out.out.splitlines() == [
        "HOST  HEALTH  POOL  WARM  BOUND  HIBERNATED  OTHER",
        "a     up      py    4     0      0           0",
        "a     up      web   1     0      0           0",
        "b     up      py    2     1      1           0",
        "b     up      web   1     0      0           0",
    ]
    down.add("a")
    code, out = _status(["--format", "json"], outputs, factory, monkeypatch, capsys)
    assert code == 1
    assert json.loads(out.out) == {"hosts": {
        "a": {"health": "lost", "error": "does not answer (ConnectError)", "pools": {"py": None}},
        "b": {"health": "up", "error": None, "pools": {
            "py": {"warm": 2, "bound": 1, "hibernated": 1, "other": 0},
            "web": {"warm": 1, "bound": 0, "hibernated": 0, "other": 0}}}}}
    code, out = _status([], outputs, factory, monkeypatch, capsys)
    assert (code, out.out.splitlines()[1], out.out.splitlines()[-1]) == (
        1, "a     lost    py    -     -      -           -", "a: lost (does not answer (ConnectError))")
