"""The chapters' profiles as data, the models each one trains, and what that costs.

:func:`chapter_profiles` reads a chapter's profiles from its own settings cell (the first two code cells of
``chapters/<chapter>.md``, run with :func:`hoplib._book.notebook.start` stopped before it starts anything), so
the shape test, the cost table and the page read the same dict. :func:`jobs` lists the models a profile trains,
built by the functions the chapter's cells call; ``Job.run(steps, batch_size)`` builds one, trains it and
evaluates it on a few samples. Every chapter that trains has four profiles: ``quick`` (the book's build, on a
CPU), ``cpu`` (the stored CPU runs), ``gpu`` (one free Colab T4, about half an hour) and ``paper`` (the authors'
sizes); the others have ``quick`` and ``paper``.

Costs: one step of every model shape is counted once on a CPU by :func:`step_costs.per_step` and stored in
``results/benchmarks/step_costs.json`` (``python scripts/profiles.py``, which fills in missing shapes);
:func:`estimate` multiplies them out, and :func:`cost_table` is the table the landing and teaching pages show.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: step_costs, also when loaded by path

TRAINING_CHAPTERS = ("training", "rnn", "efficient_attention", "chain_of_thought", "gnn")
"""The chapters that train models: profiles ``quick``, ``cpu``, ``gpu``, ``paper``."""
OTHER_CHAPTERS = ("hop_task", "construction", "mpc")
"""The chapters that train nothing: profiles ``quick`` and ``paper``, both for a CPU."""
PROFILE_NAMES = ("quick", "cpu", "gpu", "paper")
UNTRAINED_QUICK = ("rnn", "efficient_attention")
"""Chapters whose ``quick`` profile trains nothing (their live sweeps start at ``cpu``)."""
COSTS_FILE = "benchmarks/step_costs.json"
EVAL_SAMPLES = 8  # evaluation samples of a Job.run: enough for a letter target at every k of every profile


class _Stop(Exception):
    pass


def _chapter_path(chapter: str) -> Path:
    from hoplib.results import results_dir

    return results_dir().parent / "chapters" / f"{chapter}.md"


def code_cells(chapter: str, tag: str | None = None) -> list[str]:
    """Sources of the chapter's code cells (only those tagged ``tag`` if given), in order."""
    import jupytext

    cells = jupytext.read(_chapter_path(chapter), fmt="md:myst").cells
    return [c.source for c in cells if c.cell_type == "code"
            and (tag is None or tag in c.metadata.get("tags", []))]


def chapter_profiles(chapter: str) -> dict[str, dict[str, Any]]:
    """The profiles dict the chapter's settings cell hands to ``nb.start`` (its first two code cells are run,
    the start itself is not)."""
    from unittest import mock

    seen: dict[str, Any] = {}

    def start(_chapter: str, _profile: str, _device: str, _seed: int, _out: Any, profiles: dict) -> None:
        seen.update(profiles)
        raise _Stop

    with mock.patch("hoplib._book.notebook.start", start):
        try:
            exec(compile("\n".join(code_cells(chapter)[:2]), chapter, "exec"), {})  # noqa: S102
        except _Stop:
            return seen
    raise ValueError(f"the settings cell of {chapter} did not call nb.start")


# --------------------------------------------------------------------------- what a profile trains
@dataclass(frozen=True)
class Job:
    """Models of one shape that a profile trains: ``count`` models (learning rates, seeds, data regimes), each
    ``steps`` steps of ``batch_size``; ``group`` names the models trained together as one ensemble on CUDA
    (one step runs them all). ``run(steps, batch_size)`` builds one, trains it on a CPU and evaluates it on
    :data:`EVAL_SAMPLES` samples."""

    chapter: str
    key: str
    count: int
    steps: int
    batch_size: int
    run: Callable[[int, int], Any] = field(compare=False, repr=False)
    group: str | None = None


def _merge(jobs: list[Job]) -> list[Job]:
    """One job per (key, group, steps, batch): the counts added."""
    out: dict[tuple, Job] = {}
    for j in jobs:
        k = (j.key, j.group, j.steps, j.batch_size)
        out[k] = Job(j.chapter, j.key, out[k].count + j.count, j.steps, j.batch_size, j.run, j.group) if k in out \
            else j
    return list(out.values())


def _training_jobs(s: dict[str, Any]) -> list[Job]:
    from hoplib import grids
    from hoplib.train import train_run

    jobs = []
    for c in grids.grid(s["grid"]).configs():
        data = "fresh" if c.train.n_train is None else f"n{c.train.n_train}"
        key = (f"gpt L{c.depth} m{c.d_model} H{c.heads} N{c.seq_len} a{c.alphabet_size} k{c.max_hops} {c.head} "
               f"p{c.dropout:g} {data}")

        def run(steps: int, batch: int, c: Any = c) -> Any:
            short = c.replace(steps=steps, batch_size=batch, warmup_steps=min(c.train.warmup_steps, steps),
                              eval_samples=EVAL_SAMPLES, eval_every=None)
            with tempfile.TemporaryDirectory() as tmp:
                return train_run(short, tmp, device="cpu", progress=False, checkpoint_every=None)

        group = repr(grids._arch(c, s["ensemble"])) if s.get("ensemble") else None  # as train_grid groups them
        jobs.append(Job("training", key, 1, c.train.steps, c.train.batch_size, run, group))
    return _merge(jobs)


def _point_jobs(chapter: str, s: dict[str, Any], points: list[dict], make_build: Callable, prefix: str) -> list[Job]:
    from hoplib.lower_bounds import families
    from hoplib.tasks import HopTask

    task = HopTask(seq_len=s["seq_len"], alphabet_size=s.get("alphabet_size", 4), max_hops=s["max_hops"])
    batch = s.get("batch_size", families.BATCH_SIZE)
    jobs = []
    for p in points:
        key = f"{prefix}{p['kind']} L{p['depth']} m{p['d_model']} N{task.seq_len} a{task.alphabet_size} " \
              f"k{task.max_hops}"

        def run(steps: int, b: int, p: dict = p) -> Any:
            short = {"steps": steps, "batch_size": b, "warmup_steps": min(s["warmup_steps"], steps),
                     "n_samples": EVAL_SAMPLES}
            return families.measure_point(0, p, task, make_build, short, device="cpu")

        jobs.append(Job(chapter, key, 1, s["steps"], batch, run))
    return _merge(jobs)


def _rnn_jobs(s: dict[str, Any]) -> list[Job]:
    from hoplib.lower_bounds import families

    return _point_jobs("rnn", s, families.grid_points(s), families.recurrent_builder, "")


def _attention_jobs(s: dict[str, Any]) -> list[Job]:
    import functools

    from hoplib.lower_bounds import efficient_attention as attn
    from hoplib.lower_bounds import families

    points = [{"kind": kind, "depth": d, "d_model": s["d_model"], "lr": s["lr"]}
              for kind in attn.KINDS for d in s["depths"]]
    build = functools.partial(families.attention_builder, heads=s["heads"], n_features=s["n_features"],
                              window=s["window"], global_every=s["global_every"])
    prefix = f"H{s['heads']} f{s['n_features']} w{s['window']} g{s['global_every']} "
    return _point_jobs("efficient_attention", s, points, build, prefix)


def _cot_jobs(s: dict[str, Any]) -> list[Job]:
    import torch

    from hoplib.lower_bounds import cot

    cells: dict[str, Any] = {}
    exec(compile("\n\n".join(code_cells("chain_of_thought", "cot-code")), "chain_of_thought", "exec"),  # noqa: S102
         cells)
    jobs = []
    for chain in cot.CHAINS:
        task = cot.CotTask(seq_len=s["seq_len"], alphabet_size=s["alphabet_size"], max_hops=s["max_hops"],
                           chain=chain)

        def run(steps: int, b: int, task: Any = task) -> Any:
            torch.manual_seed(0)
            model = cot.cot_model(task, d_model=s["d_model"], heads=s["heads"])
            cells["train_cot"](model, task, steps=steps, batch_size=b, lr=s["lr"], device="cpu", progress=False,
                               warmup_steps=min(s["warmup_steps"], steps))
            return cells["cot_errors"](model, task, n_samples=EVAL_SAMPLES, device="cpu")

        key = f"cot-gpt L1 m{s['d_model']} H{s['heads']} N{s['seq_len']} k{s['max_hops']} {chain}"
        jobs.append(Job("chain_of_thought", key, 1, s["steps"], s["batch_size"], run))
    return jobs


def _gnn_jobs(s: dict[str, Any]) -> list[Job]:
    from hoplib.lower_bounds import gnn

    jobs, few = [], {"eval_size": EVAL_SAMPLES, "device": "cpu"}
    for fam in s["learn_families"]:
        for d in s["gnn_ds"]:
            for depth in (d - 1, d, d + 1):
                jobs.append(Job("gnn", f"gnn {fam} D{d} L{depth} m{s['gnn_width']}", 1, s["gnn_steps"], 64,
                                lambda n, b, f=fam, d=d, L=depth: gnn.train_gnn(
                                    f, d, L, width=s["gnn_width"], n_random=0, steps=n, batch_size=b, **few)))
        for d in s["tf_ds"]:
            for depth in s["tf_depths"]:
                key = f"graph-gpt {fam} D{d} L{depth} m{s['tf_d_model']} H{s['tf_heads']}"
                jobs.append(Job("gnn", key, 1, s["tf_steps"], 64, lambda n, b, f=fam, d=d, L=depth: (
                    gnn.train_transformer(f, d, L, d_model=s["tf_d_model"], heads=s["tf_heads"], steps=n,
                                          batch_size=b, marks=True, **few))))
    for pairs, depths in ((False, (1, 2, 3)), (True, (1, 2))):
        for d in s["edge_ds"]:
            for depth in depths:
                key = f"edge-gpt path D{d} L{depth} m64 H4 {'pairs' if pairs else 'edges'}"
                jobs.append(Job("gnn", key, 1, s["edge_steps"], 64, lambda n, b, d=d, L=depth, p=pairs: (
                    gnn.train_edge_transformer("path", d, L, steps=n, batch_size=b, pairs=p, **few))))
    return jobs


_JOBS = {"training": _training_jobs, "rnn": _rnn_jobs, "efficient_attention": _attention_jobs,
         "chain_of_thought": _cot_jobs, "gnn": _gnn_jobs}


def jobs(chapter: str, profile: str, profiles: dict[str, dict[str, Any]] | None = None) -> list[Job]:
    """The models ``profile`` of ``chapter`` trains (none for ``quick`` in :data:`UNTRAINED_QUICK`), one
    :class:`Job` per shape."""
    settings = (profiles or chapter_profiles(chapter))[profile]
    if chapter not in _JOBS or (profile == "quick" and chapter in UNTRAINED_QUICK):
        return []
    return _JOBS[chapter](settings)


# --------------------------------------------------------------------------- costs
def _store_path() -> Path:
    from hoplib.results import results_dir

    return results_dir() / COSTS_FILE


def stored_step_costs() -> dict[str, dict[str, float]]:
    """``{shape key: {"flops_per_sample", "launches"}}`` of ``results/benchmarks/step_costs.json`` (empty if none)."""
    from hoplib.results import load_stored

    stored = load_stored(COSTS_FILE, required=False)
    return dict(stored.data) if stored is not None else {}


def count_step(job: Job) -> dict[str, float]:
    """One step of ``job``'s model counted on a CPU at batch 2 (:func:`step_costs.per_step`): FLOPs per
    sample (a step's FLOPs grow with the batch) and launches (they do not)."""
    import step_costs as costs

    step = costs.per_step(lambda n: job.run(n, 2), short=1, long=2)
    return {"flops_per_sample": step.flops / 2, "launches": step.launches}


def estimate(chapter: str, profile: str, step_costs: dict[str, dict[str, float]] | None = None,
             profiles: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Models, model-steps, FLOPs, launches and the ESTIMATED T4 seconds (:func:`step_costs.gpu_seconds`)
    of the training ``profile`` of ``chapter`` does, from the stored step costs (``KeyError`` naming a shape
    not counted yet). An ensemble group's step costs the sum of its FLOPs and its largest model's launches."""
    import step_costs as costs

    step_costs = stored_step_costs() if step_costs is None else step_costs
    listed = jobs(chapter, profile, profiles)
    if missing := sorted({j.key for j in listed} - set(step_costs)):
        raise KeyError(f"no stored step cost for {len(missing)} shapes of {chapter}/{profile} (e.g. {missing[0]}); "
                       "run: python scripts/profiles.py")
    groups: dict[Any, list[Job]] = {}
    for j in listed:
        groups.setdefault(j.group or id(j), []).append(j)
    flops = launches = seconds = 0.0
    for members in groups.values():
        steps = max(j.steps for j in members)
        per_model = [costs.StepCost(step_costs[j.key]["flops_per_sample"] * j.batch_size,
                                    step_costs[j.key]["launches"]) for j in members]
        if members[0].group is None:  # one model at a time
            for j, c in zip(members, per_model, strict=True):
                flops += j.count * j.steps * c.flops
                launches += j.count * j.steps * c.launches
                seconds += j.count * costs.gpu_seconds(c, j.steps)
        else:
            c = costs.StepCost(sum(j.count * p.flops for j, p in zip(members, per_model, strict=True)),
                               max(p.launches for p in per_model))
            flops, launches, seconds = flops + steps * c.flops, launches + steps * c.launches, \
                seconds + costs.gpu_seconds(c, steps)
    return {"models": sum(j.count for j in listed), "model_steps": sum(j.count * j.steps for j in listed),
            "flops": flops, "launches": launches, "t4_seconds": seconds}


FREE_GPU_S = 30 * 60
"""What one free Colab session is taken to give a chapter: half an hour of a T4."""
STORED_CPU = {"training": ["training/medium/*/results.json"], "rnn": ["rnn/cpu/training.json"],
              "efficient_attention": ["efficient_attention/cpu/training.json"],
              "chain_of_thought": ["chain_of_thought/cpu/errors.json"], "gnn": ["gnn/cpu/learned.json"]}
"""The stored runs of each chapter's ``cpu`` profile (what its live cells train), by their wall time."""
CPU_NOTES = {"gnn": "36 of 46 models: the edge cell's are not stored"}
STORED_PAPER = {"hop_task": "hop_task/paper/hop_task.ipynb", "construction": "construction/paper/construction.ipynb",
                "mpc": "mpc/paper/rerun/mpc.ipynb"}
"""The executed notebooks of the stored ``paper`` runs of the chapters that train nothing (papermill records
each run's duration)."""
CHAPTER_ORDER = ("hop_task", "construction", "training", "mpc", "rnn", "efficient_attention", "chain_of_thought",
                 "gnn")


def _stored_seconds(patterns: list[str]) -> float | None:
    """The summed wall times of the stored files matching ``patterns``: results files (their provenance) or
    executed notebooks (papermill's duration)."""
    import json

    from hoplib.results import results_dir

    times = []
    for pattern in patterns:
        for path in sorted(results_dir().glob(pattern)):
            record = json.loads(path.read_text(encoding="utf-8"))
            times.append(record["metadata"]["papermill"]["duration"] if path.suffix == ".ipynb"
                         else record["provenance"]["wall_time_s"])
    return sum(times) if times else None


GPU_RUN_FILE = "benchmarks/gpu_profiles_h200.json"
"""The ``gpu`` profiles run on one H200 by ``scripts/gpu_session.sh`` (all training chapters at once, each
stopped at a time box), summarised by ``benchmarks/gpu_summary.py``."""


@functools.cache
def _gpu_run() -> dict[str, dict]:
    """The stored GPU run's record per chapter (empty where none is stored)."""
    from hoplib.results import load_stored, results_dir

    if not (results_dir() / GPU_RUN_FILE).exists():
        return {}
    return {r["chapter"]: r for r in load_stored(GPU_RUN_FILE).data["chapters"]}


def gpu_measured(chapter: str) -> str:
    """The ``gpu`` profile's training time on the stored GPU run: measured where its progress bar finished,
    else projected from the share it did; "not timed" where it did not train."""
    import step_costs as costs

    bar = _gpu_run().get(chapter, {}).get("training_progress")
    if not bar or not bar["done"]:
        return "not timed"
    if bar["done"] == bar["total"]:
        return f"{costs.duration(bar['elapsed_s'])} (measured)"
    return (f"≈ {costs.duration(bar['projected_training_s'])} (projected: "
            f"{bar['done'] / bar['total']:.0%} in {costs.duration(bar['elapsed_s'])})")


def profile_cost(chapter: str, profile: str, step_costs: dict | None = None,
                 profiles: dict | None = None) -> dict[str, Any]:
    """Where ``profile`` of ``chapter`` runs and what it costs: ``{"runs on", "models", "model-steps", "FLOP",
    "launches", "time"}``; CPU times are the stored runs' (measured), GPU times :func:`estimate`'s."""
    import step_costs as costs

    row: dict[str, Any] = {"runs on": "CPU", "models": None, "model-steps": None, "FLOP": None, "launches": None}
    if chapter in OTHER_CHAPTERS:
        seconds = _stored_seconds([STORED_PAPER[chapter]]) if profile == "paper" else None
        return {**row, "time": "the book's build" if profile == "quick" else
                f"{costs.duration(seconds)} (measured)" if seconds else "not run"}
    listed = jobs(chapter, profile, profiles)
    row.update({"models": sum(j.count for j in listed), "model-steps": sum(j.count * j.steps for j in listed)})
    if profile == "quick":
        return {**row, "time": "the book's build"}
    if profile == "cpu":
        seconds = _stored_seconds(STORED_CPU[chapter])
        note = "; ".join(["measured", *([CPU_NOTES[chapter]] if chapter in CPU_NOTES else [])])
        return {**row, "time": f"{costs.duration(seconds)} ({note})" if seconds else "not stored"}
    est = estimate(chapter, profile, step_costs, profiles)
    fits = est["t4_seconds"] <= FREE_GPU_S
    return {**row, "runs on": "free T4" if fits else "larger GPU", "FLOP": costs.flops_text(est["flops"]),
            "launches": costs.flops_text(est["launches"]),
            "time": f"T4 ≈ {costs.duration(est['t4_seconds'])} (estimate)",
            **({"H200, shared": gpu_measured(chapter)} if profile == "gpu" else {})}


def cost_table(detail: bool = False):
    """The table the landing, teaching and README pages show: per chapter (rows) and profile, where it runs and
    how long it takes (CPU: measured on the stored runs; GPU: ESTIMATED from FLOPs and launches, see
    :mod:`step_costs`, and for ``gpu`` the time on one H200 shared with the other training chapters, from
    :data:`GPU_RUN_FILE`). ``detail``: one row per (chapter, profile) with models, steps, FLOPs and launches."""
    import pandas as pd

    step_costs, rows = stored_step_costs(), []
    for chapter in CHAPTER_ORDER:
        table = chapter_profiles(chapter)
        for profile in (p for p in PROFILE_NAMES if p in table):
            rows.append({"chapter": chapter, "profile": profile,
                         **profile_cost(chapter, profile, step_costs, table)})
    df = pd.DataFrame(rows)
    if detail:
        for col in ("models", "model-steps"):
            df[col] = [f"{int(v):,}" if v is not None and v == v else "" for v in df[col]]
        return df.set_index(["chapter", "profile"]).fillna("")
    where = df["runs on"].where(df["runs on"] != "free T4", "free GPU")
    shared = df["H200, shared"].map(lambda t: f"; H200, shared: {t.split(' (')[0]}"
                                    if isinstance(t, str) and t != "not timed" else "")
    df["where, how long"] = where + ", " + df["time"] + shared
    return (df.pivot(index="chapter", columns="profile", values="where, how long")
            .reindex(index=list(CHAPTER_ORDER), columns=list(PROFILE_NAMES)).fillna("-"))


def cost_table_markdown() -> str:
    """:func:`cost_table` as a Markdown table (for the README)."""
    df = cost_table()
    lines = ["| chapter | " + " | ".join(df.columns) + " |", "|---" * (len(df.columns) + 1) + "|"]
    lines += [f"| `{c}` | " + " | ".join(df.loc[c]) + " |" for c in df.index]
    return "\n".join(lines)


TABLE_FILE = "benchmarks/cost_table.json"
"""The cost table as the landing and teaching pages read it (written by ``python scripts/profiles.py --table``)."""


def store_cost_table() -> Path:
    """Write :func:`cost_table`, both forms, to ``results/<TABLE_FILE>`` (the pages show it from there)."""
    from hoplib.results import results_dir, save_results

    short, detail = cost_table(), cost_table(detail=True)
    data = {"summary": short.reset_index().to_dict(orient="records"),
            "detail": detail.reset_index().to_dict(orient="records")}
    return save_results(results_dir() / TABLE_FILE, data, {"gpu": "T4, estimated", "free_gpu_s": FREE_GPU_S},
                        "cpu")


def fill_step_costs(chapters: tuple[str, ...] = TRAINING_CHAPTERS,
                    profiles: tuple[str, ...] = PROFILE_NAMES) -> Path:
    """Count every shape of ``profiles`` of ``chapters`` not yet in ``results/benchmarks/step_costs.json`` and store
    it (after each shape, so an interrupted run keeps what it counted)."""
    import time

    import torch

    from hoplib.results import save_results

    torch.set_num_threads(1)
    done, path, t0 = stored_step_costs(), _store_path(), time.perf_counter()
    for chapter in chapters:
        table = chapter_profiles(chapter)
        for profile in profiles:
            for job in jobs(chapter, profile, table) if profile in table else []:
                if job.key not in done:
                    done[job.key] = count_step(job)
                    print(f"{chapter}/{profile}: {job.key}: {done[job.key]}", flush=True)
                    method = {"counted_on": "cpu", "batch_size": 2, "method": "scripts/step_costs.py per_step"}
                    save_results(path, dict(sorted(done.items())), method, "cpu", time.perf_counter() - t0)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Count the step cost of every model shape of the chapters' profiles "
                                            f"and store it in results/{COSTS_FILE}.")
    p.add_argument("--chapter", action="append", choices=TRAINING_CHAPTERS, help="only these chapters")
    p.add_argument("--profile", action="append", choices=PROFILE_NAMES, help="only these profiles")
    p.add_argument("--table", action="store_true", help=f"then write the cost table to results/{TABLE_FILE}")
    args = p.parse_args(argv)
    print(fill_step_costs(tuple(args.chapter or TRAINING_CHAPTERS), tuple(args.profile or PROFILE_NAMES)))
    if args.table:
        print(store_cost_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
