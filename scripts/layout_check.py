"""Find what a reader would see cut off: elements of the built pages that run past the page's right edge (or
past the article column) without a scrollbar of their own, at a desktop and at a phone width.

    python scripts/layout_check.py _build/html            # every page, 1280 px and 390 px
    python scripts/layout_check.py _build/html --widths 390 --pages chapters/mpc.html

Needs headless Chromium (``chromium``; the Debian package). Each page is copied beside itself with a small
script that measures the laid-out page and writes what overflows into the DOM, which ``--dump-dom`` returns.
Run by hand (CI has no browser); prints one line per finding and exits 1 if there are any.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

PROBE = """
<script>
setTimeout(() => {
  const found = [];
  const article = document.querySelector('.bd-article') || document.body;
  const edge = Math.min(document.documentElement.clientWidth, article.getBoundingClientRect().right + 2);
  const scrolls = (el) => {
    for (let p = el.parentElement; p && p !== article; p = p.parentElement) {
      const s = getComputedStyle(p);
      if (['auto', 'scroll'].includes(s.overflowX)) return true;
    }
    return false;
  };
  for (const el of article.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= edge || scrolls(el)) continue;
    if (el.closest('.MathJax, mjx-container, .math')) continue;  // MathJax does not load offline
    const parent = el.parentElement && el.parentElement.getBoundingClientRect();
    if (parent && parent.right > edge) continue;  // report the outermost element only
    const text = (el.innerText || el.getAttribute('src') || '').trim().slice(0, 60);
    found.push(`${el.tagName.toLowerCase()}.${String(el.className).split(' ')[0]} ` +
               `right ${Math.round(r.right)} > ${Math.round(edge)}: ${JSON.stringify(text)}`);
  }
  const out = document.createElement('pre');
  out.id = 'layout-report';
  out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
}, 3000);
</script>
"""


def check(page: Path, width: int) -> list[str]:
    """What overflows on ``page`` in a ``width`` px wide window."""
    probe = page.with_name(f".layout-probe-{page.name}")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    try:
        dom = subprocess.run(
            [shutil.which("chromium") or "chromium", "--headless", "--no-sandbox", "--disable-gpu",
             "--hide-scrollbars", f"--window-size={width},900", "--virtual-time-budget=8000", "--dump-dom",
             probe.resolve().as_uri()], capture_output=True, text=True, timeout=120).stdout
    finally:
        probe.unlink()
    m = re.search(r'<pre id="layout-report">(.*?)</pre>', dom, re.S)
    if m is None:
        return ["no layout report (the page did not load)"]
    return json.loads(m[1].replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("html_dir", type=Path)
    p.add_argument("--widths", type=int, nargs="+", default=[1280, 390])
    p.add_argument("--pages", nargs="+", help="pages relative to html_dir (default: every page)")
    args = p.parse_args(argv)
    if shutil.which("chromium") is None:
        print("error: needs chromium on the PATH", file=sys.stderr)
        return 2
    pages = ([args.html_dir / page for page in args.pages] if args.pages else
             sorted(q for q in args.html_dir.rglob("*.html") if not q.name.startswith((".", "_"))
                    and "_static" not in q.parts and q.name not in ("search.html", "genindex.html")
                    and 'http-equiv="Refresh"' not in q.read_text(encoding="utf-8")[:2000]))  # redirects
    findings = 0
    for page in pages:
        for width in args.widths:
            for line in check(page, width):
                findings += 1
                print(f"{page.relative_to(args.html_dir)} @ {width}px: {line}")
    print(f"layout check: {findings} finding(s) on {len(pages)} page(s) at {args.widths} px")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
