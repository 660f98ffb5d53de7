"""One stored file, one producer: a file under results/ is made either by a command of scripts/ (its sweeps record
the ``part`` they ran) or by its chapter's page run at a profile (``run.save``), never by both; and the commands
train the settings of the chapter they store runs for."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _scripts import load_script, parser_of

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted(p.stem for p in (ROOT / "chapters").glob("*.md"))
CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", flags=re.S | re.M)


def page_saves(chapter: str) -> set[str]:
    """The results names the chapter's page saves (``run.save("name", ...)``; a save in a loop over a dict:
    that cell's dict keys)."""
    names = set()
    for cell in CELL.findall((ROOT / "chapters" / f"{chapter}.md").read_text(encoding="utf-8")):
        names |= set(re.findall(r'run\.save\(\s*"(\w+)"', cell))
        if re.search(r"run\.save\(\s*[a-z_]+\s*,", cell):
            names |= set(re.findall(r'"(\w+)":', cell))
    return names


def script_parts(chapter: str) -> set[str]:
    """The ``--part`` choices of ``scripts/run_<chapter>.py`` (none: no such command, or one without parts)."""
    if not (ROOT / "scripts" / f"run_{chapter}.py").exists():
        return set()
    return {c for a in parser_of(f"run_{chapter}")._actions if "--part" in a.option_strings for c in a.choices}


def test_the_page_saves_are_found():
    assert {"protocol_bits"} <= page_saves("rnn") and "hop_grid" in page_saves("mpc")
    assert {"training", "alphabet", "state"} <= script_parts("rnn")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_page_saves_a_file_its_command_makes(chapter):
    parts = script_parts(chapter)
    clash = sorted(n for n in page_saves(chapter) if n in parts or any(n.startswith(p + "_") for p in parts))
    assert not clash, f"chapters/{chapter}.md saves {clash}, which scripts/run_{chapter}.py makes too"


def test_every_stored_file_of_a_chapter_names_its_one_producer():
    two, unknown = [], []
    for chapter in CHAPTERS:
        saves = page_saves(chapter)
        for path in sorted((ROOT / "results" / chapter).rglob("*.json")):
            params = json.loads(path.read_text(encoding="utf-8")).get("parameters")
            by_script = not isinstance(params, dict) or "part" in params or "chapter" not in params
            name = path.relative_to(ROOT).as_posix()
            if by_script and path.stem in saves:
                two.append(name)  # a command made it, and the page would write it again
            elif not by_script and path.stem not in saves:
                unknown.append(name)  # made by the page, by a save it no longer has
    assert not two, f"stored files that a command and its chapter's page both write: {two}"
    assert not unknown, f"stored files of a page that no longer saves them: {unknown}"


@pytest.mark.parametrize("profile", ["cpu", "paper"])
def test_the_rnn_command_trains_the_settings_of_the_chapters_profile(profile):
    chapter_profiles = load_script("profiles").chapter_profiles

    script = load_script("run_rnn").PROFILES[profile]["training"]
    page = chapter_profiles("rnn")[profile]
    assert script == {key: page[key] for key in script}
