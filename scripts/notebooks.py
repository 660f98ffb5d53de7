"""Chapter tooling: generate the Colab notebooks, check them for drift, and run a chapter with papermill.

    python scripts/notebooks.py sync                 # chapters/*.md -> chapters/*.ipynb (for Colab)
    python scripts/notebooks.py sync --from-build    # the same, with the glued values of the last book build
    python scripts/notebooks.py check                # fail if any .ipynb differs from what sync would write
    python scripts/notebooks.py run hop_task -p profile paper -p device cuda [--out runs] [--overwrite]

``run`` checks every ``-p`` before it makes a folder or starts a kernel (exit status 2 and one line for a bad
one): names, defaults and types from papermill's inspection of the parameters cell, then the book's own checks
(a chapter that _toc.yml lists, a profile the chapter defines, a device that is present). It writes under
``--out/<chapter>/<profile>/`` only, holding a lock on that folder for the run (a second run on it is refused),
replaces an earlier run's files only with ``--overwrite``, and replaces them only when the whole chapter ran: a
failure prints one line (the failing cell and exception) and the path of the full log (exit 1).

The MyST Markdown files are the only hand-edited sources. The generated notebooks differ from them in three
ways. Their Markdown is converted to plain Markdown that Jupyter and Colab render (``colab_markdown.py``: prf
boxes and exercises as block quotes, an empty cell after each exercise, solutions left out, citations and
cross references as text, math macros expanded). Their prose carries the glued values of the executed book
build (``sync --from-build``, run by ``scripts/build.sh`` after the build; a plain ``sync`` keeps the values
stored in the notebook's metadata). And they have a first code cell, built from ``repository`` in
``_config.yml``, that clones the book and installs hoplib from it when (and only when) the notebook runs on
Google Colab, or when ``HOPLIB_INSTALL_SOURCE`` is set (the test that proves the cell works points it at a local
git checkout); when the clone fails it stops with one line saying to set ``repository.url`` and sync again. It
never installs torch or numpy: hoplib's requirements are ranges that Colab's preinstalled versions satisfy.
After a build, the page's ".ipynb" download button serves this notebook, with the build's outputs.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import jupytext
import nbformat
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from colab_markdown import collapse, convert_cells, first_cell, load_book, untitled  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"

INSTALL_CELL = '''\
# Colab setup, generated from _config.yml (not part of the chapter's source). On Google Colab
# it clones the book's repository (for hoplib and the stored results), installs hoplib from it
# and moves into the chapter's folder; anywhere else it does nothing.
# torch and numpy are never reinstalled.
import os
import subprocess
import sys


class SetupError(Exception):
    def _render_traceback_(self):  # IPython and Colab print this one line instead of a traceback
        return [f"SetupError: {{self}}"]


os.environ["HOPLIB_PLAIN_NOTEBOOK"] = "1"  # not the book build: glue leaves figures in place
if "google.colab" in sys.modules or os.environ.get("HOPLIB_INSTALL_SOURCE"):
    book_dir = os.path.abspath("{name}")
    if not os.path.isdir(book_dir):
        local = os.environ.get("HOPLIB_INSTALL_SOURCE")  # a test's stand-in checkout
        source = local or "{url}"
        branch = [] if local else ["--branch", "{branch}"]
        git = ["git", "clone", "--quiet", "--depth", "1", *branch, source, book_dir]
        env = {{**os.environ, "GIT_TERMINAL_PROMPT": "0"}}  # fail, never ask for a password
        clone = subprocess.run(git, capture_output=True, text=True, env=env)
        if clone.returncode != 0:
            why = (clone.stderr.strip().splitlines() or ["git clone failed"])[-1]
            raise SetupError(f"cannot clone {{source}} ({{why}}); set repository.url in "
                             "_config.yml to the book's public repository, then run: "
                             "python scripts/notebooks.py sync")
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


GLUE_KEY = "hoplib_glued"  # notebook metadata: the glued values its prose shows
SECONDS_KEY = "hoplib_build_seconds"  # notebook metadata: the build's execution time of the chapter
BUILD = ROOT / "_build"


def to_notebook(md_path: Path, values: dict[str, str] | None = None,
                with_install_cell: bool = True, seconds: float | None = None) -> nbformat.NotebookNode:
    """Convert one MyST chapter to a notebook with deterministic cell ids (and the Colab install cell).

    Its Markdown cells are rewritten into plain Markdown that Jupyter and Colab render (``colab_markdown``),
    with ``values`` (glue name -> text/plain) filled in; those it shows are kept in the notebook's metadata.
    Its first cell says how to run it and how long the build took to (``seconds``, also kept in the metadata);
    the install cell and the exercise checkers are collapsed to their titles.
    """
    nb = jupytext.read(md_path, fmt="md:myst")
    values = dict(values or {})
    convert_cells(nb.cells, f"chapters/{md_path.stem}", load_book(ROOT), values)
    nb.cells = [c for c in nb.cells if c.cell_type != "markdown" or c.source.strip()]
    for cell in nb.cells:
        if "exercise-checkers" in cell.metadata.get("tags", []):
            collapse(cell, "Exercise checkers: run this cell (open it to read how your answers are checked)")
    if with_install_cell:
        cell = nbformat.v4.new_code_cell(INSTALL_CELL.format(**repository()))
        cell.metadata["tags"] = ["colab-install", "hide-output"]
        collapse(cell, "Setup: run this cell first (on Colab it installs hoplib from the book's repository)")
        first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
        nb.cells.insert(first_code, cell)
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(first_cell(seconds)))
    for i, cell in enumerate(nb.cells):
        cell.id = f"{md_path.stem[:40]}-{i:03d}"
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("jupytext", None)
    nb.metadata["colab"] = {"provenance": []}
    nb.metadata["accelerator"] = "GPU"
    nb.metadata.setdefault("language_info", {"name": "python"})
    source = md_path.read_text(encoding="utf-8")
    nb.metadata[GLUE_KEY] = {k: v for k, v in sorted(values.items()) if f"`{k}`" in source or f"`{k}:" in source}
    if seconds is not None:
        nb.metadata[SECONDS_KEY] = round(seconds, 1)
    nb.nbformat, nb.nbformat_minor = 4, 5
    return nb


def render(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


def executed(md: Path) -> nbformat.NotebookNode | None:
    """A chapter's executed notebook from the last book build (myst-nb's jupyter-cache, which keeps the glued
    values that its rendered notebooks drop), if the build ran this chapter's code as it is now. Its metadata
    ``hoplib_build_seconds`` is the execution time the cache recorded."""
    folder = BUILD / ".jupyter_cache"
    if not folder.is_dir():
        return None
    from jupyter_cache import get_cache

    cache = get_cache(folder)
    try:
        record = cache.match_cache_notebook(jupytext.read(md, fmt="md:myst"))
    except KeyError:
        return None
    nb = cache.get_cache_bundle(record.pk).nb
    seconds = (record.data or {}).get("execution_seconds")
    if seconds is not None:
        nb.metadata[SECONDS_KEY] = float(seconds)
    return nb


def glued_values(nb: nbformat.NotebookNode) -> dict[str, str]:
    """Glue name -> text/plain of every value an executed notebook glued (myst-nb marks them ``scrapbook``)."""
    values = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            mark = out.get("metadata", {}).get("scrapbook", {})
            plain = out.get("data", {}).get(mark.get("mime_prefix", "") + "text/plain")
            if mark.get("name") and plain is not None:  # display=False glue prefixes its mime types
                values[mark["name"]] = plain
    return values


def stored_values(target: Path) -> dict[str, str]:
    """The glued values a committed notebook shows (none when it does not exist yet)."""
    return dict(nbformat.read(target, as_version=4).metadata.get(GLUE_KEY, {})) if target.exists() else {}


def stored_seconds(target: Path) -> float | None:
    """The build's execution time a committed notebook states (``None`` when it states none)."""
    return nbformat.read(target, as_version=4).metadata.get(SECONDS_KEY) if target.exists() else None


def _chapter_code(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    tags = ("colab-install", "exercise-answer")
    return [c for c in nb.cells if c.cell_type == "code" and not set(tags) & set(c.metadata.get("tags", []))]


def shown_in_place(outputs: list) -> list:
    """A build cell's outputs as the notebook shows them outside the book (``hoplib._book.notebook.glue`` in a
    plain notebook): a glued number or string is left out (the prose carries it); a glued table is shown where
    it was glued, a glued figure at the end of its cell (where Jupyter's inline backend draws an open figure),
    both with myst-nb's record prefix taken off their mime types so that every viewer renders them."""
    kept, figures = [], []
    for out in outputs:
        mark = out.get("metadata", {}).get("scrapbook")
        if mark is None:
            kept.append(out)
            continue
        prefix = mark.get("mime_prefix", "")
        data = {k.removeprefix(prefix): v for k, v in out.get("data", {}).items()}
        if set(data) <= {"text/plain"}:
            continue
        shown = nbformat.v4.new_output("display_data", data=data)
        (figures if any(k.startswith("image/") for k in data) else kept).append(shown)
    return kept + figures


def with_outputs(nb: nbformat.NotebookNode, run: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` whose chapter code cells carry the outputs of the executed build ``run``, glued figures
    and tables included (:func:`shown_in_place`). The notebook leaves out the solutions' code cells, so its cells
    are matched, in order, to the run's cells of equal source; unless every one of them finds its match, no
    outputs are copied."""
    nb = nbformat.from_dict(nb)
    theirs = iter([c for c in run.cells if c.cell_type == "code"])
    pairs = [(cell, next((d for d in theirs if d.source == untitled(cell.source)), None))
             for cell in _chapter_code(nb)]
    if all(done is not None for _, done in pairs):
        for cell, done in pairs:
            cell.outputs = shown_in_place(done.outputs)
            cell.execution_count = done.get("execution_count")
    return nb


def download_notebook(chapter: str) -> Path:
    """Where the built page's download button serves the chapter's notebook (with the build's outputs): the
    reference outputs that the notebook test (nbval) compares a fresh run with."""
    return BUILD / "html" / "_sources" / "chapters" / f"{chapter}.ipynb"


def sync(from_build: bool = False) -> list[Path]:
    """Write ``chapters/*.ipynb``. With ``from_build``, take the glued values from the last book build and also
    write each notebook, with the build's outputs, where the page's download button serves it."""
    written = []
    for md in chapter_sources():
        target = md.with_suffix(".ipynb")
        run = executed(md) if from_build else None
        if from_build and run is None:
            raise RunError(f"the last build under {BUILD} did not run {md.name} as it is now: build the book")
        if run is not None:
            nb = to_notebook(md, glued_values(run), seconds=run.metadata.get(SECONDS_KEY))
        else:
            nb = to_notebook(md, stored_values(target), seconds=stored_seconds(target))
        text = render(nb)
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            written.append(target)
        download = download_notebook(md.stem)
        if run is not None and download.parent.is_dir():
            download.write_text(render(with_outputs(nb, run)), encoding="utf-8")
    for stale in CHAPTERS.glob("*.ipynb"):
        if not stale.with_suffix(".md").exists():
            stale.unlink()
            written.append(stale)
    return written


def check() -> list[str]:
    """Problems: notebooks missing, out of date (their glued values aside), or without a source."""
    problems = []
    for md in chapter_sources():
        target = md.with_suffix(".ipynb")
        if not target.exists():
            problems.append(f"{target.relative_to(ROOT)} is missing")
            continue
        try:
            expected = render(to_notebook(md, stored_values(target), seconds=stored_seconds(target)))
        except ValueError as err:  # a glued value the notebook does not have yet
            problems.append(f"{target.relative_to(ROOT)}: {err}")
            continue
        if target.read_text(encoding="utf-8") != expected:
            problems.append(f"{target.relative_to(ROOT)} is out of date with {md.relative_to(ROOT)}")
    for nb_path in CHAPTERS.glob("*.ipynb"):
        if not nb_path.with_suffix(".md").exists():
            problems.append(f"{nb_path.relative_to(ROOT)} has no .md source")
    return problems


class RunError(Exception):
    """A problem ``run`` reports in one line: ``code`` 2 for bad arguments, 1 for a failed execution."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def toc_chapters(chapters: Path) -> list[str]:
    """The chapters ``_toc.yml`` (beside the ``chapters`` folder) lists: ``chapters/hop_task`` -> ``hop_task``."""
    toc_path = chapters.parent / "_toc.yml"
    if not toc_path.is_file():
        raise RunError(f"no _toc.yml beside {chapters}: the chapters a run may name are listed there")
    files, todo = [], [yaml.safe_load(toc_path.read_text(encoding="utf-8"))]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            files += [node["file"]] if isinstance(node.get("file"), str) else []
            todo += list(node.values())
        elif isinstance(node, list):
            todo += node
    prefix = f"{chapters.name}/"
    names = {f.removesuffix(".md").removeprefix(prefix) for f in files if f.startswith(prefix)}
    return sorted(n for n in names if "/" not in n and (chapters / f"{n}.md").is_file())


def chapter_parameters(source: Path) -> dict[str, dict]:
    """papermill's inspection of a notebook's ``parameters`` cell: name -> its ``default`` (source text),
    ``inferred_type_name`` (from an annotation) and ``help`` (its comment)."""
    import papermill

    found = papermill.inspect_notebook(str(source))
    if not found:
        raise RunError(f"{source.stem} has no code cell tagged 'parameters'")
    return found


def parameter_type(spec: dict) -> type | None:
    """A parameter's type: papermill's (from an annotation, ``seed: int = 0``) or else its default value's."""
    names = {"int": int, "float": float, "str": str, "bool": bool}
    if spec.get("inferred_type_name") in names:
        return names[spec["inferred_type_name"]]
    try:
        default = ast.literal_eval(spec["default"])
    except (ValueError, SyntaxError):
        return None
    return type(default) if type(default) in names.values() else None


KINDS = {int: ("an integer", (int,)), float: ("a number", (int, float)), bool: ("True or False", (bool,))}


def typed_value(name: str, text: str, kind: type | None) -> object:
    """A ``-p NAME VALUE`` as papermill's command line reads it (``True``, ``None``, numbers), checked against the
    parameter's type; a string parameter takes the text as given (``-p profile 2024`` stays ``"2024"``)."""
    from papermill.cli import _resolve_type  # what `papermill -p` does with a value

    value = _resolve_type(text)
    if kind is str:
        return text
    if kind in KINDS and type(value) not in KINDS[kind][1]:
        raise RunError(f"parameter {name} must be {KINDS[kind][0]}, got {text!r}")
    return value


class _Profiles(Exception):
    """Raised in place of ``hoplib._book.notebook.start`` by :func:`chapter_profiles`, with the profile names."""


def chapter_profiles(nb: nbformat.NotebookNode, values: dict[str, object]) -> tuple[str, ...]:
    """The profile names the chapter defines: its parameters cell (with ``values``) and its settings cell, the
    next code cell, run in this process up to the settings cell's call of ``nb.start``, which is replaced for
    the time by one that hands over its profiles table (the cell's imports run; no chapter work does)."""
    import hoplib._book.notebook as book

    code = [c for c in nb.cells if c.cell_type == "code"]

    def hand_over(chapter, profile, device, seed, out_dir, profiles):
        raise _Profiles(tuple(profiles))

    start, book.start = book.start, hand_over
    namespace: dict[str, object] = {"__name__": "__chapter__"}
    try:
        exec(compile(code[0].source, "<parameters cell>", "exec"), namespace)
        namespace.update(values)
        exec(compile(code[1].source if len(code) > 1 else "", "<settings cell>", "exec"), namespace)
    except _Profiles as found:
        return found.args[0]
    except Exception as exc:  # noqa: BLE001 - one line instead of the chapter's traceback
        raise RunError(f"cannot read the profiles of the chapter: its settings cell raised "
                       f"{type(exc).__name__}: {exc}") from exc
    finally:
        book.start = start
    raise RunError("the chapter's second code cell does not call nb.start(...) with its profiles")


def validate_parameters(md: Path, params: list[tuple[str, str]], source: Path) -> tuple[dict[str, object], str]:
    """The ``-p NAME VALUE`` pairs checked, each failure one line before any work: names and types against
    papermill's inspection of the parameters cell (``source``: the chapter as a notebook), then the book's own
    checks: a profile the chapter defines and a device that is present. Returns the values and the profile."""
    from hoplib.device import get_device

    specs = chapter_parameters(source)
    values: dict[str, object] = {}
    for name, text in params:
        if name not in specs:
            raise RunError(f"unknown parameter {name!r} for chapter {md.stem}; its parameters cell defines "
                           f"{', '.join(specs)}")
        if name == "out_dir":
            raise RunError("out_dir is set by the runner (results go under --out); choose the folder with --out")
        values[name] = typed_value(name, text, parameter_type(specs[name]))
    profiles = chapter_profiles(jupytext.read(md, fmt="md:myst"), values)
    profile = values.get("profile", ast.literal_eval(specs["profile"]["default"]) if "profile" in specs else "")
    if profile not in profiles:
        raise RunError(f"profile must be one of {', '.join(profiles)} for chapter {md.stem}, got {profile!r}")
    if "device" in values:
        try:
            get_device(values["device"])
        except (TypeError, ValueError) as exc:
            raise RunError(str(exc)) from exc
    return values, str(profile)


def inside(out: Path, *names: str) -> Path:
    """``out/name/...``, refused unless every name is one plain folder name and the path stays inside ``out``."""
    base = out.resolve()
    for name in names:
        if name in ("", ".", "..") or Path(name).name != name or "\\" in name:
            raise RunError(f"{name!r} cannot name a folder under --out {out}")
    path = base.joinpath(*names).resolve()
    if not path.is_relative_to(base):
        raise RunError(f"{'/'.join(names)!r} would lead outside --out {out}")
    return path


@contextlib.contextmanager
def locked(folder: Path):
    """Hold the book's one output lock on ``folder`` for a run (:func:`hoplib.results.exclusive`): a second run
    on the same folder (another process, another container on a shared disk) is refused in one line instead of
    waiting; the lock goes with the process, so nothing stale is left after a crash."""
    from hoplib.results import LockedError, exclusive

    with contextlib.ExitStack() as held:
        try:
            held.enter_context(exclusive(folder))
        except LockedError as exc:
            raise RunError(f"another notebooks.py run: {exc}") from None
        yield


def previous_run(final: Path, chapter: str) -> list[str]:
    """The files of an earlier successful run in ``final`` (its notebook and results files)."""
    return sorted(p.name for p in final.iterdir() if not p.name.startswith(".")
                  and p.name not in (f"{chapter}.failed.log", f"{chapter}.failed.ipynb"))


def execute(source: Path, target: Path, parameters: dict[str, object], cwd: Path, timeout: int) -> None:
    """Run ``source`` with papermill into ``target`` (a separate function so that tests can replace it)."""
    import papermill

    papermill.execute_notebook(str(source), str(target), parameters=parameters, cwd=str(cwd),
                               kernel_name="python3", execution_timeout=timeout, progress_bar=True,
                               log_output=False)


def _failure_line(exc: BaseException) -> str:
    """One line naming what went wrong: papermill's cell number, exception name and first line of its value."""
    ename, evalue = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    if ename is not None:
        first = str(evalue).strip().splitlines()[0] if str(evalue).strip() else ""
        return f"cell {getattr(exc, 'exec_count', '?')} raised {ename}: {first}"
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def _install(staging: Path, executed: Path, final: Path, chapter: str, old: list[str]) -> None:
    """Move a successful run's results files and notebook into ``final``; files of the run it replaces
    (``old``, allowed by ``--overwrite``) that it did not write again are removed, so one run's files remain."""
    results = staging / chapter / final.name
    new = sorted(results.iterdir()) if results.is_dir() else []
    for path in new:
        target = final / path.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(path, target)
    os.replace(executed, final / f"{chapter}.ipynb")
    for name in set(old) - {p.name for p in new} - {f"{chapter}.ipynb"}:
        stale = final / name
        shutil.rmtree(stale) if stale.is_dir() and not stale.is_symlink() else stale.unlink(missing_ok=True)
    for stale in (final / f"{chapter}.failed.log", final / f"{chapter}.failed.ipynb"):
        stale.unlink(missing_ok=True)


def run(chapter: str, params: list[tuple[str, str]], out: Path, timeout: int, chapters: Path = CHAPTERS,
        overwrite: bool = False) -> Path:
    """Execute a chapter with papermill; write the executed notebook and its results files under
    ``out/<chapter>/<profile>/``.

    Every parameter is checked before a path under ``out`` is made or a kernel starts (:func:`validate_parameters`;
    the chapter is one ``_toc.yml`` lists), and the results folder must stay inside ``out``. The run holds a lock
    on its folder (:func:`locked`) and replaces an earlier run's files only with ``overwrite``. It executes into
    a staging folder beside the results folder; only a successful run moves its files in, so a failed run leaves
    the last good ones in place and writes ``<chapter>.failed.ipynb`` and ``<chapter>.failed.log`` (the full
    traceback) beside them.
    """
    names = toc_chapters(chapters)
    if chapter not in names:  # a name only: "../x" or "a/b" would write outside out/
        raise RunError(f"chapter must be one of: {', '.join(names)}; got {chapter!r}")
    md = chapters / f"{chapter}.md"
    try:  # a temporary folder that cannot be written (a full disk): one line before any work
        tmp_dir = tempfile.TemporaryDirectory(prefix="notebooks-run-")  # outside out/: nothing there yet
    except OSError as exc:
        raise RunError(f"cannot write the chapter's temporary copy: {exc}") from exc
    with tmp_dir as tmp:
        source = Path(tmp) / f"{chapter}.ipynb"
        try:
            nbformat.write(jupytext.read(md, fmt="md:myst"), source)
        except OSError as exc:
            raise RunError(f"cannot write the chapter's temporary copy: {exc}") from exc
        parameters, profile = validate_parameters(md, params, source)
        final = inside(out, chapter, profile)
        from hoplib.results import check_writable

        try:  # a file, read-only, no room: one line before a kernel starts
            check_writable(final)
        except ValueError as exc:
            raise RunError(str(exc)) from exc
        with locked(final):
            old = previous_run(final, chapter)
            if old and not overwrite:
                raise RunError(f"{final} holds an earlier run ({', '.join(old[:3])}{', ...' if len(old) > 3 else ''}"
                               "); add --overwrite to replace it, or choose another --out")
            return _execute_into(md, source, parameters, final, chapter, timeout, old)


def _execute_into(md: Path, source: Path, parameters: dict[str, object], final: Path, chapter: str, timeout: int,
                  old: list[str]) -> Path:
    """The locked part of :func:`run`: execute in a staging folder beside ``final``, then install or report."""
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=f".{final.name}-running-") as tmp:
        staging = Path(tmp)
        parameters = {**parameters, "out_dir": str(staging)}  # results land in staging/<chapter>/<profile>/ first
        executed = staging / f"{chapter}.ipynb"
        t0 = time.perf_counter()
        try:
            execute(source, executed, parameters, md.parent, timeout)
        except Exception as exc:  # noqa: BLE001 - reported in one line, the full traceback goes to a file
            log = final / f"{chapter}.failed.log"
            try:
                log.write_text("".join(traceback.format_exception(exc)), encoding="utf-8")
                where = f"full log: {log}"
            except OSError as log_exc:  # the disk that made the run fail may have no room for its log
                log.unlink(missing_ok=True)
                where = f"no log was written ({log_exc.strerror or log_exc})"
            if executed.exists():
                os.replace(executed, final / f"{chapter}.failed.ipynb")
            kept = " (the previous notebook is kept)" if (final / f"{chapter}.ipynb").exists() else ""
            raise RunError(f"{chapter} failed: {_failure_line(exc)}{kept}; {where}", code=1) from exc
        _install(staging, executed, final, chapter, old)
    print(f"{chapter}: executed in {time.perf_counter() - t0:.1f} s -> {final / f'{chapter}.ipynb'}")
    return final / f"{chapter}.ipynb"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_sync = sub.add_parser("sync", help="write chapters/*.ipynb from chapters/*.md")
    p_sync.add_argument("--from-build", action="store_true",
                        help="fill in the glued values of the last book build (and its download notebooks)")
    sub.add_parser("check", help="fail if the notebooks are out of date")
    p_run = sub.add_parser("run", help="run one chapter through papermill")
    p_run.add_argument("chapter", help="chapter name, e.g. hop_task")
    p_run.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    p_run.add_argument("--out", type=Path, default=ROOT / "runs",
                       help="folder for the executed notebook and results (default: runs/, ignored by git)")
    p_run.add_argument("--timeout", type=int, default=36_000, help="seconds per cell (default 36000)")
    p_run.add_argument("--chapters", type=Path, default=CHAPTERS,
                       help="folder of the chapter sources (the chapters its parent's _toc.yml lists)")
    p_run.add_argument("--overwrite", action="store_true",
                       help="replace the notebook and results files of an earlier run in the same folder")
    args = parser.parse_args(argv)
    if args.command == "sync":
        try:
            written = sync(args.from_build)
        except (RunError, ValueError) as err:
            print(f"notebooks.py sync: {err}", file=sys.stderr)
            return 1
        for path in written:
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    if args.command == "check":
        problems = check()
        for p in problems:
            print(p, file=sys.stderr)
        if problems:
            print("run: python scripts/notebooks.py sync", file=sys.stderr)
        return 1 if problems else 0
    try:
        run(args.chapter, args.parameter, args.out, args.timeout, args.chapters, args.overwrite)
    except RunError as err:
        print(f"notebooks.py run: {err}", file=sys.stderr)
        return err.code
    except OSError as err:  # a disk that fills in the middle: the previous notebook and results are kept
        print(f"notebooks.py run: {err}; the previous notebook and results files under {args.out} are kept",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
