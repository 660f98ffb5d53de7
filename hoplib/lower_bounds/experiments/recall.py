"""The alphabet sweep of the chapter on recurrent models: how much width each family needs as the alphabet grows.

With a fixed small alphabet, hop_k is a finite-state function: one recurrent layer of O(k |Σ| log |Σ|) bits
computes it at every length N (the chapter's collapsed construction), so no N makes a well-trained RNN fail on
4 letters. What a recurrent model must carry across the sequence is the table "which letter followed the last
occurrence of each letter", about min(|Σ|, N) log |Σ| bits for k = 1. Cut a sequence in two: a causal model of
any depth L whose layer states hold s bits each is then a one-way protocol with L s bits from the first half to
the second, and the second half's queries can ask for any entry of the table, so L s must grow like
|Σ| log |Σ| (the indexing problem; this is the one-round case of the alternative in Proposition E.3, our
reading, not a theorem of the paper). A transformer reads the table by attention (the induction head of
Theorem 4.2's construction), so its width need not grow with |Σ|.

:func:`sweep` trains every family (GRU, LSTM, Mamba-style, transformer; same depth, widths and steps, the same
small learning-rate sweep each) on single-hop data (k = 1) for each alphabet size, with N = 2 |Σ| + 32, and
records the error of every model; :func:`best_table` keeps the best learning rate per (family, width, |Σ|),
:func:`widths_needed` the smallest width that reaches the threshold.

The efficient-attention chapter runs the same sweep with softmax, Performer and Longformer attention
(:data:`ATTENTION_PROFILES`): at k = 1 the last occurrence of a letter lies about |Σ| positions back, so a
Longformer window of fixed radius stops seeing it as |Σ| grows (Corollary 5.4's locality), and a fixed number of
random features must tell apart more and more letters (Corollary 5.3's low rank).

``python -m hoplib.lower_bounds.experiments.recall --chapter rnn --profile cpu --workers 2 --out results``
makes a stored run (``--chapter efficient_attention`` for the other chapter).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from hoplib._book.pool import add_run_options, map_points, run_device, store_sweep
from hoplib._book.tables import Table
from hoplib._book.timing import Job
from hoplib._book.validate import check_choice, check_int, check_rates
from hoplib.lower_bounds.experiments import THRESHOLD
from hoplib.lower_bounds.rnn import KINDS as RECURRENT_KINDS
from hoplib.lower_bounds.rnn import recurrent_model
from hoplib.tasks import HopTask

ATTENTION_KINDS = ("softmax", "performer", "longformer")
KINDS = (*RECURRENT_KINDS, "transformer", *ATTENTION_KINDS[1:])
"""Families: the recurrent kinds, ``"transformer"`` (softmax attention; ``"softmax"`` is the same model under
the efficient-attention chapter's name) and the two efficient attentions of Corollaries 5.3 and 5.4."""
_ORDER = (*KINDS[:4], "softmax", *KINDS[4:])  # the order of families in tables and figures
KEYS = ("alphabets", "kinds", "depth", "widths", "lrs", "steps", "batch_size", "warmup_steps", "heads",
        "n_samples")
ATTENTION_KEYS = ("n_features", "window", "global_every")

PROFILES: dict[str, dict[str, Any]] = {
    "quick": {"alphabets": [4, 16], "kinds": ["gru", "transformer"], "depth": 2, "widths": [32],
              "lrs": [3e-3], "steps": 150, "batch_size": 32, "warmup_steps": 15, "heads": 4, "n_samples": 50},
    "cpu": {"alphabets": [4, 8, 16, 32], "kinds": ["gru", "lstm", "mamba", "transformer"], "depth": 2,
            "widths": [16, 32, 64],
            "lrs": [1e-3, 3e-3], "steps": 2000, "batch_size": 32, "warmup_steps": 100, "heads": 4,
            "n_samples": 200},
    "paper": {"alphabets": [4, 8, 16, 32, 64, 128], "kinds": ["gru", "lstm", "mamba", "transformer"], "depth": 2,
              "widths": [16, 32, 64, 128, 256], "lrs": [3e-4, 1e-3, 3e-3], "steps": 20_000, "batch_size": 64,
              "warmup_steps": 1000, "heads": 4, "n_samples": 500},
}
"""Settings of the RNN chapter's alphabet sweep per profile (``cpu``: 96 models)."""

ATTENTION_PROFILES: dict[str, dict[str, Any]] = {
    "quick": {"alphabets": [4, 16], "kinds": list(ATTENTION_KINDS), "depth": 2, "widths": [32], "lrs": [3e-3],
              "steps": 150, "batch_size": 32, "warmup_steps": 15, "heads": 4, "n_samples": 50,
              "n_features": 16, "window": 4, "global_every": None},
    "cpu": {"alphabets": [4, 8, 16, 32], "kinds": list(ATTENTION_KINDS), "depth": 2, "widths": [64],
            "lrs": [1e-3, 3e-3], "steps": 2000, "batch_size": 32, "warmup_steps": 100, "heads": 4,
            "n_samples": 200, "n_features": 16, "window": 4, "global_every": None},
    "paper": {"alphabets": [4, 8, 16, 32, 64, 128], "kinds": list(ATTENTION_KINDS), "depth": 2,
              "widths": [64, 128], "lrs": [3e-4, 1e-3, 3e-3], "steps": 20_000, "batch_size": 64,
              "warmup_steps": 1000, "heads": 4, "n_samples": 500, "n_features": 16, "window": 4,
              "global_every": None},
}
"""Settings of the efficient-attention chapter's alphabet sweep (softmax, Performer with ``n_features`` random
features, Longformer with window radius ``window`` and no global positions) per profile (``cpu``: 24 models)."""

PART_PROFILES = {"rnn": PROFILES, "efficient_attention": ATTENTION_PROFILES}
"""The profile table of each chapter that runs the sweep; the results go to ``<out>/<chapter>/<profile>/``."""


def seq_len_for(alphabet_size: int) -> int:
    """The sequence length used with an alphabet: N = 2 |Σ| + 32 (the table fills up, most positions answer)."""
    return 2 * check_int("alphabet_size", alphabet_size, low=2) + 32


def check_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a profile's settings (``KEYS``); returns a plain copy."""
    missing = [key for key in KEYS if key not in settings]
    if missing:
        raise ValueError(f"settings lack {missing}")
    out = dict(settings)
    for a in out["alphabets"]:
        check_int("alphabets[i]", a, low=2)
    for kind in out["kinds"]:
        check_choice("kinds[i]", kind, (*KINDS, "softmax"))
    if any(kind in ATTENTION_KINDS[1:] for kind in out["kinds"]):
        missing = [key for key in ATTENTION_KEYS if key not in out]
        if missing:
            raise ValueError(f"settings with Performer or Longformer models lack {missing}")
        check_int("n_features", out["n_features"], low=1)
        check_int("window", out["window"], low=0)
        if out["global_every"] is not None:
            check_int("global_every", out["global_every"], low=1)
    for w in out["widths"]:
        check_int("widths[i]", w, low=1)
    check_rates("lrs", out["lrs"])
    for key in ("depth", "steps", "batch_size", "heads", "n_samples"):
        check_int(key, out[key], low=1)
    check_int("warmup_steps", out["warmup_steps"], low=0)
    return out


def grid(settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The sweep's points, in a fixed order: alphabet, family, width, learning rate."""
    s = check_settings(settings)
    return [{"alphabet_size": a, "seq_len": seq_len_for(a), "kind": kind, "d_model": w, "depth": s["depth"],
             "lr": lr} for a in s["alphabets"] for kind in s["kinds"] for w in s["widths"] for lr in s["lrs"]]


def _model(point: Mapping[str, Any], task: HopTask, settings: Mapping[str, Any]) -> tuple[torch.nn.Module, int]:
    from hoplib.lower_bounds.efficient_attention import attention_spec
    from hoplib.models import gpt_for_task

    kind = point["kind"]
    if kind == "transformer":
        return gpt_for_task(task, depth=point["depth"], d_model=point["d_model"], heads=settings["heads"]), 0
    if kind in ATTENTION_KINDS:
        extra = {}
        if kind == "performer":
            extra = {"n_features": settings["n_features"]}
        elif kind == "longformer":
            extra = {"window": settings["window"], "global_every": settings["global_every"]}
        spec = attention_spec(kind, **extra)
        return gpt_for_task(task, depth=point["depth"], d_model=point["d_model"], heads=settings["heads"],
                            attention=spec), 0
    model = recurrent_model(point["kind"], task.vocab_size, d_model=point["d_model"], n_layers=point["depth"])
    return model, model.state_bits()[0]


def train_point(index: int, point: Mapping[str, Any], settings: Mapping[str, Any], *, seed: int = 0,
                device: str = "cpu") -> dict[str, Any]:
    """Train the model of one grid point on k = 1 and return its record (point, ``params``, ``state_bits``
    per layer, ``error`` at k = 1, ``final_loss``, ``train_time_s``); torch is seeded with ``seed + index``
    before the model is built, training with ``seed``, so a point's result does not depend on the worker."""
    from hoplib.lower_bounds.sweep import train_and_measure
    from hoplib.train import TrainConfig

    task = HopTask(seq_len=point["seq_len"], alphabet_size=point["alphabet_size"], max_hops=1, min_hops=1)
    torch.manual_seed(seed + index)
    model, bits = _model(point, task, settings)
    config = TrainConfig(steps=settings["steps"], batch_size=settings["batch_size"], lr=point["lr"],
                         warmup_steps=settings["warmup_steps"], seed=seed)
    out = train_and_measure(model, task, config, n_samples=settings["n_samples"], device=device)
    return {**point, "params": out["params"], "state_bits": bits, "error": out["errors"][1],
            "final_loss": out["final_loss"], "train_time_s": out["train_time_s"]}


@functools.cache
def _params(kind: str, d_model: int, depth: int, alphabet_size: int, heads: int, n_features: int | None,
            window: int | None, global_every: int | None) -> int:
    from hoplib.models import count_parameters

    task = HopTask(seq_len=seq_len_for(alphabet_size), alphabet_size=alphabet_size, max_hops=1, min_hops=1)
    settings = {"heads": heads, "n_features": n_features, "window": window, "global_every": global_every}
    point = {"kind": kind, "d_model": d_model, "depth": depth}
    return count_parameters(_model(point, task, settings)[0])


def jobs(settings: Mapping[str, Any]) -> list[Job]:
    """The training work of the sweep (one :class:`hoplib._book.timing.Job` per grid point), for time
    estimates."""
    s = check_settings(settings)
    extra = tuple(s.get(key) for key in ATTENTION_KEYS)
    return [Job(_params(p["kind"], p["d_model"], p["depth"], p["alphabet_size"], s["heads"], *extra),
                s["batch_size"] * (p["seq_len"] - 1), s["steps"]) for p in grid(s)]


def sweep(settings: Mapping[str, Any], *, seed: int = 0, device: str = "cpu", workers: int = 1,
          on_model: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    """Train every point of :func:`grid` (``workers`` processes of one thread each on CPU) and return the
    records in grid order. ``on_model``, if given, is called with the records finished so far."""
    s = check_settings(settings)
    job = functools.partial(train_point, settings=s, seed=seed, device=device)
    return map_points(job, grid(s), workers=workers, device=device, on_result=on_model)


def best_table(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int, int], dict[str, Any]]:
    """``{(kind, d_model, alphabet_size): record}`` keeping, per family, width and alphabet, the record of the
    learning rate with the lowest error (the same tuning for every family)."""
    best: dict[tuple[str, int, int], dict[str, Any]] = {}
    for r in records:
        key = (r["kind"], int(r["d_model"]), int(r["alphabet_size"]))
        if key not in best or r["error"] < best[key]["error"]:
            best[key] = dict(r)
    return best


def width_grows(needed: Mapping[int, int | None]) -> bool:
    """True when the width a family needs (None: more than any tried) never falls as |Σ| grows and is larger
    at the largest alphabet than at the smallest."""
    inf = float("inf")
    widths = [inf if needed[a] is None else needed[a] for a in sorted(needed)]
    return all(x <= y for x, y in zip(widths, widths[1:], strict=False)) and widths[-1] > widths[0]


def errors_by_alphabet(records: Sequence[Mapping[str, Any]], width: int | None = None
                       ) -> dict[str, dict[int, float]]:
    """``{kind: {alphabet_size: best error}}`` at ``width`` (best over learning rates), or, with ``width``
    None, the best over every width tried as well."""
    out: dict[str, dict[int, float]] = {}
    for (kind, w, a), r in sorted(best_table(records).items(), key=lambda it: (_ORDER.index(it[0][0]), it[0][2])):
        if width is None or w == width:
            row = out.setdefault(kind, {})
            row[a] = min(row.get(a, float("inf")), float(r["error"]))
    return out


def seed_errors(runs: Sequence[tuple[int, Sequence[Mapping[str, Any]]]], alphabet_size: int, width: int
                ) -> dict[str, dict[int, float]]:
    """``{kind: {seed: best error}}`` at one alphabet size and width, from ``(seed, records)`` pairs (or pairs
    of another integer label of the runs, such as their steps)."""
    out: dict[str, dict[int, float]] = {}
    for seed, records in runs:
        for kind, errs in errors_by_alphabet(records, width).items():
            if alphabet_size in errs:
                out.setdefault(kind, {})[int(seed)] = errs[alphabet_size]
    return out


def seed_table(runs: Sequence[tuple[int, Sequence[Mapping[str, Any]]]], alphabet_size: int, width: int, *,
               column: str = "seed {}") -> Table:
    """:func:`seed_errors` as a table: one row per family, one column per seed (headed ``column`` filled with
    the label, e.g. ``"{:,} steps"`` for runs labelled by their steps)."""
    errs = seed_errors(runs, alphabet_size, width)
    seeds = sorted({seed for per in errs.values() for seed in per})
    return Table(["family", *(column.format(s) for s in seeds)],
                 [[kind, *(f"{per[s]:.3f}" if s in per else "-" for s in seeds)] for kind, per in errs.items()],
                 caption=f"best error at k = 1, |Σ| = {alphabet_size}, width {width}")


def widths_needed(records: Sequence[Mapping[str, Any]], threshold: float = THRESHOLD
                  ) -> dict[str, dict[int, int | None]]:
    """``{kind: {alphabet_size: smallest width whose best error <= threshold, or None}}``."""
    best = best_table(records)
    out: dict[str, dict[int, int | None]] = {}
    for kind, width, a in sorted(best, key=lambda t: (_ORDER.index(t[0]), t[2], t[1])):
        row = out.setdefault(kind, {})
        row.setdefault(a, None)
        if row[a] is None and best[(kind, width, a)]["error"] <= threshold:
            row[a] = width
    return out


def error_rows(records: Sequence[Mapping[str, Any]], width: int) -> list[dict[str, Any]]:
    """One row per family at ``width``: parameters, state bits per layer, best error per alphabet size."""
    best = best_table(records)
    rows = []
    for kind in (k for k in _ORDER if any(key[0] == k and key[1] == width for key in best)):
        cells = {a: r for (kd, w, a), r in best.items() if kd == kind and w == width}
        first = cells[min(cells)]
        row: dict[str, Any] = {"family": kind, "params": f"{first['params']:,}",
                               "state bits": f"{first['state_bits']:,}" if first["state_bits"] else "-"}
        row.update({f"|Σ|={a}": f"{cells[a]['error']:.3f}" for a in sorted(cells)})
        rows.append(row)
    return rows


_STYLE = {"gru": {"marker": "o", "color": "C0"}, "lstm": {"marker": "s", "color": "C1"},
          "mamba": {"marker": "^", "color": "C2"}, "transformer": {"marker": "D", "color": "C3", "lw": 2.2},
          "softmax": {"marker": "D", "color": "C3", "lw": 2.2}, "performer": {"marker": "v", "color": "C4"},
          "longformer": {"marker": "P", "color": "C5"}}


def plot_sweep(records: Sequence[Mapping[str, Any]], width: int | None = None, threshold: float = THRESHOLD):
    """Best error at k = 1 against |Σ| per family (at ``width``, or the best over every width tried) with the
    chance level; when several widths were trained, a second panel with the smallest width that reaches
    ``threshold`` (above the grid: none did)."""
    import matplotlib.pyplot as plt

    errs, needed = errors_by_alphabet(records, width), widths_needed(records, threshold)
    alphabets = sorted({int(r["alphabet_size"]) for r in records})
    widths = sorted({int(r["d_model"]) for r in records})
    fig, axes = plt.subplots(1, 2 if len(widths) > 1 else 1, figsize=(8.6, 3.7) if len(widths) > 1 else (6, 4),
                             squeeze=False)
    ax = axes[0][0]
    for kind in needed:
        ax.plot(alphabets, [errs[kind][a] for a in alphabets], **_STYLE[kind], label=kind)
    ax.plot(alphabets, [1 - 1 / a for a in alphabets], ls=":", color="0.4", label="chance")
    ax.axhline(threshold, color="0.6", lw=0.8)
    ax.set(xscale="log", xlabel="alphabet size |Σ|  (N = 2|Σ| + 32)", ylabel="test error at k = 1",
           ylim=(-0.02, 1.02), title=(f"width {width}" if width else f"best of widths {', '.join(map(str, widths))}")
           + f", depth {records[0]['depth']}")
    ax.legend(loc="upper left")
    if len(widths) > 1:
        bx = axes[0][1]
        for i, kind in enumerate(needed):  # offset each family a little so that equal widths stay visible
            shift = 1.0 + 0.035 * (i - (len(needed) - 1) / 2)
            bx.plot(alphabets, [(needed[kind][a] or widths[-1] * 2) * shift for a in alphabets], **_STYLE[kind],
                    label=kind)
        bx.set(xscale="log", yscale="log", xlabel="alphabet size |Σ|",
               ylabel=f"smallest width with error ≤ {threshold}", title="width each family needs")
        bx.set_yticks([*widths, widths[-1] * 2], [*map(str, widths), f"> {widths[-1]}"])
        bx.minorticks_off()
    for axis in axes[0]:
        axis.set_xticks(alphabets, [str(a) for a in alphabets])
        axis.xaxis.set_minor_locator(plt.NullLocator())
    fig.tight_layout()
    return fig


def observations(records: Sequence[Mapping[str, Any]], width: int | None = None, threshold: float = THRESHOLD
                 ) -> dict[str, Any]:
    """What the chapter states about a sweep at ``width`` (None: the best over widths): per family, whether
    every alphabet is solved, which are not, and whether the error grows from the smallest to the largest
    alphabet."""
    out: dict[str, Any] = {}
    for kind, errs in errors_by_alphabet(records, width).items():
        out[kind] = {"solves_all": all(e <= threshold for e in errs.values()),
                     "unsolved": sorted(a for a, e in errs.items() if e > threshold),
                     "rises": errs[max(errs)] > errs[min(errs)] + threshold}
    return out


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m hoplib.lower_bounds.experiments.recall",
                                description="Train the alphabet sweep of the RNN chapter and store it.")
    p.add_argument("--chapter", default="rnn", choices=tuple(PART_PROFILES))
    p.add_argument("--profile", default="cpu", choices=tuple(PROFILES))
    p.add_argument("--out", required=True, help="results root; writes <out>/<chapter>/<profile>/alphabet.json")
    add_run_options(p, seed_help="seeds other than 0 write alphabet_seed<seed>.json")
    p.add_argument("--alphabets", type=int, nargs="+", help="only these of the profile's alphabet sizes")
    p.add_argument("--steps", type=int, help="train this many steps instead of the profile's (a control run; "
                                              "writes alphabet[_seed<seed>]_steps<steps>_a<sizes>.json)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> Path:
    """The command line: validate everything, then run the sweep and write the results file atomically."""
    args = _parse(argv)
    device = run_device(args)
    settings = dict(PART_PROFILES[args.chapter][args.profile])
    if args.alphabets:
        unknown = sorted(set(args.alphabets) - set(settings["alphabets"]))
        if unknown:
            raise ValueError(f"--alphabets {unknown} are not in the profile's alphabets {settings['alphabets']}")
        settings["alphabets"] = sorted(set(args.alphabets))
    name = "alphabet" + (f"_seed{args.seed}" if args.seed else "")
    if args.steps is not None:  # a control run names its steps and its alphabets
        settings["steps"] = check_int("steps", args.steps, low=1)
        name += f"_steps{args.steps}_a" + "-".join(map(str, settings["alphabets"]))
    name += ".json"
    path = Path(args.out) / args.chapter / args.profile / name
    params = {"chapter": args.chapter, "part": "alphabet", "profile": args.profile, "device": device,
              "seed": args.seed, **settings}
    run = functools.partial(sweep, settings, seed=args.seed, device=device, workers=args.workers)
    return store_sweep(path, params, run, device=device, workers=args.workers, overwrite=args.overwrite)


if __name__ == "__main__":
    from hoplib._book.cli import run_cli

    raise SystemExit(run_cli(main))
