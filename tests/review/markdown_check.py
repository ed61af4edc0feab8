"""Reading `sandstack diff --format markdown` as GitHub does: markdown-it-py for the document (CommonMark with
GFM tables), Mermaid's own parser (tests/mermaid/validate.mjs, on node) for the pictures."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt

from sandstack.review.capacity import ORDER, WORDS
from sandstack.review.diff_markdown import CAPACITY_FIRST, PICTURE_HEAD, TABLE_HEAD

MERMAID_DIR = Path(__file__).resolve().parents[1] / "mermaid"
COLUMNS = [cell.strip() for cell in TABLE_HEAD[0].strip("|").split("|")]
PICTURE_COLUMNS = [cell.strip() for cell in PICTURE_HEAD[0].strip("|").split("|")]
FENCES = {"diff", "mermaid"}
# A line of a ```diff fence: a resource's marker line, a `-`/`+` setting line, or an indented comment/note.
DIFF_LINE = re.compile(r"^(?:(?:-/\+|[-+!]) \S.*|[-+] {5}\S.*|      [#…] .*)$")
MD = MarkdownIt("commonmark").enable("table")


@dataclass
class Parsed:
    tables: list[list[list[str]]] = field(default_factory=list)  # per pools' table: the header row, then each row
    capacity: list[list[str]] = field(default_factory=list)  # the reservations' table: header, then each row
    picture: list[list[str]] = field(default_factory=list)  # a picture too tall drawn as a table
    fences: dict[str, list[str]] = field(default_factory=dict)  # info → contents
    paragraphs: list[str] = field(default_factory=list)  # inline text of paragraphs, headings and list items
    first: str = ""  # the impact headline: the first paragraph after the title and the verdict
    verdict: str = ""  # `✅ passes: …` or `❌ CI fails (exit 3): …`, before the headline, with --fail-on


def parse(text: str) -> Parsed:
    """The document's tables, fences and paragraphs, after checking what must hold of every comment: fences
    closed and typed (```diff lines are `-`/`+`/`!` lines GitHub colours), <details> balanced with a <summary>,
    tables of the pools' five columns with five cells in every row."""
    tokens = MD.parse(text)
    lines = text.split("\n")
    out = Parsed()
    fences = [t for t in tokens if t.type == "fence"]
    for t in fences:
        assert t.info in FENCES, f"a fence of type {t.info!r} at line {t.map[0] + 1}"
        assert lines[t.map[1] - 1] == "```", f"the ```{t.info} fence at line {t.map[0] + 1} is not closed"
        out.fences.setdefault(t.info, []).append(t.content)
        if t.info == "diff":
            bad = [line for line in t.content.splitlines() if not DIFF_LINE.match(line)]
            assert not bad, f"lines GitHub would not colour as a diff: {bad[:3]}"
    assert sum(1 for line in lines if line.startswith("```")) == 2 * len(fences), "a stray fence line"
    depth = 0
    html = "".join(t.content for t in tokens if t.type == "html_block")
    for tag in re.findall(r"</?details>|<summary>", html):
        depth += {"<details>": 1, "</details>": -1, "<summary>": 0}[tag]
        assert depth >= 0, "</details> before its <details>"
    assert depth == 0, "a <details> is not closed"
    assert html.count("<details>") == html.count("<summary>"), "a <details> without its <summary>"
    row: list[str] = []
    for previous, t in zip([None, *tokens], tokens):
        if t.type == "table_open":
            out.tables.append([])
        elif t.type == "tr_open":
            row = []
        elif t.type == "inline" and previous is not None and previous.type in ("th_open", "td_open"):
            row.append(t.content)
        elif t.type == "tr_close":
            out.tables[-1].append(row)
        elif t.type == "inline":
            out.paragraphs.append(t.content)
    capacity = [t for t in out.tables if t[0][0] == CAPACITY_FIRST]
    pictures = [t for t in out.tables if t[0] == PICTURE_COLUMNS]
    out.tables = [t for t in out.tables if t[0][0] != CAPACITY_FIRST and t[0] != PICTURE_COLUMNS]
    assert len(pictures) <= 1 and not (pictures and "mermaid" in out.fences), "a picture and its table"
    for table in pictures:
        assert all(len(r) == 2 for r in table[1:]), "a picture's row without its two cells"
        out.picture = table
    for table in out.tables:
        assert table[0] == COLUMNS, f"table columns {table[0]}"
        assert all(len(r) == len(COLUMNS) for r in table[1:]), "a table row without its five cells"
    assert len(capacity) <= 1, "more than one capacity table"
    for table in capacity:
        assert table[0][1:] in ([WORDS[d] for d in ORDER], [WORDS[d] for d in ORDER if d != "gpus"]), table[0]
        assert all(len(r) == len(table[0]) for r in table[1:]), "a capacity row without a cell per column"
        assert table[-1][0] == "**stack**", "the capacity table ends with the stack's row"
        out.capacity = table
    rest = out.paragraphs[1:]
    if rest and rest[0].startswith(("**✅", "**❌")):
        out.verdict = rest[0].strip("*")
        rest = [p for p in rest if p.startswith("**Impact:")]
    out.first = rest[0] if rest else ""
    return out


def mermaid_available() -> str | None:
    """Why Mermaid's parser cannot run here (None: it can)."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not (MERMAID_DIR / "node_modules" / "mermaid").is_dir():
        return f"Mermaid's parser is not installed: run `npm ci --prefix {MERMAID_DIR.relative_to(MERMAID_DIR.parents[1])}`"
    return None


def mermaid_parse(texts: list[str]) -> list[dict]:
    """Each diagram as Mermaid's parser reads it (one node process for all: {ok, error, vertices, edges, ...})."""
    run = subprocess.run(["node", str(MERMAID_DIR / "validate.mjs")], input=json.dumps(texts), capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)
