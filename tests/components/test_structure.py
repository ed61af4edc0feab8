"""Parenting, providers, names, type tokens and component outputs, on the committed stacks."""

from __future__ import annotations

import pulumi
import pytest

from sandstack.program import build_stack
from tests.components.helpers import CONTAINER, NETWORK, REMOTE_IMAGE, STACKS, VOLUME, Built, gateway_networks
from testbed.specs import DEV_SECRETS, host, spec, write_spec
from testbed.provider.mocks import RecordingMocks, run_program

STACK_URN = "urn:pulumi:{stack}::sandstack::pulumi:pulumi:Stack$sandstack:index:SandboxStack::sandstack"
PROD_SECRETS = {"agentApiToken": "api-token", "githubToken": "gh-token", "gpuA.ca": "CA PEM",
                "gpuA.cert": "CERT PEM", "gpuA.key": "KEY PEM", "ingressCert": "INGRESS CERT PEM",
                "ingressKey": "INGRESS KEY PEM"}
COMPONENT_TYPES = {f"sandstack:index:{n}" for n in
                   ("SandboxStack", "SandboxHost", "HostGuard", "EgressGateway", "IngressProxy", "RuntimeService",
                    "ConnectionLogger", "SandboxTemplate", "SandboxPool")}


@pytest.fixture(scope="module")
def dev(tmp_path_factory) -> Built:
    return Built.from_path(STACKS / "dev.yaml", stack="dev", build_root=tmp_path_factory.mktemp("dev"),
                           secret_config=DEV_SECRETS)


@pytest.fixture(scope="module")
def prod(tmp_path_factory) -> Built:
    return Built.from_path(STACKS / "prod.yaml", stack="prod", build_root=tmp_path_factory.mktemp("prod"),
                           secret_config=PROD_SECRETS)


def _ancestors(built: Built, reg) -> list:
    chain, parent = [], reg.request.parent
    while parent in built.mocks.registrations:
        chain.append(built.mocks.registrations[parent])
        parent = chain[-1].request.parent
    return chain


@pytest.mark.parametrize("which", ["dev", "prod"])
def test_every_resource_descends_from_the_sandbox_stack(which, request):
    built: Built = request.getfixturevalue(which)
    stack_urn = STACK_URN.format(stack=which)
    for reg in built.mocks.registrations.values():
        if reg.urn == stack_urn:
            assert reg.request.parent == f"urn:pulumi:{which}::sandstack::pulumi:pulumi:Stack::sandstack-{which}"
            continue
        chain = _ancestors(built, reg)
        assert chain and chain[-1].urn == stack_urn, f"{reg.urn}: parents {[r.urn for r in chain]}"


def test_every_docker_resource_uses_the_provider_of_its_own_host(prod):
    providers = {r.name.removesuffix("-provider"): f"{r.urn}::{r.id}"
                 for r in prod.mocks.by_type("pulumi:providers:docker")}
    assert sorted(providers) == ["sandstack-gpu-a", "sandstack-sbx-a", "sandstack-sbx-b"]
    checked = 0
    for reg in prod.mocks.registrations.values():
        if not reg.custom or reg.typ.startswith("pulumi:providers:"):
            continue
        host = next(r for r in _ancestors(prod, reg) if r.typ == "sandstack:index:SandboxHost")
        assert reg.provider == providers[host.name], f"{reg.urn} uses {reg.provider!r}, not host {host.name}'s"
        checked += 1
    # 3 hosts × (infra image, guard volume + container) + networks + gateways + images + seeders + sandboxes
    assert checked == len([r for r in prod.mocks.registrations.values() if r.custom]) - 3


def test_component_type_tokens(dev, prod):
    # The dev stack declares a runtime, no ingress; prod an ingress, no runtime. Both have logged pools, whose
    # lookups the connection logger's resolvers answer.
    assert {r.typ for r in dev.mocks.registrations.values() if not r.custom} == COMPONENT_TYPES - {
        "sandstack:index:IngressProxy"}
    assert {r.typ for r in prod.mocks.registrations.values() if not r.custom} == COMPONENT_TYPES - {
        "sandstack:index:RuntimeService"}


def _children(built: Built, parent) -> list[str]:
    return sorted(r.name for r in built.mocks.registrations.values() if r.request.parent == parent.urn)


def test_children_of_the_host_are_named_after_it(dev):
    # The stack's host is `<stack component>-<host>`, so two SandboxStacks can share one program.
    assert _children(dev, dev.reg("sandstack")) == ["sandstack-local"]
    host = dev.reg("sandstack-local")
    assert host.typ == "sandstack:index:SandboxHost"
    own = [n for n in _children(dev, host) if n.startswith("sandstack-local-")]
    assert own == ["sandstack-local-egress-net", "sandstack-local-gateway", "sandstack-local-guard",
                   "sandstack-local-infra", "sandstack-local-logger", "sandstack-local-net.builder", "sandstack-local-net.preview",
                   "sandstack-local-net.python", "sandstack-local-net.shell", "sandstack-local-provider",
                   "sandstack-local-runtime"]
    # Templates and pools are built by the stack but parented to the host (its provider): named
    # `<stack component>-<name>.<host>`. `builder` has `preview`'s snapshot content, so it has a pool here but
    # no template of its own: it runs on preview's image.
    others = [n for n in _children(dev, host) if n not in own]
    assert others == ["sandstack-builder.local", "sandstack-preview.local",
                      "sandstack-preview.local", "sandstack-python.local", "sandstack-python.local",
                      "sandstack-shell.local", "sandstack-shell.local"]


@pytest.mark.parametrize("component, roles", [
    ("sandstack-local-guard", ["container", "state", "config", "reload"]),
    ("sandstack-local-gateway", ["container", "log", "config", "reload"]),
    ("sandstack-python.local", ["image", "0", "1"]),
    ("sandstack-shell.local", ["image", "0", "1"]),
])
def test_children_of_components_are_named_component_dash_role(dev, component, roles):
    parents = [r for r in dev.mocks.registrations.values() if r.name == component]
    names = sorted(n for p in parents for n in _children(dev, p))
    assert names == sorted(f"{component}-{role}" for role in roles)


def test_secret_and_data_seeders_and_volumes_are_named_after_their_pool(prod):
    pool = next(r for r in prod.mocks.by_type("sandstack:index:SandboxPool")
                if r.name == "sandstack-python-warm.sbx-a")
    assert _children(prod, pool) == sorted(
        [f"sandstack-python-warm.sbx-a-{i}" for i in range(16)]
        + ["sandstack-python-warm.sbx-a-secrets", "sandstack-python-warm.sbx-a-secrets-seeder",
           "sandstack-python-warm.sbx-a-data0", "sandstack-python-warm.sbx-a-data-seeder"])


def _without_none(value):
    """Pulumi drops None values when it serializes component outputs."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def test_register_outputs_of_every_component(dev):
    infra = dev.reg("sandstack-local-infra")
    image = dev.reg("sandstack-python.local-image")
    assert dev.outputs_of("sandstack-local") == {
        "address": "localhost",
        "infra_image": infra.outputs["imageId"],
        "networks": {p: f"sandstack-dev-{p}" for p in ("shell", "python", "preview", "builder")},
        "guard": "sandstack-dev_guard",
        "gateway": "sandstack-dev_gateway",
        "runtime": "http://127.0.0.1:7480",
        "logger": "sandstack-dev_logger",
    }
    assert dev.outputs_of("sandstack-local-runtime") == {"container_name": "sandstack-dev_runtime",
                                                          "state_volume": "sandstack-dev_runtime-state"}
    assert dev.outputs_of("sandstack-local-guard") == {"state_volume": "sandstack-dev_guard-state",
                                                        "container_name": "sandstack-dev_guard"}
    assert dev.outputs_of("sandstack-local-gateway") == {"container_name": "sandstack-dev_gateway",
                                                          "log_volume": "sandstack-dev_gateway-log"}
    template = next(out for urn, out in dev.mocks.component_outputs.items()
                    if urn.endswith("SandboxTemplate::sandstack-python.local"))
    assert template == {"image_name": image.inputs["name"], "image_id": image.outputs["imageId"],
                        "digest": image.inputs["triggers"]["digest"]}
    pool = next(out for urn, out in dev.mocks.component_outputs.items()
                if urn.endswith("SandboxPool::sandstack-python.local"))
    assert pool == _without_none({"sandboxes": [s for s in dev.sandboxes if s["pool"] == "python"]})
    assert dev.mocks.component_outputs[STACK_URN.format(stack="dev")] == _without_none({"sandboxes": dev.sandboxes})


def test_a_host_without_gateway_pools_outputs_no_gateway(prod):
    assert prod.outputs_of("sandstack-gpu-a") == {"address": "gpu-a.internal.example.com",
                                                  "infra_image": prod.reg("sandstack-gpu-a-infra").outputs["imageId"],
                                                  "networks": {"trainer": "sandstack-prod-trainer"},
                                                  "guard": "sandstack-prod_guard"}  # gateway: None, dropped by Pulumi
    assert "sandstack-gpu-a-gateway" not in {r.name for r in prod.mocks.registrations.values()}
    assert prod.outputs_of("sandstack-sbx-a")["gateway"] == "sandstack-prod_gateway"


def test_names_are_deterministic_docker_names(dev):
    containers = {r.name: r.inputs["name"] for r in dev.mocks.by_type(CONTAINER)}
    assert containers == {
        "sandstack-local-guard-container": "sandstack-dev_guard",
        "sandstack-local-guard-reload": "sandstack-dev_guard-reload",
        "sandstack-local-runtime-container": "sandstack-dev_runtime",
        "sandstack-local-runtime-reload": "sandstack-dev_runtime-reload",
        "sandstack-local-logger-container": "sandstack-dev_logger",
        "sandstack-local-logger-reload": "sandstack-dev_logger-reload",
        "sandstack-local-gateway-container": "sandstack-dev_gateway",
        "sandstack-local-gateway-reload": "sandstack-dev_gateway-reload",
        "sandstack-shell.local-0": "sandstack-dev-shell-0", "sandstack-shell.local-1": "sandstack-dev-shell-1",
        "sandstack-python.local-0": "sandstack-dev-python-0", "sandstack-python.local-1": "sandstack-dev-python-1",
        "sandstack-preview.local-0": "sandstack-dev-preview-0", "sandstack-builder.local-0": "sandstack-dev-builder-0",
    }
    images = {r.name: r.inputs["name"].split(":")[0] for r in dev.mocks.by_type(REMOTE_IMAGE)}
    assert images == {"sandstack-local-infra": "sandstack-dev/sandstack_infra",
                      "sandstack-shell.local-image": "sandstack-dev/shell",
                      "sandstack-python.local-image": "sandstack-dev/python",
                      "sandstack-preview.local-image": "sandstack-dev/preview"}  # builder shares it


# --- names a valid spec could once make collide -------------------------------------------------------
# Logical names join user-given names with '.', host-level Docker names with '_': spec names allow neither
# (lowercase, digits and '-'), so no pool, template or host name can take another object's name.

def test_a_gateway_pool_named_egress_builds(build):
    built = build(spec({"egress": {"base_image": "busybox:1.36",
                                   "network": {"egress": "allow-list", "allow": ["a.example"]}}}))
    # The pool's network and the gateway's egress network: apart in logical name and in Docker name.
    assert {r.name: r.inputs["name"] for r in built.mocks.by_type(NETWORK)} == {
        "sandstack-local-net.egress": "sandstack-t-egress", "sandstack-local-egress-net": "sandstack-t-_egress"}
    assert [n["name"] for n in gateway_networks(built)] == ["sandstack-t-_egress", "sandstack-t-egress"]
    assert built.container("sandstack-egress.local-0").inputs["networksAdvanced"] == [{"name": "sandstack-t-egress"}]


def test_pool_and_host_names_with_dashes_never_collide(build):
    # Joined with '-', pool 'a-b' on host 'c' and pool 'a' on host 'b-c' were both SandboxPool 'a-b-c'.
    template = {"base_image": "busybox:1.36"}
    built = build(spec({"t": template}, hosts={"c": host(), "b-c": host()},
                       pools={"a-b": {"template": "t", "hosts": ["c"]}, "a": {"template": "t", "hosts": ["b-c"]}}))
    assert built.names("sandstack:index:SandboxPool") == ["sandstack-a-b.c", "sandstack-a.b-c"]
    assert built.names("sandstack:index:SandboxTemplate") == ["sandstack-t.b-c", "sandstack-t.c"]
    assert sorted((r.name, r.inputs["name"]) for r in built.mocks.by_type(CONTAINER)
                  if r.name.startswith("sandstack-a")) == [("sandstack-a-b.c-0", "sandstack-t-a-b-0"),
                                                           ("sandstack-a.b-c-0", "sandstack-t-a-0")]
    assert [s["name"] for s in built.sandboxes] == ["c/a-b/0", "b-c/a/0"]


def test_pools_named_after_host_level_objects_keep_their_own_docker_names(build):
    listed = {"base_image": "busybox:1.36", "network": {"egress": "allow-list", "allow": ["a.example"]}}
    roles = ["egress", "gateway", "gateway-log", "gateway-config", "gateway-reload", "guard", "guard-state",
             "guard-config", "guard-reload", "infra", "logger", "logger-config", "logger-reload", "connections"]
    built = build(spec({r: {**listed, "snapshot": {"version": r}} for r in roles}))  # one image each
    docker_names = {typ: sorted(r.inputs["name"] for r in built.mocks.by_type(typ))
                    for typ in (CONTAINER, NETWORK, VOLUME)}
    assert docker_names == {
        CONTAINER: sorted(["sandstack-t_guard", "sandstack-t_gateway", "sandstack-t_logger", "sandstack-t_guard-reload",
                           "sandstack-t_gateway-reload", "sandstack-t_logger-reload"]
                          + [f"sandstack-t-{r}-0" for r in roles]),
        NETWORK: sorted(["sandstack-t-_egress"] + [f"sandstack-t-{r}" for r in roles]),
        VOLUME: ["sandstack-t_connections", "sandstack-t_gateway-config", "sandstack-t_gateway-log",
                 "sandstack-t_guard-config", "sandstack-t_guard-state", "sandstack-t_logger-config"],
    }
    # The infra image and a template named 'infra' are different repositories on the host.
    images = {r.name: r.inputs["name"].split(":")[0] for r in built.mocks.by_type(REMOTE_IMAGE)}
    assert (images["sandstack-local-infra"], images["sandstack-infra.local-image"]) == (
        "sandstack-t/sandstack_infra", "sandstack-t/infra")


# --- two stacks in one program ------------------------------------------------------------------------

def test_two_sandbox_stacks_from_two_specs_share_one_program_each_with_its_own_sandboxes(tmp_path):
    # The same template, pool and host names in both specs: only the components' names ('a', 'b') keep the
    # logical names apart, and only the Docker stack names ('one', 'two') the Docker names.
    plain = {"base_image": "busybox:1.36"}
    listed = {"base_image": "busybox:1.36", "network": {"egress": "allow-list", "allow": ["a.example"]}}
    one = write_spec(tmp_path / "one", spec({"t": plain}, pools={"t": {"template": "t", "hosts": ["local"],
                                                                       "replicas": 2}}))
    two = write_spec(tmp_path / "two", spec({"t": plain, "web": listed}))

    def program() -> None:
        for name, path, stack in (("a", one, "one"), ("b", two, "two")):
            component = build_stack(path, name=name, stack=stack, build_root=tmp_path / "build" / name)
            pulumi.export(name, component.sandboxes)

    mocks = RecordingMocks()  # refuses a second registration of a URN, as the engine does
    built = Built(mocks, run_program(program, mocks, stack="t"))

    stacks = {r.name: r for r in mocks.by_type("sandstack:index:SandboxStack")}
    assert sorted(stacks) == ["a", "b"]
    mine: dict[str, dict[str, str]] = {"a": {}, "b": {}}
    for reg in mocks.registrations.values():
        if reg.typ == "sandstack:index:SandboxStack":
            continue
        chain = [r for r in _ancestors(built, reg) if r.typ == "sandstack:index:SandboxStack"]
        assert len(chain) == 1 and reg.name.startswith(f"{chain[0].name}-"), reg.urn
        if reg.typ == CONTAINER:
            mine[chain[0].name][reg.name] = reg.inputs["name"]
    assert mine == {
        "a": {"a-local-guard-container": "sandstack-one_guard", "a-local-guard-reload": "sandstack-one_guard-reload",
              "a-t.local-0": "sandstack-one-t-0", "a-t.local-1": "sandstack-one-t-1"},
        "b": {"b-local-guard-container": "sandstack-two_guard", "b-local-gateway-container": "sandstack-two_gateway",
              "b-local-guard-reload": "sandstack-two_guard-reload",
              "b-local-gateway-reload": "sandstack-two_gateway-reload",
              "b-local-logger-container": "sandstack-two_logger",
              "b-local-logger-reload": "sandstack-two_logger-reload",
              "b-t.local-0": "sandstack-two-t-0", "b-web.local-0": "sandstack-two-web-0"},
    }
    assert {k: [(s["name"], s["container"]) for s in v] for k, v in built.result.outputs.items()} == {
        "a": [("local/t/0", "sandstack-one-t-0"), ("local/t/1", "sandstack-one-t-1")],
        "b": [("local/t/0", "sandstack-two-t-0"), ("local/web/0", "sandstack-two-web-0")],
    }
    for name, reg in stacks.items():
        assert mocks.component_outputs[reg.urn] == _without_none({"sandboxes": built.result.outputs[name]})


@pytest.mark.parametrize("name", ["a-b", "", "1st", "a.b"])
def test_a_stack_component_name_that_could_collide_is_refused(name):
    from sandstack.components.sandbox_stack import SandboxStack, SandboxStackArgs

    with pytest.raises(ValueError) as refused:
        SandboxStack(name, SandboxStackArgs(spec=None, stack="t"))  # refused before anything is read
    assert str(refused.value) == (
        f"SandboxStack name {name!r} is not allowed: use letters, digits and '_', starting with a letter "
        "(no '-': children are named '<name>-<host>', and spec names hold '-')")
