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
    sessions = [f"s{i}" for i in range(5)]  # five claims on a pool of 4: whichever comes last finds none
    claims = [request("POST", "/v1/sessions", "x", headers, {"pool": "py", "session": s}) for s in sessions]
    answers = burst(("127.0.0.1", port), claims, warmup=request("GET", "/healthz", "x", {}))
    assert sorted(a.status for a in answers) == [201, 201, 201, 201, 503]
    bound = [(s, a.json()) for s, a in zip(sessions, answers) if a.status == 201]
    assert all(answer["session"] == session for session, answer in bound)  # each its own answer
    assert sorted(answer["sandbox"] for _, answer in bound) == PY
    refused = next(a for a in answers if a.status == 503)
    assert "no capacity" in refused.json()["error"]
    assert all(a.ms > 0 and a.at > 0 for a in answers)


def test_the_concurrency_sections_burst_sends_the_clients_claim(runtime_url):
    host = type("Host", (), {"endpoint": HostEndpoint("local", runtime_url, TOKEN)})()
    sessions = [("py", "bench-burst-0"), ("web", "bench-burst-1"), ("py", "bench-burst-2"), ("web", "bench-burst-3")]
    timings, failures, sandbox_of, cpu = _burst(host, sessions)
    web = [s for s in ("bench-burst-1", "bench-burst-3") if s in timings]  # one sandbox: one of the two has it
    assert sorted(timings) == sorted(["bench-burst-0", "bench-burst-2", *web]) and len(web) == 1
    assert sandbox_of[web[0]] == "sandstack-t-web-0"
    assert timings[web[0]][1] == 0  # the replica's index: a warm hit of its pool
    other = "bench-burst-3" if web[0] == "bench-burst-1" else "bench-burst-1"
    assert len(failures) == 1 and failures[0].startswith(f"{other}: 503 ")
    start, end = cpu["ends"][web[0]]
    assert start < end and cpu["sampler"].samples[0]["at"] <= start
    used = cpu["sampler"].between(start, end)
    assert set(used) == {"wall", "machine", "cgroup", "own", "daemon"} and used["wall"] >= end - start


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
