"""The measurements of the chapter on recurrent models (Corollary 5.2 of the paper, Propositions E.3 and E.4):
the encoding of pointer chasing as hop_k checked on random instances, the bits that four protocols post, the two
exact constructions checked against ``hop``, the training sweep and what the stored sweep shows.

The training sweep (:func:`sweep`) gives every family the same tuning: the same widths, depths and steps and
the same small learning-rate sweep, keeping the better rate per model (:func:`best_lr`). The ``cpu`` profile's
run is stored with ``python -m hoplib.lower_bounds.experiments.rnn --profile cpu --workers 2 --out results``.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hoplib._book.pool import add_run_options, run_device, store_sweep
from hoplib._book.tables import Table
from hoplib._book.timing import Job
from hoplib._book.validate import check_int
from hoplib.lower_bounds import communication as comm
from hoplib.lower_bounds import pointer_chasing as pc
from hoplib.lower_bounds import rnn
from hoplib.lower_bounds.experiments import (
    THRESHOLD,
    best_error,
    error_records,
    plot_reach,
    reach_summary,
    reach_table,
    recall,
    settings_text,
    text_table,
)
from hoplib.lower_bounds.sweep import BATCH_SIZE, best_lr, grid_points, matched_settings, sweep_points
from hoplib.report import ErrorRecord, error_table
from hoplib.tasks import HopTask, hop

KINDS = ("gru", "lstm", "mamba", "transformer")
TRAIN_KEYS = ("seq_len", "max_hops", "kinds", "depths", "widths", "steps", "lrs", "warmup_steps", "n_samples")
PARTS = ("training", "matched")  # the stored depth sweeps: results/rnn/<profile>/<part>.json
HEADS = 4  # attention heads of the transformers
PROTOCOLS = ("k_rounds", "one_round", "hop_rnn", "prefix_rnn")


PROFILES: dict[str, dict[str, Any]] = {  # "matched": the recurrent sweep at the training chapter's task
    "quick": {"n_check": 300, "bit_table": [(2, 4), (3, 4), (4, 4)],
              "seq_len": 24, "max_hops": 3, "kinds": list(KINDS), "depths": [1, 2], "widths": [32],
              "steps": 60, "lrs": [3e-3], "warmup_steps": 10, "n_samples": 50,
              "alphabet": recall.PROFILES["quick"], "matched": matched_settings("quick", ["gru"], [1, 2])},
    "cpu": {"n_check": 2000, "bit_table": [(2, 8), (3, 8), (4, 8), (4, 32)],
            "seq_len": 32, "max_hops": 4, "kinds": list(KINDS), "depths": [1, 2, 3, 4], "widths": [64],
            "steps": 4000, "lrs": [1e-3, 3e-3], "warmup_steps": 100, "n_samples": 200,
            "alphabet": recall.PROFILES["cpu"],
            "matched": matched_settings("medium", ["gru", "lstm"], [1, 2, 3, 4, 5, 6])},
    "paper": {"n_check": 10_000, "bit_table": [(2, 8), (3, 8), (4, 8), (4, 32), (8, 64)],
              "seq_len": 100, "max_hops": 16, "kinds": list(KINDS), "depths": [1, 2, 3, 4, 5, 6],
              "widths": [64, 128], "steps": 20_000, "lrs": [3e-4, 1e-3], "warmup_steps": 1000, "n_samples": 100,
              "alphabet": recall.PROFILES["paper"],
              "matched": matched_settings("paper", ["gru", "lstm", "mamba"], [1, 2, 3, 4, 5, 6, 7, 8])},
}


def plot_reduction_chain(x: np.ndarray, instance: pc.PointerChasingInstance):
    """The sequence of Proposition E.4 for ``instance`` with its k-hop chain from the last position and the
    players' block boundaries (dotted); returns the figure."""
    import matplotlib.pyplot as plt

    from hoplib.plots import plot_pointer_chain

    fig, ax = plt.subplots(figsize=(9, 3.2))
    plot_pointer_chain(x, i=len(x) - 1, k=instance.k, ax=ax)
    for edge in np.cumsum(comm.block_sizes(len(x), instance.k))[:-1]:
        ax.axvline(edge - 0.5, color="0.5", lw=0.8, ls=":")
    ax.set_title(f"k = {instance.k}: each hop crosses one block boundary (dotted) along one matching edge",
                 fontsize=10)
    fig.tight_layout()
    return fig


def check_random_encodings(n_check: int, *, seed: int = 0) -> dict[str, int]:
    """Encode ``n_check`` random instances (k in 1..8, q in 2..16) with :func:`pc.to_hop_sequence`; count those
    whose hop_k at the last position decodes to a wrong answer, and those where fewer than k hops already land
    on an answer symbol (both must be 0 for Proposition E.4's encoding)."""
    n_check = check_int("n_check", n_check, low=1)
    rng = np.random.default_rng(check_int("seed", seed, low=0))
    wrong = early = 0
    for t in range(n_check):
        k, q = int(rng.integers(1, 9)), int(rng.integers(2, 17))
        instance = pc.random_instance(k, q, seed=10_000 + t)
        xs, ans = pc.to_hop_sequence(instance)
        wrong += pc.decode_answer(instance, hop(xs, k)[-1]) != ans
        early += any(pc.decode_answer(instance, hop(xs, j)[-1]) is not None for j in range(k))
    return {"instances": n_check, "wrong": int(wrong), "early": int(early)}


def _decoded(instance: pc.PointerChasingInstance, logits: torch.Tensor) -> int | None:
    symbol = int(logits.argmax())
    return pc.decode_answer(instance, -1 if symbol == instance.alphabet_size else symbol)


def protocol_bit_row(k: int, q: int, *, seed: int = 0) -> dict[str, Any]:
    """Rounds R and longest message s (bits) of the four protocols of the chapter on one random instance:
    the k-round and one-round pointer-chasing protocols, the depth-k hop RNN and the depth-1 prefix RNN run
    as blackboard protocols; ``correct`` says all four answered right."""
    instance = pc.random_instance(check_int("k", k, low=1), check_int("q", q, low=2), seed=seed)
    xs, ans = pc.to_hop_sequence(instance)
    row: dict[str, Any] = {"k": k, "q": q, "N": len(xs), "N/k^6": pc.lower_bound_scale(len(xs), k)}
    correct = True
    for strategy in pc.STRATEGIES:
        out, board = pc.solve_by_protocol(instance, strategy)
        correct &= out == ans
        row[f"{strategy} (R, s)"] = (board.rounds, board.max_message_bits)
    for name, net in (("hop_rnn", rnn.hop_rnn(k, instance.alphabet_size)),
                      ("prefix_rnn", rnn.prefix_rnn(k, instance.alphabet_size, max_len=len(xs)))):
        board = comm.Blackboard(k)
        out, _ = rnn.simulate_rnn_protocol(net, xs, k, blackboard=board)
        correct &= _decoded(instance, out) == ans
        row[f"{name} (R, s)"] = (board.rounds, board.max_message_bits)
    row["correct"] = bool(correct)
    return row


def protocol_bit_rows(bit_table: Sequence[Sequence[int]], *, seed: int = 0) -> list[dict[str, Any]]:
    """:func:`protocol_bit_row` for every (k, q) of ``bit_table``."""
    return [protocol_bit_row(int(k), int(q), seed=seed) for k, q in bit_table]


def rounds_or_long_messages(rows: Sequence[Mapping[str, Any]]) -> bool:
    """True when every protocol of every row uses at least k rounds or posts a message of at least q bits:
    the alternative of Proposition E.3, observed on these protocols (the proposition proves it, up to
    Ω(q/k⁵), for every protocol)."""
    return all(row[f"{p} (R, s)"][0] >= row["k"] or row[f"{p} (R, s)"][1] >= row["q"]
               for row in rows for p in PROTOCOLS)


def check_constructions(ks: Sequence[int], *, seed: int = 0, prefix_ks: Sequence[int] = (1, 8, 16),
                        n: int = 64, length: int = 98) -> list[dict[str, Any]]:
    """Wrong outputs of ``rnn.hop_rnn(k, 4)`` (every k of ``ks``) and ``rnn.prefix_rnn(k, 4, length)`` (the k
    also in ``prefix_ks``, else None) against ``hop`` on ``n`` uniform letter strings (with immediate repeats)
    and ``n`` strings of the experiments (without)."""
    gen = torch.Generator().manual_seed(check_int("seed", seed, low=0))
    task = HopTask(seq_len=length + 2, alphabet_size=4, max_hops=16)
    inputs = {"uniform (repeats)": torch.randint(0, 4, (n, length), generator=gen),
              "HopTask letters": task.letters(n, gen, torch.device("cpu"))}
    rows = []
    for k in ks:
        for name, xb in inputs.items():
            want = rnn.hop_classes(xb, k, 4)
            deep = int((rnn.hop_rnn(k, 4)(xb).argmax(-1) != want).sum())
            flat = int((rnn.prefix_rnn(k, 4, length)(xb).argmax(-1) != want).sum()) if k in prefix_ks else None
            rows.append({"k": k, "inputs": name, "hop_rnn wrong": deep, "prefix_rnn wrong": flat})
    return rows


def train_grid(settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The training sweep's points (kind, width, depth, learning rate), in that order of nesting
    (:func:`hoplib.lower_bounds.sweep.grid_points`)."""
    return grid_points(settings, TRAIN_KEYS, KINDS)


def sweep(task: HopTask, settings: Mapping[str, Any], *, seed: int = 0, device: str | torch.device = "auto",
          workers: int = 1, on_model: Callable[[list[dict[str, Any]]], None] | None = None
          ) -> list[dict[str, Any]]:
    """Train every point of :func:`train_grid` (``workers`` processes of one thread each on CPU) on ``task``
    and return tidy records ``{"kind", "d_model", "depth", "lr", "state_bits", "params", "k", "error",
    "final_loss", "train_time_s"}``, one per model and k (``state_bits`` is 0 for transformers); :func:`best_lr`
    keeps the better learning rate of each model. ``on_model`` is called with the records finished so far."""
    make_build = functools.partial(rnn._build, heads=HEADS)
    return sweep_points(task, train_grid(settings), settings, make_build, seed=seed, device=device,
                        workers=workers, on_model=on_model)


def jobs(profile: str) -> list[Job]:
    """The training work of a profile (the depth sweep, one job per model and learning rate, then the
    alphabet sweep), for the time estimates of :mod:`hoplib._book.timing`."""
    from hoplib.models import count_parameters

    s = PROFILES[profile]
    task = HopTask(seq_len=s["seq_len"], alphabet_size=4, max_hops=s["max_hops"])
    build = rnn._build(task, HEADS)
    out = [Job(count_parameters(build(dict(p))[0]), BATCH_SIZE * task.length, s["steps"]) for p in train_grid(s)]
    return out + recall.jobs(s["alphabet"])


def observations(records: Sequence[ErrorRecord], threshold: float = THRESHOLD) -> dict[str, bool]:
    """The two observations the chapter states about a sweep: ``deeper_helps`` (for every recurrent kind the
    deepest model has lower error than the one-layer model at every k >= 2) and ``transformer_multi_hop``
    (some transformer reaches error <= threshold at some k >= 2)."""
    recs = error_records(records)
    kmax = max(r.k for r in recs)
    deeper = True
    for kind in (kd for kd in KINDS if kd != "transformer"):
        table = error_table(recs, family=kind, width=max(r.width for r in recs if r.family == kind))
        top, low = table[max(table)], table[min(table)]
        deeper &= all(top[k] < low[k] for k in range(2, kmax + 1))
    multi = any(r.error <= threshold for r in recs if r.family == "transformer" and r.k >= 2)
    return {"deeper_helps": bool(deeper), "transformer_multi_hop": bool(multi)}


def best_errors(records: Sequence[ErrorRecord], k: int) -> dict[str, float]:
    """The lowest error at ``k`` over depths and widths, per architecture."""
    return {kind: best_error(records, kind, k) for kind in KINDS if any(r.family == kind for r in records)}


def model_table(records: Sequence[Mapping[str, Any]]) -> Table:
    """Each model's parameter count and learning rate (after :func:`best_lr`): one row per family, one column
    per depth, cells like ``"118k, lr 0.003"``."""
    cell = {(r["kind"], int(r["depth"])): f"{r['params'] / 1000:.0f}k, lr {r['lr']:g}" for r in records}
    if not cell:
        raise ValueError("records must be a non-empty list of sweep records")
    depths = sorted({d for _, d in cell})
    kinds = [kind for kind in KINDS if any(key[0] == kind for key in cell)]
    return text_table([{"parameters, learning rate": kind, **{f"L={d}": cell.get((kind, d), "-") for d in depths}}
                       for kind in kinds])


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m hoplib.lower_bounds.experiments.rnn",
                                description="Train the RNN chapter's depth sweep (every family, depth and "
                                            "learning rate on multi-task hop_k) and store it.")
    p.add_argument("--profile", default="cpu", choices=tuple(PROFILES))
    p.add_argument("--part", default="training", choices=PARTS,
                   help="training: the chapter's depth sweep; matched: recurrent models at the training "
                        "chapter's task and recipe")
    p.add_argument("--out", required=True, help="results root; writes <out>/rnn/<profile>/<part>.json")
    add_run_options(p, seed_help="seeds other than 0 write <part>_seed<seed>.json")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> Path:
    """The command line: validate everything, then run :func:`sweep` and write the results file atomically
    (a ``.partial.json`` beside it holds the models finished so far, marked incomplete)."""
    args = _parse(argv)
    device = run_device(args)
    source = PROFILES[args.profile] if args.part == "training" else PROFILES[args.profile]["matched"]
    settings = {key: source[key] for key in TRAIN_KEYS}
    extra = {"grid": source["grid"]} if "grid" in source else {}
    train_grid(settings)
    task = HopTask(seq_len=settings["seq_len"], alphabet_size=4, max_hops=settings["max_hops"])
    name = args.part + ("" if args.seed == 0 else f"_seed{args.seed}") + ".json"
    path = Path(args.out) / "rnn" / args.profile / name
    params = {"chapter": "rnn", "part": args.part, "profile": args.profile, "device": device,
              "seed": args.seed, "alphabet_size": 4, "heads": HEADS, "batch_size": BATCH_SIZE, **extra, **settings}
    run = functools.partial(sweep, task, settings, seed=args.seed, device=device, workers=args.workers)
    return store_sweep(path, params, run, device=device, workers=args.workers, overwrite=args.overwrite)


__all__ = ["BATCH_SIZE", "HEADS", "KINDS", "PARTS", "PROFILES", "PROTOCOLS", "THRESHOLD", "TRAIN_KEYS",
           "best_errors", "best_lr", "check_constructions", "check_random_encodings", "jobs", "main",
           "matched_settings", "model_table", "observations", "plot_reach", "plot_reduction_chain",
           "protocol_bit_row", "protocol_bit_rows", "reach_summary", "reach_table", "rounds_or_long_messages",
           "settings_text", "sweep", "train_grid"]


if __name__ == "__main__":
    from hoplib._book.cli import run_cli

    raise SystemExit(run_cli(main))
