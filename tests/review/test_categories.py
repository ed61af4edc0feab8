"""Issue 21: how `sandstack diff` reads to a reviewer. The five pull requests the issue names, made from
stacks/dev.yaml (a snapshot bump, a new allow entry, a new public port, more replicas, more memory): their impact
headline as printed, each change's category, `--fail-on` per category and accepted changes."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml

from sandstack.spec.access import CATEGORIES, category
from sandstack.spec.models import Stack
from sandstack.spec.models.base import access_of, change_of
from sandstack.spec.walk import model_fields
from sandstack.review.categories import field_category
from sandstack.tooling.cli import main
from testbed.specs import STACKS, set_path

DEV = yaml.safe_load((STACKS / "dev.yaml").read_text())


def _public_port(d: dict) -> None:
    d["templates"]["preview"]["ports"].append({"port": 8081, "exposure": "public", "host_port": 18081, "name": "docs"})


PRS = {
    "snapshot": lambda d: set_path(d, "templates.python.snapshot.version", "2"),
    "allow": lambda d: d["templates"]["python"]["network"]["allow"].append("pypi.org"),
    "port": _public_port,
    "replicas": lambda d: set_path(d, "pools.python.replicas", 4),
    "memory": lambda d: set_path(d, "templates.python.limits.memory", "2GiB"),
}


@pytest.fixture
def stacks(tmp_path: Path, monkeypatch) -> Path:
    shutil.copytree(STACKS, tmp_path / "stacks")
    monkeypatch.chdir(tmp_path)
    for name, edit in PRS.items():
        data = copy.deepcopy(DEV)
        edit(data)
        (tmp_path / "stacks" / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return tmp_path


def _diff(pr: str, capsys, *extra: str) -> tuple[int, str, str]:
    code = main(["diff", "stacks/dev.yaml", f"stacks/{pr}.yaml", "--stack", "dev", *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


HEADLINES = {
    "snapshot": ["Impact: 2 sandboxes restart (processes and writable paths lost), 0 created, 0 destroyed, 0 host "
                 "services renewed, no data lost, nothing less safe.",
                 "  pool python on local: 2 restart (processes and writable paths lost) — "
                 "templates.python.snapshot.version"],
    # The gateway and the logger take the new allow entry in place; egress keeps flowing.
    "allow": ["Impact: 0 sandboxes restart, 0 created, 0 destroyed, 0 host services renewed, 2 reloaded in place, no "
              "data lost, 1 change less safe.",
              "  gateway reloaded in place on local: interrupts nothing — it re-reads its squid config (a new pool's "
              "network joined first) and keeps its connections and listening ports",
              "  logger reloaded in place on local: interrupts the name lookups of a pool whose resolver changed, for "
              "milliseconds — it restarts only the resolvers whose options changed (or of pools added or taken off) "
              "and keeps its connection queue and every other resolver running"],
    "port": ["Impact: 1 sandbox restart (processes and writable paths lost), 0 created, 0 destroyed, 0 host services "
             "renewed, no data lost, 1 change less safe.",
             "  pool preview on local: 1 restart (processes and writable paths lost) — templates.preview.ports.1"],
    "replicas": ["Impact: 0 sandboxes restart, 2 created, 0 destroyed, 0 host services renewed, 2 reloaded in place "
                 "(no interruption), no data lost, nothing less safe. Capacity: +2 sandboxes, +2 CPUs, +2GiB memory, "
                 "+2GiB disk reserved; host local at 6 of 8 CPUs.",
                 "  pool python on local: 2 created — pools.python.replicas",
                 "  guard reloaded in place on local: interrupts nothing — it applies the new rules, pids limits and "
                 "lifetimes at its next pass; its clocks keep running",
                 "  runtime reloaded in place on local: interrupts nothing — it swaps in its new pools, ceilings, idle "
                 "policies, on-demand recipes and token scopes; its sessions, running processes, streams and terminals go on (a "
                 "pool taken off keeps its bound sessions until they end)"],
    "memory": ["Impact: 0 sandboxes restart, 0 created, 0 destroyed, 0 host services renewed, no data lost, nothing "
               "less safe. Capacity: +2GiB memory reserved; host local at 5GiB of 8GiB memory.",
               "  pool python on local: 2 updated in place — templates.python.limits.memory"],
}


@pytest.mark.parametrize("pr", sorted(PRS))
def test_the_impact_headline_comes_first(pr: str, stacks, capsys):
    code, out, err = _diff(pr, capsys)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[2:2 + len(HEADLINES[pr])] == HEADLINES[pr]
    assert lines[2 + len(HEADLINES[pr])] == ""


def test_the_snapshot_bump_reads_in_the_reviewers_conventions(stacks, capsys):
    _, out, _ = _diff("snapshot", capsys)
    assert ("  -/+ snapshot sandstack-python.local-image\n"
            "        digest: sha256:cb577c1c8770… → sha256:2d0dd55d92c2…\n"
            "        image: sandstack-dev/python:1-cb577c1c8770 → sandstack-dev/python:2-2d0dd55d92c2\n"
            "        version: 1 → 2\n"
            "        because templates.python.snapshot.version: 1 → 2 [rebuild]  # forces replacement\n") in out
    assert out.endswith("\nPlan: 0 to create, 0 to update in place, 3 to replace, 0 to delete, 29 unchanged.\n")


def test_the_memory_raise_is_capacity_in_spec_units(stacks, capsys):
    _, out, _ = _diff("memory", capsys)
    # The resolved value before (the `medium` profile's 1GiB), not the unset field the template wrote.
    assert "Security:\n  no security-relevant change\n\nCapacity:\n  pool python: memory 1GiB → 2GiB per sandbox\n" in out
    assert ("    ~ 2 sandboxes of pool python: sandstack-python.local-0, sandstack-python.local-1\n"
            "        memory_mb: 1GiB → 2GiB\n"
            # The value the template inherited and the layer that set it, not `(unset)` (issue 38, item 7).
            "        because templates.python.limits.memory: (inherited 1GiB from profiles.medium.memory) → 2GiB "
            "[in-place]\n") in out
    assert out.endswith("\nPlan: 0 to create, 2 to update in place, 0 to replace, 0 to delete, 30 unchanged.\n")


def test_more_replicas_are_capacity_counted_in_sandboxes(stacks, capsys):
    _, out, _ = _diff("replicas", capsys)
    assert "\nCapacity:\n  pool python: sandboxes 2 → 4 (replicas 2 → 4 on 1 host)\n" in out
    assert "\nSecurity:\n  no security-relevant change\n" in out


def test_a_port_list_reads_as_ports_and_a_squid_line_is_not_cut(stacks, capsys):
    _, out, _ = _diff("port", capsys)
    assert "        ports: [0.0.0.0:18080→8080/tcp] → [0.0.0.0:18080→8080/tcp, 0.0.0.0:18081→8081/tcp]\n" in out
    _, out, _ = _diff("allow", capsys)
    assert ("+http_access allow python_from python_allow3 python_allow3_port !sandstack_localhost !sandstack_self "
            "!python_blocked\n") in out


# --- --fail-on per category --------------------------------------------------------------------------------

# Which categories each pull request fails (exit 3) without acceptances.
FAILS = {
    "snapshot": {"disruption", "replace"},
    "allow": {"security"},  # the gateway and the logger take the new entry in place: nothing restarts
    "port": {"security", "disruption", "replace"},
    "replicas": {"capacity"},  # the guard and the runtime take the new sandboxes in place: nothing restarts
    "memory": {"capacity"},
}


@pytest.mark.parametrize("pr", sorted(PRS))
@pytest.mark.parametrize("kind", ["security", "capacity", "disruption", "data-loss", "replace"])
def test_fail_on_each_category(pr: str, kind: str, stacks, capsys):
    code, _, err = _diff(pr, capsys, "--fail-on", kind)
    assert code == (3 if kind in FAILS[pr] else 0), err
    assert (f"sandstack: --fail-on {kind}: " in err) == (kind in FAILS[pr])


def test_identical_hosts_fold_and_a_host_taken_out_loses_its_volumes(stacks, capsys):
    prod = yaml.safe_load(Path("stacks/prod.yaml").read_text())
    for pool in ("python-warm", "browser-warm"):
        set_path(prod, f"pools.{pool}.replicas", 3)
    Path("stacks/fewer-replicas.yaml").write_text(yaml.safe_dump(prod, sort_keys=False))
    code = main(["diff", "stacks/prod.yaml", "stacks/fewer-replicas.yaml", "--stack", "prod"])
    out = capsys.readouterr().out
    assert code == 0
    assert "\nhosts sbx-a, sbx-b (the same on each; names of sbx-a):\n" in out, out
    assert out.splitlines()[2:8] == [
        "Impact: 0 sandboxes restart, 0 created, 28 destroyed, 0 host services renewed, 4 reloaded in place (no "
        "interruption), no data lost, nothing less safe. Capacity: -28 sandboxes, -21 CPUs, -68GiB memory, -84GiB "
        "disk reserved; host sbx-a at 30GiB of 128GiB memory.",
        "  pool browser-warm on sbx-a, sbx-b: 2 destroyed — pools.browser-warm.replicas",
        "  pool python-warm on sbx-a, sbx-b: 26 destroyed — pools.python-warm.replicas",
        "  guard reloaded in place on sbx-a, sbx-b: interrupts nothing — it applies the new rules, pids limits and "
        "lifetimes at its next pass; its clocks keep running",
        "  ingress reloaded in place on sbx-a, sbx-b: interrupts nothing — it loads its new Caddyfile through its "
        "admin API (a url pool's network joined first) and keeps its connections",
        ""]
    assert ("    - 13 sandboxes of pool python-warm: sandstack-python-warm.sbx-a-3, sandstack-python-warm.sbx-a-4, … "
            "sandstack-python-warm.sbx-a-15 (processes and writable paths lost)\n") in out
    assert "\nhost sbx-b:" not in out
    del prod["hosts"]["sbx-b"]
    for pool in ("python-warm", "browser-warm"):
        prod["pools"][pool]["hosts"] = ["sbx-a"]
    Path("stacks/fewer.yaml").write_text(yaml.safe_dump(prod, sort_keys=False))
    code = main(["diff", "stacks/prod.yaml", "stacks/fewer.yaml", "--stack", "prod", "--fail-on", "data-loss",
                 "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 3
    # Five named per category, the rest counted: a large removal does not print a line per resource.
    capsys.readouterr()
    assert main(["diff", "stacks/prod.yaml", "stacks/fewer.yaml", "--stack", "prod", "--fail-on", "replace"]) == 3
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("sandstack: --fail-on replace: ")]
    deleted = sum(1 for i in report["review"]["items"] if i["category"] == "replace")
    assert deleted > 5 and len(lines) == 6
    assert lines[-1] == f"sandstack: --fail-on replace: … and {deleted - 5} more not accepted"
    assert {(d["kind"], d["action"], tuple(d["hosts"])) for d in report["impact"]["data_lost"]} >= {
        ("connection log", "delete", ("sbx-b",)), ("gateway log", "delete", ("sbx-b",))}


def test_every_field_has_one_review_category_from_its_declarations():
    for path, info in model_fields(Stack).items():
        assert category(access_of(info), change_of(info)) in CATEGORIES, path
    assert field_category("templates.python.limits.memory") == "capacity"
    assert field_category("templates.python.limits.cpus") == "capacity"
    assert field_category("pools.python.replicas") == "capacity"
    assert field_category("templates.python.network.allow") == "security"
    assert field_category("templates.python.limits.pids") == "security"  # the fork-bomb bound stays security
    assert field_category("templates.python.snapshot.version") == "disruption"
    assert field_category("templates.python.description") == "cosmetic"


def test_json_format_2_carries_categories_impact_and_review(stacks, capsys):
    _, out, _ = _diff("memory", capsys, "--format", "json")
    report = json.loads(out)
    assert report["format"] == 2 and report["security"] == []
    assert report["fields"] == [{"path": "templates.python.limits.memory", "old": None, "new": 2147483648,
                                 "effect": "in-place; built-in /tmp or /dev/shm under 256MiB: replace",
                                 "category": "capacity",
                                 "inherited": {"old": {"value": 1073741824, "from": "profiles.medium.memory"},
                                               "new": None}}]
    assert report["impact"]["pools"][0]["update"] == 2 and report["unchanged"] == 30


# --- accepted changes ----------------------------------------------------------------------------------------

def _accept(text: str) -> None:
    Path("stacks/review").mkdir(exist_ok=True)
    Path("stacks/review/allow.yaml").write_text(text)


def test_an_accepted_change_is_shown_with_its_reason_and_does_not_fail(stacks, capsys):
    Path("stacks/review").mkdir(exist_ok=True)
    Path("stacks/review/port.yaml").write_text(
        "accept:\n"
        "  - change: templates.preview.ports\n    category: security\n    reason: the preview is public by design\n"
        "  - change: templates.preview.ports\n    category: disruption\n"
        "    reason: the preview restarts in a quiet hour\n")
    code, out, err = _diff("port", capsys, "--fail-on", "security", "--fail-on", "disruption")
    assert (code, err) == (0, "")
    assert ("  LOOSER  pool preview: port 8081/tcp made public (was none)  (accepted: the preview is public by "
            "design)\n") in out
    assert ("\nAccepted:\n"
            "  security: pool preview: port 8081/tcp made public (was none) — the preview is public by design "
            "(stacks/review/port.yaml:2:5)\n"
            "  disruption: sandbox sandstack-preview.local-0 replace — the preview restarts in a quiet hour "
            "(stacks/review/port.yaml:5:5)\n"
            # One change, accepted for two of its three categories: the review says which one remains.
            "  templates.preview.ports (stacks/review/port.yaml:2:5, stacks/review/port.yaml:5:5): accepted for "
            "security, disruption; still not accepted: replace\n\n") in out
    code, _, err = _diff("port", capsys, "--fail-on", "replace")  # not accepted for `replace`
    assert code == 3 and "sandstack: --fail-on replace: sandbox sandstack-preview.local-0 replace\n" in err


def test_a_stale_acceptance_is_a_warning_and_an_error_when_strict(stacks, capsys):
    _accept("accept:\n  - change: templates.shell.limits.memory\n    category: disruption\n    reason: no longer true\n")
    code, out, err = _diff("allow", capsys)
    assert code == 0
    assert err == ("stacks/review/allow.yaml:2:5: warning: acceptance of 'templates.shell.limits.memory' "
                   "(disruption) matches no change: remove it\n")
    assert "Stale acceptances (they match no change; remove them):\n  stacks/review/allow.yaml:2:5: disruption " \
           "templates.shell.limits.memory\n" in out
    code, out, err = _diff("allow", capsys, "--strict-accept")
    assert code == 1 and err.startswith("stacks/review/allow.yaml:2:5: error: acceptance of ")
    # The comment of that red run says why, at the top, as a --fail-on verdict does.
    assert out.splitlines()[2] == ("CI fails (exit 1): --strict-accept and an acceptance matches no change (see Stale "
                                   "acceptances)")


def test_a_bad_review_file_is_located_with_what_is_allowed(stacks, capsys):
    _accept("accept:\n  - change: templates.python.network.allow\n    category: looser\n    reason: '.'\n    by: me\n")
    code, out, err = _diff("allow", capsys)
    assert (code, out) == (1, "")
    assert err == ("stacks/review/allow.yaml is not a valid review file:\n"
                   "stacks/review/allow.yaml:3:15: $.accept[0].category: 'looser' is not one of 'security', "
                   "'capacity', 'disruption', 'data-loss', 'replace' (or 'all' alone)\n"
                   "stacks/review/allow.yaml:4:13: $.accept[0].reason: not a valid reason: say why the change is "
                   "accepted in words (at least one word of 3 letters)\n"
                   "stacks/review/allow.yaml:5:5: $.accept[0].by: unknown key 'by': allowed are change, category, "
                   "reason\n")
