"""Results files with provenance, written atomically.

Every number the book quotes from a stored run comes from a file written by :func:`save_results`: the data
plus the parameters that produced it, hoplib's version and git commit, the device, torch's version and the
wall time. Files are written to a temporary name and renamed, so an interrupted run never leaves half a file.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch

import hoplib


def git_commit(path: str | os.PathLike | None = None) -> str:
    """The git commit of the checkout that holds ``path`` (default: hoplib's own folder), or ``'unknown'``."""
    where = Path(path) if path is not None else Path(hoplib.__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if out.returncode != 0:
        return "unknown"
    # Uncommitted or untracked code (library, chapters, scripts) means the commit alone does not reproduce it.
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "hoplib", "chapters", "scripts", "benchmarks"],
                           cwd=where.parent if where.name == "hoplib" else where,
                           capture_output=True, text=True, timeout=10).stdout.strip()
    return out.stdout.strip() + ("+dirty" if dirty else "")


def provenance(device: torch.device | str, wall_time_s: float | None = None, **extra: Any) -> dict[str, Any]:
    """The provenance record stored beside every result."""
    dev = torch.device(device) if isinstance(device, str) else device
    name = dev.type
    if dev.type == "cuda" and torch.cuda.is_available():
        name = f"cuda ({torch.cuda.get_device_name(dev)})"
    record: dict[str, Any] = {
        "hoplib_version": hoplib.__version__,
        "git_commit": git_commit(),
        "device": name,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if wall_time_s is not None:
        record["wall_time_s"] = round(float(wall_time_s), 3)
    record.update(extra)
    return record


def atomic_write(path: str | os.PathLike, write: Callable[[IO], None], binary: bool = False) -> Path:
    """Call ``write(fh)`` on a temporary file in ``path``'s folder, fsync, then rename it onto ``path``.

    A crash or an exception leaves the previous ``path`` untouched and no temporary file behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`)."""
    return atomic_write(path, lambda fh: fh.write(text))


def save_results(path: str | os.PathLike, data: Any, parameters: dict[str, Any], device: torch.device | str,
                 wall_time_s: float | None = None, **extra: Any) -> Path:
    """Write ``{"parameters", "provenance", "data"}`` as JSON to ``path``, atomically."""
    record = {"parameters": parameters, "provenance": provenance(device, wall_time_s, **extra), "data": data}
    return atomic_write_text(path, json.dumps(record, indent=2, sort_keys=False, default=_jsonable) + "\n")


def load_results(path: str | os.PathLike) -> dict[str, Any]:
    """Read a file written by :func:`save_results` (raises ``ValueError`` if it lacks provenance)."""
    record = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(record, dict) or "provenance" not in record or "data" not in record:
        raise ValueError(f"{path} is not a hoplib results file (needs 'provenance' and 'data')")
    return record


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (torch.device, Path)):
        return str(obj)
    raise TypeError(f"cannot store {type(obj).__name__} in a results file")
