"""The book's one results store: files written atomically with provenance, and stored runs read back.

:func:`save_results` writes the data, the parameters that produced it and its provenance (hoplib's version and
git commit, device, torch, wall time). Chapters read stored runs with :func:`load_stored` from
:func:`results_dir`: ``$HOPLIB_RESULTS``, else the ``results/`` folder of the nearest folder at or above the
working folder that holds ``_toc.yml`` and ``results/`` (chapters run in ``chapters/``; Colab clones the book).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import html
import json
import os
import platform
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

import hoplib

RESULTS_ENV = "HOPLIB_RESULTS"


class ResultsNotFoundError(FileNotFoundError):
    """The book's ``results/`` folder, or a stored results file in it, cannot be found."""


class OutputError(OSError):
    """A file could not be written in the middle of a run (disk full, folder made read-only); the message says
    what was kept and how to go on. Before a run starts the same faults are :class:`ValueError` (see
    :func:`check_writable`)."""


def check_writable(folder: str | os.PathLike, *, what: str = "output folder") -> Path:
    """Before any work: make ``folder`` (and its parents), then create, write (4 KiB), fsync and remove a
    temporary file in it. One-line :class:`ValueError` naming the folder and the reason when it is a file, under
    a file, read-only, or on a full disk; folders it made are removed again."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"cannot write to the {what} {folder}: it is a file, not a folder")
    if file := next((p for p in folder.parents if p.exists() and not p.is_dir()), None):
        raise ValueError(f"cannot write to the {what} {folder}: {file} is a file, not a folder")
    made = [p for p in (folder, *folder.parents) if not p.exists()]
    tmp = folder / f".write-check.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(b"\0" * 4096)
                fh.flush()
                os.fsync(fh.fileno())
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        for p in made:  # innermost first
            try:
                p.rmdir()
            except OSError:
                break
        where = f" ({exc.filename})" if exc.filename and Path(exc.filename) not in (folder, tmp) else ""
        raise ValueError(f"cannot write to the {what} {folder}: {exc.strerror or exc}{where}") from exc
    return folder


class LockedError(ValueError):
    """An output that another live process is writing."""


def take_lock(lock: str | os.PathLike, what: str | os.PathLike) -> Path:
    """Create the file ``lock`` holding this process's PID (``what`` is the output it guards, for messages),
    taking over the lock of a process that is gone; :class:`LockedError` naming the PID while a live process
    holds it. The caller removes ``lock`` when done."""
    lock = Path(lock)
    for attempt in range(20):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            try:
                pid = int(lock.read_text(encoding="utf-8").strip() or 0)
            except (OSError, ValueError):  # gone meanwhile, or not a PID
                pid = 0
            if not pid and attempt < 10:  # its process is writing its PID: look again
                time.sleep(0.05)
                continue
            if pid and pid != os.getpid() and _alive(pid):
                raise LockedError(f"{what} is being written by the live process {pid} (its lock {lock}); "
                                  "wait for it to finish or choose another output") from None
            lock.unlink(missing_ok=True)  # stale: its process is gone
            continue
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(str(os.getpid()))
        except OSError:  # a full disk: leave no empty lock behind
            lock.unlink(missing_ok=True)
            raise
        return lock
    raise LockedError(f"cannot take the lock {lock}: other processes keep taking it")


@contextlib.contextmanager
def exclusive(path: str | os.PathLike) -> Iterator[Path]:
    """Hold the lock ``.<name>.lock`` beside ``path`` while the block writes it: a second process that would
    write the same file meanwhile gets :class:`LockedError` (one line, naming the first) before any work."""
    path = Path(path)
    lock = take_lock(path.with_name(f".{path.name}.lock"), path)
    try:
        yield path
    finally:
        lock.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def check_results_path(path: str | os.PathLike, *, overwrite: bool = False, option: str = "--out") -> Path:
    """Before any work: ``path`` is a results file to be written, so it must not be a folder, must not exist
    unless ``overwrite``, and its folder must be writable (:func:`check_writable`); else one-line ValueError."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{option} {path} is a folder; give the path of a results file")
    if path.exists() and not overwrite:
        raise ValueError(f"{path} exists; pass --overwrite to replace it")
    check_writable(path.parent)
    return path


def git_commit(path: str | os.PathLike | None = None) -> str:
    """The git commit of the checkout that holds ``path`` (default: hoplib's), ``+dirty`` when the library,
    chapters or scripts have uncommitted changes, or ``'unknown'``."""
    where = Path(path) if path is not None else Path(hoplib.__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "hoplib", "chapters", "scripts", "benchmarks"],
                               cwd=where.parent if where.name == "hoplib" else where, capture_output=True,
                               text=True, timeout=10,  # read only: no index refresh, no index.lock left behind
                               env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"}).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() + ("+dirty" if dirty else "")


def provenance(device: torch.device | str, wall_time_s: float | None = None, **extra: Any) -> dict[str, Any]:
    """The provenance record stored beside every result."""
    dev = torch.device(device)
    record: dict[str, Any] = {
        "hoplib_version": hoplib.__version__,
        "git_commit": git_commit(),
        "device": f"cuda ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else dev.type,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if wall_time_s is not None:
        record["wall_time_s"] = round(float(wall_time_s), 3)
    return record | extra


def atomic_write(path: str | os.PathLike, write: Callable[[IO], None], binary: bool = False) -> Path:
    """Call ``write(fh)`` on a temporary file in ``path``'s folder, fsync, then rename it onto ``path``: a crash
    or an exception leaves the previous ``path`` untouched and no temporary file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"  # mode 0o666 & ~umask, as open()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`)."""
    return atomic_write(path, lambda fh: fh.write(text))


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (torch.device, Path)):
        return str(obj)
    raise TypeError(f"cannot store {type(obj).__name__} in a results file")


def save_results(path: str | os.PathLike, data: Any, parameters: dict[str, Any], device: torch.device | str,
                 wall_time_s: float | None = None, **extra: Any) -> Path:
    """Write ``{"parameters", "provenance", "data"}`` as JSON to ``path``, atomically."""
    record = {"parameters": parameters, "provenance": provenance(device, wall_time_s, **extra), "data": data}
    try:  # strict JSON: NaN and Infinity are not JSON, and other readers refuse them
        text = json.dumps(record, indent=2, default=_jsonable, allow_nan=False)
    except ValueError as exc:
        raise ValueError(f"cannot store {path}: {exc} (JSON has no NaN or infinity)") from exc
    return atomic_write_text(path, text + "\n")


def results_dir(start: str | os.PathLike | None = None) -> Path:
    """The book's ``results/`` folder (see the module doc), searched from ``start`` (default: the working
    folder); :class:`ResultsNotFoundError` says what to set when there is none."""
    if env := os.environ.get(RESULTS_ENV):
        if not Path(env).expanduser().is_dir():
            raise ResultsNotFoundError(f"${RESULTS_ENV} is {env!r}, which is not a folder")
        return Path(env).expanduser().resolve()
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "_toc.yml").is_file() and (folder / "results").is_dir():
            return folder / "results"
    raise ResultsNotFoundError(f"no book repository (a folder with _toc.yml and results/) at or above {here}; "
                               f"run from the repository or set ${RESULTS_ENV} to its results/ folder")


@dataclass(frozen=True)
class Stored:
    """A stored results file: its path (relative to ``results/``), the whole record and its provenance."""

    name: str
    path: Path
    record: dict[str, Any]

    @property
    def data(self) -> Any:
        """The ``data`` part of a :func:`save_results` file, else the whole record (a training run)."""
        return self.record.get("data", self.record)

    @property
    def origin(self) -> str:
        """One line of provenance: commit, date, device, wall time, where known."""
        prov = self.record["provenance"]
        parts = [f"commit {str(prov.get('source_commit') or prov.get('git_commit') or 'unknown commit')[:8]}"]
        if prov.get("created_utc"):
            parts.append(str(prov["created_utc"])[:10])
        if prov.get("device"):
            parts.append(f"device {prov['device']}")
        if isinstance(wall := prov.get("wall_time_s"), (int, float)):
            parts.append(f"{wall / 60:.1f} min" if wall >= 60 else f"{wall:.1f} s")
        return ", ".join(parts)

    WRAP = "white-space: pre-wrap; overflow-wrap: anywhere"  # long hashes wrap instead of scrolling

    def provenance_html(self, summary: str = "Provenance") -> str:
        """A collapsed ``<details>`` block naming the file and its provenance, for ``IPython.display.HTML``."""
        prov = json.dumps(self.record["provenance"], indent=1, sort_keys=True, default=str)
        return (f"<details><summary>{html.escape(summary)}: {html.escape(self.origin)}</summary>"
                f"<p>stored file <code>results/{html.escape(self.name)}</code></p>"
                f"<pre style='{self.WRAP}'>{html.escape(prov)}</pre></details>")

    _repr_html_ = provenance_html

    def __post_init__(self) -> None:  # a string "false" would count as complete
        if not isinstance(self.record.get("complete", False), bool):
            raise ValueError(f"results/{self.name}: 'complete' must be true or false, got {self.record['complete']!r}")


def load_stored(name: str, *, required: bool = True, root: str | os.PathLike | None = None) -> Stored | None:
    """Read ``results/<name>``, a JSON record with a ``provenance`` entry. ``required=False`` returns None when
    the file is missing; a file that is not such a record always raises ``ValueError`` naming it."""
    if not name or Path(name).is_absolute() or ".." in Path(name).parts:
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
