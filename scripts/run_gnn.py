"""Train the edge-set transformer sweeps of the GNN chapter and store them (the appendix's stored runs).

    python scripts/run_gnn.py --profile cpu --part edge --workers 2 --out results    # edge labels
    python scripts/run_gnn.py --profile cpu --part pair --workers 2 --out results    # edge and pair labels
    python scripts/run_gnn.py --profile cpu --part pair --diameters 16 --depths 5 --steps 24000 --out results
    python scripts/run_gnn.py --profile cpu --part mpc --out results    # MPC components at s = (2|E|)^delta

writes ``<out>/gnn/<profile>/<part>_sweep[_seed<s>][_steps<n>][_depths<a>-<b>].json``: one model per
(family, D, depth) by :func:`hoplib.lower_bounds.gnn.train_edge_transformer`, or for ``mpc`` one protocol run
per (family, D, delta) by :func:`hoplib.lower_bounds.gnn.mpc_components`. A ``.partial.json`` beside it
keeps the points finished so far.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

from hoplib.lower_bounds import gnn, graphs
from hoplib.sweep import run_sweep

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/, also when loaded by path
from cli import add_run_options, executor_from_args, out_path, positive_int, run_cli, run_device  # noqa: E402

_SHARED = {"families": ["path"], "heads": 4, "lr": 1e-3, "eval_size": 512, "threshold": 0.9}
PROFILES: dict[str, dict[str, dict[str, Any]]] = {  # {profile: {part: settings}}
    "quick": {"edge": {"ds": [2, 4], "depths": [1, 2, 3], "d_model": 64, "steps": 1500},
              "pair": {"ds": [2, 4], "depths": [1, 2], "d_model": 64, "steps": 1500}},
    "cpu": {"edge": {"ds": [2, 4, 6, 8], "depths": [1, 2, 3, 4, 5], "d_model": 64, "steps": 6000},
            "pair": {"ds": [2, 4, 8, 16], "depths": [1, 2, 3, 4], "d_model": 64, "steps": 12000}},
    "paper": {"edge": {"ds": [2, 4, 8, 16, 32], "depths": [1, 2, 3, 4, 5, 6, 7], "d_model": 128,
                       "steps": 10000, "families": list(graphs.FAMILIES), "eval_size": 2048},
              "pair": {"ds": [2, 4, 8, 16, 32, 64], "depths": [1, 2, 3, 4, 5, 6, 7], "d_model": 128,
                       "steps": 20000, "families": list(graphs.FAMILIES), "eval_size": 2048}},
}
MPC_PROFILES = {"quick": {"families": ["path"], "ds": [256, 512, 1024], "deltas": ["3/4"]},
                "cpu": {"families": list(graphs.FAMILIES), "ds": [2**i for i in range(8, 15)],
                        "deltas": ["1/2", "2/3", "3/4"]}}
MPC_PROFILES["paper"] = MPC_PROFILES["cpu"]


def _mpc_point(index: int, point: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    del index
    row = gnn.mpc_components(point["family"], point["D"], point["delta"], seed=seed)
    return [] if row is None else [row]  # none where s is below the protocol's least memory


def settings(profile: str, part: str) -> dict[str, Any]:
    """The stored parameters of one sweep, named as the committed files name them (``edge_ds``, ...)."""
    s = {**_SHARED, **PROFILES[profile][part]}
    return {**{f"{part}_{key}": s[key] for key in ("families", "ds", "depths", "d_model", "heads", "steps", "lr")},
            "eval_size": s["eval_size"], "threshold": s["threshold"]}


def _train_point(index: int, point: dict[str, Any], s: dict[str, Any], part: str, seed: int,
                 device: str) -> dict[str, Any]:
    del index  # every model of a sweep has the same seed
    return gnn.train_edge_transformer(point["family"], point["D"], point["depth"], d_model=s[f"{part}_d_model"],
                                      heads=s[f"{part}_heads"], steps=s[f"{part}_steps"], lr=s[f"{part}_lr"],
                                      seed=seed, pairs=part == "pair", eval_size=s["eval_size"], device=device)


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", default="cpu", choices=tuple(PROFILES))
    p.add_argument("--part", default="edge", choices=("edge", "pair", "mpc"),
                   help="edge: edge labels only; pair: edge and pair labels; mpc: components protocol")
    p.add_argument("--out", type=out_path, required=True, help="results root")
    add_run_options(p, seed_help="seeds other than 0 add _seed<seed> to the file name")
    p.add_argument("--diameters", type=int, nargs="+", help="only these of the profile's diameters")
    p.add_argument("--depths", type=int, nargs="+", help="these depths (beyond the profile's: _depths<a>-<b>)")
    p.add_argument("--steps", type=positive_int, help="train this many steps (a control run: _steps<steps>)")
    args = p.parse_args(argv)
    device, part = run_device(args), args.part
    if part == "mpc":
        if args.diameters or args.depths or args.steps is not None:
            raise ValueError("--part mpc takes none of --diameters, --depths, --steps")
        m = MPC_PROFILES[args.profile]
        path = Path(args.out) / "gnn" / args.profile / ("mpc_sweep" + (f"_seed{args.seed}" if args.seed else "")
                                                        + ".json")
        points = [{"family": fam, "D": d, "delta": delta} for delta in m["deltas"][::-1] for d in m["ds"]
                  for fam in m["families"]]  # the cheap points (large delta, small D) first
        params = {"chapter": "gnn", "part": part, "profile": args.profile, "device": device, "seed": args.seed,
                  **{f"mpc_{k}": v for k, v in m.items()}}
        run_sweep(functools.partial(_mpc_point, seed=args.seed), points, path, params, device=device,
                  workers=args.workers, overwrite=args.overwrite, executor=executor_from_args(args))
        return path
    s = settings(args.profile, part)
    name, deeper = f"{part}_sweep" + (f"_seed{args.seed}" if args.seed else ""), ""
    if args.diameters:
        unknown = sorted(set(args.diameters) - set(s[f"{part}_ds"]))
        if unknown:  # a control run names its diameters by the profile's
            raise ValueError(f"--diameters {unknown} are not in the profile's diameters {s[f'{part}_ds']}")
        s[f"{part}_ds"] = sorted(set(args.diameters))
    if args.depths:
        depths = sorted(set(args.depths))
        if not set(depths) <= set(s[f"{part}_depths"]):
            deeper = "_depths" + "-".join(map(str, depths))
        s[f"{part}_depths"] = depths
    if args.steps is not None:
        s[f"{part}_steps"] = args.steps
        name += f"_steps{args.steps}"
    path = Path(args.out) / "gnn" / args.profile / f"{name}{deeper}.json"
    points = [{"family": fam, "D": d, "depth": depth} for fam in s[f"{part}_families"] for d in s[f"{part}_ds"]
              if d >= graphs.min_diameter(fam) for depth in s[f"{part}_depths"]]
    job = functools.partial(_train_point, s=s, part=part, seed=args.seed, device=device)
    params = {"chapter": "gnn", "part": part, "profile": args.profile, "device": device, "seed": args.seed, **s}
    run_sweep(job, points, path, params, device=device, workers=args.workers, overwrite=args.overwrite,
              executor=executor_from_args(args))
    return path


if __name__ == "__main__":

    raise SystemExit(run_cli(main))
