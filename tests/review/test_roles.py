"""One descriptor per host role (sandstack.spec.roles): the plan names and tells its nodes from it, every table of
the change table, the review and CrossGuard reads it, and a role missing from a review table is refused where the
table is defined, with the table and the missing kind named, never left out of a picture or an impact."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sandstack.plan.stack import plan_stack
from sandstack.plan.stack_host import RESOURCE_TYPES
from sandstack.policy import crossguard
from sandstack.review import diagram, impact, preview, reasons, resources
from sandstack.spec import changes, load_data
from sandstack.spec.models.hosts import ON_INFRA
from sandstack.spec.models.stack import PLACEMENT
from sandstack.spec.roles import HOST_ROLES, HostRoleInfo, Part, check_complete, registry
from testbed.specs import host, spec

# A new role, as an engineer would add it: a metrics exporter with a volume and a container.
EXPORTER = HostRoleInfo(
    "metrics", "the metrics exporter container",
    (Part("metrics data", "metrics-data", "volume", "metrics", holds="the exporter's samples"),
     Part("metrics exporter", "metrics-container", "container", "metrics", interrupts="metrics stop")),
    component="sandstack:index:MetricsExporter", per_pool=True)
WITH_EXPORTER = registry((*HOST_ROLES.values(), EXPORTER))
WITHOUT_LOGGER = {name: role for name, role in HOST_ROLES.items() if name != "logger"}

# Each review table with its own facets (props, summary lines, the diagram's place and words): its check, and what
# it says when a role is missing from it.
MISSING = {
    resources.check_roles: "sandstack.review.resources.CONTAINER_PROPS has no entry for 'metrics exporter': each "
                           "host role's kinds and elements (sandstack.spec.roles) need one",
    preview.check_roles: "sandstack.review.preview.SUMMARY has no entry for 'metrics data', 'metrics exporter': each "
                         "host role's kinds and elements (sandstack.spec.roles) need one",
    diagram.check_roles: "sandstack.review.diagram.ELEMENTS has no entry for 'metrics': each host role's kinds and "
                         "elements (sandstack.spec.roles) need one",
}


@pytest.mark.parametrize("check", list(MISSING), ids=lambda c: c.__module__)
def test_a_review_table_refuses_a_registry_with_a_role_it_lacks(check):
    check()  # the registry as it is: complete
    with pytest.raises(LookupError) as refused:
        check(WITH_EXPORTER)
    assert str(refused.value) == MISSING[check]


STALE = {
    resources.check_roles: "sandstack.review.resources.CONTAINER_PROPS has entries for 'connection logger', 'logger "
                           "reload', which no host role (sandstack.spec.roles) has; known: gateway, gateway reload, "
                           "guard, guard reload, ingress, ingress reload, runtime",
    preview.check_roles: "sandstack.review.preview.SUMMARY has entries for 'connection log', 'connection logger', "
                         "'logger configuration', 'logger reload', which no host role (sandstack.spec.roles) has; "
                         "known: ",
    diagram.check_roles: "sandstack.review.diagram.ELEMENTS has entries for 'logger', which no host role "
                         "(sandstack.spec.roles) has; known: ",
}


@pytest.mark.parametrize("check", list(STALE), ids=lambda c: c.__module__)
def test_a_review_table_refuses_a_row_no_role_has(check):
    with pytest.raises(LookupError) as refused:
        check(WITHOUT_LOGGER)
    assert str(refused.value).startswith(STALE[check])


def test_check_complete_names_the_table_and_every_missing_key():
    with pytest.raises(LookupError, match=r"^T has no entry for 'a', 'b': "):
        check_complete("T", {"c": 1}, {"a", "b", "c"})
    check_complete("T", {"c": 1, "x": 2}, {"c"}, others=frozenset({"x"}))


@pytest.mark.parametrize("name", list(HOST_ROLES))
def test_every_table_read_from_the_registry_has_every_role(name):
    role = HOST_ROLES[name]
    assert {kind for kind, owner in reasons.ROLE_OF_KIND.items() if owner == name} == {p.kind for p in role.parts}
    assert changes.HOST_ROLE_WORDS[name] == role.words
    assert (name in PLACEMENT.host) == role.per_pool
    for part in role.parts:
        if part.config and part.resource == "container":  # its reload container: the role taking a configuration
            assert impact.RELOADS[part.kind] == (name, f"interrupts {role.reload_interrupts} — it {role.reload_words}")
            assert part.kind in reasons.RELOAD_KINDS
            continue
        assert impact.INTERRUPTS.get(part.kind) == (part.interrupts or None)
        assert impact.HOLDS.get(part.kind) == (part.holds or None)
        assert diagram.ROLE[part.kind] == part.element and part.element in diagram.RANK
    if role.container:
        assert role.container.kind in reasons.ON_INFRA and name in ON_INFRA
        assert role.component in crossguard.HOST_ROLE_COMPONENTS
    else:
        assert role.component not in crossguard.HOST_ROLE_COMPONENTS


def _every_role(tmp_path: Path):
    """A stack whose one host has every role: a gateway pool (gateway, logger, egress network), a runtime and an
    ACME ingress (its data volume)."""
    web = {"base_image": "busybox:1.36", "network": {"egress": "allow-list", "allow": ["example.com"]},
           "ports": [{"port": 8080, "exposure": "url"}]}
    data = spec({"web": web}, hosts={"local": host(runtime={"token": {"secret": "runtimeToken"}},
                                                   ingress={"domain": "sbx.example.com",
                                                            "acme_email": "ops@example.com"})})
    return plan_stack(load_data(data, tmp_path), "t")


def test_the_plan_names_types_and_tells_each_roles_nodes_from_its_descriptor(tmp_path):
    plan = _every_role(tmp_path)
    seen = {}
    for key, about in plan.about.items():
        node = plan.nodes[key]
        if about.host is None or not node.custom:
            continue
        part = next((p for r in HOST_ROLES.values() for p in r.parts if p.kind == about.kind), None)
        if part is not None:
            assert node.name == f"sandstack-local-{part.name.format(pool=about.pool or '')}"
            assert node.type == RESOURCE_TYPES[part.resource]
            seen[part.kind] = node.name
    assert set(seen) == {p.kind for r in HOST_ROLES.values() for p in r.parts}
    components = {plan.nodes[k].type: a.kind for k, a in plan.about.items() if not plan.nodes[k].custom}
    for role in HOST_ROLES.values():
        if role.component:
            assert components[role.component] == role.container.kind


def test_the_runtimes_restart_says_what_it_ends_and_what_it_keeps():
    runtime = HOST_ROLES["runtime"]
    assert runtime.restart_interrupts == ("its sessions API for pools {pools} is down while it restarts: running "
                                          "processes, their output streams and terminals end; sessions and snapshots "
                                          "are kept")
    # A role takes a new configuration by restarting, or in place from its configuration volume (interrupting nothing).
    assert {r.name: (r.config, r.reload, r.reload_interrupts) for r in HOST_ROLES.values() if r.reload != "restart"} == {
        "guard": ("volume", "in place", "nothing"), "gateway": ("volume", "in place", "nothing"),
        "ingress": ("volume", "in place", "nothing"), "runtime": ("volume", "in place", "nothing"),
        "logger": ("volume", "in place", "the name lookups of a pool whose resolver changed, for milliseconds")}
    assert {r.config for r in HOST_ROLES.values() if r.reload == "restart"} == {"inputs"}


@pytest.mark.parametrize(("roles", "message"), [
    (lambda: (replace(EXPORTER, parts=(replace(EXPORTER.parts[0], holds=""),)),),
     "part 'metrics data': a volume says what its replacement throws away (`holds`)"),
    (lambda: (replace(EXPORTER, parts=(replace(EXPORTER.parts[1], interrupts=""),)),),
     "part 'metrics exporter': a container says what its restart interrupts (`interrupts`)"),
    (lambda: (EXPORTER, EXPORTER), "two host roles named 'metrics'"),
    (lambda: (HOST_ROLES["guard"], replace(EXPORTER, parts=(replace(EXPORTER.parts[0], kind="guard state"),))),
     "host roles 'guard' and 'metrics' both have a part kind 'guard state'"),
    (lambda: (replace(EXPORTER, component=None),),
     "host role 'metrics': a role with a container has its own component"),
], ids=["volume-without-holds", "container-without-interrupts", "two-names", "one-kind-twice", "no-component"])
def test_the_registry_refuses_a_role_that_would_leave_a_gap(roles, message):
    with pytest.raises(ValueError) as refused:
        registry(tuple(roles()))
    assert str(refused.value) == message


def test_an_effect_or_a_cascade_naming_no_role_is_refused():
    with pytest.raises(ValueError, match=r"^an Effect's host is a frozenset of \['gateway', 'guard', 'infra', "):
        changes.Effect(host=frozenset({"metrics"}))
    with pytest.raises(ValueError) as refused:
        changes.Cascade("networks", frozenset({"metrics"}), "")
    assert str(refused.value) == ("a Cascade names host roles ['metrics']; one of ['gateway', 'guard', 'infra', "
                                  "'ingress', 'logger', 'networks', 'provider', 'runtime']")
