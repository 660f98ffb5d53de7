"""Train the efficient-attention chapter's stored sweeps (its appendix section reads them).

    python scripts/run_efficient_attention.py --part matched --workers 2 --out results   # Performer, Longformer
                                              # at the training chapter's cpu task and recipe
    python scripts/run_efficient_attention.py --part features --out results  # the Performer with m' = N
    python scripts/run_efficient_attention.py --part alphabet --workers 2 --out results  # k = 1, growing alphabet
    python scripts/run_efficient_attention.py --part alphabet --alphabets 16 --steps 4000 --out results
    python scripts/run_efficient_attention.py --part longformer_grid --out results  # w x g at one depth
    python scripts/run_efficient_attention.py --part performer_grid --out results  # m', elu map, softmax
    python scripts/run_efficient_attention.py --part longformer_grid --steps 4000 --out results  # 4x longer

writes ``<out>/efficient_attention/<profile>/<part>[_seed<s>][_steps<n>[_a<sizes>]].json``.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

from run_rnn import matched_settings, run_part, sweep_parser

from hoplib.lower_bounds import efficient_attention as attn
from hoplib.lower_bounds import families
from hoplib.models import gpt_for_task
from hoplib.tasks import HopTask

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/, also when loaded by path
from cli import positive_int, run_cli, run_device  # noqa: E402

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


def _grid(matched: dict[str, Any], attentions: list[dict[str, Any]]) -> dict[str, Any]:
    """The matched task and recipe at depth 3 and a quarter of the steps, one model per attention setting: a grid
    cheap enough for a CPU (each point's settings are part of the point and of its records)."""
    kept = {key: value for key, value in matched.items() if key not in _ATTENTION}  # set per point instead
    return {**kept, "depths": [3], "steps": 1000, "attentions": attentions,
            "kinds": sorted({a["kind"] for a in attentions})}


_CPU_MATCHED = _matched("cpu", [2, 3, 4, 5, 6])
_N = _CPU_MATCHED["seq_len"]  # global_every = N: position 0 is the only global position
_LONGFORMER_GRID = [{"kind": "longformer", "window": w, "global_every": g}  # corners first: a partial
                    for w, g in ((2, _N), (8, _N), (2, 4), (8, 4), (4, _N), (4, 4), (2, 16), (8, 16), (4, 16))]
_PERFORMER_GRID = [{"kind": "performer", "n_features": 16, "feature_map": "favor"},
                   {"kind": "performer", "n_features": 16, "feature_map": "elu"},  # d_head = 64 / 4
                   {"kind": "performer", "n_features": 256, "feature_map": "favor"}, {"kind": "softmax"},
                   {"kind": "performer", "n_features": 64, "feature_map": "favor"}]
PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {"matched": _CPU_MATCHED, "features": _features(_CPU_MATCHED, [3, 5]),
            "longformer_grid": _grid(_CPU_MATCHED, _LONGFORMER_GRID),
            "performer_grid": _grid(_CPU_MATCHED, _PERFORMER_GRID),
            "alphabet": {"alphabets": [4, 8, 16, 32], "kinds": ["softmax", "performer", "longformer"],
                         "depth": 2, "widths": [64], "lrs": [1e-3, 3e-3], "steps": 2000, "batch_size": 32,
                         "warmup_steps": 100, "heads": 4, "n_samples": 200, **_ATTENTION}},
}


def depth_sweep(s: dict[str, Any], *, seed: int, device: str) -> tuple[list[dict], Any]:
    """The points and the job of a depth part (matched, features)."""
    task = HopTask(seq_len=s["seq_len"], alphabet_size=4, max_hops=s["max_hops"])
    make_build = functools.partial(families.attention_builder, heads=s["heads"], n_features=s["n_features"],
                                   window=s["window"], global_every=s["global_every"])
    return families.grid_points(s), families.point_job(task, make_build, s, seed=seed, device=device)


def attention_point_builder(task: HopTask, heads: int) -> families.Builder:
    """GPTs whose attention settings (window, global_every, n_features, feature_map) come with the point."""
    names = ("n_features", "window", "global_every", "feature_map")

    def build(point: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        spec = attn.attention_spec(point["kind"], **{n: point[n] for n in names if n in point})
        model = gpt_for_task(task, depth=point["depth"], d_model=point["d_model"], heads=heads, attention=spec)
        return model, {"heads": heads}
    return build


def grid_sweep(s: dict[str, Any], *, seed: int, device: str) -> tuple[list[dict], Any]:
    """The points and the job of a grid part (longformer_grid, performer_grid)."""
    task = HopTask(seq_len=s["seq_len"], alphabet_size=4, max_hops=s["max_hops"])
    points = [{**a, "d_model": w, "depth": d, "lr": lr} for a in s["attentions"] for w in s["widths"]
              for d in s["depths"] for lr in s["lrs"]]
    make_build = functools.partial(attention_point_builder, heads=s["heads"])
    return points, families.point_job(task, make_build, s, seed=seed, device=device)


def main(argv: list[str] | None = None) -> Path:
    p = sweep_parser(__doc__, PROFILES, ("matched", "features", "alphabet", "longformer_grid", "performer_grid"))
    p.add_argument("--alphabets", type=int, nargs="+", help="alphabet part: only these alphabet sizes")
    p.add_argument("--steps", type=positive_int, help="alphabet and grid parts: a control run with this many steps")
    args = p.parse_args(argv)
    device = run_device(args)
    s = dict(PROFILES[args.profile][args.part])
    name = args.part + (f"_seed{args.seed}" if args.seed else "")
    if args.alphabets:
        s["alphabets"] = sorted(set(args.alphabets))
    if args.steps and args.part not in ("alphabet", "longformer_grid", "performer_grid"):
        raise SystemExit(f"--steps applies to the alphabet and grid parts, not {args.part}")
    if args.steps:
        s["steps"] = args.steps
        name += f"_steps{args.steps}"
        if args.part == "alphabet":
            name += "_a" + "-".join(map(str, s["alphabets"]))
    path = Path(args.out) / "efficient_attention" / args.profile / f"{name}.json"
    params = {"chapter": "efficient_attention", "part": args.part, "profile": args.profile, "device": device,
              "seed": args.seed}
    if args.part != "alphabet":
        params |= {"alphabet_size": 4, "batch_size": families.BATCH_SIZE}
    return run_part(args, s, path, params, grid_sweep if args.part.endswith("_grid") else depth_sweep)


if __name__ == "__main__":
    sys.exit(run_cli(main))
