"""How long each profile of a chapter takes: on a CPU as measured by its stored run, on GPUs as an estimate.

The CPU time of a profile is read from the provenance of its stored results (``wall_time_s``, written by the
code that made them): files a chapter's notebook wrote count from the chapter's start, so the largest of them
is the run's time; files written by a separate command (a training run, an alphabet sweep) add theirs. Nothing
is measured for a profile without stored results.

No GPU time in this book is measured unless a results file says so, so the GPU columns are **estimates**, from
the training FLOPs of the profile's models (6 x parameters x tokens per step, the usual count that leaves out
attention scores and elementwise work; :mod:`hoplib.training.flops` has the exact count for the GPT) at an
assumed fraction of each GPU's dense peak, and never below an assumed time per optimiser step (small models are
bound by kernel launches, not FLOPs). Evaluation and the exact constructions are left out. The assumptions are
in :data:`GPU_CLASSES`; read the estimates as "about", within a factor of a few.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hoplib._book.validate import check_int


@dataclass(frozen=True)
class Job:
    """The training work of one model: ``steps`` optimiser steps of ``tokens`` tokens each, ``params`` weights."""

    params: int
    tokens: int
    steps: int

    def __post_init__(self) -> None:
        for name in ("params", "tokens", "steps"):
            check_int(name, getattr(self, name), low=1)

    @property
    def flops(self) -> float:
        """Training FLOPs, 6 x params x tokens x steps (forward 2, backward 4 per weight and token)."""
        return 6.0 * self.params * self.tokens * self.steps


@dataclass(frozen=True)
class GPUClass:
    """Assumptions for an estimate: dense peak (TFLOP/s, in the dtype the book's autocast uses there), the
    fraction of it small models reach, and the least time an optimiser step takes."""

    name: str
    peak_tflops: float
    dtype: str
    efficiency: float
    step_floor_s: float


GPU_CLASSES = (GPUClass("T4-class", 65.0, "fp16", 0.2, 0.006),
               GPUClass("H100-class", 989.0, "bf16", 0.2, 0.004))
"""Colab's free T4 (fp16 tensor cores, no bf16) and an H100 (bf16); 20% of peak, and at least 6 ms and 4 ms
per step."""


def estimate_seconds(jobs: Iterable[Job], gpu: GPUClass) -> float:
    """Estimated training time of ``jobs`` on ``gpu``: per job, the larger of FLOPs at the assumed rate and
    steps times the per-step floor."""
    rate = gpu.peak_tflops * 1e12 * gpu.efficiency
    return sum(max(job.flops / rate, job.steps * gpu.step_floor_s) for job in jobs)


def _wall(path: Path) -> tuple[float | None, bool]:
    """(wall_time_s, written by a chapter's notebook) of a results file."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, False
    if not isinstance(record, dict):
        return None, False
    wall = (record.get("provenance") or {}).get("wall_time_s")
    params = record.get("parameters") if isinstance(record.get("parameters"), dict) else {}
    notebook = "chapter" in params and "part" not in params
    return (float(wall) if isinstance(wall, (int, float)) else None), notebook


def measured_cpu_seconds(chapter: str, profile: str, root: str | Path | None = None) -> float | None:
    """The CPU time of a chapter's stored ``profile`` run from its results' provenance (module doc), or None."""
    from hoplib._book.results import ResultsNotFoundError, results_dir

    try:
        base = Path(root) if root is not None else results_dir()
    except ResultsNotFoundError:  # outside the repository (e.g. Colab without a clone): nothing measured
        return None
    folder = base / chapter / profile
    if not folder.is_dir():
        return None
    notebook, separate = 0.0, 0.0
    for path in sorted(folder.rglob("*.json")):
        if path.name.endswith(".partial.json"):
            continue
        wall, from_notebook = _wall(path)
        if wall is None:
            continue
        if from_notebook:
            notebook = max(notebook, wall)
        else:
            separate += wall
    total = notebook + separate
    return total or None


def duration(seconds: float | None) -> str:
    """``"45 s"``, ``"12 min"``, ``"3.5 h"``; ``"-"`` for None."""
    if seconds is None:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def time_rows(chapter: str, profiles: Sequence[str], jobs: Callable[[str], list[Job]] | None,
              root: str | Path | None = None) -> list[dict[str, Any]]:
    """One row per profile: the CPU time measured by its stored run and the GPU estimates (``"-"``: nothing
    stored, or no training to estimate)."""
    import torch

    rows = []
    for profile in profiles:
        with torch.random.fork_rng(devices=[]):  # building models to count weights leaves the seeded RNG alone
            work = jobs(profile) if jobs is not None else []
        row = {"profile": profile, "CPU (stored run, measured)": duration(measured_cpu_seconds(chapter, profile,
                                                                                                 root))}
        for gpu in GPU_CLASSES:
            row[f"{gpu.name} GPU (estimate)"] = f"≈ {duration(estimate_seconds(work, gpu))}" if work else "-"
        rows.append(row)
    return rows


__all__ = ["GPU_CLASSES", "GPUClass", "Job", "duration", "estimate_seconds", "measured_cpu_seconds", "time_rows"]
