"""Regenerate the construction chapter's stored runs (read by chapters/stored_runs/construction.md).

    python scripts/run_construction.py search --out results/construction/paper/pointer_search.json
    python scripts/run_construction.py precision --out results/construction/paper/precision.json

``search``: the exhaustive pointer-program search to depth 4 (CPU, under a minute). ``precision``: the
smallest exact inverse temperature of the hand-built hop_2 model for N up to 16384, float32 and float64
(CPU, about five minutes); every N is kept in a ``.partial.json`` beside it, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

from hoplib.construction import precision_study
from hoplib.construction.pointer_programs import search_programs
from hoplib.results import OutputError, check_results_path, exclusive, save_results
from hoplib.sweep import run_sweep

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/, also when loaded by path
from cli import add_run_options, executor_from_args, out_path, run_cli, run_device  # noqa: E402

NS = "64,128,256,512,1024,2048,4096,8192,16384"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["precision", "search"])
    parser.add_argument("--out", type=out_path, required=True)
    parser.add_argument("--ns", default=NS, help="precision: sequence lengths N, comma-separated")
    parser.add_argument("--k", type=int, default=2, help="precision: the model's hop count")
    parser.add_argument("--total-letters", type=int, default=4096, help="precision: letters per N")
    parser.add_argument("--max-layers", type=int, default=4, help="search: the deepest programs")
    add_run_options(parser, seed_help="seed of the data")
    args = parser.parse_args(argv)
    device = run_device(args)
    ns = [int(v) for v in args.ns.split(",")]
    if min(args.k, args.total_letters, args.max_layers, *ns) < 1:  # else an empty study would be stored
        raise ValueError(f"--k, --total-letters, --max-layers and --ns must be positive, got k={args.k}, "
                         f"total_letters={args.total_letters}, max_layers={args.max_layers}, ns={ns}")
    if args.out.is_file() and not args.overwrite:
        raise SystemExit(f"{args.out} exists; pass --overwrite to replace it")
    check_results_path(args.out, overwrite=True)  # not a folder; its folder writable, with room: before work
    t0 = time.time()
    if args.what == "search":
        with exclusive(args.out):  # a second process on the same file is refused, not raced
            _search(args, t0)
        return
    params = {"ns": ns, "k": args.k, "alphabet_size": 4, "total_letters": args.total_letters,
              "seed": args.seed, "hi": 300.0, "rel_tol": 0.05}
    job = functools.partial(_precision_point, k=args.k, total_letters=args.total_letters, seed=args.seed,
                            device=device)
    run_sweep(job, ns, args.out, params, device=device, workers=args.workers, overwrite=args.overwrite,
              executor=executor_from_args(args))  # each N kept in a .partial.json: a stopped run resumes


def _search(args: argparse.Namespace, t0: float) -> None:
    if args.out.exists() and not args.overwrite:  # written by another process since the check
        raise SystemExit(f"{args.out} exists; pass --overwrite to replace it")
    ks = list(range(1, 9))
    res = search_programs(args.max_layers, ks=ks, n_seq=24, n=20, seed=args.seed)
    data = {"found": {str(d): sorted(v) for d, v in res.found.items()},
            "n_programs": {str(d): v for d, v in res.n_programs.items()},
            "n_states": {str(d): v for d, v in res.n_states.items()},
            "witnesses": {f"L={d},k={kk}": w for (d, kk), w in res.witnesses.items()}}
    params = {"max_layers": args.max_layers, "ks": ks, "n_seq": 24, "n": 20, "alphabet_size": 4,
              "max_shift": 3, "seed": args.seed}
    try:
        save_results(args.out, data, params, "cpu", time.time() - t0)
    except OSError as exc:
        raise OutputError(f"cannot write {args.out} ({exc.strerror or exc}); the search "
                          f"({time.time() - t0:.0f} s) was not stored, nothing was kept; free space and "
                          "rerun") from exc


def _precision_point(index: int, n: int, *, k: int, total_letters: int, seed: int, device: str) -> list[dict]:
    del index
    return precision_study([n], k=k, total_letters=total_letters, seed=seed, device=device, hi=300.0,
                           rel_tol=0.05)


if __name__ == "__main__":
    sys.exit(run_cli(main))
