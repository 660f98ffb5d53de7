"""Tests of ``scripts/notebooks.py run``: parameters are checked before a folder is made or a kernel starts, no
parameter leads outside ``--out``, a rerun needs ``--overwrite``, two runs on one folder at once are refused, and a
failed run keeps the last good executed notebook and results files and reports its cause in one line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
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
        (["-p", "seed", "1.5"], "parameter seed must be an integer"),
        (["-p", "profile", "huge"], "profile must be one of quick, paper"),
        (["-p", "device", "tpu"], "device must be one of"),
        (["-p", "out_dir", "/tmp/elsewhere"], "out_dir is set by the runner"),
    ],
)
def test_bad_parameters_exit_2_with_one_line_before_any_kernel(no_kernel, capsys, tmp_path, params, message):
    code, err = _run(capsys, "hop_task", "--out", str(tmp_path / "out"), *params)
    assert code == 2
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "out").exists(), "no folder is made for a rejected run"


CHAPTERS = sorted(p.stem for p in (ROOT / "chapters").glob("*.md"))


@pytest.mark.parametrize("chapter", CHAPTERS)
@pytest.mark.parametrize("profile", ["../../ESCAPED", "/ABSOLUTE", "quick/../../../ESCAPED"])
def test_a_profile_that_names_a_path_is_refused_before_any_folder_is_made(no_kernel, capsys, tmp_path, chapter,
                                                                          profile):
    if profile.startswith("/"):
        profile = str(tmp_path / "ABSOLUTE")
    code, err = _run(capsys, chapter, "--out", str(tmp_path / "W" / "runs"), "-p", "profile", profile)
    assert code == 2 and err.count("\n") == 1 and "profile must be one of" in err
    assert list(tmp_path.rglob("*")) == [], "nothing was made, inside --out or outside it"


def test_a_folder_under_out_must_be_one_plain_name_inside_it(tmp_path):
    assert notebooks.inside(tmp_path, "hop_task", "quick") == tmp_path.resolve() / "hop_task" / "quick"
    for bad in ("..", ".", "", "a/b", "/abs", "a\\b"):
        with pytest.raises(notebooks.RunError, match="cannot name a folder under --out"):
            notebooks.inside(tmp_path, "hop_task", bad)
    (tmp_path / "hop_task").mkdir()
    (tmp_path / "hop_task" / "quick").symlink_to(tmp_path.parent)
    with pytest.raises(notebooks.RunError, match="would lead outside --out"):
        notebooks.inside(tmp_path, "hop_task", "quick")


def test_a_chapter_not_in_the_table_of_contents_is_refused(no_kernel, capsys, tmp_path):
    chapters = tiny_book(tmp_path)
    (chapters / "draft.md").write_text(TINY, encoding="utf-8")
    code, err = _run(capsys, "draft", "--out", str(tmp_path / "out"), "--chapters", str(chapters))
    assert code == 2 and "chapter must be one of: tiny; got 'draft'" in err
    code, err = _run(capsys, "../chapters/tiny", "--out", str(tmp_path / "out"), "--chapters", str(chapters))
    assert code == 2 and "chapter must be one of" in err


def test_a_rejected_run_leaves_the_good_notebook_untouched(no_kernel, capsys, tmp_path):
    good = tmp_path / "hop_task" / "quick" / "hop_task.ipynb"
    good.parent.mkdir(parents=True)
    good.write_text("the good run", encoding="utf-8")
    code, _ = _run(capsys, "hop_task", "--out", str(tmp_path), "-p", "profile", "huge")
    assert code == 2 and good.read_text(encoding="utf-8") == "the good run"


def test_parameters_come_from_papermills_inspection():
    import papermill

    specs = notebooks.chapter_parameters(ROOT / "chapters" / "mpc.ipynb")
    assert specs == papermill.inspect_notebook(str(ROOT / "chapters" / "mpc.ipynb"))
    assert {name: spec["default"] for name, spec in specs.items()} == {
        "profile": '"quick"', "device": '"auto"', "seed": "0", "out_dir": '""'}
    assert [notebooks.parameter_type(specs[n]) for n in ("profile", "seed")] == [str, int]
    assert notebooks.parameter_type({"default": "0", "inferred_type_name": "float"}) is float, "annotation first"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_profiles_are_the_keys_of_the_table_each_chapter_passes_to_start(chapter):
    import jupytext

    profiles = notebooks.chapter_profiles(jupytext.read(ROOT / "chapters" / f"{chapter}.md", fmt="md:myst"), {})
    assert "quick" in profiles and "paper" in profiles
    import hoplib._book.notebook as book

    assert book.start.__name__ == "start", "the real start is back in place"


def _fake_execute(fail: bool, marker: str, also: str | None = None):
    """An executor that writes a results file (and ``also``) into the run's out_dir and a notebook, or fails
    midway."""
    def execute(source, target, parameters, cwd, timeout):
        results = Path(parameters["out_dir"]) / "hop_task" / "quick"
        results.mkdir(parents=True, exist_ok=True)
        (results / "hop_statistics.json").write_text(json.dumps({"run": marker}), encoding="utf-8")
        if also:
            (results / also).write_text("{}", encoding="utf-8")
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
    code, err = _run(capsys, "hop_task", "--out", str(tmp_path), "-p", "seed", "3", "--overwrite")
    assert code == 1
    assert err.count("\n") == 1 and "cell 7 raised ZeroDivisionError: division by zero" in err
    assert "previous notebook is kept" in err and str(folder / "hop_task.failed.log") in err
    assert nbformat.read(folder / "hop_task.ipynb", as_version=4).metadata["marker"] == "good"
    assert json.loads((folder / "hop_statistics.json").read_text(encoding="utf-8")) == {"run": "good"}
    assert "40 lines" in (folder / "hop_task.failed.log").read_text(encoding="utf-8")
    assert nbformat.read(folder / "hop_task.failed.ipynb", as_version=4).metadata["marker"] == "bad"
    assert not any(p.name.startswith(".") for p in (tmp_path / "hop_task").iterdir()), "staging left behind"


def test_a_rerun_is_refused_without_overwrite_and_replaces_the_whole_run_with_it(monkeypatch, capsys, tmp_path):
    folder = tmp_path / "hop_task" / "quick"
    monkeypatch.setattr(notebooks, "execute", _fake_execute(False, "first", also="only_first.json"))
    assert _run(capsys, "hop_task", "--out", str(tmp_path))[0] == 0
    monkeypatch.setattr(notebooks, "execute", _fake_execute(False, "second"))
    code, err = _run(capsys, "hop_task", "--out", str(tmp_path), "-p", "seed", "3")
    assert code == 2 and err.count("\n") == 1 and "add --overwrite to replace it" in err
    assert nbformat.read(folder / "hop_task.ipynb", as_version=4).metadata["marker"] == "first"
    assert json.loads((folder / "hop_statistics.json").read_text(encoding="utf-8")) == {"run": "first"}
    assert _run(capsys, "hop_task", "--out", str(tmp_path), "-p", "seed", "3", "--overwrite")[0] == 0
    assert nbformat.read(folder / "hop_task.ipynb", as_version=4).metadata["marker"] == "second"
    assert json.loads((folder / "hop_statistics.json").read_text(encoding="utf-8")) == {"run": "second"}
    assert not (folder / "only_first.json").exists(), "no file of the replaced run is left beside the new one"


def test_two_runs_on_one_folder_at_once_the_second_is_refused_and_the_first_keeps_its_results(
        monkeypatch, capsys, tmp_path):
    inside, release = threading.Event(), threading.Event()
    first = _fake_execute(False, "first")
    calls = []

    def execute(*args):
        calls.append(args)
        if len(calls) == 1:  # the first run stays inside its kernel until the second has tried
            inside.set()
            assert release.wait(60)
            first(*args)
        else:
            _fake_execute(False, "second")(*args)

    monkeypatch.setattr(notebooks, "execute", execute)
    outcome: list[object] = []
    thread = threading.Thread(target=lambda: outcome.append(notebooks.run("hop_task", [], tmp_path, 60)))
    thread.start()
    assert inside.wait(60)
    try:
        code, err = _run(capsys, "hop_task", "--out", str(tmp_path), "-p", "seed", "5", "--overwrite")
    finally:
        release.set()
        thread.join(60)
    assert code == 2 and err.count("\n") == 1 and "another notebooks.py run: " in err and "live process" in err
    assert len(calls) == 1, "the second run started no kernel"
    folder = tmp_path / "hop_task" / "quick"
    assert outcome == [folder / "hop_task.ipynb"]
    assert json.loads((folder / "hop_statistics.json").read_text(encoding="utf-8")) == {"run": "first"}
    assert _run(capsys, "hop_task", "--out", str(tmp_path), "-p", "seed", "5", "--overwrite")[0] == 0, \
        "the lock ends with the run"


def test_the_lock_refuses_another_process(tmp_path):
    script = ("import sys, time; sys.path.insert(0, sys.argv[1]); import notebooks; from pathlib import Path\n"
              "with notebooks.locked(Path(sys.argv[2])):\n    print('locked', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", script, str(ROOT / "scripts"), str(tmp_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(notebooks.RunError, match=f"another notebooks.py run: .* live process {holder.pid} on "):
            with notebooks.locked(tmp_path):
                pass
    finally:
        holder.communicate("", timeout=60)
    with notebooks.locked(tmp_path):  # free again once the holder ended
        pass


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

    profile = "quick"
    device = "cpu"
    seed = 0
    fail = 0
    out_dir = ""
    ```

    ```{code-cell} ipython3
    import hoplib._book.notebook as nb

    run = nb.start("tiny", profile, device, seed, out_dir, {"quick": {}, "other": {}})
    ```

    ```{code-cell} ipython3
    if fail:
        raise RuntimeError("boom at seed %d" % seed)
    ```
    ''')


def tiny_book(root: Path) -> Path:
    """A book of one chapter, ``tiny``, listed in its ``_toc.yml``; returns its chapters folder."""
    chapters = root / "chapters"
    chapters.mkdir()
    (chapters / "tiny.md").write_text(TINY, encoding="utf-8")
    (root / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: chapters/tiny\n")
    return chapters


@pytest.mark.slow
def test_a_real_failing_chapter_keeps_the_last_good_notebook(capsys, tmp_path):
    chapters = tiny_book(tmp_path)
    out = tmp_path / "out"
    assert _run(capsys, "tiny", "--out", str(out), "--chapters", str(chapters))[0] == 0
    code, err = _run(capsys, "tiny", "--out", str(out), "--chapters", str(chapters), "-p", "fail", "1",
                     "-p", "seed", "4", "--overwrite")
    last = err.strip().splitlines()[-1]  # after papermill's progress bar
    assert code == 1 and "raised RuntimeError: boom at seed 4" in last and "Traceback" not in err
    kept = nbformat.read(out / "tiny" / "quick" / "tiny.ipynb", as_version=4)
    assert not any("fail = 1" in c.source for c in kept.cells)
