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
import math
import os
import platform
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

import hoplib

try:  # an advisory lock that the kernel drops when its process dies; not on Windows
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

RESULTS_ENV = "HOPLIB_RESULTS"


class ResultsNotFoundError(FileNotFoundError):
    """The book's ``results/`` folder, or a stored results file in it, cannot be found."""


class OutputError(OSError):
    """A file could not be written in the middle of a run (disk full, folder made read-only); the message says
    what was kept and how to go on. Before a run starts the same faults are :class:`ValueError` (see
    :func:`check_writable`)."""


def output_path(value: str | os.PathLike, *, option: str = "--out") -> Path:
    """``value`` as a path, refused (one-line :class:`ValueError`) when it is empty or blank (``Path("")`` is the
    working folder: the files would land in the repository root) or holds a NUL byte."""
    text = os.fspath(value)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if not text.strip() or "\0" in text:
        raise ValueError(f"{option} must name a file or folder, got {text!r}")
    return Path(text)


def plain_name(value: str, *, what: str = "name") -> str:
    """``value`` if it is one plain file or folder name (no ``/``, ``\\``, ``..``, NUL, not empty): a value
    that is joined into a path must not lead out of its folder; else a one-line :class:`ValueError`."""
    if not isinstance(value, str) or value.strip() in ("", ".", "..") or any(c in value for c in "/\\\0"):
        raise ValueError(f"{what} must be a plain name (no path), got {value!r}")
    return value


def check_writable(folder: str | os.PathLike, *, what: str = "output folder") -> Path:
    """Before any work: make ``folder`` (and its parents), then create, write (4 KiB), fsync and remove a
    temporary file in it. One-line :class:`ValueError` naming the folder and the reason when it is empty, a file,
    under a file, read-only, or on a full disk; folders it made are removed again."""
    folder = output_path(folder, option=f"the {what}")
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
    """An output that another live process is writing, or whose lock names a process on another machine."""


def _boot_id() -> str | None:
    """This kernel's boot id: equal for every process (and container) that shares the kernel, and so the locks."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def _boot_time() -> float | None:
    try:
        return float(next(line.split()[1] for line in Path("/proc/stat").read_text().splitlines()
                          if line.startswith("btime ")))
    except (OSError, ValueError, StopIteration):
        return None


def _start_time(pid: int) -> float | None:
    """The start time of process ``pid`` (seconds since the epoch, Linux), which a reused PID does not share."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None
    boot = _boot_time()
    return None if boot is None else round(boot + ticks / os.sysconf("SC_CLK_TCK"), 2)


def _owner() -> dict[str, Any]:
    return {"host": socket.gethostname(), "boot_id": _boot_id(), "pid": os.getpid(),
            "started": _start_time(os.getpid())}


def _read_owner(fd: int) -> dict[str, Any] | None:
    """The owner recorded in an open lock file: a dict, ``{"pid": n}`` for a bare PID (older locks), or None."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 4096).decode("utf-8", "replace").strip()
        rec = json.loads(text) if text.startswith("{") else {"pid": int(text)} if text else None
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def _where(rec: dict[str, Any]) -> str:
    """Where the lock's owner ran: ``"here"`` (this kernel: the same boot id, which containers on one machine
    share; without boot ids, the same host name), ``"gone"`` (this host before its last boot) or ``"other"``."""
    if "host" not in rec and "boot_id" not in rec:
        return "here"  # a bare PID: written on this machine by an older hoplib
    mine, same_host = _boot_id(), rec.get("host") == socket.gethostname()
    if not (rec.get("boot_id") and mine):
        return "here" if same_host else "other"
    if rec["boot_id"] == mine:
        return "here"
    boot, started = _boot_time(), rec.get("started")
    before_boot = isinstance(started, (int, float)) and boot is not None and started < boot
    return "gone" if same_host and before_boot else "other"


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _describe(rec: dict[str, Any] | None) -> str:
    if not rec or "pid" not in rec:
        return "another process"
    return f"the live process {rec['pid']}" + (f" on {rec['host']}" if rec.get("host") else "")


class FileLock:
    """A held lock file (see :func:`take_lock`); :meth:`release` (or leaving a ``with`` block) removes it."""

    def __init__(self, path: Path, fd: int):
        self.path, self._fd = path, fd

    def release(self) -> None:
        """Remove the lock file (if it is still this lock's) and close it, which frees the kernel lock."""
        if self._fd is None:
            return
        try:
            if _same_file(self._fd, self.path):
                self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FileLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def take_lock(lock: str | os.PathLike, what: str | os.PathLike) -> FileLock:
    """Take the lock file ``lock`` for the output ``what`` (named in messages): an exclusive ``flock`` on the open
    file, held as long as this process keeps it (the kernel frees it when the process dies, however it dies), and
    a record of the owner (host, boot id, PID, start time) in it. :class:`LockedError` in one line while a live
    process holds it, or when the file names a process of another machine (which this one cannot see: it is
    never taken over; delete the file once that run is over). A lock whose process is gone is taken over
    atomically: of several processes racing for it, exactly one gets it."""
    lock = Path(lock)
    for _ in range(100):
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            rec = _read_owner(fd)
            os.close(fd)
            raise LockedError(f"{what} is being written by {_describe(rec)} (its lock {lock}); wait for it to "
                              "finish or choose another output") from None
        except OSError as exc:
            os.close(fd)
            raise LockedError(f"cannot lock {lock} ({exc.strerror or exc}): this file system has no file "
                              "locks; choose an output on a local disk") from exc
        if not _same_file(fd, lock):  # its owner removed it between our open and our lock: look again
            os.close(fd)
            continue
        rec = _read_owner(fd)
        refusal = None
        if rec and _where(rec) == "other":
            refusal = (f"{what} is locked by process {rec.get('pid')} on host {rec.get('host')} (its lock {lock}), "
                       f"which this machine cannot check; if that run is over, delete {lock} and rerun")
        elif rec and isinstance(pid := rec.get("pid"), int) and pid != os.getpid() and \
                (fcntl is None or set(rec) == {"pid"}) and _alive(pid, rec.get("started")):
            # no flock to tell (a lock of an older hoplib, or no fcntl): ask the PID
            refusal = (f"{what} is being written by {_describe(rec)} (its lock {lock}); wait for it to finish "
                       "or choose another output")
        if refusal:
            os.close(fd)
            raise LockedError(refusal)
        try:  # stale or new: ours now
            data = (json.dumps(_owner()) + "\n").encode()
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            if os.write(fd, data) != len(data):
                raise OSError(28, "No space left on device")
        except OSError:  # a full disk: leave no lock behind
            FileLock(lock, fd).release()
            raise
        return FileLock(lock, fd)
    raise LockedError(f"cannot take the lock {lock}: other processes keep taking it")


@contextlib.contextmanager
def exclusive(path: str | os.PathLike) -> Iterator[Path]:
    """Hold the lock ``.<name>.lock`` beside ``path`` (a results file, or a folder) while the block writes it:
    a second process that would write the same output meanwhile gets :class:`LockedError` (one line, naming the
    first process and its host) before any work; see :func:`take_lock`. This is the one lock of the book's
    outputs (sweeps, training runs, notebook runs)."""
    path = Path(path)
    with take_lock(path.with_name(f".{path.name}.lock"), path):
        yield path


def _alive(pid: int, started: float | None = None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        pass
    now = _start_time(pid)  # a PID reused by a newer process is not the owner
    return started is None or now is None or abs(now - float(started)) < 1


def check_results_path(path: str | os.PathLike, *, overwrite: bool = False, option: str = "--out") -> Path:
    """Before any work: ``path`` is a results file to be written, so it must not be a folder, must not exist
    unless ``overwrite``, and its folder must be writable (:func:`check_writable`); else one-line ValueError."""
    path = output_path(path, option=option)
    if path.is_dir():
        raise ValueError(f"{option} {path} is a folder; give the path of a results file")
    if path.exists() and not overwrite:
        raise ValueError(f"{path} exists; pass --overwrite to replace it")
    check_writable(path.parent)
    return path


def git_commit(path: str | os.PathLike | None = None) -> str:
    """The git commit of the checkout that holds ``path`` (default: hoplib's), ``+dirty`` when the library,
    chapters or scripts have uncommitted changes, or ``'unknown'``. ``HOPLIB_SOURCE_COMMIT``, when set, names it
    instead: a copy of a commit sent to another machine (a GPU's) may carry no history, or another's."""
    if source := os.environ.get("HOPLIB_SOURCE_COMMIT"):
        return source
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
    kind = str(device).partition(":")[0]  # a Slurm array's "cuda" or "auto", resolved on its nodes
    record: dict[str, Any] = {
        "hoplib_version": hoplib.__version__,
        "git_commit": git_commit(),
        "device": f"cuda ({torch.cuda.get_device_name(device)})" if kind == "cuda" and torch.cuda.is_available()
        else kind,
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


INT_FIELDS = frozenset({"depth", "k", "seed", "d_model", "heads", "steps"})
"""Fields that readers of stored results take as integers (a hand-edited ``"depth": "1"`` is refused)."""
ERROR_FIELDS = frozenset({"error"})
ERROR_MAPS = frozenset({"per_k_error", "per_k_error_pooled"})
"""Fields that hold an error rate (a number in [0, 1]), or a map ``{k: error rate}``."""


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON (save_results never writes it)")


def read_json(path: str | os.PathLike) -> Any:
    """The strict JSON in ``path``: ``NaN`` and ``Infinity`` (which Python's json reads by default) are refused."""
    return json.loads(Path(path).read_text(encoding="utf-8"), parse_constant=_refuse_constant)


def _check_error(value: Any, where: str, field: str) -> None:
    if isinstance(value, str) and field.rpartition(".")[2] in ERROR_FIELDS:
        try:
            float(value)
        except ValueError:
            return  # a message (a diverged run's "error"), not a rate
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not (ok and 0 <= value <= 1):
        raise ValueError(f"{where}: {field} must be an error rate, a number in [0, 1], got {value!r}")


def check_fields(obj: Any, where: str) -> None:
    """Check the fields that readers use, anywhere in ``obj`` (a results record): :data:`INT_FIELDS` are
    integers (not booleans, not strings), :data:`ERROR_FIELDS` and the values of :data:`ERROR_MAPS` are finite
    numbers in [0, 1] (their keys integers); else one-line :class:`ValueError` naming ``where`` and the field."""
    stack = [(obj, "")]
    while stack:
        node, at = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            here = f"{at}[{key}]" if isinstance(key, int) else f"{at}.{key}" if at else str(key)
            if key in INT_FIELDS and (not isinstance(value, int) or isinstance(value, bool)):
                raise ValueError(f"{where}: {here} must be an integer, got {value!r}")
            if key in ERROR_FIELDS:
                _check_error(value, where, here)
            if key in ERROR_MAPS:
                if not isinstance(value, dict):
                    raise ValueError(f"{where}: {here} must be a map from k to an error rate, got {value!r}")
                for k, e in value.items():
                    if not str(k).lstrip("-").isdigit():
                        raise ValueError(f"{where}: {here} has the key {k!r}, not an integer k")
                    _check_error(e, where, f"{here}[{k}]")
            stack.append((value, here))


def load_stored(name: str, *, required: bool = True, root: str | os.PathLike | None = None,
                partial: bool = False) -> Stored | None:
    """Read ``results/<name>``, a JSON record with a ``provenance`` entry. ``required=False`` returns None when
    the file is missing; a file that is not such a record always raises ``ValueError`` naming it: not strict
    JSON (NaN, Infinity), a field of the wrong type (:func:`check_fields`), or an unfinished sweep
    (``parameters.complete`` false) unless ``partial`` (or the name ends in ``.partial.json``)."""
    if not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise ValueError(f"name must be a relative path inside results/, got {name!r}")
    base = Path(root) if root is not None else results_dir()
    path = base / name
    if path.is_dir():
        raise ValueError(f"results/{name} is a folder, not a results file")
    if not path.is_file():
        if required:
            raise ResultsNotFoundError(f"stored result results/{name} is missing (looked in {base})")
        return None
    try:
        record = read_json(path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"results/{name} is not readable JSON: {exc}") from exc
    except ValueError as exc:  # NaN, Infinity
        raise ValueError(f"results/{name} is not strict JSON: {exc}") from exc
    if not isinstance(record, dict) or not isinstance(record.get("provenance"), dict):
        raise ValueError(f"results/{name} is not a hoplib results file (no 'provenance' entry)")
    check_fields(record, f"results/{name}")
    params = record.get("parameters")
    if isinstance(params, dict) and params.get("complete") is not None and params["complete"] is not True and \
            not (partial or name.endswith(".partial.json")):
        raise ValueError(f"results/{name} is an unfinished sweep (parameters.complete is "
                         f"{json.dumps(params['complete'])}): rerun its command to finish it, or read it with "
                         "partial=True")
    return Stored(name, path, record)
