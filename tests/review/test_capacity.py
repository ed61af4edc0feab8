"""Capacity and cost in every review (issue 38, items 1 and 2): what the pools reserve per pool, host and the stack,
warm and at the on-demand ceiling apart, each host's headroom, the headline's net change, `--fail-on capacity`
with its acceptance, the organisation's capacity bounds, and the monthly cost only where prices are declared."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from sandstack.review.capacity import capacity
from sandstack.review.cost import cost, load_prices
from sandstack.spec import SpecError, load_stack
from sandstack.spec.units import GIB
from sandstack.tooling.cli import main
from testbed.specs import host, spec, write_spec

RUNTIME = {"token": {"secret": "runtimeToken"}}


def _base() -> dict:
    """Two hosts of 16 CPUs (overcommit 2), 64GiB and 200GiB; `agent` 2 warm per host, up to 4 on demand."""
    hosts = {name: host(f"ssh://deploy@{name}.example.com", capacity={"cpus": 16, "memory": "64GiB", "disk": "200GiB"},
                        overcommit={"cpus": 2}, runtime=dict(RUNTIME)) for name in ("node-a", "node-b")}
    return spec({"agent": {"base_image": "python:3.12-slim", "limits": {"cpus": 2, "memory": "4GiB", "disk": "8GiB"}},
                 "shell": {"base_image": "busybox:1.36", "limits": {"cpus": 0.5, "memory": "512MiB", "disk": "1GiB"}}},
                pools={"agent": {"template": "agent", "hosts": ["node-a", "node-b"], "replicas": 2, "max": 4},
                       "shell": {"template": "shell", "hosts": ["node-a"], "replicas": 1}},
                hosts=hosts)


def _memory_raise(data: dict) -> None:
    data["templates"]["agent"]["limits"]["memory"] = "8GiB"


def _new_pool(data: dict) -> None:
    data["templates"]["gpu"] = {"base_image": "python:3.12-slim", "limits": {"cpus": 4, "memory": "16GiB",
                                                                            "disk": "20GiB"}}
    data["pools"]["batch"] = {"template": "gpu", "hosts": ["node-b"], "replicas": 1}


def _pair(tmp_path: Path, edit) -> tuple:
    base = _base()
    head = copy.deepcopy(base)
    edit(head)
    return (load_stack(write_spec(tmp_path / "base", base)), load_stack(write_spec(tmp_path / "head", head)))


def _cli(tmp_path: Path, capsys, edit, *extra: str) -> tuple[int, str, str]:
    base = _base()
    head = copy.deepcopy(base)
    edit(head)
    write_spec(tmp_path / "base", base)
    write_spec(tmp_path / "head", head)
    code = main(["diff", str(tmp_path / "base" / "stack.yaml"), str(tmp_path / "head" / "stack.yaml"), "--stack",
                 "prod", *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_memory_raise_across_two_hosts_reserves_per_pool_host_and_stack_warm_and_ceiling_apart(tmp_path):
    report = capacity(*_pair(tmp_path, _memory_raise))
    (pool,) = report.pools
    assert (pool.name, pool.hosts) == ("agent", ("node-a", "node-b"))
    assert (pool.warm[0].memory, pool.warm[1].memory) == (16 * GIB, 32 * GIB)  # 2 warm × 2 hosts × 4 → 8GiB
    assert (pool.ceiling[0].memory, pool.ceiling[1].memory) == (32 * GIB, 64 * GIB)  # max 4 × 2 hosts
    assert [h.name for h in report.hosts] == ["node-a", "node-b"]
    a = report.hosts[0]
    # node-a: agent 4 at the ceiling × 8GiB + shell 512MiB, of 64GiB (memory is not overcommitted here).
    assert a.ceiling[1].memory == 32 * GIB + GIB // 2 and a.allowed is not None and a.allowed.memory == 64 * GIB
    assert a.headroom().memory == 64 * GIB - 32 * GIB - GIB // 2  # type: ignore[union-attr]
    assert a.allowed.cpus == 32  # 16 × overcommit 2
    assert a.cell("memory") == "8.50GiB → 16.50GiB (max 16.50GiB → 32.50GiB) of 64GiB"
    assert report.headline() == ("Capacity: +16GiB memory reserved (on-demand ceiling: +32GiB memory); host node-a "
                                 "at 32.50GiB of 64GiB memory.")


def test_the_text_markdown_and_json_say_the_same_reservations(tmp_path, capsys):
    code, out, _ = _cli(tmp_path, capsys, _memory_raise)
    assert code == 0
    assert out.splitlines()[2].endswith(" Capacity: +16GiB memory reserved (on-demand ceiling: +32GiB memory); host "
                                        "node-a at 32.50GiB of 64GiB memory.")
    assert ("    pool agent on node-a, node-b: sandboxes 4 (max 8); CPUs 8 (max 16); memory 16GiB → 32GiB (max 32GiB "
            "→ 64GiB); disk 32GiB (max 64GiB)\n") in out
    assert "    stack: sandboxes 5 (max 9); CPUs 8.5 (max 16.5);" in out
    _, md, _ = _cli(tmp_path, capsys, _memory_raise, "--format", "markdown")
    assert ("| host `node-a` | 3 (max 5) | 4.5 (max 8.5) of 32 | 8.50GiB → 16.50GiB (max 16.50GiB → 32.50GiB) of "
            "64GiB | 17GiB (max 33GiB) of 200GiB |") in md
    assert ("| host `node-b` | 2 (max 4) | 4 (max 8) of 32 | 8GiB → 16GiB (max 16GiB → 32GiB) of 64GiB | 16GiB "
            "(max 32GiB) of 200GiB |") in md
    _, js, _ = _cli(tmp_path, capsys, _memory_raise, "--format", "json")
    reserved = json.loads(js)["reserved"]
    assert reserved["stack"]["warm"]["after"]["memory"] == 32 * GIB + GIB // 2
    assert reserved["hosts"][0]["headroom"]["memory"] == 64 * GIB - 32 * GIB - GIB // 2
    assert reserved["headline"].startswith("Capacity: +16GiB memory reserved")


def test_a_new_pool_is_capacity_that_fails_until_accepted(tmp_path, capsys):
    code, out, err = _cli(tmp_path, capsys, _new_pool, "--fail-on", "capacity")
    assert code == 3
    assert "sandstack: --fail-on capacity: pool batch: +1 sandboxes, +4 CPUs, +16GiB memory, +20GiB disk reserved\n" \
        in err
    assert out.splitlines()[2:4] == ["CI fails (exit 3): --fail-on capacity",
                                     "  capacity: pool batch: +1 sandboxes, +4 CPUs, +16GiB memory, +20GiB disk "
                                     "reserved"]
    review = tmp_path / "accept.yaml"
    review.write_text("accept:\n  - change: pools.batch\n    category: [capacity, security]\n"
                      "    reason: the nightly batch jobs, sized with the platform team\n")
    code, out, err = _cli(tmp_path, capsys, _new_pool, "--fail-on", "capacity", "--fail-on", "security", "--accept",
                          str(review))
    assert (code, err) == (0, "")
    assert out.splitlines()[2] == "CI passes: --fail-on capacity, security"


def test_an_acceptance_of_all_categories_and_one_that_leaves_some(tmp_path, capsys):
    review = tmp_path / "accept.yaml"
    review.write_text("accept:\n  - change: pools.batch\n    category: all\n    reason: the nightly batch jobs\n")
    code, _, err = _cli(tmp_path, capsys, _new_pool, "--fail-on", "capacity", "--fail-on", "security", "--accept",
                        str(review))
    assert (code, err) == (0, "")
    review.write_text("accept:\n  - change: pools.batch\n    category: [security]\n    reason: the nightly batch\n")
    code, out, _ = _cli(tmp_path, capsys, _new_pool, "--fail-on", "capacity", "--accept", str(review))
    assert code == 3
    # (A new pool restarts nothing: the guard, the gateway and the runtime take it in place.)
    assert f"  pools.batch ({review}:2:5): accepted for security; still not accepted: capacity\n" in out
    review.write_text("accept:\n  - change: pools.batch\n    category: []\n    reason: the nightly batch\n"
                      "  - change: pools.batch\n    category: [capacity, looser]\n    reason: the nightly batch\n")
    code, out, err = _cli(tmp_path, capsys, _new_pool, "--accept", str(review))
    assert (code, out) == (1, "")
    assert err.splitlines()[1:] == [
        f"{review}:3:15: $.accept[0].category: an empty list accepts nothing: name one or more of 'security', "
        "'capacity', 'disruption', 'data-loss', 'replace', or 'all'",
        f"{review}:6:26: $.accept[1].category[1]: 'looser' is not one of 'security', 'capacity', 'disruption', "
        "'data-loss', 'replace' (or 'all' alone)"]


def test_a_green_and_a_red_run_say_so_at_the_top_of_markdown_and_json(tmp_path, capsys):
    code, md, _ = _cli(tmp_path, capsys, _memory_raise, "--fail-on", "security", "--fail-on", "data-loss",
                       "--format", "markdown")
    assert code == 0 and md.splitlines()[2] == "**✅ passes: --fail-on security, data-loss**"
    code, md, _ = _cli(tmp_path, capsys, _memory_raise, "--fail-on", "capacity", "--fail-on", "security",
                       "--format", "markdown")
    assert code == 3
    assert md.splitlines()[2:6] == ["**❌ CI fails (exit 3): --fail-on capacity; passes: security**", "",
                                    "- capacity: pool agent: +16GiB memory reserved (on-demand ceiling: +32GiB memory)",
                                    ""]
    assert md.splitlines()[6].startswith("**Impact: ")
    _, js, _ = _cli(tmp_path, capsys, _memory_raise, "--fail-on", "capacity", "--format", "json")
    verdict = json.loads(js)["verdict"]
    assert (verdict["fail_on"], verdict["failed"], verdict["passed"], verdict["exit"]) == (["capacity"],
                                                                                          ["capacity"], [], 3)
    assert [i["text"] for i in verdict["items"]] == ["pool agent: +16GiB memory reserved (on-demand ceiling: +32GiB "
                                                     "memory)"]
    code, md, _ = _cli(tmp_path, capsys, _memory_raise, "--format", "markdown")  # no --fail-on: no verdict line
    assert md.splitlines()[2].startswith("**Impact: ")


# --- the organisation's capacity bounds ---------------------------------------------------------------------

BOUNDS = """rules:
  - id: ORG-CAP-010
    name: change-size
    applies_to: change
    severity: error
    description: Checks whether a change adds at most 16GiB of memory at the ceiling.
    message: "A change must add at most 16GiB of memory"
    remediation: Split it.
    schema:
      added_memory_mib: {max: 16384}
  - id: ORG-CAP-011
    name: host-total
    applies_to: host
    severity: error
    description: Checks whether a host's pools reserve at most 30GiB of memory.
    message: "Host '{name}' must reserve at most 30GiB of memory"
    remediation: Move a pool.
    schema:
      reserved_memory_mib: {max: 30720}
  - id: ORG-CAP-012
    name: stack-total
    applies_to: stack
    severity: error
    description: Checks whether the stack reserves at most 12 sandboxes.
    message: "The stack must reserve at most 12 sandboxes"
    remediation: Lower replicas.
    schema:
      reserved_sandboxes: {max: 12}
"""


def test_capacity_bounds_of_the_organisation_fail_with_their_rule_located(tmp_path, capsys):
    policy = tmp_path / "capacity.yaml"
    policy.write_text(BOUNDS)
    code, out, err = _cli(tmp_path, capsys, _memory_raise, "--policy", str(policy), "--fail-on", "capacity")
    assert code == 3
    lines = [line for line in err.splitlines() if "ORG-CAP" in line]
    assert lines == [
        "sandstack: --fail-on capacity: ORG-CAP-010 change-size: A change must add at most 16GiB of memory "
        "(added_memory_mib 32768: max value is 16384).",
        "sandstack: --fail-on capacity: ORG-CAP-011 host-total: Host 'node-a' must reserve at most 30GiB of memory "
        "(reserved_memory_mib 33280: max value is 30720).",
        "sandstack: --fail-on capacity: ORG-CAP-011 host-total: Host 'node-b' must reserve at most 30GiB of memory "
        "(reserved_memory_mib 32768: max value is 30720)."]
    assert f"(bound {policy}:2:9)" in out  # the rule's own line in the policy file
    # A bound is the organisation's: accepting the change in the pull request does not lift it.
    review = tmp_path / "accept.yaml"
    review.write_text("accept:\n  - change: templates.agent.limits.memory\n    category: capacity\n"
                      "    reason: the model needs 8GiB\n")
    code, _, err = _cli(tmp_path, capsys, _memory_raise, "--policy", str(policy), "--fail-on", "capacity",
                        "--accept", str(review))
    assert code == 3 and "pool agent" not in err and "ORG-CAP-010" in err


def test_a_stack_total_bound_counts_only_a_new_breach(tmp_path, capsys):
    policy = tmp_path / "capacity.yaml"
    policy.write_text(BOUNDS.replace("{max: 12}", "{max: 9}"))

    def more(data: dict) -> None:
        data["pools"]["shell"]["replicas"] = 2
    code, _, err = _cli(tmp_path, capsys, more, "--policy", str(policy), "--fail-on", "capacity")
    assert code == 3 and "ORG-CAP-012 stack-total: The stack must reserve at most 12 sandboxes (reserved_sandboxes " \
        "10: max value is 9)." in err
    policy.write_text(BOUNDS.replace("{max: 12}", "{max: 8}"))  # the base breaks it already: check's finding
    _, _, err = _cli(tmp_path, capsys, more, "--policy", str(policy), "--fail-on", "capacity")
    assert "ORG-CAP-012" not in err


def test_check_applies_host_and_stack_bounds_and_leaves_change_rules_to_diff(tmp_path, capsys):
    policy = tmp_path / "capacity.yaml"
    policy.write_text(BOUNDS.replace("{max: 12}", "{max: 8}").replace("{max: 30720}", "{max: 16384}"))
    path = write_spec(tmp_path / "s", _base())
    assert main(["check", str(path), "--policy", str(policy), "--format", "json"]) == 1
    found = {(f["rule"], f["target"], f["path"]) for f in json.loads(capsys.readouterr().out)["findings"]
             if f["rule"].startswith("ORG-CAP")}
    assert found == {("ORG-CAP-011", "host/node-a", "$.hosts.node-a"), ("ORG-CAP-012", "stack", "$.pools")}


# --- cost -----------------------------------------------------------------------------------------------------

PRICES = "currency: EUR\nper_hour: {cpu: 0.04, memory_gib: 0.005, disk_gib: 0.0001}\nhosts: {node-b: 1.5}\n"


def test_cost_before_after_and_its_difference_from_the_price_list(tmp_path, capsys):
    prices = tmp_path / "prices.yaml"
    prices.write_text(PRICES)
    result = cost(*_pair(tmp_path, _memory_raise), load_prices(prices))
    # node-a warm: 4.5 CPUs, 8.5GiB → 16.5GiB, 17GiB disk; node-b billed whole: 1.5 an hour; 730 hours.
    before = (4.5 * 0.04 + 8.5 * 0.005 + 17 * 0.0001) * 730 + 1.5 * 730
    after = (4.5 * 0.04 + 16.5 * 0.005 + 17 * 0.0001) * 730 + 1.5 * 730
    assert (round(result.before.warm, 2), round(result.after.warm, 2)) == (round(before, 2), round(after, 2))
    ceiling = (8.5 * 0.04 + 32.5 * 0.005 + 33 * 0.0001) * 730 + 1.5 * 730  # node-a: 4 agents and the shell
    assert result.headline() == (f"Cost: {before:,.2f} → {after:,.2f} EUR a month (+{after - before:,.2f}), up to "
                                 f"{ceiling:,.2f} at the on-demand ceiling.")
    code, out, _ = _cli(tmp_path, capsys, _memory_raise, "--prices", str(prices))
    assert code == 0 and out.splitlines()[2].endswith(" " + result.headline())
    assert f"  host node-a: {before - 1095:,.2f} → {after - 1095:,.2f} EUR a month (+29.20)\n  prices: {prices}\n" in out


def test_a_host_reserving_what_has_no_price_is_named_not_guessed(tmp_path, capsys):
    prices = tmp_path / "prices.yaml"
    prices.write_text("currency: USD\nper_hour: {cpu: 0.04}\n")
    result = cost(*_pair(tmp_path, _memory_raise), load_prices(prices))
    assert result.after.warm == 0 and result.after.unpriced == (
        "host node-a (no price for disk_gib, memory_gib)", "host node-b (no price for disk_gib, memory_gib)")
    assert result.headline().endswith("; not priced: host node-a (no price for disk_gib, memory_gib), host node-b "
                                      "(no price for disk_gib, memory_gib).")


def test_without_prices_no_figure_is_shown_anywhere(tmp_path, capsys):
    for fmt in ("text", "markdown"):
        _, out, _ = _cli(tmp_path, capsys, _memory_raise, "--format", fmt)
        assert "Cost" not in out and "EUR" not in out
    _, js, _ = _cli(tmp_path, capsys, _memory_raise, "--format", "json")
    data = json.loads(js)
    assert data["cost"] is None and data["impact"]["cost"] == ""


def test_a_policy_file_names_the_price_list(tmp_path, capsys):
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "prices.yaml").write_text(PRICES)
    policy = tmp_path / "org" / "policy.yaml"
    policy.write_text("prices: prices.yaml\nrules: []\n")
    _, js, _ = _cli(tmp_path, capsys, _memory_raise, "--policy", str(policy), "--format", "json")
    assert json.loads(js)["cost"]["prices"] == str(tmp_path / "org" / "prices.yaml")


@pytest.mark.parametrize(("text", "message"), [
    ("currency: EUR\n", ":1:1: $: a price list declares 'per_hour' prices, 'hosts' prices or both"),
    ("currency: EUR\nper_hour: {cpu: -1}\n", ":2:17: $.per_hour.cpu: -1 is not a price an hour (a number, 0 or "
                                             "more)"),
    ("currency: EUR\nper_hour: {cores: 1}\n", ":2:12: $.per_hour.cores: unknown unit 'cores': allowed are cpu, "
                                              "memory_gib, disk_gib, gpu"),
    ("per_hour: {cpu: 1}\n", ":1:1: $.currency: None is not a currency: write its code, e.g. EUR or USD (at most 8 "
                             "characters)"),
    ("currency: EUR\nhosts: {a: 1}\nmonthly: 3\n", ":3:1: $.monthly: unknown key 'monthly': allowed are currency, "
                                                   "hours_per_month, per_hour, hosts"),
])
def test_a_bad_price_list_is_located_with_what_is_allowed(text: str, message: str, tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as error:
        load_prices(path)
    assert str(error.value).splitlines() == [f"{path}{message}"]


def test_the_example_price_list_and_capacity_policy_load_and_the_committed_stacks_keep_the_bounds(capsys):
    from sandstack.policy.org import load_policy_file
    from testbed.specs import REPO

    prices = load_prices(REPO / "policies" / "prices.yaml")
    assert (prices.currency, prices.hours_per_month, prices.hosts) == ("EUR", 730.0, {"gpu-a": 1.95})
    policy = load_policy_file(REPO / "policies" / "capacity.yaml")
    assert [r.applies_to for r in policy.rules] == ["host", "stack", "change"]
    assert policy.prices == str(REPO / "policies" / "prices.yaml")
    assert main(["check", str(REPO / "stacks" / "prod.yaml"), "--policy", str(REPO / "policies" / "capacity.yaml"),
                 "--format", "json"]) == 0
    assert not [f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"].startswith("ORG-CAP")]
