"""The pull-request comment as a reviewer sees it (issue 38, item 5): every golden comment turned into HTML by
markdown-it-py and its pictures drawn by Mermaid in headless Chromium at a comment's width, on GitHub's light and
dark colours (testbed/review_render.py). Checked on what Chromium drew: every picture drawn, every part's label and
every box's title as the markdown wrote them, no title clipped or drawn over a part, a one-pool change at most ~300 px tall, the height
estimate that sends a too-tall picture to a table never below the drawing, and every text readable over its fill.
Skipped, with the reason, where Chromium or Mermaid is not installed (scripts/test installs both)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sandstack.review import diagram
from tests.review.markdown_check import parse
from testbed.review_render import contrast, measure, to_html, unavailable

GOLDEN = Path(__file__).parent / "golden"
ONE_POOL_MAX_PX = 300


def _comments() -> dict[str, str]:
    return {p.stem: p.read_text() for p in sorted(GOLDEN.glob("*.md")) if not p.stem.startswith("preview-")}


def _unquote(text: str) -> str:
    return text.replace("#quot;", '"').replace("#96;", "`").replace("#amp;", "&")


def _written(picture: str) -> tuple[list[str], list[str]]:
    """The part labels and box titles a Mermaid text writes, as Chromium's text shows them (`<br/>` drawn as a
    line break, not as text)."""
    labels = [_unquote(m).replace("<br/>", "") for m in re.findall(r'    g\d+n\d+\["(.*?)"\]', picture)]
    titles = [_unquote(m) for m in re.findall(r'subgraph g\d+\["(.*?)"\]', picture)]
    return labels, titles


@pytest.fixture(scope="module")
def drawn() -> dict[str, dict]:
    """Every golden comment in one page per theme (one Chromium run each), and each picture's Mermaid text."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    comments = _comments()
    together = "\n\n---\n\n".join(comments.values())
    return {"pictures": [f for text in comments.values() for f in parse(text).fences.get("mermaid", [])],
            "light": measure(together, "light"), "dark": measure(together, "dark")}


def test_every_picture_is_drawn_with_its_labels_and_titles_and_no_title_clipped(drawn):
    for theme in ("light", "dark"):
        measured = drawn[theme]
        assert measured["unrendered"] == []
        assert len(measured["pictures"]) == len(drawn["pictures"]) > 10
        for text, picture in zip(drawn["pictures"], measured["pictures"]):
            labels, titles = _written(text)
            assert sorted(picture["labels"]) == sorted(labels), text
            assert [t["text"] for t in picture["titles"]] == titles
            assert not [t for t in picture["titles"] if t["clipped"]], text
            assert not [t for t in picture["titles"] if t["overlapped"]], text  # no part drawn under the title


def test_a_one_pool_change_is_a_short_picture_and_the_estimate_is_never_below_it(drawn):
    one_pool = 0
    for text, picture in zip(drawn["pictures"], drawn["light"]["pictures"]):
        boxes = text.count("subgraph ")
        pools = len(re.findall(r'\["pool [^"]*"\]:::(?:replaced|updated|created|deleted)', text))
        if boxes == 1 and pools == 1:
            one_pool += 1
            assert picture["height"] <= ONE_POOL_MAX_PX, (picture["height"], text)
        # The estimate decides when a picture gives way to a table: it must not promise less than is drawn.
        columns = _columns(text)
        estimate = sum(diagram.BOX_PX + diagram.PART_PX * c for c in columns)
        assert picture["height"] <= estimate, (picture["height"], estimate, text)
    assert one_pool >= 8


def _columns(text: str) -> list[int]:
    """Per box, the most parts in one column (the diagram's RANK of each part's role)."""
    out = []
    for box in re.split(r"\n  subgraph ", text)[1:]:
        ranks: dict[int, int] = {}
        for label in re.findall(r'    g\d+n\d+\["(.*?)"\]', box):
            role = next(r for r, (_, _, words) in sorted(diagram.ELEMENTS.items(), key=lambda e: -len(e[1][2]))
                        if _matches(words, label))
            ranks[diagram.RANK[role]] = ranks.get(diagram.RANK[role], 0) + 1
        out.append(max(ranks.values()))
    return out


def _matches(words: str, label: str) -> bool:
    head = words.split("{q}")[0]
    return label.startswith(head) or (words.startswith("pool ") and re.match(r"\d+ pools: ", label) is not None) or (
        words.startswith("network of") and re.match(r"\d+ pool networks: ", label) is not None) or (
        words.startswith("snapshot of") and re.match(r"\d+ snapshots: ", label) is not None)


def test_every_text_reads_over_its_fill_on_light_and_dark(drawn):
    for theme in ("light", "dark"):
        for picture in drawn[theme]["pictures"]:
            for c in picture["colours"]:
                assert contrast(c["fg"], c["bg"]) >= 4.5, (theme, c)


def test_the_html_leads_with_the_verdict_and_the_headline_and_renders_the_tables():
    text = (GOLDEN / "pr-red-fail-on.md").read_text()
    html = to_html(text)
    first = re.findall(r"<p><strong>(.*?)</strong></p>", html)[:2]
    assert first[0].startswith("❌ CI fails (exit 3): --fail-on ") and first[1].startswith("Impact: ")
    assert html.count("<table>") == len(parse(text).tables) + bool(parse(text).capacity) + bool(parse(text).picture)
    assert '<pre class="mermaid">' in html or parse(text).picture
