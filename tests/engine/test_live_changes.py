"""The change drill on the engine (docs/design/live-changes.md): ordinary changes applied to a live stack while its
sandboxes keep making requests through the gateway every 100 ms and a session of the host's runtime streams a
process's output. For each change: no request fails (but the instant squid reopens its ports, below), no host
service and no sandbox is renewed or restarted that the diff does not say is, the diff's impact equals what
happened (testbed/drill.py counts it from outside: container ids and start times, each loop's own log), and the
session's process keeps running and streaming.

One stack for the module, changed step by step (each test applies the next change; they run in file order):
pools `listed` and `other` (allow-list, each its own list), `direct` (unlogged allow-all: a direct route, whose
connection bounds the guard holds), `prof` (network profiles `open` and `locked`, switched at run time through the
runtime: no apply). "The internet" is a test server on the stack's egress network.
"""

from __future__ import annotations

import threading
import time

import pytest
import yaml

from testbed.deploy import engine_spec
from testbed.drill import Drill
from testbed.waiting import wait_until
from tests.engine.net.probes import curl, template
from tests.engine.net.stack import access_log, deployed
from tests.engine.runtime_helpers import local_client

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ALIASES = ["allowed.test", "other.test", "new.test", "third.test"]
PORT = 17547
TOKEN = "engine-test-runtime-token-live-0001"
INGRESS_PORT = 17548
URL_PORTS = [{"port": 8080, "exposure": "url", "name": "app"}, {"port": 8081, "exposure": "url", "name": "api"}]


def stack_spec(image: str, *, listed=("allowed.test",), third=False, other_replicas=1, rate=100,
               exec_max="1h", ingress=False, url_ports=0) -> str:
    templates = {
        "listed": template(image, {"egress": "allow-list", "allow": list(listed)}),
        "other": template(image, {"egress": "allow-list", "allow": ["other.test"]}),
        "direct": template(image, {"egress": "allow-all", "log": False, "connections": {"rate": rate}}),
        "prof": {**{k: v for k, v in template(image, {}).items() if k != "network"}, "network_profiles": {
            "start": "open", "profiles": {"open": {"egress": "allow-list", "allow": ["allowed.test"]},
                                          "locked": {"egress": "deny-all"}}}},
    }
    pools = {"listed": {"template": "listed", "hosts": ["local"]},
             "prof": {"template": "prof", "hosts": ["local"]},
             "other": {"template": "other", "hosts": ["local"], "replicas": other_replicas},
             "direct": {"template": "direct", "hosts": ["local"]}}
    templates["listed"]["session"] = {"exec_max_timeout": exec_max}
    if third:
        templates["third"] = template(image, {"egress": "allow-list", "allow": ["third.test"]})
        pools["third"] = {"template": "third", "hosts": ["local"]}
    templates["prof"]["ports"] = URL_PORTS[:url_ports]
    data = yaml.safe_load(engine_spec(image, templates, pools))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    if ingress:
        data["hosts"]["local"]["ingress"] = {"domain": "lc.test", "port": INGRESS_PORT, "exposure": "host"}
    return yaml.safe_dump(data, sort_keys=False)


class Stream:
    """A session's process that prints a line every 0.2 s, read by a thread as the runtime streams it."""

    def __init__(self, sandbox):
        self.process = sandbox.start(script="i=0; while :; do i=$((i+1)); echo $i; sleep 0.2; done", timeout=600)
        self.lines: list[float] = []
        self.ended: BaseException | str | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for event in self.process:
                if event.kind == "stdout":
                    self.lines.append(time.time())
            self.ended = "the stream ended"
        except BaseException as error:  # noqa: BLE001 -- what ended it is the finding
            self.ended = error

    def goes_on_after(self, moment: float) -> None:
        wait_until(lambda: self.ended is not None or any(t > moment for t in self.lines), 15,
                   what="the session's process to stream a line after the apply")
        assert self.ended is None, self.ended


@pytest.fixture(scope="module")
def live(docker_client, debian_image, harness_sweep_orphans, tmp_path_factory):
    with deployed(__file__, "lc", tmp_path_factory.mktemp("live"), stack_spec(debian_image), docker_client,
                  debian_image, {"listed": 1, "other": 1, "direct": 1, "prof": 1},
                  secret_config={"runtimeToken": TOKEN}) as net, local_client(PORT, TOKEN, ["direct", "prof"]) as client:
        net.extra["image"] = debian_image
        net.extra["web"] = net.lab.server("web", net.name("egress"), ["tcp:80"], aliases=ALIASES)
        drill = Drill(net.deployment, docker_client)
        drill.traffic("listed", 0, "http://allowed.test/")
        drill.traffic("other", 0, "http://other.test/")
        # Both loops answer before the first change (the gateway serves them).
        wait_until(lambda: all(any(s == 200 for _, s in drill.log(n)) for n in drill.loops), 30,
                   what="both request loops answered")
        net.extra["drill"] = drill
        net.extra["stream"] = Stream(client.claim("direct", "live-drill"))
        net.extra["client"] = client
        yield net


def _applied(live, streams_end=False, **change):
    """Applies the stack with `change` and checks what the drill saw against the diff. `streams_end`: the diff says
    the runtime is renewed, so the session's stream ends (and a new one is started for the next steps)."""
    drill: Drill = live.extra["drill"]
    outcome = drill.apply(stack_spec(live.extra["image"], **change))
    assert outcome.requests >= 2, outcome  # the loops ran while the apply did
    # A reload refuses no request: HAProxy holds the gateway's ports while squid reconfigures (its connect to squid is
    # retried), and the guard, logger, ingress and runtime take their sets in place (docs/design/live-changes.md).
    assert outcome.failed == [], outcome.failed
    if streams_end:
        wait_until(lambda: live.extra["stream"].ended is not None, 15, what="the stream's end the diff announced")
        live.extra["stream"] = Stream(live.extra["client"].claim("direct", "live-drill"))  # the session is kept
    else:
        live.extra["stream"].goes_on_after(time.time())
    assert outcome.renewed == outcome.predicted_renewed, outcome
    assert outcome.restarted == outcome.predicted_restarted, outcome
    return outcome


def test_an_allow_entry_added_reloads_the_gateway_in_place_and_works_when_the_apply_returns(live):
    live.proves("Container.envs", "Container.mounts")
    outcome = _applied(live, listed=("allowed.test", "new.test"))
    assert outcome.renewed == set() and outcome.restarted == {}
    assert curl(live.sandbox("listed"), "http://new.test/").status == 200


def test_an_allow_entry_removed_is_refused_and_logged_when_the_apply_returns(live):
    outcome = _applied(live, listed=("allowed.test",))
    assert outcome.renewed == set() and outcome.restarted == {}
    since = len(access_log(live))
    assert curl(live.sandbox("listed"), "http://new.test/").status == 403
    wait_until(lambda: any("dest=new.test:80 verdict=TCP_DENIED" in line for line in access_log(live)[since:]), 10,
               what="the refusal in the gateway's log")


def test_a_new_pool_reloads_the_host_services_and_interrupts_no_other_pool(live):
    outcome = _applied(live, third=True)
    assert outcome.renewed == set() and outcome.restarted == {}
    live.wait_serving({"third": 1})
    assert curl(live.sandbox("third"), "http://third.test/").status == 200
    assert curl(live.sandbox("third"), "http://allowed.test/").status == 403


def test_one_more_replica_creates_one_sandbox_and_restarts_nothing(live):
    outcome = _applied(live, third=True, other_replicas=2)
    assert outcome.renewed == set() and outcome.restarted == {}
    live.wait_serving({"other": 2})
    assert curl(live.sandbox("other", 1), "http://other.test/").status == 200


def test_a_connection_bound_changed_reloads_the_guard_only(live):
    outcome = _applied(live, third=True, other_replicas=2, rate=50)
    assert outcome.renewed == set() and outcome.restarted == {}
    actions = {(s["kind"], s["action"]) for s in outcome.diff["impact"]["services"]}
    assert actions == {("guard", "reload")}, actions


def test_a_runtime_setting_reloads_the_runtime_in_place_and_its_session_streams_on(live, docker_client):
    outcome = _applied(live, third=True, other_replicas=2, rate=50, exec_max="30m")
    assert outcome.renewed == set() and outcome.restarted == {}
    actions = {(s["kind"], s["action"]) for s in outcome.diff["impact"]["services"]}
    assert actions == {("runtime", "reload")}, actions
    # The runtime reports the set its reload container delivered.
    digest = docker_client.containers.get(live.name("runtime")).exec_run(
        ["python3", "-c", f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{PORT}/healthz')"
                          ".read().decode())"]).output.decode()
    reload_env = dict(line.split("=", 1) for line in docker_client.containers.get(
        live.name("runtime") + "-reload").attrs["Config"]["Env"])
    assert f'"config":"{reload_env["SANDSTACK_CONFIG_DIGEST"]}"' in digest.replace(" ", ""), digest


def test_a_profile_switched_at_run_time_fails_no_request_of_another_session_and_restarts_nothing(live):
    """Not an apply: the runtime records the session's profile where the gateway's helper reads it (no reconfigure,
    so no instant of closed ports either)."""
    drill: Drill = live.extra["drill"]
    session = live.extra["client"].claim("prof", "live-profile")
    assert curl(live.sandbox("prof"), "http://allowed.test/").status == 200
    # The window counted: the switch and a second after it (a switch answers in a fraction of one).
    outcome = drill.run(lambda: (session.network("locked"), time.sleep(1)))
    assert outcome.requests >= 2, outcome
    assert outcome.failed == [], outcome.failed
    assert outcome.renewed == set() and outcome.restarted == {}, outcome
    live.extra["stream"].goes_on_after(time.time())
    assert curl(live.sandbox("prof"), "http://allowed.test/").status == 403
    again = drill.run(lambda: (session.network("open"), time.sleep(1)))
    assert again.failed == [] and again.renewed == set() and again.restarted == {}, again
    assert curl(live.sandbox("prof"), "http://allowed.test/").status == 200


def test_a_configuration_the_gateway_refuses_fails_the_apply_naming_it_and_the_one_in_force_stays(live,
                                                                                                 monkeypatch):
    # No spec renders a squid.conf squid refuses (the plan's own tests parse every mode): one is planted by a
    # render that adds an access rule naming an acl that does not exist (squid: "Bungled").
    from sandstack.plan import gateway as gateway_plan

    render = gateway_plan.render
    monkeypatch.setattr(gateway_plan, "render", lambda *args: render(*args) + "http_access allow sandstack_nowhere\n")
    with pytest.raises(Exception) as failed:
        live.deployment.up(stack_spec(live.extra["image"], listed=("allowed.test", "new.test"), third=True,
                                      other_replicas=2, rate=50, exec_max="30m"))
    text = str(failed.value)
    assert "the gateway configuration reload on host 'local' exited with 1" in text, text
    assert "refused configuration" in text and "sandstack_nowhere" in text, text
    # The set in force before: the entry the refused set would have added is still refused, the others served.
    sandbox = live.sandbox("listed")
    assert curl(sandbox, "http://allowed.test/").status == 200
    assert curl(sandbox, "http://new.test/").status == 403
    assert live.gateway.status == "running"


# Where the steps below end: the refused set above left the one before it in force.
IN_FORCE = {"third": True, "other_replicas": 2, "rate": 50, "exec_max": "30m"}


def test_an_ingress_added_beside_the_runtime_restarts_only_the_url_pools_sandbox_and_fails_no_request(live):
    """An ingress and the first url port of the `prof` pool: `prof`'s sandbox is recreated (it learns its URL from its
    environment), and nothing else: the runtime keeps running (the ingress reaches it by the socket in its
    configuration volume: docs/design/live-changes.md) and the session's stream goes on. The drill's counts must say
    exactly what the diff says, and no request through the gateway fails."""
    outcome = _applied(live, ingress=True, url_ports=1, **IN_FORCE)
    assert outcome.predicted_renewed == set(), outcome
    assert outcome.predicted_restarted == {"prof": 1}, outcome


def test_a_url_port_added_reloads_the_ingress_recreates_its_pools_sandbox_only_and_streams_go_on(live):
    outcome = _applied(live, ingress=True, url_ports=2, **IN_FORCE)
    actions = {(s["kind"], s["action"]) for s in outcome.diff["impact"]["services"]}
    assert ("ingress", "reload") in actions and not any(a != "reload" for _, a in actions), actions
    assert outcome.predicted_restarted == {"prof": 1}, outcome
