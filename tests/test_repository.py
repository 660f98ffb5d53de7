"""The repository speaks to its reader: no source cites a tracker number or a file outside the repository; the
licence, the declared dependencies and the publishing workflow are what the README says."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent
# a tracker's numbers (issue, issues, PR or pull request, then a number) and a specification file that is not in
# the repository (the examples below are split so that this file passes its own check)
HISTORY = re.compile(r"\bissues?\s*#?\s*\d|\b(?:PR|pull request)\s*#?\s*\d|\bpaper" r"-spec\b", re.IGNORECASE)
SOURCES = re.compile(r"(hoplib|scripts|tests|benchmarks|_ext)/.*\.(py|sh)|chapters/.*\.md|[^/]+\.(md|yml|toml|cff)"
                     r"|\.github/.*\.yml|\.ci/.*")


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in out.splitlines() if SOURCES.fullmatch(p)]


def test_the_history_pattern_finds_what_it_should_and_nothing_else():
    for cited in ("the fixes of issue" " 13", "(Issue" " 4)", "see issues" " #28", "PR" " 12", "paper" "-spec.md"):
        assert HISTORY.search(cited), cited
    for fine in ("an issue of precision", "issues a request", "the paper's Section 4.2", "2 issues"):
        assert not HISTORY.search(fine), fine


def test_no_source_file_cites_a_tracker_number_or_a_file_outside_the_repository():
    files = _tracked()
    assert any(p.startswith("hoplib/") for p in files) and any(p.startswith("chapters/") for p in files)
    found = [f"{path}:{n}: {line.strip()[:80]}" for path in files
             for n, line in enumerate((ROOT / path).read_text(encoding="utf-8").splitlines(), 1)
             if HISTORY.search(line)]
    assert not found, "say what the code does, not which tracker entry it came from:\n" + "\n".join(found)


def _third_party_imports(code: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"hoplib"}


def _code_cells(md: Path) -> str:
    jupytext = pytest.importorskip("jupytext")
    cells = [c.source for c in jupytext.read(md, fmt="md:myst").cells if c.cell_type == "code"]
    return "\n".join(re.sub(r"^\s*[%!].*$", "", c, flags=re.M) for c in cells)  # no IPython magics


def test_every_package_hoplib_and_the_chapters_import_is_a_declared_dependency():
    declared = {re.split(r"[<>=!~ \[]", d)[0].lower()
                for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    kernel = {"IPython", "matplotlib_inline", "myst_nb"}  # the notebook kernel and the book build provide these
    optional = {"submitit"}  # imported only for --slurm, which says to install it
    used: dict[str, str] = {}
    for path in sorted((ROOT / "hoplib").rglob("*.py")):
        used.update(dict.fromkeys(_third_party_imports(path.read_text(encoding="utf-8")), str(path.relative_to(ROOT))))
    for path in sorted((ROOT / "chapters").glob("*.md")):
        used.update(dict.fromkeys(_third_party_imports(_code_cells(path)), str(path.relative_to(ROOT))))
    assert {"torch", "numpy", "pandas"} <= set(used)
    missing = {name: where for name, where in used.items() if name not in kernel | optional and name not in declared}
    assert not missing, f"imported but not in pyproject.toml's dependencies: {missing}"


def test_the_licence_covers_code_and_prose_as_readme_pyproject_and_the_book_footer_say():
    licence = (ROOT / "LICENSE").read_text()
    assert "MIT License" in licence and "Creative Commons Attribution 4.0" in licence
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "MIT"
    readme = (ROOT / "README.md").read_text()
    assert "MIT" in readme and "CC BY 4.0" in readme
    footer = yaml.safe_load((ROOT / "_config.yml").read_text())["html"]["extra_footer"]
    assert "CC BY 4.0" in footer and "MIT" in footer


def test_the_publishing_workflow_runs_the_build_and_the_tests_as_ci_does():
    steps = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())["jobs"]["build"]["steps"]
    runs = [s["run"].strip() for s in steps if "run" in s]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("bash ")]
    assert set(ci) == {"bash scripts/test.sh", "bash scripts/build.sh"}
    assert [r for r in runs if r in ci] == ci  # both, in .ci/run's order
    test_sh = (ROOT / "scripts" / "test.sh").read_text()
    assert "ruff check ." in test_sh and "pytest tests" in test_sh


def test_the_changelog_names_no_tag_the_repository_does_not_have():
    try:
        tags = subprocess.run(["git", "tag"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    named = set(re.findall(r"git checkout (v\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text()))
    told_to_tag = set(re.findall(r"git tag (v\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text()))
    assert named <= set(tags) | told_to_tag, f"CHANGELOG checks out tags that do not exist: {named - set(tags)}"
