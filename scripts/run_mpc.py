"""Regenerate the MPC chapter's stored run of Theorem 3.4 at s = ceil((mN)^δ′) (read by chapters/mpc.md).

    python scripts/run_mpc.py layer-regime --out results/mpc/paper/layer_regime.json

One attention layer (m = 4, H = 2, causal, random weights) run as an MPC protocol by
``hoplib.mpc.layer_sim.layer_as_mpc`` for N = 256 ... 4096 tokens and δ′ in {0.6, 0.75}, with
s = ceil((4N)^δ′) words per machine: the theorem's regime, memory a fixed power of the input. CPU, about
three minutes and 8 GB at N = 4096 (N² inner-product machines). The file is rewritten after every point;
``--resume`` keeps the points already stored and runs the rest.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

from hoplib.mpc import layer_sim
from hoplib.results import OutputError, check_results_path, exclusive, git_commit, load_stored, save_results

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/, also when loaded by path
from cli import out_path, run_cli  # noqa: E402

NS = "256,512,1024,2048,4096"
DELTAS = "0.6,0.75"
WIDTH, HEADS = 4, 2


def layer_regime_point(n: int, delta: float, seed: int) -> dict:
    """One layer on N = ``n`` tokens at s = ceil((m N)^delta): rounds, tree sizes, error."""
    s = math.ceil((WIDTH * n) ** delta - 1e-9)
    if s >= WIDTH * n:
        raise ValueError(f"s = {s} words could hold the whole input of {WIDTH * n} words")
    layer = layer_sim.AttentionLayer.random(WIDTH, HEADS, causal=True, seed=seed)
    x = np.random.default_rng(seed + n).normal(size=(n, WIDTH))
    t0 = time.perf_counter()
    y, st, info = layer_sim.layer_as_mpc(layer, x, s)
    error = float(np.abs(y - layer.forward(x)).max())
    return {"N": n, "input_words": WIDTH * n, "memory": s, "delta": delta, "branching": info["branching"],
            "depth": info["depth"], "rounds": st.rounds, "machines": info["num_machines"],
            "max_memory": st.max_memory, "max_error": error, "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["layer-regime"])
    parser.add_argument("--out", type=out_path, required=True)
    parser.add_argument("--ns", default=NS, help="numbers of tokens N, comma-separated")
    parser.add_argument("--deltas", default=DELTAS, help="memory exponents δ′ < 1, comma-separated")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and the tokens")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing results file")
    parser.add_argument("--resume", action="store_true", help="keep the stored points, run the rest")
    args = parser.parse_args(argv)
    ns = [int(v) for v in args.ns.split(",")]
    deltas = [float(v) for v in args.deltas.split(",")]
    if min(ns) < 2 or not all(0 < d < 1 for d in deltas):
        raise ValueError(f"--ns must be at least 2 and --deltas in (0, 1), got {ns} and {deltas}")
    params = {"ns": ns, "deltas": deltas, "width": WIDTH, "heads": HEADS, "causal": True,
              "seed": args.seed}
    check_results_path(args.out, overwrite=True)  # not a folder; its folder writable, with room: before work
    run = {"layer-regime": _layer_regime}[args.what]  # the one stored run of this command so far
    with exclusive(args.out):  # a second process on the same file is refused, not raced
        run(args, ns, deltas, params)


def _layer_regime(args: argparse.Namespace, ns: list[int], deltas: list[float], params: dict) -> None:
    data: list[dict] = []
    if args.out.exists() and not args.overwrite:
        if not args.resume:
            raise SystemExit(f"{args.out} exists; pass --overwrite to replace it or --resume")
        stored = load_stored(args.out.name, root=args.out.parent).record  # strict JSON, with provenance
        if stored.get("parameters") != params:
            raise ValueError(f"{args.out} was made with other parameters: {stored.get('parameters')}")
        if (made := stored["provenance"].get("git_commit")) != (now := git_commit()):  # one commit per file
            raise ValueError(f"{args.out} was made by commit {made}, not by this code ({now}); pass --overwrite "
                             "to start afresh")
        data = stored["data"]
    done = {(r["N"], r["delta"]) for r in data}
    t0, kept = time.time(), len(data) if args.out.exists() else 0
    for delta in deltas:
        for n in ns:
            if (n, delta) not in done:
                data.append(layer_regime_point(n, delta, args.seed))
                try:
                    save_results(args.out, data, params, "cpu", time.time() - t0)
                except OSError as exc:  # disk full, folder gone read-only: say what is kept
                    what = (f"{args.out} keeps {kept} of them" if kept else "the previous file is kept unchanged"
                            if args.out.exists() else "nothing was kept")
                    raise OutputError(f"cannot write {args.out} ({exc.strerror or exc}) after {len(data)} of "
                                      f"{len(ns) * len(deltas)} points; {what}; free space and rerun with "
                                      "--resume") from exc
                kept = len(data)


if __name__ == "__main__":
    sys.exit(run_cli(main))
