"""Build one chapter (plus the intro and bibliography) into a private folder, warnings as errors.

    python scripts/build_one.py construction      # -> .tmp/build-construction/_build/html

For checking a chapter in isolation while others build the whole book; it uses the book's own _config.yml
with a table of contents that lists only that chapter.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    name = argv[0]
    if not (ROOT / "chapters" / f"{name}.md").exists():
        print(f"no chapter chapters/{name}.md", file=sys.stderr)
        return 2
    work = ROOT / ".tmp" / f"build-{name}"
    if work.exists():
        shutil.rmtree(work)
    (work / "chapters").mkdir(parents=True)
    for f in ("_config.yml", "references.bib", "bibliography.md", "status.md"):
        shutil.copy(ROOT / f, work / f)
    # A stub root page: the real intro links to every chapter, which this partial build does not have.
    (work / "intro.md").write_text(f"# Partial build: {name}\n\nOnly this chapter (and the task chapter).\n")
    shutil.copy(ROOT / "chapters" / f"{name}.md", work / "chapters" / f"{name}.md")
    shutil.copy(ROOT / "chapters" / "hop_task.md", work / "chapters" / "hop_task.md")  # the intro links to it
    if (ROOT / "chapters" / f"{name}.ipynb").exists():
        shutil.copy(ROOT / "chapters" / f"{name}.ipynb", work / "chapters" / f"{name}.ipynb")
    for extra in ("results", "_ext"):
        if (ROOT / extra).exists():
            shutil.copytree(ROOT / extra, work / extra)
    # Stub pages carry the other chapters' labels, so cross references to them resolve in a partial build.
    others = sorted(m.stem for m in (ROOT / "chapters").glob("*.md") if m.stem not in (name, "hop_task"))
    for other in others:
        label = "chap-" + other.replace("_", "-")
        (work / "chapters" / f"{other}.md").write_text(f"({label})=\n# {other} (not in this partial build)\n")
    stubs = "".join(f"      - file: chapters/{o}\n" for o in others)
    (work / "_toc.yml").write_text(
        "format: jb-book\nroot: intro\nparts:\n  - caption: Chapter\n    numbered: true\n    chapters:\n"
        + ("" if name == "hop_task" else "      - file: chapters/hop_task\n")
        + f"      - file: chapters/{name}\n  - caption: Other chapters (stubs)\n    chapters:\n" + stubs
        + "  - caption: About\n    chapters:\n      - file: status\n      - file: bibliography\n"
    )
    cmd = [str(Path(sys.executable).with_name("jupyter-book")), "build", str(work), "-W", "-n", "--keep-going"]
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
