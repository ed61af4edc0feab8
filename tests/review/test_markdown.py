"""`sandstack diff --format markdown`, read as GitHub reads it: the headline first, the pools' table, the security
section, closed and typed fences, balanced <details>, a Mermaid picture Mermaid's own parser accepts, and a comment
that stays under GitHub's limit at 1,000 sandboxes with the headline, the table and the security section whole."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from benchmarks.stacks import SIZES, generate, write
from sandstack.review import diagram
from sandstack.review.diff import diff
from sandstack.review.diff_markdown import MARKDOWN_BUDGET, _code, to_markdown
from sandstack.review.diff_text import to_text
from sandstack.review.impact import impact
from sandstack.spec import load_stack
from sandstack.tooling.cli import main
from tests.review.cases import FILES, PAIRS, pair
from tests.review.test_categories import HEADLINES, PRS, stacks  # noqa: F401 (a fixture)
from tests.review.markdown_check import mermaid_available, mermaid_parse, parse
from testbed.specs import host, spec, write_spec

GOLDEN = Path(__file__).parent / "golden"


def _diff(tmp_path: Path, base: dict, head: dict):
    return diff(load_stack(write_spec(tmp_path / "base", base, FILES)),
                load_stack(write_spec(tmp_path / "head", head, FILES)), "prod")


def _case(case: str, tmp_path: Path):
    return _diff(tmp_path, *pair(case))


@pytest.mark.parametrize("case", PAIRS)
def test_the_golden_markdown_of_each_case_parses_with_its_headline_table_and_security(case: str, tmp_path: Path):
    text = (GOLDEN / f"diff-{case}.md").read_text()
    doc = parse(text)
    result = _case(case, tmp_path)
    facts = impact(result)
    assert doc.first == f"**{facts.headline()}**"  # the headline is what a reviewer reads first
    rows = doc.tables[0][1:] if doc.tables else []
    assert [r[0] for r in rows] == [f"`{p.pool}`" for p in facts.pools]
    assert [r[3] for r in rows] == [str(p.restart) for p in facts.pools]
    looser = sum(f.loosens for f in result.security)
    assert f"{'⚠️ ' if looser else ''}Security: {looser} looser, {len(result.security) - looser} tighter" \
        in doc.paragraphs
    for finding in result.security:
        assert any(finding.text in p and finding.pool in p for p in doc.paragraphs), finding
    assert bool(doc.fences.get("mermaid")) == bool(result.changes)


def test_a_memory_raise_reads_as_an_update_in_place_with_its_setting_coloured(tmp_path: Path):
    doc = parse(to_markdown(_case("limits-raised", tmp_path), "base", "head"))
    assert doc.tables[0][1] == ["`agent`", "gpu-1", "~ update (3 updated in place)", "0",
                                "`templates.agent.limits.memory`"]
    # Capacity, not a loosening: the security section is empty and the raise is listed under Capacity.
    assert "Security: 0 looser, 0 tighter" in doc.paragraphs and "No security-relevant change." in doc.paragraphs
    assert "pool `agent`: memory 1GiB → 4GiB per sandbox" in doc.paragraphs
    assert doc.fences["diff"] == ["! 3 sandboxes of pool agent: updated in place\n"
                                  "-     memory_mb: 1GiB\n+     memory_mb: 4GiB\n"
                                  "      # because templates.agent.limits.memory: 1GiB → 4GiB [in-place]\n"]


def test_a_public_port_reads_as_a_restart_and_a_looser_finding(tmp_path: Path):
    result = _case("port-public", tmp_path)
    doc = parse(to_markdown(result, "base", "head"))
    assert doc.tables[0][1] == ["`agent`", "gpu-1", "-/+ replace", "3", "`templates.agent.ports.0.exposure`"]
    assert "⚠️ **looser** — pool `agent`: port 8000/tcp made public (was host)" in doc.paragraphs
    (picture,) = doc.fences["mermaid"]
    assert '["pool agent<br/>3 restart<br/>-/+ replaced"]:::replaced' in picture
    assert '["network of agent"]:::unchanged' in picture  # context: the pool's network, unchanged


def _two_hosts() -> tuple[dict, dict]:
    base = spec({"agent": {"base_image": "python:3.12-slim", "limits": {"memory": "1GiB"},
                           "ports": [{"port": 8000, "exposure": "host"}]}},
                pools={"agent": {"template": "agent", "hosts": ["node-a", "node-b"], "replicas": 2}},
                hosts={"node-a": host("ssh://deploy@node-a.example.com"),
                       "node-b": host("ssh://deploy@node-b.example.com")})
    head = copy.deepcopy(base)
    head["templates"]["agent"]["ports"][0]["exposure"] = "public"
    return base, head


def test_identical_hosts_fold_into_one_row_one_box_and_one_details_block(tmp_path: Path):
    result = _diff(tmp_path, *_two_hosts())
    text = to_markdown(result, "base", "head")
    doc = parse(text)
    assert doc.tables[0][1:] == [["`agent`", "node-a, node-b", "-/+ replace", "4",
                                  "`templates.agent.ports.0.exposure`"]]
    assert text.count("<details>") == 1
    assert "<summary>2 identical hosts <code>node-a</code>, <code>node-b</code>: 2 resources change each" in text
    assert doc.fences["diff"][0].startswith("-/+ 2 sandboxes of pool agent: replaced (processes and writable "
                                            "paths lost)\n")
    (box,) = diagram.boxes(result)
    assert box.hosts == ("node-a", "node-b")
    assert 'subgraph g0["2 hosts alike: node-a, node-b"]' in doc.fences["mermaid"][0]


def test_hosts_alike_but_for_their_names_fold_the_same_in_text_markdown_and_picture(tmp_path: Path):
    """A host service's name holds its host's (`sandstack-node-a-gateway-container`): the text folded such hosts,
    the markdown did not (issue 38: they folded in one comment and not in another). Every output folds them now."""
    base, _ = _two_hosts()
    base["templates"]["agent"]["network"] = {"egress": "allow-list", "allow": ["api.github.com"]}
    head = copy.deepcopy(base)
    head["templates"]["agent"]["network"]["allow"].append("pypi.org")
    result = _diff(tmp_path, base, head)
    text = to_text(result, "base", "head")
    assert "\nhosts node-a, node-b (the same on each; names of node-a):\n" in text
    markdown = to_markdown(result, "base", "head")
    assert markdown.count("<details>") == 1
    assert ("<summary>2 identical hosts <code>node-a</code>, <code>node-b</code>: 2 resources change each (names of "
            "<code>node-a</code>)</summary>") in markdown
    assert [box.hosts for box in diagram.boxes(result)] == [("node-a", "node-b")]


def test_a_new_host_is_drawn_as_created(tmp_path: Path):
    picture = parse(to_markdown(_case("host-added", tmp_path), "base", "head")).fences["mermaid"][0]
    assert 'subgraph g0["host gpu-2 (created)"]' in picture
    assert '["pool shell<br/>2 created<br/>+ created"]:::created' in picture


def test_a_value_with_backticks_and_markup_stays_inside_its_fence(tmp_path: Path):
    base, head = pair("limits-raised")
    head["templates"]["agent"]["env"]["MODE"] = "a ``` <b>|</b>\n```"
    doc = parse(to_markdown(_diff(tmp_path, base, head), "base", "head"))
    (fence,) = doc.fences["diff"]  # a text's lines are `+`/`-` lines of their own, inside the one fence
    assert "-     env.MODE: agent\n+     env.MODE: a ``` <b>|</b>\n+     env.MODE: ```\n" in fence
    assert _code("a`b") == "``a`b``" and _code("`x`") == "`` `x` ``"


def test_what_does_not_fit_gives_way_details_first_and_is_counted(tmp_path: Path):
    result = _case("pool-resized", tmp_path)
    full = to_markdown(result, "base", "head")
    assert "not shown" not in full
    kept = full.split("\n```mermaid")[0]
    tight = to_markdown(result, "base", "head", budget=len(kept) + 200)
    doc = parse(tight)
    assert tight.startswith(kept) and "<details>" not in tight and "mermaid" not in doc.fences
    assert tight.endswith("\n\n_… 3 more resource changes, the picture and the legend not shown: run `sandstack diff` "
                          "locally for everything._\n")
    for budget in range(len(kept) + 130, len(full) + 50, 37):  # whatever the budget, the comment keeps to it
        assert len(to_markdown(result, "base", "head", budget=budget)) <= budget


def _pull_request(pr: str, capsys) -> str:
    assert main(["diff", "stacks/dev.yaml", f"stacks/{pr}.yaml", "--stack", "dev", "--format", "markdown"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("pr", PRS)
def test_the_five_pull_requests_of_the_issue_lead_with_their_headline(pr: str, stacks, capsys):
    doc = parse(_pull_request(pr, capsys))
    assert doc.first == f"**{HEADLINES[pr][0]}**"
    assert bool(doc.tables) == (pr != "allow")  # a new allow entry restarts no pool: no table, its services instead
    assert doc.fences["mermaid"] and doc.fences["diff"]


# --- 1,000 sandboxes ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """1,000 sandboxes (100 pools on 10 hosts): every template's memory raised, half its port made public, a third
    an allow entry added: 1,000 sandboxes change, the gateways of every host with them."""
    data = generate(SIZES["1000"])
    head = copy.deepcopy(data)
    for template in head["templates"].values():
        template["limits"]["memory"] = "2GiB"
        for port in template.get("ports", []):
            port["exposure"] = "public"
        if "allow" in template["network"]:
            template["network"]["allow"].append("pypi.org")
    for h in head["hosts"].values():
        h["capacity"]["memory"] = "800GiB"
    folder = tmp_path_factory.mktemp("large")
    return diff(load_stack(write(data, folder / "base.yaml")), load_stack(write(head, folder / "head.yaml")), "bench")


def test_the_markdown_of_1000_sandboxes_fits_a_comment_with_headline_table_and_security_whole(large):
    text = to_markdown(large, "base.yaml", "head.yaml")
    assert len(text) <= MARKDOWN_BUDGET < 65_536
    doc = parse(text)
    facts = impact(large)
    assert doc.first == f"**{facts.headline()}**" and facts.restart == 500
    assert [r[0] for r in doc.tables[0][1:]] == [f"`p{i}`" for i in sorted(range(100), key=str)]
    assert all(r[1] == "h0, h1, h2, h3, h4, h5 and 4 more" for r in doc.tables[0][1:])
    for finding in large.security:  # folded across pools, never cut
        assert any(finding.text in p and f"`{finding.pool}`" in p for p in doc.paragraphs), finding
    # The ten hosts read alike but for their own names: one block for all (as the text folds them), so every
    # resource change fits and nothing is counted out (before the fold: ~1,000 left out).
    assert text.count("<details>") == 1 and "<summary>10 identical hosts <code>h0</code>" in text
    assert "(names of <code>h0</code>)</summary>" in text and "not shown" not in text
    assert doc.fences["mermaid"] and doc.fences["diff"]


def test_when_even_the_kept_part_does_not_fit_its_lists_are_cut_and_counted(large):
    text = to_markdown(large, "base.yaml", "head.yaml", budget=8_000)
    doc = parse(text)
    assert len(text) <= 8_000 and doc.first.startswith("**Impact: 500 sandboxes restart")
    last = doc.tables[0][-1]
    assert last[0] == "…" and re.fullmatch(r"\d+ more pools not shown: run `sandstack diff` locally for everything",
                                           last[4])
    assert len(doc.tables[0]) - 2 + int(last[4].split()[0]) == 100


# --- the pictures, by Mermaid's own parser -------------------------------------------------------------------

def test_every_picture_parses_with_mermaid_and_marks_what_changed(tmp_path: Path, large, stacks, capsys):
    reason = mermaid_available()
    if reason:
        pytest.skip(reason)
    pictures = [fence for path in sorted(GOLDEN.glob("diff-*.md")) for fence in parse(path.read_text())
                .fences.get("mermaid", [])]
    pictures += parse(to_markdown(_diff(tmp_path, *_two_hosts()), "base", "head")).fences["mermaid"]
    pictures += parse(to_markdown(large, "base", "head")).fences["mermaid"]
    pictures += [parse(_pull_request(pr, capsys)).fences["mermaid"][0] for pr in PRS]
    assert len(pictures) >= len(PAIRS)
    results = mermaid_parse(pictures + ['flowchart LR\n  a["unclosed\n'])
    assert results[-1]["ok"] is False and "Parse error" in results[-1]["error"]  # the parser does refuse
    for text, got in zip(pictures, results):
        assert got["ok"], f"{got['error']}\n{text}"
        assert got["type"] == "flowchart-v2"
        # A `style gN …` line of a host's box registers the box's id as a vertex too: the boxes are not parts.
        ids = {v["id"] for v in got["vertices"]} - {s["id"] for s in got["subgraphs"]}
        assert {e[0] for e in got["edges"]} | {e[1] for e in got["edges"]} <= ids
        assert set().union(*(s["nodes"] for s in got["subgraphs"])) == ids  # every part inside its host's box
        for v in (v for v in got["vertices"] if v["id"] in ids):
            (cls,) = v["classes"]
            assert cls in got["classes"]
            marks = {"replaced": ("-/+ replaced",), "deleted": ("- deleted",), "created": ("+ created",),
                     "updated": ("~ updated", "~ reloaded")}  # a role reloaded in place is drawn as updated
            assert v["text"].endswith(marks[cls]) if cls in marks else not any(
                v["text"].endswith(m) for ms in marks.values() for m in ms)


def test_accepted_changes_and_stale_acceptances_are_shown_with_their_reasons(tmp_path: Path):
    from sandstack.review.accept import load_acceptances
    from sandstack.review.categories import review

    result = _case("protocols-any", tmp_path)
    accept = tmp_path / "prod.review.yaml"
    accept.write_text("accept:\n"
                      "  - change: templates.shell.network.protocols\n    category: security\n"
                      "    reason: the build tools speak git over ssh\n"
                      "  - change: templates.shell.network.protocols\n    category: replace\n"
                      "    reason: the shells restart at night\n"
                      "  - change: templates.shell.limits.memory\n    category: disruption\n"
                      "    reason: no longer true\n")
    doc = parse(to_markdown(result, "base", "head", review(result, load_acceptances(accept))))
    where = f"{accept}:2:5"
    assert (f"✅ accepted — pool `shell`: egress of template shell made direct for any protocol (every connection "
            f"logged) — the build tools speak git over ssh ({where})" in doc.paragraphs)
    assert any(p.startswith("✅ replace: ") and p.endswith(f"— the shells restart at night ({accept}:5:5)")
               for p in doc.paragraphs)
    assert f"{accept}:8:5: disruption `templates.shell.limits.memory`" in doc.paragraphs


def test_a_picture_too_tall_gives_way_to_a_table_of_its_parts_counted(tmp_path: Path, monkeypatch):
    result = _case("host-added", tmp_path)
    items = diagram.boxes(result)
    assert diagram.height(items) == diagram.BOX_PX + 2 * diagram.PART_PX  # the guard and the snapshot: 2 deep
    monkeypatch.setattr(diagram, "MAX_HEIGHT", diagram.height(items) - 1)
    doc = parse(to_markdown(result, "base", "head"))
    assert "mermaid" not in doc.fences
    assert f"_The picture would be about {diagram.height(items)} px tall (1 host group): its parts as a table._" \
        in doc.paragraphs
    assert doc.picture == [["hosts", "parts changed"],
                           ["host gpu-2 (created)", "infra image + created; Docker provider + created; host guard + "
                            "created; snapshot of shell + created; pool shell 2 created + created; network of shell + "
                            "created"]]
