"""No exercise solution reaches a student: every chapter's Colab notebook is scanned for the lines of the
chapter's solutions (the code and text of its ``{solution}`` blocks and gated solutions), wherever they might
hide: in a cell of their own, in an exercise checker whose reference is the answer, in the prose. The build's
download sources are scanned the same way in test_editions.py.

A solution line counts when it is long enough to be an answer (30 characters or more), is not the call of a
checker every solution ends with, and is not what the chapter teaches before its lab and exercises: a solution
may reuse a line of the chapter's own code, and a lab may ask a student to rebuild what the chapter quotes from
``hoplib`` (the MPC lab's pointer doubling); that code is the chapter's, not an answer. What the scan guards is
everything else: the exercise sections (where a checker's reference could be the answer) and the solutions'
own text.
"""

from __future__ import annotations

import json
import re
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "_ext"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from hoplib_editions import SOLUTION, _close  # noqa: E402

CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))
LONG = 30
CHECKED = re.compile(r"^(result = check_\w+\(.*\)|print\(result\)|assert result\.passed)$")
MARKUP = re.compile(r"^(`{3,}|:{3,}|:\w[\w-]*:|---$)")


@cache
def library_lines() -> frozenset[str]:
    return frozenset(line.strip() for path in (ROOT / "hoplib").rglob("*.py")
                     for line in path.read_text(encoding="utf-8").splitlines())


def solution_lines(md: Path) -> set[str]:
    """The lines of a chapter's solutions that would give an answer away (see the module's docstring)."""
    lines = md.read_text(encoding="utf-8").split("\n")
    inside, i, found = False, 0, []
    while i < len(lines):
        m = SOLUTION.match(lines[i])
        if m:
            end = _close(lines, i, m["fence"])
            if m["name"] == "solution":
                found += lines[i + 1:end]
            inside = {"solution-start": True, "solution-end": False}.get(m["name"], inside)
            i = end + 1
            continue
        if inside:
            found.append(lines[i])
        i += 1
    text = md.read_text(encoding="utf-8")
    body = re.split(r"^## (?:Lab\b|Exercises)", text, maxsplit=1, flags=re.M)[0]
    taught = library_lines() | {line.strip() for line in body.splitlines()}
    return {s for s in (line.strip() for line in found) if len(s) >= LONG and not CHECKED.match(s)
            and not MARKUP.match(s) and s not in taught}


def artifact_text(path: Path) -> str:
    """What a student sees of a file: a notebook's cell sources, any other file's text."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".ipynb":
        return text
    cells = json.loads(text)["cells"]
    return "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells)


def leaks(text: str, lines: set[str]) -> list[str]:
    """The solution ``lines`` found, as whole lines, in ``text``."""
    return sorted(lines & {line.strip() for line in text.splitlines()})


def test_solution_lines_are_found_and_leave_out_checker_calls_and_what_the_chapter_teaches(tmp_path):
    md = tmp_path / "demo.md"
    md.write_text("""\
Text before, long enough to count as a line of prose here.

```{code-cell} ipython3
xs, ans = pointer_chasing.to_hop_sequence(instance)
```

## Exercises

````{solution-start} ex-a
:class: dropdown
````

The gated answer's explanation, a line long enough.

```{code-cell} ipython3
def my_answer(values):
    xs, ans = pointer_chasing.to_hop_sequence(instance)
    return sorted(values, key=lambda v: (v % 7, -v))[:3]


result = check_answer(my_answer)
assert result.passed
```

````{solution-end}
````

````{solution} ex-b
:class: dropdown

The plain solution says this in one long line.
```python
x = np.asarray(x)
```
````
""")
    found = solution_lines(md)
    assert found == {"The gated answer's explanation, a line long enough.",
                     "return sorted(values, key=lambda v: (v % 7, -v))[:3]",
                     "The plain solution says this in one long line."}
    assert leaks("ref = 1\n    return sorted(values, key=lambda v: (v % 7, -v))[:3]\n", found) == [
        "return sorted(values, key=lambda v: (v % 7, -v))[:3]"]


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_no_line_of_a_solution_is_in_the_chapters_colab_notebook(md):
    lines = solution_lines(md)
    assert lines, f"{md.name}: no solution lines found (has the solution syntax changed?)"
    found = leaks(artifact_text(md.with_suffix(".ipynb")), lines)
    assert not found, f"{md.with_suffix('.ipynb').name} holds lines of its solutions: {found[:3]}"
