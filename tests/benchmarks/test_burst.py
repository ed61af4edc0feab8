"""The burst load generator (benchmarks.burst) and the concurrency section's burst round over it, against the runtime's
app over the fake backend, served by uvicorn as the runtime serves it."""

from __future__ import annotations

import socket
import threading

import pytest

from benchmarks.burst import burst, request
from benchmarks.sections.concurrency import _burst
from sandstack.client.endpoints import HostEndpoint
from sandstack.runtime.connections import bounded_protocol
from tests.runtime.conftest import PY, TOKEN, make_env
from tests.runtime.served import serve


@pytest.fixture
def runtime_url(tmp_path):
    env = make_env(tmp_path)
    with serve(env.api.app, http=bounded_protocol()) as url:
        yield url
    env.close()


def test_every_claim_of_a_burst_is_answered_on_its_own_connection_in_the_order_sent(runtime_url):
    port = int(runtime_url.rsplit(":", 1)[1])
    headers = {"Authorization": f"Bearer {TOKEN}"}
    claims = [request("POST", "/v1/sessions", "x", headers, {"pool": "py", "session": f"s{i}"}) for i in range(4)]
    claims.append(request("POST", "/v1/sessions", "x", headers, {"pool": "py", "session": "one-too-many"}))
    answers = burst(("127.0.0.1", port), claims, warmup=request("GET", "/healthz", "x", {}))
    assert [a.status for a in answers[:4]] == [201] * 4
    assert [a.json()["session"] for a in answers[:4]] == ["s0", "s1", "s2", "s3"]
    assert sorted(a.json()["sandbox"] for a in answers[:4]) == PY
    # the fifth finds the pool of 4 taken: its own answer, not another's
    assert answers[4].status == 503 and "no capacity" in answers[4].json()["error"]
    assert all(a.ms > 0 for a in answers)


def test_the_concurrency_sections_burst_sends_the_clients_claim(runtime_url):
    host = type("Host", (), {"endpoint": HostEndpoint("local", runtime_url, TOKEN)})()
    sessions = [("py", "bench-burst-0"), ("web", "bench-burst-1"), ("py", "bench-burst-2"), ("web", "bench-burst-3")]
    timings, failures, sandbox_of = _burst(host, sessions)
    assert sorted(timings) == ["bench-burst-0", "bench-burst-1", "bench-burst-2"]
    assert sandbox_of["bench-burst-1"] == "sandstack-t-web-0"
    assert timings["bench-burst-1"][1] == 0  # the replica's index: a warm hit of its pool
    assert len(failures) == 1 and failures[0].startswith("bench-burst-3: 503 ")


def test_an_answer_cut_off_names_its_request():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve_one() -> None:
        held = [listener.accept()[0] for _ in range(2)]
        for conn in held:
            conn.recv(65536)
        held[0].sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        held[1].close()  # no answer
        held[0].close()

    thread = threading.Thread(target=serve_one)
    thread.start()
    try:
        with pytest.raises(RuntimeError, match="request 1: the server closed the connection before its answer"):
            burst(("127.0.0.1", port), [request("GET", "/a", "x", {}), request("GET", "/b", "x", {})], timeout=30)
    finally:
        thread.join()
        listener.close()
