"""The measurements of the chapter on GNNs and connectivity (Theorem 5.1 and Corollaries 3.3 and 3.5 of the
paper): locality of message passing checked on random GNNs, the depth an exact GNN, pointer doubling and the MPC
components protocol need against the diameter, and GNNs and transformers trained on the same instances."""

from __future__ import annotations

import argparse
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from hoplib._book.device import get_device
from hoplib._book.pool import add_run_options, map_points, run_device, store_sweep
from hoplib._book.tables import Table
from hoplib._book.validate import check_choice, check_int
from hoplib.lower_bounds import gnn, graphs

TRAIN_KEYS = ("learn_families", "gnn_ds", "gnn_width", "gnn_steps", "tf_ds", "tf_depths", "tf_d_model",
              "tf_heads", "tf_steps", "eval_size")
STRUCTURE_KEYS = ("exact_ds", "doubling_ds", "mpc_ds", "mpc_memory")
EDGE_KEYS = ("edge_families", "edge_ds", "edge_depths", "edge_d_model", "edge_heads", "edge_steps", "edge_lr",
             "eval_size")
PAIR_KEYS = ("pair_families", "pair_ds", "pair_depths", "pair_d_model", "pair_heads", "pair_steps", "pair_lr",
             "eval_size")
PARTS = {"edge": EDGE_KEYS, "pair": PAIR_KEYS}  # the edge-set sweeps: edge labels only, or edge and pair labels

PROFILES: dict[str, dict[str, Any]] = {
    "quick": {"exact_ds": [2, 3, 4, 6, 8, 12, 16, 24, 32], "doubling_ds": [2, 4, 8, 16, 32, 64, 128],
              "mpc_ds": [2, 4, 8, 16, 32], "mpc_memory": 256, "learn_families": ["path"], "gnn_ds": [2, 3],
              "gnn_width": 16, "gnn_steps": 120, "tf_ds": [2], "tf_depths": [1, 2], "tf_d_model": 32,
              "tf_heads": 2, "tf_steps": 100, "eval_size": 256, "threshold": 0.9,
              "edge_families": ["path"], "edge_ds": [2, 4], "edge_depths": [1, 2, 3], "edge_d_model": 64,
              "edge_heads": 4, "edge_steps": 1500, "edge_lr": 1e-3,
              "pair_families": ["path"], "pair_ds": [2, 4], "pair_depths": [1, 2], "pair_d_model": 64,
              "pair_heads": 4, "pair_steps": 1500, "pair_lr": 1e-3},
    "cpu": {"exact_ds": [2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64], "doubling_ds": [2, 4, 8, 16, 32, 64, 128, 256],
            "mpc_ds": [2, 4, 8, 16, 32, 64, 128], "mpc_memory": 256, "learn_families": ["path", "cycle"],
            "gnn_ds": [2, 3, 4, 6], "gnn_width": 32, "gnn_steps": 400, "tf_ds": [2, 4], "tf_depths": [1, 2, 3],
            "tf_d_model": 32, "tf_heads": 2, "tf_steps": 500, "eval_size": 512, "threshold": 0.9,
            "edge_families": ["path"], "edge_ds": [2, 4, 6, 8], "edge_depths": [1, 2, 3, 4, 5],
            "edge_d_model": 64, "edge_heads": 4, "edge_steps": 6000, "edge_lr": 1e-3,
            "pair_families": ["path"], "pair_ds": [2, 4, 8, 16], "pair_depths": [1, 2, 3, 4],
            "pair_d_model": 64, "pair_heads": 4, "pair_steps": 12000, "pair_lr": 1e-3},
    "paper": {"exact_ds": [2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128],
              "doubling_ds": [2, 4, 8, 16, 32, 64, 128, 256, 512], "mpc_ds": [2, 4, 8, 16, 32, 64, 128, 256],
              "mpc_memory": 256, "learn_families": ["path", "cycle", "tree"], "gnn_ds": [2, 3, 4, 6, 8, 12],
              "gnn_width": 64, "gnn_steps": 3000, "tf_ds": [2, 4, 8, 12], "tf_depths": [1, 2, 3, 4, 5, 6],
              "tf_d_model": 128, "tf_heads": 4, "tf_steps": 10000, "eval_size": 2048, "threshold": 0.9,
              "edge_families": ["path", "cycle", "tree"], "edge_ds": [2, 4, 8, 16, 32],
              "edge_depths": [1, 2, 3, 4, 5, 6, 7], "edge_d_model": 128, "edge_heads": 4, "edge_steps": 10000,
              "edge_lr": 1e-3, "pair_families": ["path", "cycle", "tree"], "pair_ds": [2, 4, 8, 16, 32, 64],
              "pair_depths": [1, 2, 3, 4, 5, 6, 7], "pair_d_model": 128, "pair_heads": 4, "pair_steps": 20000,
              "pair_lr": 1e-3},
}


def _need(settings: Mapping[str, Any], keys: Sequence[str]) -> None:
    missing = [key for key in keys if key not in settings]
    if missing:
        raise ValueError(f"settings lack {missing}")


def locality_table(family: str, diameter: int, depths: Sequence[int], *, seed: int = 0, n_random: int = 4,
                   device: str | torch.device = "cpu") -> list[dict[str, Any]]:
    """The locality of message passing, measured: for each aggregation and depth L, the largest change of a
    random :class:`~hoplib.lower_bounds.gnn.MessagePassingGNN`'s output at t (double precision) when
    everything outside t's L-ball is perturbed (must be 0) and when everything outside its (L-1)-ball is (must
    not be). Nodes carry the marks of s and t and ``n_random`` random features."""
    dev = get_device(device)
    g = graphs.sample_graphs(family, check_int("diameter", diameter, low=1), 64, seed=seed, device=dev)
    x = graphs.node_features(g, n_random, seed=seed).double()
    rows = []
    for agg in gnn.AGGREGATIONS:
        for depth in depths:
            depth = check_int("depths[i]", depth, low=1)
            torch.manual_seed(seed + depth)
            model = gnn.MessagePassingGNN(2 + n_random, 16, depth, aggregation=agg).double().to(dev)
            with torch.no_grad():
                out = model(x, g.edges, g.t)
                e_out, x_out = gnn.perturb_outside_ball(g, x, g.t, depth, seed=seed)
                e_in, x_in = gnn.perturb_outside_ball(g, x, g.t, depth - 1, seed=seed)
                rows.append({"aggregation": agg, "L": depth,
                             "change (outside L-ball)": float((model(x_out, e_out, g.t) - out).abs().max()),
                             "change (outside (L-1)-ball)": float((model(x_in, e_in, g.t) - out).abs().max())})
    return rows


def same_output_when_source_moves(family: str, diameter: int, max_depth: int, *, seed: int = 0,
                                  device: str | torch.device = "cpu") -> list[bool]:
    """For depths 0..``max_depth``: does a random GNN give the same output at t on connected instances and on
    the same instances with s moved into the other component? (True for every depth below the diameter.)"""
    dev = get_device(device)
    pos = graphs.sample_graphs(family, check_int("diameter", diameter, low=1), 64, seed=seed, device=dev,
                               p_connected=1.0)
    neg = gnn.move_source_to_other_component(pos)
    same = []
    for depth in range(check_int("max_depth", max_depth, low=0) + 1):
        torch.manual_seed(depth)
        model = gnn.MessagePassingGNN(6, 16, depth).double().to(dev)
        with torch.no_grad():
            a = model(graphs.node_features(pos, 4, seed=1).double(), pos.edges, pos.t)
            b = model(graphs.node_features(neg, 4, seed=1).double(), neg.edges, neg.t)
        same.append(bool(torch.equal(a, b)))
    return same


def depth_vs_diameter(settings: Mapping[str, Any], *, seed: int = 0,
                      device: str | torch.device = "cpu") -> dict[str, list[dict[str, Any]]]:
    """For every graph family: the exact GNN's smallest exact depth per D (``exact_ds``), the squarings of
    pointer doubling (``doubling_ds``) and the MPC components protocol's iterations and rounds (``mpc_ds``,
    memory ``mpc_memory``)."""
    _need(settings, STRUCTURE_KEYS)
    out: dict[str, list[dict[str, Any]]] = {"exact": [], "doubling": [], "mpc": []}
    for fam in graphs.FAMILIES:
        out["exact"] += gnn.exact_gnn_depth_vs_diameter(fam, list(settings["exact_ds"]), seed=seed, device=device)
        out["doubling"] += gnn.doubling_rounds_vs_diameter(fam, list(settings["doubling_ds"]), seed=seed,
                                                           device=device)
        out["mpc"] += gnn.mpc_connectivity_rounds(fam, list(settings["mpc_ds"]), settings["mpc_memory"], seed=seed)
    return out


def structure_holds(found: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, bool]:
    """The three claims about :func:`depth_vs_diameter`: the exact GNN needs exactly D layers and is right at
    D; doubling is right after exactly ⌈log₂ D⌉ squarings; the MPC protocol labels every instance right."""
    return {"exact_needs_D": all(r["smallest_exact_depth"] == r["D"] and r["acc_at_D"] == 1.0
                                 for r in found["exact"]),
            "doubling_log_D": all(r["correct"] and r["squarings"] == math.ceil(math.log2(r["D"]))
                                  for r in found["doubling"]),
            "mpc_correct": all(r["correct"] for r in found["mpc"])}


def plot_structure(found: Mapping[str, Sequence[Mapping[str, Any]]]):
    """:func:`hoplib.lower_bounds.gnn.plot_depth_vs_diameter` of :func:`depth_vs_diameter`'s results, with the
    Theorem 5.1 scale drawn for the width-1 exact GNN; returns the figure."""
    return gnn.plot_depth_vs_diameter(list(found["exact"]), list(found["doubling"]), list(found["mpc"]), width=1)


def learned_sweep(settings: Mapping[str, Any], *, seed: int = 0, device: str | torch.device = "cpu",
                  progress: bool = False) -> list[dict[str, Any]]:
    """:func:`hoplib.lower_bounds.gnn.depth_sweep` for every family of ``learn_families``: GNNs of depths
    D-1, D, D+1 for each D of ``gnn_ds``, transformers of ``tf_depths`` for each D of ``tf_ds`` (reading the
    marks of s and t in the serialised edge list)."""
    _need(settings, TRAIN_KEYS)
    rows: list[dict[str, Any]] = []
    for fam in settings["learn_families"]:
        rows += gnn.depth_sweep(
            fam, list(settings["gnn_ds"]), "around", list(settings["tf_depths"]), tf_diameters=list(settings["tf_ds"]),
            gnn={"width": settings["gnn_width"], "n_random": 0, "steps": settings["gnn_steps"],
                 "eval_size": settings["eval_size"]},
            transformer={"d_model": settings["tf_d_model"], "heads": settings["tf_heads"],
                         "steps": settings["tf_steps"], "eval_size": settings["eval_size"], "marks": True},
            seed=seed, device=device, progress=progress)
    return rows


def learned_summary(rows: Sequence[Mapping[str, Any]], threshold: float, eval_size: int) -> dict[str, Any]:
    """What the chapter reads off :func:`learned_sweep`: ``noise``, five standard deviations of a chance
    accuracy on ``eval_size`` test instances; ``shallow_at_chance``, every GNN shallower than D within it of
    1/2 (the locality bound); ``deep_ok`` of ``deep_n`` GNNs with depth >= D reaching ``threshold``;
    ``all_or_nothing``, every GNN either at chance or at the threshold; and the best transformer accuracy
    ``tf_best`` with ``tf_at_chance``."""
    noise = 5 * 0.5 / math.sqrt(check_int("eval_size", eval_size, low=1))
    deep = [r for r in rows if r["model"] == "gnn" and r["depth"] >= r["D"]]
    tf = [r["accuracy"] for r in rows if r["model"] == "transformer"]
    if not deep or not tf:
        raise ValueError("rows must hold GNNs of depth >= D and transformers (see learned_sweep)")
    return {"noise": noise,
            "shallow_at_chance": all(r["accuracy"] < 0.5 + noise for r in rows
                                     if r["model"] == "gnn" and r["depth"] < r["D"]),
            "deep_ok": sum(r["accuracy"] >= threshold for r in deep), "deep_n": len(deep),
            "all_or_nothing": all(r["accuracy"] < 0.5 + noise or r["accuracy"] >= threshold
                                  for r in rows if r["model"] == "gnn"),
            "tf_best": max(tf), "tf_at_chance": max(tf) < 0.5 + noise}


def learned_text(rows: Sequence[Mapping[str, Any]]) -> Table:
    """Test accuracy of the trained models as a :class:`Table`: one row per (family, D, model), one column per
    depth (``-``: that depth was not trained)."""
    depths = sorted({int(r["depth"]) for r in rows})
    cells: dict[tuple[str, int, str], dict[int, float]] = {}
    for r in rows:
        cells.setdefault((r["family"], int(r["D"]), r["model"]), {})[int(r["depth"])] = float(r["accuracy"])
    return Table(["family", "D", "model", *(f"depth {d}" for d in depths)],
                 [[fam, str(d), model, *(f"{acc[dp]:.3f}" if dp in acc else "-" for dp in depths)]
                  for (fam, d, model), acc in cells.items()])


# --------------------------------------------------------------------------- the edge-set transformer
def sweep_settings(settings: Mapping[str, Any], part: str = "edge") -> dict[str, Any]:
    """The settings of one edge-set sweep under the ``edge_*`` names: the profile's ``edge_*`` settings for
    ``part="edge"`` (edge labels only), its ``pair_*`` settings renamed for ``part="pair"`` (edge and pair
    labels); ``pairs`` says which."""
    check_choice("part", part, tuple(PARTS))
    _need(settings, PARTS[part])
    out = {key.replace("pair_", "edge_", 1): settings[key] for key in PARTS[part]}
    return {**out, "pairs": part == "pair"}


def edge_points(settings: Mapping[str, Any], part: str = "edge") -> list[dict[str, Any]]:
    """The (family, D, depth) models of the edge-set sweep ``part``, in training order (diameters below a
    family's minimum are skipped)."""
    s = sweep_settings(settings, part)
    return [{"family": fam, "D": int(d), "depth": int(depth)} for fam in s["edge_families"]
            for d in s["edge_ds"] if d >= graphs.min_diameter(fam) for depth in s["edge_depths"]]


def train_edge_point(index: int, point: Mapping[str, Any], settings: Mapping[str, Any], *, part: str = "edge",
                     seed: int = 0, device: str = "cpu") -> dict[str, Any]:
    """Train one model of :func:`edge_points` (:func:`hoplib.lower_bounds.gnn.train_edge_transformer`)."""
    del index  # the position in the sweep; the seed is the same for every model
    s = sweep_settings(settings, part)
    return gnn.train_edge_transformer(point["family"], point["D"], point["depth"], d_model=s["edge_d_model"],
                                      heads=s["edge_heads"], steps=s["edge_steps"], lr=s["edge_lr"], seed=seed,
                                      pairs=s["pairs"], eval_size=s["eval_size"], device=device)


def edge_sweep(settings: Mapping[str, Any], *, part: str = "edge", seed: int = 0, device: str = "cpu",
               workers: int = 1, on_model: Callable[[list[dict[str, Any]]], None] | None = None
               ) -> list[dict[str, Any]]:
    """Train every model of :func:`edge_points` (``workers`` CPU processes) and return their records in order."""
    job = functools.partial(train_edge_point, settings=dict(settings), part=part, seed=seed, device=str(device))
    return map_points(job, edge_points(settings, part), workers=workers, device=str(device), on_result=on_model)


def edge_depths_needed(rows: Sequence[Mapping[str, Any]], threshold: float) -> dict[tuple[str, int], int | None]:
    """``{(family, D): smallest depth whose connectivity accuracy reaches threshold}`` (None: no trained depth),
    by :func:`hoplib.lower_bounds.gnn.smallest_depth`."""
    keys = dict.fromkeys((r["family"], int(r["D"])) for r in rows)
    return {(fam, d): gnn.smallest_depth(list(rows), "edge-transformer", d, threshold, fam) for fam, d in keys}


def edge_summary(rows: Sequence[Mapping[str, Any]], threshold: float) -> dict[str, Any]:
    """What the chapter asserts of the edge sweep: ``needed`` (:func:`edge_depths_needed`); ``all_solved``,
    every (family, D) reached ``threshold`` at some trained depth; ``below_D``, the depth needed is below
    the diameter wherever D >= 4 (a GNN read at t needs D layers); ``within_log``, it is at most
    ``ceil(log2 D)``, the squarings of pointer doubling; ``grows``, it never falls as D grows within a family;
    ``shallow_fails``, depth 1 is at chance (below 0.6) for every D >= 4."""
    needed = edge_depths_needed(rows, threshold)
    solved = {key: d for key, d in needed.items() if d is not None}
    by_family: dict[str, list[int]] = {}
    for (fam, d) in sorted(solved):
        by_family.setdefault(fam, []).append(solved[(fam, d)])
    return {"needed": needed, "all_solved": len(solved) == len(needed),
            "below_D": all(dep < d for (_, d), dep in solved.items() if d >= 4),
            "within_log": all(dep <= math.ceil(math.log2(d)) for (_, d), dep in solved.items()),
            "grows": all(v == sorted(v) for v in by_family.values()),
            "shallow_fails": all(r["accuracy"] < 0.6 for r in rows if r["depth"] == 1 and r["D"] >= 4)}


def edge_text(rows: Sequence[Mapping[str, Any]]) -> Table:
    """Connectivity accuracy of the edge-set transformers as a :class:`Table`, one row per (family, D), one
    column per depth (edge accuracy in brackets)."""
    depths = sorted({int(r["depth"]) for r in rows})
    cells: dict[tuple[str, int], dict[int, str]] = {}
    for r in rows:
        cells.setdefault((r["family"], int(r["D"])), {})[int(r["depth"])] = (
            f"{r['accuracy']:.3f} ({r['edge_accuracy']:.2f})")
    return Table(["family", "D", *(f"depth {d}" for d in depths)],
                 [[fam, str(d), *(row.get(dp, "-") for dp in depths)] for (fam, d), row in cells.items()],
                 caption="accuracy at t (edge accuracy)")


def budget_text(rows: Sequence[Mapping[str, Any]], diameter: int) -> Table:
    """The edge-set models of one diameter, from any number of runs, as a :class:`Table`: one row per training
    length (steps), one column per depth, connectivity accuracy at t (edge accuracy in brackets); ``-`` where
    no run trained that pair. Shows what longer training and more layers each bring."""
    sel = [r for r in rows if int(r["D"]) == diameter]
    if not sel:
        raise ValueError(f"no rows with D = {diameter}")
    depths = sorted({int(r["depth"]) for r in sel})
    cells: dict[int, dict[int, str]] = {}
    for r in sel:
        cells.setdefault(int(r["steps"]), {})[int(r["depth"])] = f"{r['accuracy']:.3f} ({r['edge_accuracy']:.2f})"
    return Table(["steps", *(f"depth {d}" for d in depths)],
                 [[f"{steps:,}", *(row.get(d, "-") for d in depths)] for steps, row in sorted(cells.items())],
                 caption=f"D = {diameter}: accuracy at t (edge accuracy)")


def plot_edge_sweep(rows: Sequence[Mapping[str, Any]], threshold: float, title: str = "edge-set transformer"):
    """Left (titled ``title``): connectivity accuracy against depth, one colour per D, one line style per
    family. Right: the smallest depth reaching ``threshold`` against D (log axis), with the ``ceil(log2 D)``
    squarings of pointer doubling and the GNN's ``L = D``."""
    import matplotlib.pyplot as plt

    from hoplib.plots import integer_ticks

    fig, (left, right) = plt.subplots(1, 2, figsize=(8.6, 3.8))
    ds = sorted({int(r["D"]) for r in rows})
    fams = list(dict.fromkeys(r["family"] for r in rows))
    cmap, styles, marks = plt.get_cmap("viridis"), ["-", "--", ":"], ["o", "s", "^"]
    for i, d in enumerate(ds):
        for j, fam in enumerate(fams):
            sel = sorted((r["depth"], r["accuracy"]) for r in rows if r["D"] == d and r["family"] == fam)
            if sel:
                left.plot(*zip(*sel, strict=True), ls=styles[j % 3], marker=marks[j % 3],
                          color=cmap(0.85 * i / max(1, len(ds) - 1)), label=f"D = {d}" if j == 0 else None)
    left.axhline(threshold, color="0.5", lw=1, ls=":")
    left.set(xlabel="depth L", ylabel="accuracy at t", ylim=(0.4, 1.02), title=title)
    left.legend(loc="center right")
    needed, top = edge_depths_needed(rows, threshold), max(int(r["depth"]) for r in rows)
    for j, fam in enumerate(fams):
        pts = sorted((d, dep) for (f, d), dep in needed.items() if f == fam and dep is not None)
        if pts:
            right.plot(*zip(*pts, strict=True), marker=marks[j % 3], ls=styles[j % 3], label=fam)
        none = sorted(d for (f, d), dep in needed.items() if f == fam and dep is None)
        if none:
            right.plot(none, [top + 0.5] * len(none), ls="none", marker="^", mfc="white", color="C0",
                       label=f"{fam}: no depth ≤ {top}")
    ints = range(min(ds), max(ds) + 1)
    right.plot(ints, [math.ceil(math.log2(d)) for d in ints], "x:", color="0.4", label="⌈log₂ D⌉ (doubling)")
    right.plot(ds, ds, color="crimson", lw=1, ls="--", label="GNN: L = D")
    right.set_xscale("log", base=2)
    right.set_xticks(ds, [str(d) for d in ds])
    right.set(xlabel="diameter D", ylabel="depth needed", ylim=(0, max(ds) + 1 if max(ds) <= 8 else 10),
              title=f"smallest depth with accuracy ≥ {threshold}")
    right.legend(loc="upper left")
    integer_ticks(left, "x")
    integer_ticks(right, "y")
    fig.tight_layout()
    return fig


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m hoplib.lower_bounds.experiments.gnn",
                                description="Train the edge-set transformer sweep of the GNN chapter and store it.")
    p.add_argument("--profile", default="cpu", choices=tuple(PROFILES))
    p.add_argument("--part", default="edge", choices=tuple(PARTS),
                   help="edge: edge labels only (edge_sweep.json); pair: edge and pair labels (pair_sweep.json)")
    p.add_argument("--out", required=True, help="results root; writes <out>/gnn/<profile>/<part>_sweep.json")
    add_run_options(p, seed_help="seeds other than 0 write <part>_sweep_seed<seed>.json")
    p.add_argument("--diameters", type=int, nargs="+", help="only these of the profile's diameters")
    p.add_argument("--depths", type=int, nargs="+",
                   help="train these depths (any beyond the profile's add _depths<a>-<b> to the file name)")
    p.add_argument("--steps", type=int, help="train this many steps instead of the profile's (a control run; "
                                              "writes <part>_sweep[_seed<seed>]_steps<steps>.json)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> Path:
    """The command line: validate everything, then run :func:`edge_sweep` and write the results atomically
    (a ``.partial.json`` beside it holds the models finished so far, marked incomplete)."""
    args = _parse(argv)
    device = run_device(args)
    settings = {key: PROFILES[args.profile][key] for key in (*PARTS[args.part], "threshold")}
    name = f"{args.part}_sweep" + (f"_seed{args.seed}" if args.seed else "")
    if args.diameters:
        unknown = sorted(set(args.diameters) - set(settings[f"{args.part}_ds"]))
        if unknown:
            raise ValueError(f"--diameters {unknown} are not in the profile's diameters "
                             f"{settings[f'{args.part}_ds']}")
        settings[f"{args.part}_ds"] = sorted(set(args.diameters))
    deeper = ""
    if args.depths:
        depths = sorted({check_int("depths[i]", d, low=1) for d in args.depths})
        if not set(depths) <= set(settings[f"{args.part}_depths"]):  # a deeper control run: say so in the name
            deeper = "_depths" + "-".join(map(str, depths))
        settings[f"{args.part}_depths"] = depths
    if args.steps is not None:
        settings[f"{args.part}_steps"] = check_int("steps", args.steps, low=1)
        name += f"_steps{args.steps}"
    name += deeper + ".json"
    path = Path(args.out) / "gnn" / args.profile / name
    params = {"chapter": "gnn", "part": args.part, "profile": args.profile, "device": device, "seed": args.seed,
              **settings}
    run = functools.partial(edge_sweep, settings, part=args.part, seed=args.seed, device=device,
                            workers=args.workers)
    return store_sweep(path, params, run, device=device, workers=args.workers, overwrite=args.overwrite)


__all__ = ["EDGE_KEYS", "PAIR_KEYS", "PARTS", "PROFILES", "STRUCTURE_KEYS", "TRAIN_KEYS", "budget_text",
           "depth_vs_diameter", "edge_depths_needed", "edge_points", "edge_summary", "edge_sweep", "edge_text",
           "learned_summary", "learned_sweep", "learned_text", "locality_table", "main", "plot_edge_sweep",
           "plot_structure", "same_output_when_source_moves", "structure_holds", "sweep_settings",
           "train_edge_point"]


if __name__ == "__main__":
    from hoplib._book.cli import run_cli

    raise SystemExit(run_cli(main))
