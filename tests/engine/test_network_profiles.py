"""Network profiles on a real engine (docs/design/network-profiles.md): a session switched between its template's
declared profiles through the host's runtime, enforced by the gateway at the next request, without a restart of the
gateway or the sandbox.

One stack: pool `agent` whose template declares `open` (allow-list: allowed.test) and `locked` (deny-all), starting
in `open`; the host's runtime. "The internet" is a test server on the stack's egress network.
"""

from __future__ import annotations

import pytest
import yaml

from sandstack.client import InvalidRequest
from testbed.deploy import engine_spec
from testbed.waiting import wait_until
from tests.engine.net.probes import curl, template
from tests.engine.net.stack import access_log, deployed
from tests.engine.runtime_helpers import local_client

pytestmark = pytest.mark.docker

PORT = 17548
TOKEN = "engine-test-runtime-token-prof-0001"
PROFILES = {"start": "open", "profiles": {"open": {"egress": "allow-list", "allow": ["allowed.test"]},
                                          "locked": {"egress": "deny-all"}}}


def stack_spec(image: str) -> str:
    agent = template(image, {})
    del agent["network"]
    agent["network_profiles"] = PROFILES
    data = yaml.safe_load(engine_spec(image, {"agent": agent}, {"agent": {"template": "agent", "hosts": ["local"]}}))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture(scope="module")
def net(docker_client, debian_image, harness_sweep_orphans, tmp_path_factory):
    with deployed(__file__, "np", tmp_path_factory.mktemp("profiles"), stack_spec(debian_image), docker_client,
                  debian_image, {"agent": 1}, secret_config={"runtimeToken": TOKEN}) as stack, \
            local_client(PORT, TOKEN, ["agent"]) as client:
        stack.extra["web"] = stack.lab.server("web", stack.name("egress"), ["tcp:80"], aliases=["allowed.test"])
        stack.extra["client"] = client
        yield stack


def _started(container) -> tuple[str, str]:
    container.reload()
    return container.id, container.attrs["State"]["StartedAt"]


def test_a_session_switched_to_locked_is_refused_by_the_gateway_and_back_in_open_reaches_the_origin(net):
    net.proves("Container.envs")
    session = net.extra["client"].claim("agent", "prof-1")
    sandbox, gateway = net.sandbox("agent"), net.gateway
    assert session.name == sandbox.name
    before = (_started(sandbox), _started(gateway))
    assert session.network().profile == "open"
    assert curl(sandbox, "http://allowed.test/").status == 200

    switched = session.network("locked")
    assert (switched.profile, switched.previous) == ("locked", "open")
    since = len(access_log(net))
    got = curl(sandbox, "http://allowed.test/")
    assert got.status == 403, got
    wait_until(lambda: any("dest=allowed.test:80 verdict=TCP_DENIED" in line and "pool=agent" in line
                           for line in access_log(net)[since:]), 10, what="the refusal in the gateway's log")

    assert session.network("open").previous == "locked"
    assert curl(sandbox, "http://allowed.test/").status == 200
    # In place: the same containers, never restarted.
    assert (_started(sandbox), _started(gateway)) == before
    session.release()  # the pool's one sandbox, for the next test


def test_an_undeclared_profile_is_refused_and_the_session_keeps_its_own(net):
    session = net.extra["client"].claim("agent", "prof-2")
    session.network("locked")
    with pytest.raises(InvalidRequest) as refused:
        session.network("everything")
    assert "network profile 'everything' is not declared for pool 'agent'; its profiles: open, locked" in str(
        refused.value)
    assert session.network().profile == "locked"
    assert curl(net.sandbox("agent"), "http://allowed.test/").status == 403
    session.release()


def test_a_released_session_leaves_its_sandbox_in_the_start_profile(net):
    client = net.extra["client"]
    session = client.claim("agent", "prof-3")
    session.network("locked")
    session.release()
    again = client.claim("agent", "prof-4")
    assert again.network().profile == "open"
    assert curl(net.sandbox("agent"), "http://allowed.test/").status == 200
