"""Tests of the book itself: structure, parameters cells, generated Colab notebooks and their install cell, and
nbval's comparison of every chapter's Colab notebook, run afresh, with the web build's outputs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))
import notebooks  # noqa: E402
from _nbval import colab_environment, colab_run_env, failed_cells, run_nbval  # noqa: E402

CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    return files


def test_every_chapter_is_in_the_table_of_contents():
    listed = set(toc_files())
    for md in CHAPTERS:
        assert f"chapters/{md.stem}" in listed, f"{md.name} is not in _toc.yml"
    for f in listed:
        assert (ROOT / f"{f}.md").exists(), f"_toc.yml lists {f}, which does not exist"


def test_config_pins_main_branch_colab_and_extensions():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["branch"] == "main"
    assert config["launch_buttons"]["colab_url"].startswith("https://colab.research.google.com")
    assert {"sphinx_proof", "sphinx_exercise"} <= set(config["sphinx"]["extra_extensions"])
    assert config["execute"]["execute_notebooks"] == "cache", "each chapter executes once per change, in the build"
    assert config["sphinx"]["config"]["nb_execution_raise_on_error"] is True


def test_requirements_pin_jupyter_book_below_2_and_cpu_torch():
    reqs = dict(line.split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    assert reqs["jupyter-book"].startswith("1.")
    assert reqs["torch"] == "2.13.0"


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_has_parameters_cell_first_and_exercises_last(md):
    nb = jupytext.read(md, fmt="md:myst")
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", []), "the first code cell must be tagged parameters"
    names = {line.split("=")[0].strip() for line in code[0].source.splitlines() if "=" in line}
    assert {"profile", "device", "seed", "out_dir"} <= names
    assert "notebook.start(" in code[1].source or "nb.start(" in code[1].source, "settings derive in cell 2"
    text = md.read_text()
    assert "\n## Exercises" in text and "{exercise}" in text
    assert text.index("## Exercises") > text.index("parameters")
    body = text.split("\n---\n", 1)[1].lstrip()
    assert body.startswith(f"(chap-{md.stem.replace('_', '-')})="), "the chapter opens with its label"


def test_colab_notebooks_are_in_sync_with_sources():
    problems = notebooks.check()
    assert not problems, "run `python scripts/notebooks.py sync`:\n" + "\n".join(problems)


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_colab_notebook_starts_with_install_cell_from_config(md):
    nb = nbformat.read(md.with_suffix(".ipynb"), as_version=4)
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert "colab-install" in first_code.metadata["tags"]
    assert "google.colab" in first_code.source
    repo = notebooks.repository()
    assert repo["url"] in first_code.source and repo["branch"] in first_code.source
    assert "torch" not in first_code.source.split("never reinstalled.")[1], "the install cell never names torch"


FRONT = """\
---
jupytext:
  text_representation: {extension: .md, format_name: myst, format_version: 0.13}
kernelspec: {display_name: Python 3, language: python, name: python3}
---
# Demo

"""


def demo_book(tmp_path: Path, monkeypatch, body: str) -> Path:
    """A book of one chapter, ``chapters/demo.md`` with ``body`` after its title, that ``notebooks`` works on."""
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    md = chapters / "demo.md"
    md.write_text(FRONT + textwrap.dedent(body))
    monkeypatch.setattr(notebooks, "ROOT", tmp_path)
    monkeypatch.setattr(notebooks, "CHAPTERS", chapters)
    monkeypatch.setattr(notebooks, "BUILD", tmp_path / "_build")
    return md


def test_drift_is_detected(tmp_path, monkeypatch):
    md = demo_book(tmp_path, monkeypatch, "```{code-cell} ipython3\nx = 1\n```\n")
    chapters = md.parent
    assert notebooks.check() == ["chapters/demo.ipynb is missing"]
    notebooks.sync()
    assert notebooks.check() == []
    md.write_text(md.read_text().replace("x = 1", "x = 2"))
    assert notebooks.check() == ["chapters/demo.ipynb is out of date with chapters/demo.md"]
    notebooks.sync()
    (chapters / "orphan.ipynb").write_text(notebooks.render(notebooks.to_notebook(md)))
    assert notebooks.check() == ["chapters/orphan.ipynb has no .md source"]


def test_sync_from_build_fills_glued_values_and_the_download_notebook(tmp_path, monkeypatch):
    """``sync --from-build`` takes the glued values from myst-nb's executed notebook; a plain ``sync`` keeps them
    (from the notebook's metadata), and the download notebook of the built page carries the build's outputs."""
    md = demo_book(tmp_path, monkeypatch, """\
        ```{code-cell} ipython3
        print("hello")
        ```

        The answer is {glue:text}`answer:.1f` of {glue:text}`total`.
        """)
    assert notebooks.check() == ["chapters/demo.ipynb is missing"]
    assert notebooks.main(["sync", "--from-build"]) == 1, "no build yet: one line, exit 1"
    built = jupytext.read(md, fmt="md:myst")
    built.cells[1].outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="hello\n"),
        nbformat.v4.new_output("display_data", data={"application/papermill.record/text/plain": "41.96"},
                               metadata={"scrapbook": {"name": "answer",
                                                       "mime_prefix": "application/papermill.record/"}}),
        nbformat.v4.new_output("display_data", data={"text/plain": "'1,000'"},
                               metadata={"scrapbook": {"name": "total", "mime_prefix": ""}}),
        nbformat.v4.new_output("display_data", data={"application/papermill.record/image/svg+xml": "<svg/>",
                                                     "application/papermill.record/text/plain": "<Figure>"},
                               metadata={"scrapbook": {"name": "fig_demo",
                                                       "mime_prefix": "application/papermill.record/"}}),
        nbformat.v4.new_output("stream", name="stdout", text="after the figure\n")]
    (tmp_path / "_build" / "html" / "_sources" / "chapters").mkdir(parents=True)
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    get_cache(tmp_path / "_build" / ".jupyter_cache").cache_notebook_bundle(
        CacheBundleIn(built, str(md)), check_validity=False)
    assert notebooks.main(["sync", "--from-build"]) == 0
    nb = nbformat.read(md.with_suffix(".ipynb"), as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "The answer is 42.0 of 1,000." in text and "computed in the notebook" not in text
    assert all(not c.outputs for c in nb.cells if c.cell_type == "code"), "the committed notebook has no outputs"
    download = nbformat.read(notebooks.download_notebook("demo"), as_version=4)
    outputs = next(c.outputs for c in download.cells if c.cell_type == "code" and "hello" in c.source)
    assert [o.get("text") or o["data"] for o in outputs] == [
        "hello\n", "after the figure\n", {"image/svg+xml": "<svg/>", "text/plain": "<Figure>"}], \
        "the glued figure is shown (at the end of its cell, as Jupyter shows an open figure); glued numbers are not"
    shutil.rmtree(tmp_path / "_build")
    assert notebooks.sync() == [] and notebooks.check() == [], "a plain sync keeps the stored values"
    md.write_text(md.read_text() + "\nAnd {glue:text}`new_value`.\n")
    assert "new_value" in notebooks.check()[0] and "build the book" in notebooks.check()[0]


@pytest.fixture(scope="module")
def colab_env(tmp_path_factory):
    """``colab_env()``: a new venv without hoplib, a git repository standing in for the book's public one, and a
    work folder, made at the first call (after the test found the build's notebooks)."""
    made: dict[str, Path] = {}

    def get() -> dict[str, Path]:
        if not made:
            made.update(colab_environment(tmp_path_factory.mktemp("colab"),
                                          [md.with_suffix(".ipynb") for md in CHAPTERS]))
        return made

    return get


def code_sources(nb: nbformat.NotebookNode) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def build_problem(md: Path) -> str | None:
    """Why the build's download notebook of ``md``'s chapter cannot serve as nbval's reference, if it cannot."""
    path = notebooks.download_notebook(md.stem)
    if not path.exists():
        return f"{path.relative_to(ROOT)} is missing"
    built = nbformat.read(path, as_version=4)
    if code_sources(built) != code_sources(nbformat.read(md.with_suffix(".ipynb"), as_version=4)):
        return f"the build is older than chapters/{md.name}"
    return None


def test_the_book_was_built_before_the_tests():
    """The notebook tests compare with the build's outputs, so CI (``.ci/run``) builds first. Without a build, or
    with one older than a chapter, this test fails in one line and those tests are skipped: a skip alone would
    read as a pass."""
    problems = [p for md in CHAPTERS if (p := build_problem(md))]
    if problems:
        pytest.fail(f"no current book build ({'; '.join(problems[:2])}{'; ...' if len(problems) > 2 else ''}): "
                    "run bash scripts/build.sh, then the tests", pytrace=False)


def reference_notebook(md: Path) -> nbformat.NotebookNode:
    """The chapter's notebook as the built page's download button serves it, with the web build's outputs: the
    reference nbval compares with (skipped, and reported by the test above, when there is none)."""
    if problem := build_problem(md):
        pytest.skip(f"no current book build: {problem}")
    return nbformat.read(notebooks.download_notebook(md.stem), as_version=4)


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_colab_notebook_run_afresh_prints_what_the_web_book_shows(colab_env, md):
    """nbval, the regression test of every chapter: the chapter's Colab notebook, run as a Colab user runs it (its
    install cell clones the stand-in repository and installs hoplib into a venv that lacks it, a fresh kernel,
    the build's thread count), prints cell by cell what the web build printed (tests/nbval_sanitize.cfg lists
    what may differ: figures' SVG, versions, addresses, paths, wall times). torch and numpy are never
    reinstalled."""
    reference = reference_notebook(md)
    code = [c for c in reference.cells if c.cell_type == "code"]
    compared = [c for c in code if c.execution_count is not None]
    chapter_code = [c for c in code if not {"colab-install", "exercise-answer"} & set(c.metadata.get("tags", []))]
    assert len(compared) == len(chapter_code), "every chapter cell carries the build's outputs"
    assert "profile quick" in "".join(o.get("text", "") for c in compared for o in c.outputs)
    env = colab_env()
    notebook = env["work"] / md.with_suffix(".ipynb").name
    nbformat.write(reference, notebook)
    result = run_nbval(notebook, env["py"], colab_run_env(env["checkout"]))
    where = ", ".join(failed_cells(result.stdout)) or "its run"
    assert result.returncode == 0, (f"{md.stem}: a fresh run differs from the web build in {where}; rebuild the "
                                    "book if the change is meant, else fix it\n"
                                    + result.stdout[-6000:] + result.stderr[-2000:])
    clone = env["work"] / notebooks.repository()["name"]
    assert (clone / "chapters" / md.with_suffix(".ipynb").name).exists(), "the install cell cloned the book"
    installed = subprocess.run([str(env["py"]), "-c", "import hoplib; print(hoplib.__file__)"],
                               cwd=env["work"].parent, capture_output=True, text=True, check=True,
                               env=colab_run_env(env["checkout"])).stdout.strip()
    assert installed.startswith(str(clone)), f"hoplib should be installed from the clone, found {installed}"
    assert not (env["site"] / "torch").exists(), "torch must not be reinstalled"
    assert not (env["site"] / "numpy").exists(), "numpy must not be reinstalled"


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_the_download_notebook_carries_every_figure_the_page_shows(md):
    figures = set(re.findall(r"\{glue:figure\}\s+(\w+)", md.read_text(encoding="utf-8")))
    reference = reference_notebook(md)
    images = [o for c in reference.cells if c.cell_type == "code" for o in c.outputs
              if any(k.startswith("image/") for k in o.get("data", {}))]
    assert len(images) >= len(figures), f"{len(images)} figures in the download notebook, the page shows {figures}"


IGNORE_TAG = "nbval-ignore-output"


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_few_cells_are_left_out_of_the_comparison_and_each_says_why(md):
    """At most one code cell in ten is tagged ``nbval-ignore-output``, and each such cell says in a comment why
    its output varies between runs (a comment line that mentions "varies")."""
    code = [c for c in jupytext.read(md, fmt="md:myst").cells if c.cell_type == "code"]
    ignored = [c for c in code if IGNORE_TAG in c.metadata.get("tags", []) or "NBVAL_IGNORE_OUTPUT" in c.source]
    assert 10 * len(ignored) <= len(code), f"{len(ignored)} of {len(code)} cells ignored by nbval"
    for cell in ignored:
        comments = [line for line in cell.source.splitlines() if line.lstrip().startswith("#")]
        assert any("varies" in line for line in comments), f"an ignored cell says why:\n{cell.source[:300]}"


def test_publishing_workflow_is_valid_yaml_that_runs_the_readme_build_command():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    steps = workflow["jobs"]["build"]["steps"]
    runs = [s["run"] for s in steps if "run" in s]
    assert "bash scripts/build.sh" in runs and "bash scripts/build.sh" in (ROOT / "README.md").read_text()
    assert any(s.get("uses", "").startswith("actions/upload-pages-artifact") and s["with"]["path"] == "_build/html"
               for s in steps)
    deploy = workflow["jobs"]["deploy"]
    assert deploy["needs"] == "build" and "refs/heads/main" in deploy["if"]
    assert any(s.get("uses", "").startswith("actions/deploy-pages") for s in deploy["steps"])
    assert workflow[True]["push"]["branches"] == ["main"]  # YAML 1.1 reads the key `on` as True


def test_ci_builds_the_book_before_it_runs_the_tests():
    steps = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if line.strip().startswith("bash scripts/")]
    assert steps == ["bash scripts/build.sh", "bash scripts/test.sh"], "the notebook tests need the build's outputs"
