"""Where the book's stored results live, and the one way chapters read them.

Stored runs (paper-scale or CPU runs too long to execute at build time) are committed under the repository's
``results/`` folder, written by :func:`hoplib._book.provenance.save_results` or by a training run. Chapters find
that folder with :func:`results_dir`, never through ``__file__``: it is ``$HOPLIB_RESULTS`` when that is set,
else the ``results/`` folder of the book's repository root, the nearest folder at or above the working folder
that holds ``_toc.yml`` and ``results/`` (chapters run with ``chapters/`` as their working folder: book build,
papermill, nbval, and Colab after its install cell clones the repository).

:func:`load_stored` reads one stored results file and returns a :class:`Stored` with its data and a one-line
provenance (:attr:`Stored.origin`); :meth:`Stored.provenance_html` renders that provenance as a collapsed
``<details>`` block, which shows the same in the HTML book, Jupyter and Colab.
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS_ENV = "HOPLIB_RESULTS"


class ResultsNotFoundError(FileNotFoundError):
    """The book's ``results/`` folder, or a stored results file in it, cannot be found."""


def results_dir(start: str | os.PathLike | None = None) -> Path:
    """The book's ``results/`` folder: ``$HOPLIB_RESULTS``, else ``<repository root>/results``.

    The repository root is the nearest folder at or above ``start`` (default: the working folder) that holds
    both ``_toc.yml`` and ``results/``. Raises :class:`ResultsNotFoundError` (one line, saying what to set)
    when neither is found.
    """
    env = os.environ.get(RESULTS_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise ResultsNotFoundError(f"${RESULTS_ENV} is {env!r}, which is not a folder")
        return path.resolve()
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "_toc.yml").is_file() and (folder / "results").is_dir():
            return folder / "results"
    raise ResultsNotFoundError(f"no book repository (a folder with _toc.yml and results/) at or above {here}; "
                               f"run from the repository or set ${RESULTS_ENV} to its results/ folder")


def origin_line(record: dict[str, Any]) -> str:
    """One line of provenance of a results record: commit, date, device, wall time, where known."""
    if not isinstance(record, dict):
        raise TypeError(f"record must be a dict, got {type(record).__name__}")
    prov = record.get("provenance")
    if not isinstance(prov, dict):
        raise ValueError("record has no 'provenance' dict")
    commit = prov.get("source_commit") or prov.get("git_commit") or "unknown commit"
    parts = [f"commit {str(commit)[:8]}"]
    if prov.get("created_utc"):
        parts.append(str(prov["created_utc"])[:10])
    if prov.get("device"):
        parts.append(f"device {prov['device']}")
    wall = prov.get("wall_time_s")
    if isinstance(wall, (int, float)):
        parts.append(f"{wall / 60:.1f} min" if wall >= 60 else f"{wall:.1f} s")
    return ", ".join(parts)


@dataclass(frozen=True)
class Stored:
    """A stored results file: its path (relative to ``results/``), the whole record and its provenance."""

    name: str
    path: Path
    record: dict[str, Any]

    @property
    def data(self) -> Any:
        """The ``data`` part of a :func:`~hoplib._book.provenance.save_results` file, else the whole record."""
        return self.record.get("data", self.record)

    @property
    def origin(self) -> str:
        """One line: commit, date, device, wall time (see :func:`origin_line`)."""
        return origin_line(self.record)

    def provenance_html(self, summary: str = "Provenance") -> str:
        """A collapsed ``<details>`` block naming the file and its provenance, for ``IPython.display.HTML``."""
        prov = json.dumps(self.record.get("provenance", {}), indent=1, sort_keys=True, default=str)
        return (f"<details><summary>{html.escape(summary)}: {html.escape(self.origin)}</summary>"
                f"<p>stored file <code>results/{html.escape(self.name)}</code></p>"
                f"<pre>{html.escape(prov)}</pre></details>")

    def _repr_html_(self) -> str:
        return self.provenance_html()


def load_stored(name: str, *, required: bool = True, root: str | os.PathLike | None = None) -> Stored | None:
    """Read ``results/<name>`` (a JSON results file with a ``provenance`` entry).

    ``required=False`` returns None when the file is missing (a chapter then says the run is not stored yet);
    a file that exists but is not a results record always raises ``ValueError`` naming it.
    """
    if not isinstance(name, str) or not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise ValueError(f"name must be a relative path inside results/, got {name!r}")
    base = Path(root) if root is not None else results_dir()
    path = base / name
    if not path.is_file():
        if required:
            raise ResultsNotFoundError(f"stored result results/{name} is missing (looked in {base})")
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"results/{name} is not readable JSON: {exc}") from exc
    if not isinstance(record, dict) or not isinstance(record.get("provenance"), dict):
        raise ValueError(f"results/{name} is not a hoplib results file (no 'provenance' entry)")
    return Stored(name, path, record)
