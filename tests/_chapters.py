"""Run a chapter's cells of one tag on their own, for the tests of the code a chapter defines."""

from pathlib import Path

import jupytext

CHAPTERS = Path(__file__).resolve().parent.parent / "chapters"


def tagged_cells(chapter: str, tag: str) -> dict:
    """The names that ``chapters/<chapter>.md``'s cells tagged ``tag`` define, run in order (they import what
    they use)."""
    md = CHAPTERS / f"{chapter}.md"
    source = "\n\n".join(c.source for c in jupytext.read(md, fmt="md:myst").cells
                         if tag in c.metadata.get("tags", []))
    names: dict = {}
    exec(compile(source, str(md), "exec"), names)  # noqa: S102
    return names
