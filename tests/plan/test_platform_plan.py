"""A template's platform reaches its snapshot build and its sandbox containers; a sandbox's environment refers to its
own public host name and URLs, rendered per sandbox (issue 39 items 6 and 7)."""

from __future__ import annotations

from sandstack.plan.snapshot import build_inputs
from sandstack.plan.stack import plan_stack
from sandstack.plan.tree import CONTAINER, REMOTE_IMAGE
from sandstack.spec import load_stack
from testbed.specs import host, spec, write_spec

BOTH = host(platforms=["linux/amd64", "linux/arm64"])


def _nodes(plan, kind):
    return {key: node for key, node in plan.nodes.items() if node.type == kind}


def test_a_declared_platform_is_the_build_s_and_the_sandboxes_and_splits_a_shared_image(tmp_path):
    templates = {"arm": {"base_image": "busybox:1.36", "platform": "linux/arm64"},
                 "native": {"base_image": "busybox:1.36"}}
    plan = plan_stack(load_stack(write_spec(tmp_path, spec(templates, hosts={"local": BOTH}))), "t")
    images = {n.name: n.inputs for n in _nodes(plan, REMOTE_IMAGE).values() if n.name.startswith("sandstack-")}
    # The same base image and no setup, but two platforms: two images, two digests.
    assert images["sandstack-arm.local-image"]["build"]["platform"] == "linux/arm64"
    assert "platform" not in images["sandstack-native.local-image"]["build"]
    assert images["sandstack-arm.local-image"]["triggers"] != images["sandstack-native.local-image"]["triggers"]
    sandboxes = {n.name: n.inputs for n in _nodes(plan, CONTAINER).values() if n.name.endswith("-0")}
    assert sandboxes["sandstack-arm.local-0"]["platform"] == "linux/arm64"
    assert "platform" not in sandboxes["sandstack-native.local-0"]


def test_a_template_without_a_platform_keeps_the_digest_it_had_before_the_field(tmp_path):
    resolved = load_stack(write_spec(tmp_path, spec({"p": {"base_image": "busybox:1.36"}})))
    inputs = build_inputs(resolved.templates["p"])
    assert resolved.templates["p"].platform is None and "platform" not in inputs
    assert sorted(inputs) == ["base_image", "files", "format", "setup", "supervisor", "version"]


def test_the_defaults_platform_applies_and_a_template_s_own_wins(tmp_path):
    data = spec({"a": {"base_image": "busybox:1.36"}, "b": {"base_image": "busybox:1.36", "platform": "linux/amd64"}},
                hosts={"local": BOTH}, defaults={"platform": "linux/arm64"})
    resolved = load_stack(write_spec(tmp_path, data))
    assert (resolved.templates["a"].platform, resolved.templates["b"].platform) == ("linux/arm64", "linux/amd64")


INGRESS = host(ingress={"domain": "sbx.example.com", "port": 8443})
ENV = {"CALLBACK": "${SANDSTACK_URL_APP}/oauth/callback",
       "ALLOWED_HOSTS": "${SANDSTACK_PUBLIC_HOSTNAME},8080-${SANDSTACK_PUBLIC_HOSTNAME}",
       "LITERAL": "$${SANDSTACK_PUBLIC_HOSTNAME} and ${HOME} and $SANDSTACK_PUBLIC_HOSTNAME",
       "DOCS": "${SANDSTACK_URL_9000}"}


def test_env_references_are_rendered_per_sandbox(tmp_path):
    template = {"base_image": "busybox:1.36", "env": ENV,
                "ports": [{"port": 8080, "exposure": "url", "name": "app"}, {"port": 9000, "exposure": "url"}]}
    data = spec({"web": template}, pools={"web": {"template": "web", "hosts": ["local"], "replicas": 2}},
                hosts={"local": INGRESS})
    plan = plan_stack(load_stack(write_spec(tmp_path, data)), "t")
    envs = {p.name: p.env for pool in plan.pools.values() for p in pool.sandbox_plans}
    assert {name: {k: env[k] for k in ENV} for name, env in envs.items()} == {
        "sandstack-t-web-0": {
            "CALLBACK": "https://8080-web-0.sbx.example.com:8443/oauth/callback",
            "ALLOWED_HOSTS": "web-0.sbx.example.com,8080-web-0.sbx.example.com",
            "LITERAL": "${SANDSTACK_PUBLIC_HOSTNAME} and ${HOME} and $SANDSTACK_PUBLIC_HOSTNAME",
            "DOCS": "https://9000-web-0.sbx.example.com:8443"},
        "sandstack-t-web-1": {
            "CALLBACK": "https://8080-web-1.sbx.example.com:8443/oauth/callback",
            "ALLOWED_HOSTS": "web-1.sbx.example.com,8080-web-1.sbx.example.com",
            "LITERAL": "${SANDSTACK_PUBLIC_HOSTNAME} and ${HOME} and $SANDSTACK_PUBLIC_HOSTNAME",
            "DOCS": "https://9000-web-1.sbx.example.com:8443"},
    }
    # What the sandbox gets is the rendered text (its container's envs), the variables beside it as before.
    sandbox = next(n for n in _nodes(plan, CONTAINER).values() if n.name == "sandstack-web.local-1")
    assert "CALLBACK=https://8080-web-1.sbx.example.com:8443/oauth/callback" in sandbox.inputs["envs"]
    assert "SANDSTACK_URL_APP=https://8080-web-1.sbx.example.com:8443" in sandbox.inputs["envs"]


def test_on_demand_places_render_their_own_names(tmp_path):
    template = {"base_image": "busybox:1.36", "env": {"ORIGIN": "https://${SANDSTACK_PUBLIC_HOSTNAME}"}}
    data = spec({"web": template}, pools={"web": {"template": "web", "hosts": ["local"], "replicas": 1, "max": 3}},
                hosts={"local": {**INGRESS, "runtime": {"token": {"secret": "runtimeToken"}}}})
    plan = plan_stack(load_stack(write_spec(tmp_path, data)), "t")
    ondemand = plan.hosts["local"].runtime.config.pools["web"].ondemand
    bodies = {name: ondemand.body(name) for name in ondemand.places}
    assert {name: [e for e in b["Env"] if e.startswith("ORIGIN=")] for name, b in bodies.items()} == {
        "sandstack-t-web-1": ["ORIGIN=https://web-1.sbx.example.com"],
        "sandstack-t-web-2": ["ORIGIN=https://web-2.sbx.example.com"]}
