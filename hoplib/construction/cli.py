"""Command line of the construction chapter's stored runs: ``python -m hoplib.construction precision|search``.

``precision`` runs the precision study (Lemma A.2, :func:`~hoplib.construction.precision.precision_study`)
and ``search`` the exhaustive search over pointer programs
(:func:`~hoplib.construction.pointer_programs.search_programs`); both write a results file with provenance
to ``--out``.
"""

from __future__ import annotations

import argparse
import time

from hoplib._book.provenance import save_results
from hoplib.construction.pointer_programs import search_programs
from hoplib.construction.precision import precision_study

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["precision", "search"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--ns", default="32,64,128,256,512,1024,2048,4096")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--max-layers", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--total-letters", type=int, default=4096)
    return parser


def _precision(args: argparse.Namespace, t0: float) -> None:
    ns = [int(v) for v in args.ns.split(",")]
    params = {"ns": ns, "k": args.k, "alphabet_size": 4, "total_letters": args.total_letters, "seed": 0,
              "hi": 300.0, "rel_tol": 0.05}
    data = []
    for n in ns:  # save after every N, so an interrupted run keeps what it measured
        data += precision_study([n], k=args.k, device=args.device, total_letters=args.total_letters,
                                hi=300.0, rel_tol=0.05, progress=False)
        save_results(args.out, data, params, args.device, time.time() - t0)


def _search(args: argparse.Namespace, t0: float) -> None:
    res = search_programs(args.max_layers, ks=range(1, 9), n_seq=24, n=20)
    data = {"found": {str(d): sorted(v) for d, v in res.found.items()},
            "n_programs": {str(d): v for d, v in res.n_programs.items()},
            "n_states": {str(d): v for d, v in res.n_states.items()},
            "witnesses": {f"L={d},k={kk}": w for (d, kk), w in res.witnesses.items()}}
    params = {"max_layers": args.max_layers, "ks": list(range(1, 9)), "n_seq": 24, "n": 20,
              "alphabet_size": 4, "max_shift": 3, "seed": 0}
    save_results(args.out, data, params, "cpu", time.time() - t0)


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m hoplib.construction precision|search --out FILE`` writes a results file."""
    args = _parser().parse_args(argv)
    t0 = time.time()
    (_precision if args.what == "precision" else _search)(args, t0)
