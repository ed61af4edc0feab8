"""A template's setup steps run under its network policy (issue 39 item 1, docs/design/setup-policy.md): the build
node's exact inputs in each mode, what it waits for, and what the build digest covers."""

from __future__ import annotations

import dataclasses

from sandstack.plan.snapshot import build_inputs
from sandstack.plan.stack import plan_stack
from sandstack.plan.tree import REMOTE_IMAGE
from sandstack.spec import load_stack
from testbed.specs import spec, write_spec

SETUP = {"version": "1", "setup": ["wget -q -O /etc/fetched http://pkgs.example.com/x"]}
ALLOW = {"egress": "allow-list", "allow": ["pkgs.example.com"]}
PROXY = "http://sandstack-gateway:{port}"


def _plan(tmp_path, templates, **extra):
    return plan_stack(load_stack(write_spec(tmp_path, spec(templates, **extra))), "t")


def _image(plan, template):
    name = f"sandstack-{template}.local-image"
    return next(n for n in plan.nodes.values() if n.type == REMOTE_IMAGE and n.name == name)


def test_setup_runs_on_the_pool_network_through_its_gateway_after_the_host_is_ready(tmp_path):
    plan = _plan(tmp_path, {"agent": {"base_image": "busybox:1.36", "snapshot": SETUP, "network": ALLOW}})
    image = _image(plan, "agent")
    network = plan.hosts["local"].networks["agent"]
    proxy = PROXY.format(port=network.gateway_port)
    build = image.inputs["build"]
    assert {k: build[k] for k in ("network_mode", "build_args", "force_remove")} == {
        "network_mode": "sandstack-t-agent", "force_remove": True,
        "build_args": {"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "https_proxy": proxy,
                       "NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
                       # The pool has the logging resolver: the steps' wrapper finds it on the bridge.
                       "SANDSTACK_SETUP_RESOLVER": "bridge"}}
    assert network.resolver == network.bridge_ip
    keys = plan.host_keys["local"]
    assert image.options.depends_on == (keys.networks["agent"], *keys.ready)
    assert keys.ready  # the gateway, guard and logger's ready parts: the pool's port open before a step runs


def test_deny_all_runs_setup_on_the_pool_network_without_a_proxy_and_none_without_a_network(tmp_path):
    plan = _plan(tmp_path, {
        "closed": {"base_image": "busybox:1.36", "snapshot": SETUP, "network": {"egress": "deny-all"}},
        "offline": {"base_image": "busybox:1.36", "snapshot": {**SETUP, "setup_network": "none"}, "network": ALLOW}})
    closed, offline = _image(plan, "closed").inputs["build"], _image(plan, "offline").inputs["build"]
    # No proxy and no resolver: a deny-all session has neither (its lookups fail on the internal network, unlogged).
    assert (closed["network_mode"], "build_args" in closed) == ("sandstack-t-closed", False)
    assert (offline["network_mode"], "build_args" in offline) == ("none", False)
    assert _image(plan, "offline").options.depends_on == ()


def test_a_template_without_setup_steps_builds_as_before(tmp_path):
    plan = _plan(tmp_path, {"plain": {"base_image": "busybox:1.36", "network": ALLOW}})
    image = _image(plan, "plain")
    assert sorted(image.inputs["build"]) == ["context", "dockerfile", "labels", "no_cache"]
    assert image.options.depends_on == ()
    assert sorted(build_inputs(load_stack(tmp_path / "stack.yaml").templates["plain"])) == \
        ["base_image", "files", "format", "setup", "supervisor", "version"]


def test_the_start_profile_is_the_setup_policy(tmp_path):
    profiles = {"start": "setup", "profiles": {"setup": ALLOW, "locked": {"egress": "deny-all"}}}
    templates = {"agent": {"base_image": "busybox:1.36", "snapshot": SETUP, "network_profiles": profiles}}
    resolved = load_stack(write_spec(tmp_path, spec(templates, hosts={"local": {
        "endpoint": "unix:///var/run/docker.sock", "capacity": {"cpus": 64, "memory": "256GiB", "disk": "1TiB"},
        "runtime": {"token": {"secret": "runtimeToken"}}}})))
    template = resolved.templates["agent"]
    assert template.setup_policy == dict(template.network_profiles)["setup"]
    locked = dataclasses.replace(template, start_profile="locked")
    assert locked.setup_policy.egress == "deny-all"


def test_the_digest_covers_the_setup_mode_not_the_policy(tmp_path):
    plan_a = _plan(tmp_path / "a", {"agent": {"base_image": "busybox:1.36", "snapshot": SETUP, "network": ALLOW}})
    wider = {"egress": "allow-list", "allow": ["pkgs.example.com", "more.example.com"]}
    plan_b = _plan(tmp_path / "b", {"agent": {"base_image": "busybox:1.36", "snapshot": SETUP, "network": wider}})
    plan_c = _plan(tmp_path / "c", {"agent": {"base_image": "busybox:1.36",
                                               "snapshot": {**SETUP, "setup_network": "none"}, "network": ALLOW}})
    triggers = [_image(p, "agent").inputs["triggers"]["digest"] for p in (plan_a, plan_b, plan_c)]
    assert triggers[0] == triggers[1]  # the policy is the review's to show, not a rebuild (docs)
    assert triggers[0] != triggers[2]
    inputs = build_inputs(load_stack(tmp_path / "a" / "stack.yaml").templates["agent"])
    assert inputs["setup_network"] == "template"


def test_a_logged_direct_route_gives_the_steps_its_resolver_and_no_proxy(tmp_path):
    direct = {"egress": "allow-all", "protocols": "any"}
    plan = _plan(tmp_path, {"agent": {"base_image": "busybox:1.36", "snapshot": SETUP, "network": direct}})
    network = plan.hosts["local"].networks["agent"]
    assert _image(plan, "agent").inputs["build"]["build_args"] == {"SANDSTACK_SETUP_RESOLVER": "bridge"}
    assert network.resolver  # the pool's logging resolver, which the wrapper finds on the bridge


def test_templates_of_one_content_share_an_image_only_under_one_setup_policy(tmp_path):
    narrow = {"base_image": "busybox:1.36", "snapshot": SETUP, "network": ALLOW}
    same = {"base_image": "busybox:1.36", "snapshot": SETUP, "network": ALLOW}
    wide = {"base_image": "busybox:1.36", "snapshot": SETUP, "network": {"egress": "allow-all"}}
    plan = _plan(tmp_path, {"narrow": narrow, "same": same, "wide": wide})
    images = sorted(n.name for n in plan.nodes.values() if n.type == REMOTE_IMAGE and n.name.endswith("-image"))
    # `same` shares `narrow`'s image; `wide` builds its own, on its own pool's network.
    assert images == ["sandstack-narrow.local-image", "sandstack-wide.local-image"]
    assert _image(plan, "wide").inputs["build"]["network_mode"] == "sandstack-t-wide"
