"""Build one chapter (and, optionally, its stored-runs section) into a private folder, warnings as errors.

    python scripts/build_one.py construction                  # -> .tmp/build-construction/_build/html
    python scripts/build_one.py mpc stored_runs/mpc           # a chapter and its appendix section

For checking a chapter in isolation while others build the whole book. It uses the book's own _config.yml with
a table of contents that lists only the named pages; every other page is replaced by a stub that carries its
labels, so cross references into the rest of the book still resolve.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from hoplib.results import check_writable

ROOT = Path(__file__).resolve().parent.parent
LABEL = re.compile(r"^\(([\w-]+)\)=\s*$", re.M)
NAMED = re.compile(r"^:name: ([\w-]+)\s*$", re.M)
PRF = re.compile(r"^:label: ([\w-]+)\s*$", re.M)


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    for name in argv:
        if not (ROOT / "chapters" / f"{name}.md").exists():
            print(f"no chapter chapters/{name}.md", file=sys.stderr)
            return 2
    work = ROOT / ".tmp" / f"build-{argv[0].replace('/', '-')}"
    try:  # read-only, no room: one line before the old build is removed
        check_writable(work.parent, what="build folder")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return _build(argv, work)
    except OSError as exc:  # a disk that fills while copying: only the private build folder is incomplete
        print(f"error: {exc}; only {work} is incomplete, the checkout is untouched", file=sys.stderr)
        return 1


def _build(argv: list[str], work: Path) -> int:
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    for f in ("_config.yml", "references.bib", "bibliography.md", "status.md"):
        shutil.copy(ROOT / f, work / f)
    (work / "intro.md").write_text(f"# Partial build: {', '.join(argv)}\n\nOnly the named pages.\n")
    for extra in ("results", "_ext", "_static", "hoplib"):
        if (ROOT / extra).exists():
            shutil.copytree(ROOT / extra, work / extra)
    shown, stubs = [], []
    for md in sorted((ROOT / "chapters").rglob("*.md")):
        rel = md.relative_to(ROOT / "chapters").with_suffix("").as_posix()
        target = work / "chapters" / f"{rel}.md"
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel in argv:
            shutil.copy(md, target)
            shown.append(rel)
            continue
        text = md.read_text(encoding="utf-8")
        # A stub page carries the real page's labels (prf labels in a prf box, since {prf:ref} needs one), so
        # references to them resolve in this partial build.
        body = "".join(f"({label})=\n# {label}\n\nstub\n\n" for label in LABEL.findall(text) + NAMED.findall(text))
        body += "".join(f":::{{prf:theorem}}\n:label: {label}\n\nstub\n:::\n\n" for label in PRF.findall(text))
        target.write_text(body or f"# {rel}\n")
        stubs.append(rel)
    entries = "".join(f"      - file: chapters/{n}\n" for n in shown)
    stub_entries = "".join(f"      - file: chapters/{n}\n" for n in stubs)
    (work / "_toc.yml").write_text(
        "format: jb-book\nroot: intro\nparts:\n  - caption: Built\n    numbered: true\n    chapters:\n" + entries
        + "  - caption: Stubs\n    chapters:\n" + stub_entries
        + "  - caption: About\n    chapters:\n      - file: status\n      - file: bibliography\n"
    )
    cmd = [str(Path(sys.executable).with_name("jupyter-book")), "build", str(work), "-W", "-n", "--keep-going"]
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
