"""Find what a reader would see cut off in the built pages, at a desktop and at a phone width:

- *cut*: an element that runs past the page's right edge (or past the article column) with no scrolling box
  around it;
- *clipped*: a box that hides the part of a figure, table or code block that does not fit (``overflow: hidden``);
- *no scroll cue*: a box that scrolls sideways, holds more than it shows, and gives no visible sign of it. The
  book's cue (``_static/hoplib.js`` and ``hoplib.css``) fades the edge beyond which there is more; the check
  accepts a gradient mask or background, or an inset shadow, on the scrolling box.

    python scripts/layout_check.py _build/html            # every page, 1280 px and 390 px
    python scripts/layout_check.py _build/html --widths 390 --pages chapters/mpc.html
    python scripts/layout_check.py _build/html --pages chapters/rnn.html --screenshots shots/

Needs headless Chromium (``chromium``; the Debian package). Headless Chromium's window is at least 500 px wide,
so each page is loaded in an iframe of the width asked for (its media queries see that width), beside a copy of
itself with a small script that measures the laid-out page and posts what it finds to the frame's page, which
``--dump-dom`` returns. ``--screenshots`` also saves the whole page at each width as a PNG. Run by hand (CI has
no browser); prints one line per finding and exits 1 if there are any.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

PROBE = """
<script>
const measure = () => {
  const found = [];
  const article = document.querySelector('.bd-article') || document.body;
  const edge = Math.min(document.documentElement.clientWidth, article.getBoundingClientRect().right + 2);
  const scrolling = (s) => ['auto', 'scroll'].includes(s.overflowX);
  const scrolls = (el) => {
    for (let p = el.parentElement; p && p !== article; p = p.parentElement) {
      if (scrolling(getComputedStyle(p))) return true;
    }
    return false;
  };
  const cued = (s) => [s.maskImage, s.webkitMaskImage, s.backgroundImage].some((v) => (v || '').includes('gradient'))
    || (s.boxShadow || '').includes('inset');
  const name = (el) => `${el.tagName.toLowerCase()}.${String(el.className).split(' ')[0]}`;
  const text = (el) => JSON.stringify((el.innerText || el.getAttribute('src') || '').trim().slice(0, 60));
  for (const el of article.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || el.closest('.MathJax, mjx-container, .math')) continue;  // MathJax does not load offline
    if (el.checkVisibility && !el.checkVisibility()) continue;  // inside a closed <details>: not on screen
    const s = getComputedStyle(el);
    const hidden = el.scrollWidth - el.clientWidth;
    if (hidden > 1 && el.clientWidth > 0 && s.display !== 'inline') {
      const shown = `shows ${el.clientWidth} of ${el.scrollWidth} px`;
      if (scrolling(s) && !cued(s)) found.push(`no scroll cue: ${name(el)} ${shown}: ${text(el)}`);
      if (['hidden', 'clip'].includes(s.overflowX) && el.querySelector('img, svg, table, pre, canvas'))
        found.push(`clipped: ${name(el)} ${shown}: ${text(el)}`);
    }
    if (r.right <= edge || scrolls(el)) continue;
    const parent = el.parentElement && el.parentElement.getBoundingClientRect();
    if (parent && parent.right > edge) continue;  // report the outermost element only
    found.push(`cut: ${name(el)} right ${Math.round(r.right)} > ${Math.round(edge)}: ${text(el)}`);
  }
  const report = JSON.stringify({found, height: document.documentElement.scrollHeight});
  if (window.parent !== window) window.parent.postMessage(report, '*');
  const out = document.createElement('pre');
  out.id = 'layout-report';
  out.textContent = report;
  document.body.appendChild(out);
};
// Measure once the page has loaded (the book's scripts run at DOMContentLoaded, which a script that cannot be
// fetched offline, MathJax, delays) and its fonts are in, one second later; at the latest after 20 s.
let measured = false;
const once = () => { if (!measured) { measured = true; measure(); } };
window.addEventListener('load', () => document.fonts.ready.then(() => setTimeout(once, 1000)));
setTimeout(once, 20000);
</script>
"""

FRAME = """<html><body style="margin:0">
<iframe src="{src}" style="border:0;width:{width}px;height:{height}px"></iframe><pre id="layout-report"></pre>
<script>addEventListener('message', (e) => {{ document.getElementById('layout-report').textContent = e.data; }});
</script></body></html>"""

MIN_WINDOW = 500  # headless Chromium's narrowest window


def _chromium(args: list[str], width: int, height: int) -> str:
    command = [shutil.which("chromium") or "chromium", "--headless", "--no-sandbox", "--disable-gpu",
               "--hide-scrollbars", f"--window-size={max(width, MIN_WINDOW)},{height}",
               "--virtual-time-budget=30000", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=180).stdout


def measure(page: Path, width: int, screenshot: Path | None = None) -> tuple[list[str], int]:
    """What is cut, clipped or hidden without a cue on ``page`` in a ``width`` px wide window, and the page's
    height; with ``screenshot``, the whole page is saved there as a PNG."""
    probe = page.with_name(f".layout-probe-{page.name}")
    frame = page.with_name(f".layout-frame-{page.name}")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    try:
        frame.write_text(FRAME.format(src=probe.name, width=width, height=900), encoding="utf-8")
        dom = _chromium(["--dump-dom", frame.resolve().as_uri()], width, 900)
        m = re.search(r'<pre id="layout-report">(.*?)</pre>', dom, re.S)
        if m is None or not m[1].strip():
            return ["no layout report (the page did not load)"], 0
        report = json.loads(html.unescape(m[1]))
        if screenshot is not None:
            height = min(report["height"], 30000)
            frame.write_text(FRAME.format(src=probe.name, width=width, height=height), encoding="utf-8")
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            _chromium([f"--screenshot={screenshot.resolve()}", frame.resolve().as_uri()], width, height)
    finally:
        probe.unlink(missing_ok=True)
        frame.unlink(missing_ok=True)
    return report["found"], report["height"]


def check(page: Path, width: int) -> list[str]:
    """What is cut, clipped or hidden without a cue on ``page`` in a ``width`` px wide window."""
    found, _ = measure(page, width)
    if found == ["no layout report (the page did not load)"]:  # a slow first start of the browser: once more
        found, _ = measure(page, width)
    return found


def book_pages(html_dir: Path) -> list[Path]:
    """Every page of a built book, without search, index and redirect pages."""
    return sorted(q for q in html_dir.rglob("*.html") if not q.name.startswith((".", "_"))
                  and "_static" not in q.parts and q.name not in ("search.html", "genindex.html")
                  and 'http-equiv="Refresh"' not in q.read_text(encoding="utf-8")[:2000])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("html_dir", type=Path)
    p.add_argument("--widths", type=int, nargs="+", default=[1280, 390])
    p.add_argument("--pages", nargs="+", help="pages relative to html_dir (default: every page)")
    p.add_argument("--screenshots", type=Path, help="also save each page at each width as a PNG in this folder")
    args = p.parse_args(argv)
    if shutil.which("chromium") is None:
        print("error: needs chromium on the PATH (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    if not args.html_dir.is_dir():
        print(f"error: no built book at {args.html_dir}", file=sys.stderr)
        return 2
    pages = [args.html_dir / page for page in args.pages] if args.pages else book_pages(args.html_dir)
    findings = 0
    for page in pages:
        for width in args.widths:
            rel = page.relative_to(args.html_dir)
            shot = None
            if args.screenshots:
                shot = args.screenshots / f"{rel.with_suffix('').as_posix().replace('/', '-')}-{width}.png"
            found, _ = measure(page, width, shot) if shot else (check(page, width), 0)
            for line in found:
                findings += 1
                print(f"{rel} @ {width}px: {line}")
    print(f"layout check: {findings} finding(s) on {len(pages)} page(s) at {args.widths} px")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
