"""Tests of the book itself: structure, parameters cells, generated Colab notebooks and their install cell."""

from __future__ import annotations

import os
import shutil
import site
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
import notebooks  # noqa: E402

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
                               metadata={"scrapbook": {"name": "total", "mime_prefix": ""}})]
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
    download = nbformat.read(tmp_path / "_build" / "html" / "_sources" / "chapters" / "demo.ipynb", as_version=4)
    assert any("hello" in o.get("text", "") for c in download.cells if c.cell_type == "code" for o in c.outputs)
    shutil.rmtree(tmp_path / "_build")
    assert notebooks.sync() == [] and notebooks.check() == [], "a plain sync keeps the stored values"
    md.write_text(md.read_text() + "\nAnd {glue:text}`new_value`.\n")
    assert "new_value" in notebooks.check()[0] and "build the book" in notebooks.check()[0]


def _main_site_packages() -> str:
    return next(p for p in site.getsitepackages() if p.endswith("site-packages"))


@pytest.fixture(scope="module")
def colab_env(tmp_path_factory) -> dict[str, Path]:
    """A new venv without hoplib, a git repository standing in for the book's public one, and a work folder.

    The venv sees this environment's third-party packages (torch, numpy, jupyter: Colab's preinstalled set)
    through a .pth file, but not hoplib; the first notebook run clones the stand-in and installs hoplib from it.
    """
    tmp = tmp_path_factory.mktemp("colab")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    venv_site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                    check=True, capture_output=True, text=True).stdout.strip())
    (venv_site / "preinstalled.pth").write_text(_main_site_packages() + "\n")
    work = tmp / "work"
    work.mkdir()
    probe = subprocess.run([str(py), "-c", "import hoplib"], cwd=work, capture_output=True, text=True)
    assert probe.returncode != 0, "hoplib must not be importable before the install cell runs"
    checkout = tmp / "checkout"
    checkout.mkdir()
    for item in ("pyproject.toml", "README.md", "_toc.yml", "_config.yml"):
        shutil.copy(ROOT / item, checkout / item)
    skip = shutil.ignore_patterns("__pycache__", "*.partial.json")
    for folder in ("hoplib", "results"):
        shutil.copytree(ROOT / folder, checkout / folder, ignore=skip)
    (checkout / "chapters").mkdir()
    for md in CHAPTERS:
        shutil.copy(md.with_suffix(".ipynb"), checkout / "chapters" / md.with_suffix(".ipynb").name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=checkout, check=True)
    subprocess.run([*git, "add", "."], cwd=checkout, check=True)
    subprocess.run([*git, "commit", "-qm", "snapshot"], cwd=checkout, check=True)
    return {"py": py, "site": venv_site, "work": work, "checkout": checkout}


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_colab_notebook_runs_top_to_bottom_in_a_fresh_environment(colab_env, md):
    """Every chapter's generated notebook, run as a Colab user runs it: its install cell clones the (stand-in)
    repository and installs hoplib into a venv that lacks it (once, for the first chapter), then every cell runs
    without an error; torch and numpy are never reinstalled."""
    py, work = colab_env["py"], colab_env["work"]
    name = md.with_suffix(".ipynb").name
    shutil.copy(md.with_suffix(".ipynb"), work / name)
    runner = textwrap.dedent(f"""\
        import nbformat
        from nbclient import NotebookClient
        nb = nbformat.read("{name}", as_version=4)
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={{"metadata": {{"path": "."}}}}).execute()
        nbformat.write(nb, "executed-{name}")
        """)
    env = {**os.environ, "HOPLIB_INSTALL_SOURCE": str(colab_env["checkout"]), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    result = subprocess.run([str(py), "-c", runner], cwd=work, env=env, capture_output=True, text=True,
                            timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    clone = work / notebooks.repository()["name"]
    assert (clone / "chapters" / name).exists(), "the install cell cloned the book"
    installed = subprocess.run([str(py), "-c", "import hoplib; print(hoplib.__file__)"], cwd=work.parent,
                               capture_output=True, text=True, check=True).stdout.strip()
    assert installed.startswith(str(clone)), f"hoplib should be installed from the clone, found {installed}"
    executed = nbformat.read(work / f"executed-{name}", as_version=4)
    code = [c for c in executed.cells if c.cell_type == "code" and c.source.strip()]
    assert code and all(c.execution_count for c in code), "every code cell ran"
    outputs = "".join(o.get("text", "") for c in code for o in c.outputs)
    assert "profile quick" in outputs, "the chapter started with its default (quick) profile"
    assert not (colab_env["site"] / "torch").exists(), "torch must not be reinstalled"
    assert not (colab_env["site"] / "numpy").exists(), "numpy must not be reinstalled"


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
