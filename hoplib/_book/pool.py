"""Run independent training jobs in worker processes (one thread each) on a CPU, or in turn on one device, and
store a sweep's results without losing finished models.

Used by the stored sweeps of the lower-bound chapters: each job is a picklable function of ``(index, point)``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from hoplib._book.validate import check_int


def add_run_options(parser: argparse.ArgumentParser, *, seed_help: str) -> None:
    """Add the options every stored-sweep command shares: ``--workers``, ``--seed``, ``--device`` and
    ``--overwrite`` (validated by :func:`run_device`)."""
    parser.add_argument("--workers", type=int, default=1, help="CPU worker processes, one thread each")
    parser.add_argument("--seed", type=int, default=0, help=seed_help)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--overwrite", action="store_true")


def run_device(args: argparse.Namespace) -> str:
    """Check ``--workers`` and ``--seed`` of :func:`add_run_options` (``ValueError`` before any work) and return
    the resolved device; several workers are for CPU runs only."""
    from hoplib._book.device import get_device

    check_int("workers", args.workers, low=1)
    check_int("seed", args.seed, low=0, high=2**32 - 1)
    device = str(get_device(args.device))
    if args.workers > 1 and device != "cpu":
        raise ValueError("--workers > 1 is for CPU runs")
    return device


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def map_points(fn: Callable[[int, Any], dict[str, Any]], points: Sequence[Any], *, workers: int = 1,
               device: str = "cpu", on_result: Callable[[list[dict[str, Any]]], None] | None = None
               ) -> list[dict[str, Any]]:
    """``[fn(i, point) for i, point in enumerate(points)]``, with ``workers`` spawned processes of one thread
    each when ``workers > 1`` (CPU only). ``on_result``, if given, is called after every finished job with the
    results so far, in the points' order (for partial result files)."""
    workers = check_int("workers", workers, low=1)
    if workers > 1 and str(device) != "cpu":
        raise ValueError("workers > 1 is for CPU runs; on a GPU use workers=1")
    done: dict[int, dict[str, Any]] = {}
    if workers == 1:
        for i, point in enumerate(points):
            done[i] = fn(i, point)
            if on_result is not None:
                on_result([done[j] for j in sorted(done)])
        return [done[i] for i in range(len(points))]
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_one_thread) as pool:
        futures = {pool.submit(fn, i, p): i for i, p in enumerate(points)}
        for future in as_completed(futures):
            done[futures[future]] = future.result()
            if on_result is not None:
                on_result([done[j] for j in sorted(done)])
    return [done[i] for i in range(len(points))]


def store_sweep(path: Path, params: dict[str, Any], sweep: Callable[..., list[dict[str, Any]]], *, device: str,
                workers: int, overwrite: bool = False) -> Path:
    """Check that ``path`` may be written (``overwrite`` to replace it; raises ``ValueError`` before any
    work), run ``sweep(on_model=...)``, keeping the models finished so far in ``<stem>.partial.json`` (marked
    ``complete: False``), then write ``path`` atomically with provenance and remove the partial file."""
    from hoplib._book.provenance import save_results

    path = Path(path)
    if path.exists() and not overwrite:
        raise ValueError(f"{path} exists; pass --overwrite to replace it")
    if path.parent.exists() and not path.parent.is_dir():
        raise ValueError(f"{path.parent} is not a folder")
    t0 = time.perf_counter()
    partial = path.with_name(path.stem + ".partial.json")
    rows = sweep(on_model=lambda done: save_results(partial, done, {**params, "complete": False}, device))
    out = save_results(path, rows, params, device, time.perf_counter() - t0, workers=workers)
    partial.unlink(missing_ok=True)
    print(f"wrote {out} ({len(rows)} records, {time.perf_counter() - t0:.0f} s)")
    return out


__all__ = ["add_run_options", "map_points", "run_device", "store_sweep"]
