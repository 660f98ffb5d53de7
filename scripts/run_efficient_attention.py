"""Train the efficient-attention chapter's stored sweeps (its appendix section reads them).

    python scripts/run_efficient_attention.py --part matched --workers 2 --out results   # Performer, Longformer
                                              # at the training chapter's medium task and recipe
    python scripts/run_efficient_attention.py --part features --out results  # the Performer with m' = N
    python scripts/run_efficient_attention.py --part alphabet --workers 2 --out results  # k = 1, growing alphabet
    python scripts/run_efficient_attention.py --part alphabet --alphabets 16 --steps 4000 --out results

writes ``<out>/efficient_attention/<profile>/<part>[_seed<s>][_steps<n>_a<sizes>].json``.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

from run_rnn import matched_settings, run_part, sweep_parser

from hoplib.lower_bounds import sweep
from hoplib.tasks import HopTask

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/, also when loaded by path
from cli import run_device  # noqa: E402

_ATTENTION = {"n_features": 16, "window": 4, "global_every": None}


def _matched(grid: str, depths: list[int]) -> dict[str, Any]:
    """Performer and Longformer at a training-chapter grid; the Longformer's one global position is 0 (the
    hop-count token), so everything else travels through windows, w positions per layer."""
    s = matched_settings(grid, ["performer", "longformer"], depths)
    return {**s, "n_features": _ATTENTION["n_features"], "window": _ATTENTION["window"],
            "global_every": s["seq_len"]}


def _features(matched: dict[str, Any], depths: list[int]) -> dict[str, Any]:
    """The control: the matched Performer with one random feature per position (m' = N)."""
    return {**matched, "kinds": ["performer"], "n_features": matched["seq_len"], "depths": depths}


_CPU_MATCHED = _matched("medium", [2, 3, 4, 5, 6])
PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {"matched": _CPU_MATCHED, "features": _features(_CPU_MATCHED, [3, 5]),
            "alphabet": {"alphabets": [4, 8, 16, 32], "kinds": ["softmax", "performer", "longformer"],
                         "depth": 2, "widths": [64], "lrs": [1e-3, 3e-3], "steps": 2000, "batch_size": 32,
                         "warmup_steps": 100, "heads": 4, "n_samples": 200, **_ATTENTION}},
}


def depth_sweep(s: dict[str, Any], *, seed: int, device: str) -> tuple[list[dict], Any]:
    """The points and the job of a depth part (matched, features)."""
    task = HopTask(seq_len=s["seq_len"], alphabet_size=4, max_hops=s["max_hops"])
    make_build = functools.partial(sweep.attention_builder, heads=s["heads"], n_features=s["n_features"],
                                   window=s["window"], global_every=s["global_every"])
    return sweep.grid_points(s), sweep.point_job(task, make_build, s, seed=seed, device=device)


def main(argv: list[str] | None = None) -> Path:
    p = sweep_parser(__doc__, PROFILES, ("matched", "features", "alphabet"))
    p.add_argument("--alphabets", type=int, nargs="+", help="alphabet part: only these alphabet sizes")
    p.add_argument("--steps", type=int, help="alphabet part: a control run with this many steps")
    args = p.parse_args(argv)
    device = run_device(args)
    s = dict(PROFILES[args.profile][args.part])
    name = args.part + (f"_seed{args.seed}" if args.seed else "")
    if args.alphabets:
        s["alphabets"] = sorted(set(args.alphabets))
    if args.steps:
        s["steps"] = args.steps
        name += f"_steps{args.steps}_a" + "-".join(map(str, s["alphabets"]))
    path = Path(args.out) / "efficient_attention" / args.profile / f"{name}.json"
    params = {"chapter": "efficient_attention", "part": args.part, "profile": args.profile, "device": device,
              "seed": args.seed}
    if args.part != "alphabet":
        params |= {"alphabet_size": 4, "batch_size": sweep.BATCH_SIZE}
    return run_part(args, s, path, params, depth_sweep)


if __name__ == "__main__":
    main()
