"""The pull-request comment as a reviewer sees it: `sandstack diff --format markdown` turned into HTML with
markdown-it-py (CommonMark and GFM tables, as GitHub reads it), its ```mermaid pictures drawn by Mermaid (the
version tests/mermaid installs) in Debian's headless Chromium, at the width of a GitHub comment, on GitHub's light
or dark colours. The render test (tests/review/test_render.py) reads what Chromium measured; the screenshot script
(scripts/review-screenshots) keeps a PNG of each golden case in docs/review/.

Chromium runs only on local files: a fresh profile, no background networking, no updates, every host name
resolved to nothing (`--host-resolver-rules`), so no page it draws can reach outside this machine.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parents[1]
MERMAID_JS = REPO / "tests" / "mermaid" / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
WIDTH = 780  # a pull-request comment's body on github.com at a desktop window, in CSS pixels
THEMES = {  # GitHub's page colours and the Mermaid theme it draws with on each
    "light": {"bg": "#ffffff", "fg": "#1f2328", "border": "#d1d9e0", "code": "#f6f8fa", "mermaid": "default"},
    "dark": {"bg": "#0d1117", "fg": "#f0f6fc", "border": "#3d444d", "code": "#151b23", "mermaid": "dark"},
}
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
                  "--disable-default-apps", "--mute-audio", "--host-resolver-rules=MAP * ~NOTFOUND",
                  "--hide-scrollbars", "--force-device-scale-factor=1")
MD = MarkdownIt("commonmark", {"html": True}).enable("table")

# Measured in the page once Mermaid has drawn: per picture its SVG's size, every node's label, every box's title
# and whether the title is wider than its box (clipped); then the page's height.
MEASURE = """
const out = [];
for (const svg of document.querySelectorAll('.mermaid svg')) {
  const box = svg.getBoundingClientRect();
  const labels = [...svg.querySelectorAll('g.node .nodeLabel, g.node foreignObject div')]
    .map((e) => e.textContent.trim()).filter((t, i, a) => t && a.indexOf(t) === i);
  const titles = [...svg.querySelectorAll('g.cluster')].map((c) => {
    const rect = c.querySelector('rect').getBoundingClientRect();
    const label = c.querySelector('.cluster-label, .nodeLabel');
    const inner = label ? (label.querySelector('span, p, div') || label) : null;
    const lb = inner ? inner.getBoundingClientRect() : rect;
    // A part inside the box whose top is above the title's bottom: the title is drawn over it.
    const over = [...svg.querySelectorAll('g.node')].map((n) => n.getBoundingClientRect())
      .filter((r) => r.left >= rect.left && r.right <= rect.right && r.top >= rect.top && r.bottom <= rect.bottom)
      .some((r) => r.top < lb.bottom - 1 && r.right > lb.left && r.left < lb.right);
    return {text: label ? label.textContent.trim() : '', clipped: lb.width > rect.width + 1 ||
            lb.left < rect.left - 1 || lb.right > rect.right + 1, overlapped: over};
  });
  // Each part's text colour over its fill, and each box's title colour over the page (the box has no fill).
  const colours = [...svg.querySelectorAll('g.node')].map((n) => {
    const shape = n.querySelector('rect, polygon, path, circle');
    const text = n.querySelector('.nodeLabel, span, p') || n;
    return {text: n.textContent.trim(), fg: getComputedStyle(text).color, bg: getComputedStyle(shape).fill};
  });
  const page = getComputedStyle(document.body).backgroundColor;
  for (const c of svg.querySelectorAll('g.cluster')) {
    const label = c.querySelector('.cluster-label span, .cluster-label p, .cluster-label') || c;
    const fill = getComputedStyle(c.querySelector('rect')).fill;
    colours.push({text: c.textContent.trim(), fg: getComputedStyle(label).color,
                  bg: fill === 'none' || fill.endsWith(', 0)') ? page : fill});
  }
  out.push({width: box.width, height: box.height, labels, titles, colours});
}
const error = [...document.querySelectorAll('.mermaid')].filter((e) => !e.querySelector('svg'))
  .map((e) => e.textContent.slice(0, 200));
document.getElementById('measured').textContent = JSON.stringify(
  {pictures: out, unrendered: error, height: Math.ceil(document.documentElement.scrollHeight)});
"""


def _rgb(colour: str) -> tuple[float, ...]:
    found = re.findall(r"[0-9.]+", colour)
    if colour.startswith("#"):
        return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return tuple(float(v) for v in found[:3])


def contrast(fg: str, bg: str) -> float:
    """WCAG's contrast ratio of two CSS colours (`rgb(…)` or `#rrggbb`): 4.5 or more reads as body text."""
    def luminance(colour: str) -> float:
        channels = [c / 255 for c in _rgb(colour)]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    a, b = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def unavailable() -> str | None:
    """Why the comment cannot be drawn here (None: it can)."""
    if chromium() is None:
        return "Chromium is not installed (Debian: apt-get install chromium)"
    if not MERMAID_JS.is_file():
        return "Mermaid is not installed: run `npm ci --prefix tests/mermaid`"
    return None


def to_html(markdown: str) -> str:
    """The comment's body as GitHub renders it: markdown-it-py's HTML, each ```mermaid fence a picture to draw."""
    body = MD.render(markdown)
    return re.sub(r'<pre><code class="language-mermaid">(.*?)</code></pre>',
                  lambda m: f'<pre class="mermaid">{m.group(1)}</pre>', body, flags=re.S)


def page(markdown: str, theme: str = "light") -> str:
    colours = THEMES[theme]
    style = f"""
    body {{ margin: 0; background: {colours['bg']}; color: {colours['fg']};
           font: 14px/1.5 -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; }}
    main {{ width: {WIDTH}px; padding: 16px; box-sizing: content-box; }}
    table {{ border-collapse: collapse; display: block; overflow: auto; }}
    th, td {{ border: 1px solid {colours['border']}; padding: 4px 10px; }}
    pre, code {{ background: {colours['code']}; font: 12px ui-monospace, monospace; border-radius: 6px; }}
    pre {{ padding: 12px; overflow: auto; }} pre.mermaid {{ background: none; padding: 0; }}
    h3 {{ font-size: 17px; }} h4 {{ font-size: 15px; }} summary {{ cursor: pointer; }}
    """
    return (f"<!doctype html><html><head><meta charset='utf-8'><style>{style}</style>"
            f"<script src='{MERMAID_JS.as_uri()}'></script></head><body><main>{to_html(markdown)}</main>"
            "<pre id='measured' hidden></pre><script>"
            f"mermaid.initialize({{startOnLoad: false, securityLevel: 'strict', theme: '{colours['mermaid']}'}});"
            f"mermaid.run({{querySelector: '.mermaid'}}).catch(() => null).then(() => {{ {MEASURE} }});"
            "</script></body></html>")


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    binary = chromium()
    assert binary is not None, unavailable()
    with tempfile.TemporaryDirectory(prefix="sandstack-chromium-") as profile:
        return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=timeout, check=False)


def measure(markdown: str, theme: str = "light", timeout: float = 120) -> dict:
    """What Chromium drew: {pictures: [{width, height, labels, titles: [{text, clipped}]}], unrendered, height}."""
    with tempfile.TemporaryDirectory(prefix="sandstack-render-") as folder:
        path = Path(folder) / "comment.html"
        path.write_text(page(markdown, theme))
        run = _run(["--virtual-time-budget=20000", f"--window-size={WIDTH + 32},900", "--dump-dom", path.as_uri()],
                   timeout)
    found = re.search(r'<pre id="measured" hidden="">(.*?)</pre>', run.stdout, re.S)
    assert found, f"Chromium drew nothing measurable (exit {run.returncode}): {run.stderr[-1500:]}"
    return json.loads(html.unescape(found.group(1)))


def screenshot(markdown: str, png: Path, theme: str = "light", timeout: float = 120) -> dict:
    """A PNG of the whole comment (its <details> closed, as GitHub shows them) and what `measure` measured."""
    measured = measure(markdown, theme, timeout)
    with tempfile.TemporaryDirectory(prefix="sandstack-render-") as folder:
        path = Path(folder) / "comment.html"
        path.write_text(page(markdown, theme))
        png.parent.mkdir(parents=True, exist_ok=True)
        run = _run(["--virtual-time-budget=20000", f"--window-size={WIDTH + 32},{measured['height'] + 8}",
                    f"--screenshot={png}", path.as_uri()], timeout)
    assert png.is_file(), f"no screenshot (exit {run.returncode}): {run.stderr[-1500:]}"
    return measured
