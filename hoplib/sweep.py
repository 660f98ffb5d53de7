"""The one sweep runner: the points of a grid, run in local worker processes or as a Slurm job array, stored
with provenance, resumable.

    rows = run_sweep(job, points, "results/rnn/cpu/sweep.json", params, workers=2)
    rows = run_sweep(job, points, path, params, executor=slurm_executor("runs/slurm", slurm_partition="gpu"))

``job(index, point)`` returns the records of one point (a dict or a list of dicts) and must be picklable. Every
finished point is kept in ``<stem>.partial.json``, written atomically, so a stopped run resumes where it left off
when started again with the same points, parameters and code (git commit). An existing final file is replaced
only with ``overwrite=True``, which also starts afresh. Worker processes end with the process that started them,
however it ends (``kill -9`` included).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

Job = Callable[[int, Any], Any]


def slurm_executor(folder: str | Path, *, cluster: str | None = None, timeout_min: int = 24 * 60,
                   gpus_per_node: int = 1, **parameters: Any) -> Any:
    """A submitit executor for a Slurm job array (``cluster="local"`` runs the same jobs as local processes,
    which is how the tests use it); ``parameters`` go to ``update_parameters`` (``slurm_partition=...``).
    Without submitit, or (``cluster`` unset) without Slurm's ``sbatch``, a one-line ValueError: submitit would
    otherwise run the array on this machine without a word."""
    try:
        import submitit
    except ImportError:
        raise ValueError("--slurm needs the submitit package (pip install submitit); run without --slurm for "
                         "local workers") from None
    if cluster is None and shutil.which("sbatch") is None:
        raise ValueError("--slurm: Slurm is not available on this machine (no sbatch on the PATH); run it on the "
                         "cluster's login node, or without --slurm for local workers")
    executor = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
    gpus = {} if cluster == "local" else {"gpus_per_node": gpus_per_node}
    executor.update_parameters(timeout_min=timeout_min, **gpus, **parameters)
    return executor


def _one_thread(parent: int | None = None) -> None:
    """A local worker's start: one thread, and a watchdog that ends the worker when ``parent`` (the process
    that started it) is gone, so that a killed sweep leaves no workers behind."""
    import torch

    torch.set_num_threads(1)
    if parent is not None:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="parent-watchdog").start()


def _watch_parent(parent: int, every_s: float = 0.5) -> None:
    while os.getppid() == parent:
        time.sleep(every_s)
    os._exit(1)  # the parent died (its children were handed to init): stop at once, whatever the point


def map_points(fn: Job, points: Sequence[Any], *, workers: int = 1,
               on_result: Callable[[list[Any]], None] | None = None, executor: Any = None,
               done: dict[int, Any] | None = None) -> list[Any]:
    """``[fn(i, point) for i, point in enumerate(points)]``: in this process, in ``workers`` spawned processes
    of one thread each (on a GPU they share it: small launch-bound models gain), or as one job array of a
    submitit ``executor``. Points already in ``done``
    (index -> result, updated in place) are not run again; ``on_result`` gets the results so far, in order,
    after every finished point."""
    done = {} if done is None else done
    todo = [i for i in range(len(points)) if i not in done]

    def finished(i: int, result: Any) -> None:
        done[i] = result
        if on_result is not None:
            on_result([done[j] for j in sorted(done)])

    if executor is not None:
        import submitit

        jobs = executor.map_array(fn, todo, [points[i] for i in todo])
        index = {job.job_id: i for job, i in zip(jobs, todo, strict=True)}
        for job in submitit.helpers.as_completed(jobs):
            finished(index[job.job_id], job.result())
    elif workers == 1:
        for i in todo:
            finished(i, fn(i, points[i]))
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_one_thread,
                                 initargs=(os.getpid(),)) as pool:
            futures = {pool.submit(fn, i, points[i]): i for i in todo}
            try:
                for future in as_completed(futures):
                    finished(futures[future], future.result())
            except BaseException:  # a failed point or a failed save: start no further points
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    return [done[i] for i in range(len(points))]


def run_sweep(job: Job, points: Sequence[Any], path: str | Path, params: dict[str, Any], *, device: str = "cpu",
              workers: int = 1, overwrite: bool = False, executor: Any = None,
              still_valid: Callable[[int, Any, Any], bool] | None = None) -> list[Any]:
    """Run ``job`` on every point and store the records (flattened) in ``path`` with provenance.

    Finished points are kept in ``<stem>.partial.json`` (with the points, parameters and git commit they belong
    to); a later call with the same points, parameters and commit resumes from it, a call with others is refused
    unless ``overwrite``, which always starts afresh (it deletes the partial file). ``still_valid(i, point,
    result)``, if given, is asked of each resumed point: those it rejects (their inputs changed) run again.
    The output is checked before the first point (:func:`check_results_path`); a write that fails later raises
    :class:`~hoplib.results.OutputError` saying what the partial file keeps.
    """
    from hoplib.results import OutputError, check_results_path, exclusive, save_results

    path = check_results_path(path, overwrite=overwrite)  # a folder, an existing file, no room: before any work
    with exclusive(path):  # a second process on the same file is refused, not raced
        if path.exists() and not overwrite:  # written by another process between the check and the lock
            raise ValueError(f"{path} exists; pass --overwrite to replace it")
        partial = path.with_name(path.stem + ".partial.json")
        key = json.loads(json.dumps({"points": list(points), "params": params}, default=str))
        done = _resumable(partial, key, overwrite)
        if still_valid is not None and (stale := [i for i in sorted(done) if not still_valid(i, points[i], done[i])]):
            for i in stale:
                del done[i]
            print(f"{partial.name}: {len(stale)} finished points have changed inputs; running them again")
        if done:
            print(f"resuming {path.name}: {len(done)} of {len(points)} points already done")

        stored = [len(done)]  # points in the partial file on disk

        def keep(_: list[Any]) -> None:
            try:
                save_results(partial, {**key, "done": {str(i): r for i, r in sorted(done.items())}},
                             {**params, "complete": False}, device)
            except OSError as exc:  # disk full, folder gone read-only: say what is kept, no traceback
                what = f"{partial} keeps {stored[0]} of them" if stored[0] else "no point was stored"
                raise OutputError(f"cannot write {partial} ({exc.strerror or exc}) after {len(done)} of "
                                  f"{len(points)} points; {what}; free space and rerun the same command to "
                                  "resume") from exc
            stored[0] = len(done)

        t0 = time.perf_counter()
        results = map_points(job, points, workers=workers, executor=executor, done=done,
                             on_result=keep)
        rows = [r for res in results for r in (res if isinstance(res, list) else [res])]
        try:
            out = save_results(path, rows, params, device, time.perf_counter() - t0, workers=workers)
        except OSError as exc:
            raise OutputError(f"cannot write {path} ({exc.strerror or exc}); {partial} keeps all {len(points)} "
                              "points; free space and rerun the same command to write it") from exc
        partial.unlink(missing_ok=True)
        print(f"wrote {out} ({len(rows)} records, {time.perf_counter() - t0:.0f} s)")
        return rows


def _resumable(partial: Path, key: dict[str, Any], overwrite: bool) -> dict[int, Any]:
    """The finished points of ``partial`` if it belongs to ``key`` (points, parameters) and this code's commit;
    ``{}`` with ``overwrite`` (the file is deleted) or without a file; else a one-line ValueError."""
    from hoplib.results import git_commit, read_json

    if overwrite:  # --overwrite starts afresh: no point of an earlier run is reused
        partial.unlink(missing_ok=True)
    if not partial.exists():
        return {}
    try:
        record = read_json(partial)
        held, commit = record["data"], record["provenance"].get("git_commit")
        held_key, n_held = {"points": held["points"], "params": held["params"]}, len(held["done"])
        done = {int(i): r for i, r in held["done"].items()}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{partial} is not a partial sweep file ({exc}); move it away to start afresh") from exc
    if held_key != key:  # finished points of other settings are data too
        diff = sorted(k for k in set(held["params"]) | set(key["params"])
                      if held["params"].get(k) != key["params"].get(k)) or ["points"]
        raise ValueError(f"{partial} holds {n_held} finished points of other settings (differing: "
                         f"{', '.join(map(str, diff))}); rerun with those settings to resume it, or pass "
                         "--overwrite to discard it")
    if commit != (now := git_commit()):
        raise ValueError(f"{partial} holds {n_held} finished points made by commit {commit}, not by this code "
                         f"({now}); pass --overwrite to start afresh")
    return done


def kept_sweep(job: Job, points: Sequence[Any], path: str | Path, params: dict[str, Any], *, device: str = "cpu",
               workers: int = 1, executor: Any = None, overwrite: bool = False) -> list[Any]:
    """:func:`run_sweep` for a sweep that may be started again once finished (a notebook, a training grid): the
    records stored in ``path`` when it already holds this sweep (the same points and parameters), else the sweep
    run, resumed from the partial file of a stopped one. ``path`` holding another sweep is refused (one line:
    move it away); ``overwrite`` runs the sweep afresh and replaces it."""
    path, params = Path(path), {**params, "points": list(points)}
    if path.exists() and not overwrite:
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
            same = stored["parameters"] == json.loads(json.dumps(params, default=str))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path} is not a sweep's results file ({exc}); move it away to run the sweep") from exc
        if not same:
            raise ValueError(f"{path} holds a sweep of other settings; move it away (or pass --overwrite) to run "
                             "this one")
        print(f"read back {path.name}: the sweep finished before")
        return stored["data"]
    return run_sweep(job, points, path, params, device=device, workers=workers, executor=executor,
                     overwrite=overwrite)


def points_done(points: Sequence[Any], path: str | Path, params: dict[str, Any]) -> int:
    """How many of ``points`` the partial file of :func:`kept_sweep`'s ``path`` holds (0: none, or another
    sweep's)."""
    partial = Path(path).with_name(Path(path).stem + ".partial.json")
    key = json.loads(json.dumps({"points": list(points), "params": {**params, "points": list(points)}},
                                default=str))
    try:
        held = json.loads(partial.read_text(encoding="utf-8"))["data"]
        return len(held["done"]) if {"points": held["points"], "params": held["params"]} == key else 0
    except (OSError, ValueError, KeyError, TypeError):
        return 0

