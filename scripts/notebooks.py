"""Chapter tooling: generate the Colab notebooks, check them for drift, and run a chapter with papermill.

    python scripts/notebooks.py sync                 # chapters/*.md -> chapters/*.ipynb (for Colab)
    python scripts/notebooks.py check                # fail if any .ipynb differs from what sync would write
    python scripts/notebooks.py run hop_task -p profile paper -p device cuda [--out results]

The MyST Markdown files are the only hand-edited sources. The generated notebooks differ from them in one
way: a first code cell, built from ``repository`` in ``_config.yml``, that clones the book and installs hoplib
from it when (and only when) the notebook runs on Google Colab, or when ``HOPLIB_INSTALL_SOURCE`` is set (the
test that proves the cell works points it at a local git checkout). It never installs torch or numpy:
hoplib's requirements are ranges that Colab's preinstalled versions satisfy.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import jupytext
import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"

INSTALL_CELL = '''\
# Colab setup, generated from _config.yml (not part of the chapter's source). On Google Colab it clones the
# book's repository (for hoplib and the stored results), installs hoplib from it and moves into the chapter's
# folder; anywhere else it does nothing. torch and numpy are never reinstalled.
import os
import subprocess
import sys

if "google.colab" in sys.modules or os.environ.get("HOPLIB_INSTALL_SOURCE"):
    book_dir = os.path.abspath("{name}")
    if not os.path.isdir(book_dir):
        source = os.environ.get("HOPLIB_INSTALL_SOURCE")
        branch = [] if source else ["--branch", "{branch}"]
        subprocess.check_call(["git", "clone", "--quiet", "--depth", "1", *branch, source or "{url}", book_dir])
        subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "-e", book_dir])
    os.chdir(os.path.join(book_dir, "chapters"))
    sys.path.insert(0, book_dir)  # the running kernel sees the fresh install at once'''


def repository() -> dict[str, str]:
    """``url``, ``branch`` and folder ``name`` of the book's repository, from _config.yml (the one place)."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    url = config["repository"]["url"].rstrip("/")
    return {"url": url, "branch": config["repository"].get("branch", "main"), "name": url.rsplit("/", 1)[-1]}


def chapter_sources() -> list[Path]:
    return sorted(CHAPTERS.glob("*.md"))


def to_notebook(md_path: Path, with_install_cell: bool = True) -> nbformat.NotebookNode:
    """Convert one MyST chapter to a notebook with deterministic cell ids (and the Colab install cell)."""
    nb = jupytext.read(md_path, fmt="md:myst")
    if with_install_cell:
        cell = nbformat.v4.new_code_cell(INSTALL_CELL.format(**repository()))
        cell.metadata["tags"] = ["colab-install", "hide-output"]
        first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
        nb.cells.insert(first_code, cell)
    for i, cell in enumerate(nb.cells):
        cell.id = f"{md_path.stem[:40]}-{i:03d}"
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("jupytext", None)
    nb.metadata["colab"] = {"provenance": []}
    nb.metadata["accelerator"] = "GPU"
    nb.metadata.setdefault("language_info", {"name": "python"})
    nb.nbformat, nb.nbformat_minor = 4, 5
    return nb


def render(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


CHECK_TAG = "nbval-check-output"


def _checked(nb: nbformat.NotebookNode) -> list[int]:
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and CHECK_TAG in c.metadata.get("tags", [])]


def strip_outputs(nb: nbformat.NotebookNode) -> str:
    """The notebook as text without outputs: what must match the .md source exactly."""
    nb = nbformat.from_dict(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return render(nb)


def _fill_checked_outputs(nb: nbformat.NotebookNode, md: Path, old: nbformat.NotebookNode | None) -> None:
    """Give cells tagged ``nbval-check-output`` their reference outputs, which nbval then compares.

    They are kept from the existing notebook when its sources are unchanged; otherwise the chapter is executed
    once, in its default (quick, CPU) parameters, and only those cells' outputs are stored.
    """
    idx = _checked(nb)
    if not idx:
        return
    if old is not None and strip_outputs(old) == strip_outputs(nb) and all(old.cells[i].outputs for i in idx):
        source = old
    else:
        from nbclient import NotebookClient

        source = nbformat.from_dict(nb)
        for cell in source.cells:
            if "colab-install" in cell.metadata.get("tags", []):
                cell.source = "pass"
        NotebookClient(source, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(md.parent)}}).execute()
    for i in idx:
        nb.cells[i].outputs = source.cells[i].outputs
        nb.cells[i].execution_count = i  # nbval only compares cells that record an execution


def sync() -> list[Path]:
    written = []
    for md in chapter_sources():
        target = md.with_suffix(".ipynb")
        nb = to_notebook(md)
        old = nbformat.read(target, as_version=4) if target.exists() else None
        _fill_checked_outputs(nb, md, old)
        text = render(nb)
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            written.append(target)
    for stale in CHAPTERS.glob("*.ipynb"):
        if not stale.with_suffix(".md").exists():
            stale.unlink()
            written.append(stale)
    return written


def check() -> list[str]:
    """Problems: notebooks missing, out of date, or without a source."""
    problems = []
    for md in chapter_sources():
        target = md.with_suffix(".ipynb")
        if not target.exists():
            problems.append(f"{target.relative_to(ROOT)} is missing")
            continue
        stored = nbformat.read(target, as_version=4)
        expected = to_notebook(md)
        if strip_outputs(stored) != strip_outputs(expected):
            problems.append(f"{target.relative_to(ROOT)} is out of date with {md.relative_to(ROOT)}")
            continue
        checked = set(_checked(expected))
        for i, cell in enumerate(stored.cells):
            if cell.cell_type == "code" and cell.outputs and i not in checked:
                problems.append(f"{target.relative_to(ROOT)}: cell {i} stores outputs but is not tagged {CHECK_TAG}")
            elif i in checked and not cell.outputs:
                problems.append(f"{target.relative_to(ROOT)}: cell {i} is tagged {CHECK_TAG} but has no stored output")
    for nb_path in CHAPTERS.glob("*.ipynb"):
        if not nb_path.with_suffix(".md").exists():
            problems.append(f"{nb_path.relative_to(ROOT)} has no .md source")
    return problems


def _value(text: str) -> object:
    """Parse a -p value as papermill does: None, booleans, ints and floats, else the string itself."""
    if text in ("None", "none"):
        return None
    if text in ("True", "true", "False", "false"):
        return text.lower() == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def run(chapter: str, params: list[tuple[str, str]], out: Path, timeout: int) -> Path:
    """Execute a chapter with papermill; write the executed notebook and its results files under ``out``."""
    import papermill

    md = CHAPTERS / f"{chapter}.md"
    if not md.exists():
        names = ", ".join(p.stem for p in chapter_sources())
        raise SystemExit(f"chapter must be one of: {names}; got {chapter!r}")
    parameters = {name: _value(value) for name, value in params}
    out = out.resolve()
    parameters.setdefault("out_dir", str(out))
    profile = parameters.get("profile", "quick")
    target = out / chapter / str(profile) / f"{chapter}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / f"{chapter}.ipynb"
        nbformat.write(to_notebook(md, with_install_cell=False), source)
        t0 = time.perf_counter()
        papermill.execute_notebook(str(source), str(target), parameters=parameters, cwd=str(CHAPTERS),
                                   kernel_name="python3", execution_timeout=timeout, progress_bar=True,
                                   log_output=False)
    print(f"{chapter}: executed in {time.perf_counter() - t0:.1f} s -> {target}")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("sync", help="write chapters/*.ipynb from chapters/*.md")
    sub.add_parser("check", help="fail if the notebooks are out of date")
    p_run = sub.add_parser("run", help="run one chapter through papermill")
    p_run.add_argument("chapter", help="chapter name, e.g. hop_task")
    p_run.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    p_run.add_argument("--out", type=Path, default=ROOT / "runs",
                       help="folder for the executed notebook and results (default: runs/, ignored by git)")
    p_run.add_argument("--timeout", type=int, default=36_000, help="seconds per cell (default 36000)")
    args = parser.parse_args(argv)
    if args.command == "sync":
        for path in sync():
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    if args.command == "check":
        problems = check()
        for p in problems:
            print(p, file=sys.stderr)
        if problems:
            print("run: python scripts/notebooks.py sync", file=sys.stderr)
        return 1 if problems else 0
    run(args.chapter, args.parameter, args.out, args.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
