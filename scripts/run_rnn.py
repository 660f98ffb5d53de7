"""Train the RNN chapter's stored sweeps (its appendix section reads them); nothing here runs in the book.

    python scripts/run_rnn.py --part training --workers 2 --out results   # every family, depths 1-4, k <= 4
    python scripts/run_rnn.py --part matched --workers 2 --out results    # GRU, LSTM at the training chapter's
                                                                          # cpu task and recipe
    python scripts/run_rnn.py --part alphabet --workers 2 --out results   # k = 1, growing alphabet
    python scripts/run_rnn.py --part state_lr --out results               # k = 1, |Sigma| = N/4: the learning
    python scripts/run_rnn.py --part state --seed S --out results         # rate of each family, then width
                                                                          # against N with that rate
    python scripts/run_rnn.py --part state_long --seed S --out results    # the same, 2,000 steps, the
                                                                          # transformer at every width too
    python scripts/run_rnn.py --part equal_lr --workers 2 --out results   # the cpu task (N = 64, k <= 8):
    python scripts/run_rnn.py --part equal --seed S --out results         # every family's rate at depth 2,
                                                                          # then depths 2-4 with it, per seed
    python scripts/run_rnn.py --part capacity_lr --out results            # k = 1, |Sigma| = 32, N = 128: each
    python scripts/run_rnn.py --part capacity_lr_edge --out results       # family's rate (beyond the grid's
    python scripts/run_rnn.py --part capacity --seed S --steps B --out results  # ends too), then every
                                                                          # state size with it, per seed and
                                                                          # step budget

writes ``<out>/rnn/<profile>/<part>[_seed<s>].json`` (a ``.partial.json`` beside it keeps the models finished
so far; the cpu settings run on a GPU add ``_cuda``, their data drawn by the GPU's generator).
``--profile paper`` is the GPU-scale grid, not run for the book.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hoplib.lower_bounds import families
from hoplib.lower_bounds.efficient_attention import KINDS as ATTENTION_KINDS
from hoplib.sweep import map_points, run_sweep
from hoplib.tasks import HopTask

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/, also when loaded by path
from cli import add_run_options, executor_from_args, out_path, run_cli, run_device  # noqa: E402

HEADS = 4


def matched_settings(grid: str, kinds: list[str], depths: list[int]) -> dict[str, Any]:
    """The task and recipe of the training chapter's grid ``grid`` (N, k, steps, learning rate, warm-up,
    width, heads, test samples) for ``kinds`` at ``depths``: the tuning effort of its stored transformers;
    ``"grid"`` names the folder of ``results/training/`` that holds them."""
    from hoplib.grids import GRIDS, stored_folder

    g = GRIDS[grid]
    s = g.settings
    return {"seq_len": s["seq_len"], "max_hops": s["max_hops"], "kinds": list(kinds), "depths": list(depths),
            "widths": [g.widths[0][0]], "heads": g.widths[0][1], "steps": s["steps"], "lrs": [s["lr"]],
            "warmup_steps": s["warmup_steps"], "n_samples": s["eval_samples"], "grid": stored_folder(grid)}


STATE = {"lengths": [16, 32, 64], "letters_per_position": 0.25, "kinds": ["gru", "lstm", "mamba"],
         "widths": [16, 64], "transformer_width": 32, "depth": 2, "lrs": [3e-3, 1e-2], "reference": (32, 16),
         "steps": 600, "batch_size": 32, "warmup_steps": 50, "heads": HEADS, "n_samples": 100}
"""The state-size sweep: k = 1 with |Sigma| = N/4; the recurrent families at each width, the transformer at
one; each family's learning rate is the best of ``lrs`` on seed 0 at the reference (N, width)."""

STATE_LONG = {**STATE, "kinds": ["gru", "lstm", "mamba", "transformer"], "widths": [16, 32, 64],
              "transformer_width": None, "steps": 2000, "warmup_steps": 100}
"""The longer state-size sweep: as ``state`` with 2,000 steps, and the transformer at every width like the
recurrent families, so its own width need is measured; each family's rate is the one ``state_lr`` picked."""

EQUAL = {**matched_settings("cpu", ["gru", "lstm", "mamba", "transformer"], [2, 3, 4]),
         "lrs": [1e-3, 3e-3], "reference_depth": 2}
"""The equal-tuning run: the training chapter's cpu task and recipe for all four families; each family's
learning rate is the best of ``lrs`` on seed 0 at ``reference_depth`` (part equal_lr), then every family is
trained at depths 2-4 with its rate on the same seeds (part equal, one file per seed)."""

CAPACITY = {"alphabet_size": 32, "seq_len": 128, "depth": 2, "heads": HEADS,
            "models": {"gru": [{"d_model": 64, "state_width": h} for h in (1, 2, 4, 8, 16, 32, 64)],
                       "lstm": [{"d_model": 64, "state_width": h} for h in (1, 2, 4, 8, 16, 32)],
                       "mamba": [{"d_model": 64, "d_inner": h, "d_state": h, "d_conv": 2, "n_heads": min(4, h)}
                                 for h in (1, 2, 4, 8, 16)],
                       "transformer": [{"d_model": 64, "state_width": 0}]},
            "reference": {"gru": 64, "lstm": 32, "mamba": 8, "transformer": 0},
            "lrs": [1e-3, 3e-3, 1e-2, 3e-2], "beyond": (3e-4, 1e-1), "steps": 2000, "batch_size": 32,
            "warmup_steps": 100, "n_samples": 200}
"""The capacity sweep: k = 1 with |Sigma| = 32 letters at N = 128, where a recurrent layer must carry a table of
|Sigma| log2 |Sigma| = 160 bits. Every model has depth 2 and residual width 64; only the recurrent state varies,
on both sides of the table: ``state_width`` floats (GRU; twice that, LSTM), or a Mamba-style layer of inner width
and state dimension h with a width-2 convolution; the transformer carries none. Each family's learning rate is the
best of ``lrs`` on seed 0 at its ``reference`` size (part capacity_lr; a family whose best is at an end of the grid
is also trained at the rate ``beyond`` that end, part capacity_lr_edge, so that no pick sits at the grid's edge
untested); then every model with it, per seed, at a step budget of ``steps`` (``--steps B``: another budget, its
own file)."""

PROFILES: dict[str, dict[str, dict[str, Any]]] = {  # {profile: {part: settings}}
    "cpu": {"training": {"seq_len": 32, "max_hops": 4, "kinds": ["gru", "lstm", "mamba", "transformer"],
                         "depths": [1, 2, 3, 4], "widths": [64], "steps": 4000, "lrs": [1e-3, 3e-3],
                         "warmup_steps": 100, "n_samples": 200},
            "matched": matched_settings("cpu", ["gru", "lstm"], [1, 2, 3, 4, 5, 6]),
            "alphabet": {"alphabets": [4, 8, 16, 32], "kinds": ["gru", "lstm", "mamba", "transformer"],
                         "depth": 2, "widths": [16, 32, 64], "lrs": [1e-3, 3e-3], "steps": 2000,
                         "batch_size": 32, "warmup_steps": 100, "heads": HEADS, "n_samples": 200},
            "state": STATE,
            "state_lr": STATE,
            "state_long": STATE_LONG,
            "equal": EQUAL,
            "equal_lr": EQUAL,
            "capacity": CAPACITY,
            "capacity_lr": CAPACITY,
            "capacity_lr_edge": CAPACITY},
    "paper": {"training": {"seq_len": 100, "max_hops": 16, "kinds": ["gru", "lstm", "mamba", "transformer"],
                           "depths": [1, 2, 3, 4, 5, 6], "widths": [64, 128], "steps": 20_000,
                           "lrs": [3e-4, 1e-3], "warmup_steps": 1000, "n_samples": 100},
              "matched": matched_settings("paper", ["gru", "lstm", "mamba"], list(range(1, 9))),
              "alphabet": {"alphabets": [4, 8, 16, 32, 64, 128], "kinds": ["gru", "lstm", "mamba", "transformer"],
                           "depth": 2, "widths": [16, 32, 64, 128, 256], "lrs": [3e-4, 1e-3, 3e-3],
                           "steps": 20_000, "batch_size": 64, "warmup_steps": 1000, "heads": HEADS,
                           "n_samples": 500}},
}


def alphabet_points(s: dict[str, Any]) -> list[dict[str, Any]]:
    """Alphabet, family, width, learning rate, in that order of nesting."""
    return [{"alphabet_size": a, "seq_len": 2 * a + 32, "kind": kind, "d_model": w, "depth": s["depth"], "lr": lr}
            for a in s["alphabets"] for kind in s["kinds"] for w in s["widths"] for lr in s["lrs"]]


def alphabet_point(index: int, point: Mapping[str, Any], settings: Mapping[str, Any], *, seed: int = 0,
                   device: str = "cpu") -> dict[str, Any]:
    """Train one point of an alphabet sweep (``alphabet_size``, ``kind``, ``d_model``, ``depth``, ``lr``) on
    single-hop data of length ``point["seq_len"]`` (default 2 |Sigma| + 32); its record with ``error`` at k = 1
    and ``state_bits``."""
    a = point["alphabet_size"]
    task = HopTask(seq_len=point.get("seq_len", 2 * a + 32), alphabet_size=a, max_hops=1, min_hops=1)
    if point["kind"] in ATTENTION_KINDS:
        make_build = functools.partial(families.attention_builder, heads=settings["heads"],
                                       n_features=settings.get("n_features"), window=settings.get("window"),
                                       global_every=settings.get("global_every"))
    else:
        make_build = functools.partial(families.recurrent_builder, heads=settings["heads"])
    rec = families.measure_point(index, dict(point), task, make_build, settings, seed=seed, device=device)[0]
    keys = ("params", "state_bits", "error", "final_loss", "train_time_s")
    return {**point, **{key: rec.get(key, 0) for key in keys}}


def alphabet_sweep(s: dict[str, Any], *, seed: int, device: str) -> tuple[list[dict], Any]:
    """The points and the job of the alphabet part."""
    return alphabet_points(s), functools.partial(alphabet_point, settings=s, seed=seed, device=device)


def alphabet_run(s: dict[str, Any], *, seed: int, device: str, workers: int) -> list[dict]:
    points, job = alphabet_sweep(s, seed=seed, device=device)
    return map_points(job, points, workers=workers)


def state_point(n: int, s: dict[str, Any], kind: str, width: int, lr: float) -> dict[str, Any]:
    return {"alphabet_size": int(n * s["letters_per_position"]), "seq_len": n, "kind": kind, "d_model": width,
            "depth": s["depth"], "lr": lr}


def state_lr_sweep(s: dict[str, Any], *, seed: int, device: str) -> tuple[list[dict], Any]:
    """Every family at the reference (N, width) with every learning rate (the transformer at its width)."""
    n, width = s["reference"]
    points = [state_point(n, s, kind, width, lr) for kind in s["kinds"] for lr in s["lrs"]]
    points += [state_point(n, s, "transformer", s["transformer_width"], lr) for lr in s["lrs"]]
    return points, functools.partial(alphabet_point, settings=s, seed=seed, device=device)


def chosen_lrs(records: list[dict[str, Any]]) -> dict[str, float]:
    """Each family's learning rate of lowest error in the records of the state_lr part (the first on a tie)."""
    best: dict[str, dict[str, Any]] = {}
    for r in records:
        if r["kind"] not in best or r["error"] < best[r["kind"]]["error"]:
            best[r["kind"]] = r
    return {kind: r["lr"] for kind, r in best.items()}


def state_sweep(s: dict[str, Any], *, seed: int, device: str) -> tuple[list[dict], Any]:
    """Length, family, width with each family's chosen rate (``s["lr_by_kind"]``)."""
    lr = s["lr_by_kind"]
    points = [state_point(n, s, kind, w, lr[kind]) for n in s["lengths"] for kind in s["kinds"]
              for w in s["widths"]]
    if s["transformer_width"] is not None:  # part state: the transformer at its one width
        points += [state_point(n, s, "transformer", s["transformer_width"], lr["transformer"])
                   for n in s["lengths"]]
    return points, functools.partial(alphabet_point, settings=s, seed=seed, device=device)


def capacity_point(s: dict[str, Any], kind: str, model: dict[str, Any], lr: float) -> dict[str, Any]:
    return {"alphabet_size": s["alphabet_size"], "seq_len": s["seq_len"], "kind": kind, **model,
            "depth": s["depth"], "lr": lr}


def capacity_lr_sweep(s: dict[str, Any], *, seed: int, device: str) -> tuple[list[dict], Any]:
    """Every family at its reference width with every learning rate of the grid."""
    points = [capacity_point(s, kind, m, lr) for kind, models in s["models"].items() for m in models
              if size(m) == s["reference"][kind] for lr in s["lrs"]]
    return points, functools.partial(alphabet_point, settings=s, seed=seed, device=device)


def edge_points(s: dict[str, Any], picked: dict[str, float]) -> list[dict[str, Any]]:
    """A point at the rate beyond the grid's end for every family whose picked rate is at that end."""
    beyond = {min(s["lrs"]): s["beyond"][0], max(s["lrs"]): s["beyond"][1]}
    return [capacity_point(s, kind, m, beyond[picked[kind]]) for kind, models in s["models"].items()
            for m in models if picked[kind] in beyond and size(m) == s["reference"][kind]]


def size(model: dict[str, Any]) -> int:
    """The state size a capacity model is named by: its state width, or its Mamba-style inner width."""
    return model.get("state_width", model.get("d_inner"))


def capacity_edge_sweep(s: dict[str, Any], *, seed: int, device: str) -> tuple[list[dict], Any]:
    """The rates beyond the grid's ends, for the families picked there (``s["lr_by_kind"]``)."""
    return edge_points(s, s["lr_by_kind"]), functools.partial(alphabet_point, settings=s, seed=seed,
                                                              device=device)


def capacity_sweep(s: dict[str, Any], *, seed: int, device: str) -> tuple[list[dict], Any]:
    """Every model of every family with the family's chosen rate (``s["lr_by_kind"]``)."""
    points = [capacity_point(s, kind, m, s["lr_by_kind"][kind]) for kind, models in s["models"].items()
              for m in models]
    return points, functools.partial(alphabet_point, settings=s, seed=seed, device=device)


def equal_lr_sweep(s: dict[str, Any], *, seed: int, device: str) -> tuple[list[dict], Any]:
    """Every family with every learning rate at the reference depth."""
    return depth_sweep({**s, "depths": [s["reference_depth"]]}, seed=seed, device=device)


def equal_sweep(s: dict[str, Any], *, seed: int, device: str) -> tuple[list[dict], Any]:
    """Every family at every depth with its chosen rate (``s["lr_by_kind"]``)."""
    points, job = depth_sweep({**s, "lrs": [None]}, seed=seed, device=device)
    return [p | {"lr": s["lr_by_kind"][p["kind"]]} for p in points], job


def depth_sweep(s: dict[str, Any], *, seed: int, device: str) -> tuple[list[dict], Any]:
    """The points and the job of a depth part (training, matched)."""
    task = HopTask(seq_len=s["seq_len"], alphabet_size=4, max_hops=s["max_hops"])
    make_build = functools.partial(families.recurrent_builder, heads=s.get("heads", HEADS))
    return families.grid_points(s), families.point_job(task, make_build, s, seed=seed, device=device)


def sweep_parser(doc: str, profiles: dict[str, Any], parts: tuple[str, ...]) -> argparse.ArgumentParser:
    """The options of a lower-bound sweep command (this one and run_efficient_attention.py)."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--profile", default="cpu", choices=tuple(profiles))
    p.add_argument("--part", default=parts[0], choices=parts)
    p.add_argument("--out", type=out_path, required=True, help="results root")
    add_run_options(p, seed_help="seeds other than 0 add _seed<seed> to the file name")
    return p


def run_part(args: argparse.Namespace, s: dict[str, Any], path: Path, params: dict[str, Any],
             depth: Any) -> Path:
    """Train the points of ``args.part`` (the alphabet sweep, or ``depth``'s) with the one sweep runner and
    store their records at ``path``."""
    device = params["device"]
    make = {"alphabet": alphabet_sweep, "state": state_sweep, "state_long": state_sweep, "state_lr": state_lr_sweep,
            "equal_lr": equal_lr_sweep, "equal": equal_sweep, "capacity_lr": capacity_lr_sweep,
            "capacity": capacity_sweep, "capacity_lr_edge": capacity_edge_sweep}.get(args.part, depth)
    points, job = make(s, seed=args.seed, device=device)
    run_sweep(job, points, path, params | s, device=device, workers=args.workers, overwrite=args.overwrite,
              executor=executor_from_args(args))
    return path


def main(argv: list[str] | None = None) -> Path:
    parts = ("training", "matched", "alphabet", "state", "state_lr", "state_long", "equal", "equal_lr",
             "capacity_lr", "capacity_lr_edge", "capacity")
    parser = sweep_parser(__doc__, PROFILES, parts)
    parser.add_argument("--steps", type=int, default=None,
                        help="part capacity: the step budget (other than the settings' adds _steps<B> to the file)")
    args = parser.parse_args(argv)
    device = run_device(args)
    if args.part not in PROFILES[args.profile]:
        raise ValueError(f"profile {args.profile!r} has no part {args.part!r}")
    s = dict(PROFILES[args.profile][args.part])
    name = args.part + (f"_seed{args.seed}" if args.seed else "")
    if args.steps is not None:
        if args.part != "capacity" or args.steps < 1:
            raise ValueError("--steps is for --part capacity, a positive number of steps")
        if args.steps != s["steps"]:
            s["steps"], name = args.steps, f"{name}_steps{args.steps}"
    if args.profile == "cpu" and device != "cpu":  # the cpu settings on an accelerator: its own file
        name += "_" + device.split(":")[0]
    path = Path(args.out) / "rnn" / args.profile / (name + ".json")
    params = {"chapter": "rnn", "part": args.part, "profile": args.profile, "device": device, "seed": args.seed}
    picked_by = {"state": ("state_lr", chosen_lrs),  # the lowest error at the reference point
                 "state_long": ("state_lr", chosen_lrs),
                 "capacity": ("capacity_lr", chosen_lrs),
                 "capacity_lr_edge": ("capacity_lr", chosen_lrs),
                 "equal": ("equal_lr", lambda rows: {r["kind"]: r["lr"] for r in families.best_lr(rows)})}
    if args.part in picked_by:  # each family's rate, read from the stored seed-0 run that picked it
        from hoplib.results import load_stored

        name, pick = picked_by[args.part]
        rows = load_stored(f"rnn/{args.profile}/{name}.json", root=args.out).data
        if args.part == "capacity":  # with the rates beyond the grid's ends, which must have been tried
            rows = rows + load_stored(f"rnn/{args.profile}/capacity_lr_edge.json", root=args.out).data
        s["lr_by_kind"] = pick(rows)
    if not args.part.startswith(("alphabet", "state", "capacity")):  # the depth parts: four letters
        params |= {"alphabet_size": 4, "heads": HEADS, "batch_size": families.BATCH_SIZE}
    return run_part(args, s, path, params, depth_sweep)


if __name__ == "__main__":
    sys.exit(run_cli(main))
