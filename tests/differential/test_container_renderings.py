"""A sandbox container is one value rendered two ways (sandstack/plan/sandbox_container.py): for every warm sandbox of
the committed stacks and the test specs, the pulumi-docker inputs the plan registers, as the provider model
(testbed/provider) translates them, and the Engine body of the same `SandboxContainer` agree key by key through
`ENGINE_KEYS`; and every setting of the value changes both renderings (or is one `OUTSIDE_THE_BODY` names)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any, Iterator

import pytest

from sandstack.plan import sandbox_container as sc
from sandstack.plan.sandbox import PortBinding
from sandstack.plan.sandbox_container import (ENGINE_KEYS, NOT_AN_INPUT, OUTSIDE_THE_BODY, SandboxContainer,
                                              VolumeMount, engine_body, pulumi_inputs, sandbox_container)
from sandstack.plan.stack import StackPlan, plan_stack
from sandstack.plan.tree import Ref, Secret
from sandstack.spec import load_data, load_stack
from sandstack.spec.models import SecretRef
from testbed.provider.container_map import CONTAINER, new_plan
from testbed.provider.schema import Ctx
from testbed.provider.wire import to_wire
from testbed.specs import STACKS, host, spec, write_spec
from tests.plan.test_ondemand_plan import RUNTIME, TEMPLATE
from tests.review.cases import FILES, PAIRS, pair

SECRET = "secret-value-for-the-test"
MISSING = object()

# The on-demand test's template with what it lacks: ports of each exposure, a working directory, a numeric user, a
# platform, a connection-logged network (a resolver), a writable root (capped: the host has storage quotas).
RICH = {**TEMPLATE, "ports": [{"port": 8000, "exposure": "host"}, {"port": 9000, "exposure": "public"},
                              {"port": 8080, "exposure": "url"}],
        "workdir": "/workspace", "user": "1000:1000", "platform": "linux/arm64",
        "network": {"egress": "allow-list", "allow": ["example.com"], "log": True},
        "filesystem": {**TEMPLATE["filesystem"], "read_only_root": False}}


def _specs(root: Path) -> Iterator[tuple[str, StackPlan]]:
    build = root / "build"
    for path in sorted(STACKS.glob("*.yaml")):
        yield path.name, plan_stack(load_stack(path), path.stem, build_root=build)
    seen: list[dict] = []
    for case in PAIRS:
        for side, data in zip(("base", "head"), pair(case)):
            if data not in seen:
                seen.append(data)
                yield f"review {case} {side}", plan_stack(
                    load_stack(write_spec(root / f"{case}-{side}", data, FILES)), "prod", build_root=build)
    hosts = {"local": host(runtime=RUNTIME, disk_workspaces="1GiB", storage_quota=True,
                           platforms=["linux/amd64", "linux/arm64"],
                           ingress={"domain": "sbx.example.com", "exposure": "public"})}
    for name, template in (("on-demand fixture", TEMPLATE), ("rich fixture", RICH)):
        folder = root / name.replace(" ", "-")
        folder.mkdir()
        data = spec({"t": template}, {"t": {"template": "t", "hosts": ["local"], "replicas": 2}}, hosts=hosts)
        yield name, plan_stack(load_data(data, folder), "t", build_root=build)


def _sandboxes(root: Path) -> tuple[tuple[str, StackPlan, str, SandboxContainer], ...]:
    """(where, plan, node key, container) of every warm sandbox of every spec."""
    return tuple((f"{where}: {pool.pool} on {pool.host} #{i}", plan, key, container)
                 for where, plan in _specs(root) for pool in plan.pools.values()
                 for i, (key, container) in enumerate(zip(pool.sandboxes, pool.containers)))


@pytest.fixture(scope="module")
def sandboxes(tmp_path_factory):
    return _sandboxes(tmp_path_factory.mktemp("specs"))


def _at(body: dict, path: str) -> Any:
    for part in path.split("/"):
        if not isinstance(body, dict) or part not in body:
            return MISSING
        body = body[part]
    return body


def _leaves(body: dict, prefix: str = "") -> set[str]:
    """The body's keys at the depth the table names them (RestartPolicy's and LogConfig's fields one by one)."""
    deeper = {p for row in ENGINE_KEYS.values() for p in row}
    out = set()
    for key, value in body.items():
        path = prefix + key
        if isinstance(value, dict) and any(p.startswith(path + "/") for p in deeper):
            out |= _leaves(value, path + "/")
        else:
            out.add(path)
    return out


def _wire(plan: StackPlan, inputs: dict) -> dict:
    """Inputs as the provider gets them: each reference the named object's Docker name, each secret its value."""
    def leaf(value: Any) -> Any:
        if isinstance(value, Ref):
            return plan.nodes[value.node].inputs["name"]
        if isinstance(value, Secret):
            return value.render(SECRET)
        return value
    return to_wire(inputs, leaf)


def _provider_body(plan: StackPlan, inputs: dict) -> dict:
    ctx = Ctx(CONTAINER.token, "urn", _wire(plan, inputs))
    translated, unknown = CONTAINER.translate(ctx)
    assert unknown == [] and translated.notes == []
    body = translated.body()
    # The provider creates on the default bridge, then connects the pool network with no fixed address; the
    # runtime creates on that network at once: the same container on the same network.
    (network, endpoint), = translated.endpoints
    assert endpoint == {"IPAMConfig": {"IPv4Address": "", "IPv6Address": "", "LinkLocalIPs": []}}
    body["HostConfig"]["NetworkMode"] = network
    body["NetworkingConfig"] = {"EndpointsConfig": {network: {}}}
    # The provider sends every field of Go's DeviceRequest, Options a nil map (null) where none is given, which the
    # daemon reads as the empty map the recipe sends; the model leaves the field out.
    for request in body["HostConfig"].get("DeviceRequests", ()):
        request.setdefault("Options", {})
    return body


def _plain(container: SandboxContainer) -> SandboxContainer:
    """The container with its secret environment values in clear (an Engine body holds no Pulumi secret)."""
    env = {k: SECRET if isinstance(v, SecretRef) else v for k, v in container.settings.env.items()}
    return dataclasses.replace(container, settings=dataclasses.replace(container.settings, env=env))


def _defaults() -> dict:
    plan = new_plan(Ctx(CONTAINER.token, "urn", {}))
    return {**plan.config, "HostConfig": plan.host}


def agreement(plan: StackPlan, key: str, container: SandboxContainer) -> list[str]:
    """How the registered inputs and the Engine body of one sandbox disagree, row by row of ENGINE_KEYS."""
    inputs = dict(plan.nodes[key].inputs)
    host = plan.about[key].host  # Docker names are a host's own
    named = {n.inputs["name"]: k for k, n in plan.nodes.items() if "name" in n.inputs and plan.about[k].host == host}
    if inputs != pulumi_inputs(container, named):
        return ["the registered inputs are not the container's rendering"]
    problems = [f"input {name!r} has no row in ENGINE_KEYS" for name in inputs if name not in ENGINE_KEYS]
    provider, mine = _provider_body(plan, inputs), engine_body(_plain(container))
    for name, paths in ENGINE_KEYS.items():
        for path in paths:
            if _at(provider, path) != _at(mine, path):
                problems.append(f"{name} → {path}: provider {_at(provider, path)!r} "
                                f"!= engine body {_at(mine, path)!r}")
    if _leaves(provider) != _leaves(mine):
        problems.append(f"keys only the provider sends {sorted(_leaves(provider) - _leaves(mine))}, only the "
                        f"engine body {sorted(_leaves(mine) - _leaves(provider))}")
    # A key no set input reaches is one the provider sends whatever the inputs: its value is the provider's own.
    reached = {p for name in inputs for p in ENGINE_KEYS.get(name, ())}
    defaults = _defaults()
    problems += [f"{path}: no input sets it, and {_at(mine, path)!r} is not the provider's {_at(defaults, path)!r}"
                 for path in sorted(_leaves(mine) - reached) if _at(mine, path) != _at(defaults, path)]
    return problems


def test_the_table_maps_each_body_key_from_one_input():
    paths = [p for row in ENGINE_KEYS.values() for p in row]
    assert len(paths) == len(set(paths))
    assert not [p for p in paths for q in paths if q.startswith(p + "/")]  # no row's key inside another's


def test_every_warm_sandbox_s_two_renderings_agree_key_by_key(sandboxes):
    problems = [f"{where}: {p}" for where, plan, key, container in sandboxes for p in agreement(plan, key, container)]
    assert problems == []


def test_the_specs_set_every_input_of_the_table(sandboxes):
    """The agreement above is exhaustive: each row is set by some sandbox (else its keys were only compared absent)."""
    seen = {name for _, plan, key, _ in sandboxes for name in plan.nodes[key].inputs}
    assert (len(sandboxes) > 50, sorted(set(ENGINE_KEYS) - seen)) == (True, [])


def test_the_agreement_check_finds_a_key_rendered_differently(sandboxes, monkeypatch):
    where, plan, key, container = next(s for s in sandboxes if s[3].settings.dns)
    body = sc.engine_body

    def other_dns(c: SandboxContainer) -> dict:
        out = copy.deepcopy(body(c))
        out["HostConfig"]["Dns"] = ["192.0.2.53"]
        return out

    monkeypatch.setattr(f"{__name__}.engine_body", other_dns)
    assert agreement(plan, key, container) == [
        f"dns → HostConfig/Dns: provider {list(container.settings.dns)!r} != engine body ['192.0.2.53']"]


# --- every setting of the value reaches both renderings ------------------------------------------------------

class _Nodes(dict):
    """Docker name → a node key, for any name (the mutated values name volumes no plan registered)."""

    def __missing__(self, name: str) -> str:
        return f"node::{name}"


def _other(value: Any, field: str) -> Any:
    """A different value of the same shape."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "1"
    if dataclasses.is_dataclass(value):
        first = dataclasses.fields(value)[0].name
        return dataclasses.replace(value, **{first: _other(getattr(value, first), f"{field}.{first}")})
    if isinstance(value, tuple) and value:
        return (*value, _other(value[-1], field))
    if isinstance(value, dict) and value:
        k, v = next(iter(value.items()))
        return {**value, _other(k, field): v}
    raise AssertionError(f"the base container leaves {field} = {value!r}: give it a value, so a change shows")


def _base(sandboxes) -> SandboxContainer:
    """The rich fixture's first sandbox, with what no spec of one host sets together filled in."""
    c = next(c for where, _, _, c in sandboxes if where.startswith("rich fixture"))
    settings = dataclasses.replace(_plain(c).settings, capability_adds=("NET_BIND_SERVICE",),
                                   security_opts=("no-new-privileges:true",), gpu_device_ids=("GPU-0",),
                                   max_retry_count=3, ports=(*c.settings.ports, PortBinding(7000, 17000, "127.0.0.1",
                                                                                           "udp")))
    return dataclasses.replace(c, settings=settings)


def _renderings(container: SandboxContainer) -> tuple[dict, dict]:
    return pulumi_inputs(container, _Nodes()), engine_body(container)


def unrendered(base: SandboxContainer) -> list[str]:
    """Each setting a change of which leaves a rendering as it was (but where OUTSIDE_THE_BODY sends it)."""
    shared = tuple(m for m in base.mounts if m.volume not in {w.name for w in base.settings.workspaces})
    changes = {f.name: lambda value, f=f: sandbox_container(dataclasses.replace(base.settings, **{f.name: value}),
                                                            image=base.image, network=base.network, shared=shared)
               for f in dataclasses.fields(base.settings)}
    changes.update({f.name: lambda value, f=f: dataclasses.replace(base, **{f.name: value})
                    for f in dataclasses.fields(base) if f.name != "settings"})
    before = _renderings(base)
    out = []
    for name, change in changes.items():
        owner = base if name in {f.name for f in dataclasses.fields(base)} else base.settings
        after = _renderings(change(_other(getattr(owner, name), name)))
        for side, was, now, exempt in (("pulumi inputs", before[0], after[0], NOT_AN_INPUT),
                                       ("engine body", before[1], after[1], OUTSIDE_THE_BODY)):
            if (was == now) != (name in exempt):
                out.append(f"{name}: " + (f"not rendered in the {side}" if was == now else
                                          f"rendered in the {side}, though declared outside it"))
    return out


def test_every_setting_of_the_container_changes_both_renderings(sandboxes):
    base = _base(sandboxes)
    assert base.settings.workspaces and base.settings.healthcheck and base.settings.dns
    assert unrendered(base) == []


def test_a_setting_one_renderer_ignores_is_found(sandboxes, monkeypatch):
    base = _base(sandboxes)
    body = sc.engine_body

    def forgets_ulimits(c: SandboxContainer) -> dict:
        out = body(c)
        out["HostConfig"].pop("Ulimits")
        return out

    monkeypatch.setattr(f"{__name__}.engine_body", forgets_ulimits)
    assert unrendered(base) == ["open_files: not rendered in the engine body"]


def test_the_pool_s_mounts_come_first_then_the_replica_s_workspaces(sandboxes):
    c = next(c for where, _, _, c in sandboxes if where.startswith("on-demand fixture"))
    assert c.mounts == (VolumeMount("sandstack-t_guard-state", "/run/sandstack/guard", True),
                        VolumeMount("sandstack-t-t-secrets", "/run/secrets", True),
                        VolumeMount("sandstack-t-t-0-ws0-32m", "/data", False))
