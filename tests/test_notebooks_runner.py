"""Tests of ``scripts/notebooks.py run``: parameters are checked before a kernel starts, and a failed run keeps
the last good executed notebook and results files and reports its cause in one line."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from papermill.exceptions import PapermillExecutionError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import notebooks  # noqa: E402


@pytest.fixture
def no_kernel(monkeypatch):
    """Fail the test if the runner tries to execute anything."""
    def forbidden(*args, **kwargs):
        raise AssertionError("a kernel was started for parameters that should have been rejected")

    monkeypatch.setattr(notebooks, "execute", forbidden)


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = notebooks.main(["run", *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (["-p", "seeed", "3"], "unknown parameter 'seeed' for chapter hop_task"),
        (["-p", "seed", "-1"], r"seed must be in [0, 4294967295], got -1"),
        (["-p", "seed", "1.5"], "parameter seed must be an integer"),
        (["-p", "profile", "huge"], "profile must be one of quick, paper"),
        (["-p", "device", "tpu"], "device must be one of"),
    ],
)
def test_bad_parameters_exit_2_with_one_line_before_any_kernel(no_kernel, capsys, tmp_path, params, message):
    code, err = _run(capsys, "hop_task", "--out", str(tmp_path), *params)
    assert code == 2
    assert err.count("\n") == 1 and message in err


def test_a_rejected_run_leaves_the_good_notebook_untouched(no_kernel, capsys, tmp_path):
    good = tmp_path / "hop_task" / "quick" / "hop_task.ipynb"
    good.parent.mkdir(parents=True)
    good.write_text("the good run", encoding="utf-8")
    code, _ = _run(capsys, "hop_task", "--out", str(tmp_path), "-p", "seed", "-1")
    assert code == 2 and good.read_text(encoding="utf-8") == "the good run"


def test_parameters_and_profiles_are_read_from_the_chapter():
    import jupytext

    nb = jupytext.read(ROOT / "chapters" / "mpc.md", fmt="md:myst")
    assert notebooks.parameters_cell(nb) == {"profile": "quick", "device": "auto", "seed": 0, "out_dir": ""}
    assert set(notebooks.chapter_profiles(nb)) >= {"quick", "paper"}


def _fake_execute(fail: bool, marker: str):
    """An executor that writes a results file into the run's out_dir and a notebook, or fails midway."""
    def execute(source, target, parameters, cwd, timeout):
        results = Path(parameters["out_dir"]) / "hop_task" / "quick"
        results.mkdir(parents=True, exist_ok=True)
        (results / "hop_statistics.json").write_text(json.dumps({"run": marker}), encoding="utf-8")
        nb = nbformat.read(source, as_version=4)
        nb.metadata["marker"] = marker
        nbformat.write(nb, target)
        if fail:
            raise PapermillExecutionError(5, 7, "x = 1 / 0", "ZeroDivisionError", "division by zero\nmore",
                                          ["Traceback (most recent call last):", "  ... 40 lines ..."])
    return execute


def test_a_failed_run_keeps_the_good_notebook_and_results_and_says_why_in_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(notebooks, "execute", _fake_execute(False, "good"))
    assert _run(capsys, "hop_task", "--out", str(tmp_path))[0] == 0
    folder = tmp_path / "hop_task" / "quick"
    monkeypatch.setattr(notebooks, "execute", _fake_execute(True, "bad"))
    code, err = _run(capsys, "hop_task", "--out", str(tmp_path), "-p", "seed", "3")
    assert code == 1
    assert err.count("\n") == 1 and "cell 7 raised ZeroDivisionError: division by zero" in err
    assert "previous notebook is kept" in err and str(folder / "hop_task.failed.log") in err
    assert nbformat.read(folder / "hop_task.ipynb", as_version=4).metadata["marker"] == "good"
    assert json.loads((folder / "hop_statistics.json").read_text(encoding="utf-8")) == {"run": "good"}
    assert "40 lines" in (folder / "hop_task.failed.log").read_text(encoding="utf-8")
    assert nbformat.read(folder / "hop_task.failed.ipynb", as_version=4).metadata["marker"] == "bad"
    assert not any(p.name.startswith(".") for p in (tmp_path / "hop_task").iterdir()), "staging left behind"


TINY = textwrap.dedent('''\
    ---
    jupytext:
      text_representation:
        extension: .md
        format_name: myst
        format_version: 0.13
    kernelspec:
      display_name: Python 3
      language: python
      name: python3
    ---

    # Tiny

    ```{code-cell} ipython3
    :tags: [parameters]

    seed = 0
    fail = 0
    out_dir = ""
    ```

    ```{code-cell} ipython3
    if fail:
        raise RuntimeError("boom at seed %d" % seed)
    ```
    ''')


@pytest.mark.slow
def test_a_real_failing_chapter_keeps_the_last_good_notebook(capsys, tmp_path):
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    (chapters / "tiny.md").write_text(TINY, encoding="utf-8")
    out = tmp_path / "out"
    assert _run(capsys, "tiny", "--out", str(out), "--chapters", str(chapters))[0] == 0
    code, err = _run(capsys, "tiny", "--out", str(out), "--chapters", str(chapters), "-p", "fail", "1",
                     "-p", "seed", "4")
    last = err.strip().splitlines()[-1]  # after papermill's progress bar
    assert code == 1 and "raised RuntimeError: boom at seed 4" in last and "Traceback" not in err
    kept = nbformat.read(out / "tiny" / "quick" / "tiny.ipynb", as_version=4)
    assert not any("fail = 1" in c.source for c in kept.cells)
