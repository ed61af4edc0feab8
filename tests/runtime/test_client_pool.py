"""The client's connection pool under many threads: the default httpx client of a host never closes a connection the
pool has handed to a request (encode/httpcore#1110: httpcore 1.0.9 closed such a connection as a surplus keep-alive
one, and a request that had started on it waited for its read timeout; one claim of a 200-thread burst waited 300 s).

The pool's passes are watched (httpcore's own `_assign_requests_to_connections`, which returns the connections it
closes): a close of a connection some request of the pool still holds is the race, whether or not that request had
started yet, so the test counts every one instead of waiting for the rare hang it causes."""

from __future__ import annotations

import threading

import httpcore
import httpx
import pytest

from sandstack.client import Client
from sandstack.client.transport import CONNECTIONS, POOL
from tests.runtime.conftest import TOKEN
from tests.runtime.served import serve

THREADS = 60
CALLS = 10


@pytest.fixture
def closed_while_held(monkeypatch):
    """The connections a pool pass closed while a request of the pool held them."""
    closed: list[object] = []
    passes = [httpcore.ConnectionPool._assign_requests_to_connections]

    def watched(pool):
        closing = passes[0](pool)
        held = {id(r.connection) for r in pool._requests if r.connection is not None}
        closed.extend(c for c in closing if id(c) in held)
        return closing

    monkeypatch.setattr(httpcore.ConnectionPool, "_assign_requests_to_connections", watched)
    return closed


def test_threads_sharing_a_sync_client_never_have_a_held_connection_closed(tmp_path, closed_while_held):
    from tests.runtime.conftest import make_env

    env = make_env(tmp_path)
    with serve(env.api.app) as url, Client.from_outputs({"hosts": {"local": {"url": url, "token": TOKEN}},
                                                        "pools": {"py": ["local"]}}) as client:
        host = client.host("local")
        barrier = threading.Barrier(THREADS)
        answers: list[object] = []

        def calls() -> None:
            barrier.wait()
            for _ in range(CALLS):
                answers.append(host.pools())

        threads = [threading.Thread(target=calls) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    env.close()
    assert len(answers) == THREADS * CALLS
    assert closed_while_held == []


def test_the_default_pools_keep_every_connection_they_open_and_never_expire_one():
    assert POOL == httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS,
                                keepalive_expiry=None)
    from sandstack.client.async_client import _default_http as async_http
    from sandstack.client.client import _default_http as sync_http
    from sandstack.client.endpoints import HostEndpoint

    endpoint = HostEndpoint("local", "http://127.0.0.1:1", TOKEN)
    for http in (sync_http(endpoint, 5, {}), async_http(endpoint, 5, {})):
        pool = http._transport._pool
        assert (pool._max_connections, pool._max_keepalive_connections, pool._keepalive_expiry) == \
            (CONNECTIONS, CONNECTIONS, None)
