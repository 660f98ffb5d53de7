"""Train one-layer GPTs with no chain, half a chain and the full chain of thought at several widths and seeds,
and store their greedy-decoding errors (the chain-of-thought chapter's width sweep, Corollary 5.6).

    nice -n 19 python scripts/run_chain_of_thought.py --profile cpu --out results

writes ``<out>/chain_of_thought/<profile>/width_sweep[_seed<s>].json``: one model per (seed, width, chain),
trained and scored by the chapter's own cells tagged ``cot-code`` (``train_cot``, ``cot_errors``), one record per
(model, k). The settings are the chapter's ``cpu`` profile but for the width. A ``.partial.json`` beside the file
keeps the models finished so far; the same command resumes from it.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

from hoplib.sweep import run_sweep

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/, also when loaded by path
from cli import add_run_options, executor_from_args, run_cli, run_device  # noqa: E402

CHAPTER = Path(__file__).resolve().parent.parent / "chapters" / "chain_of_thought.md"
_TRAIN = {"alphabet_size": 4, "heads": 4, "batch_size": 64, "lr": 0.003, "warmup_steps": 50}
PROFILES: dict[str, dict[str, Any]] = {
    "quick": {**_TRAIN, "seq_len": 8, "max_hops": 2, "steps": 30, "n_eval": 20, "widths": [8, 16],
              "seeds": [0], "chains": ["none", "full"]},
    "cpu": {**_TRAIN, "seq_len": 20, "max_hops": 4, "steps": 2500, "n_eval": 500, "widths": [8, 16, 32, 64],
            "seeds": [0, 1, 2], "chains": ["none", "half", "full"]},
}


def chapter_cells() -> dict[str, Any]:
    """The names the chapter's ``cot-code`` cells define (``train_cot``, ``cot_errors``, ...)."""
    import jupytext

    cells = jupytext.read(CHAPTER, fmt="md:myst").cells
    code = "\n\n".join(c.source for c in cells if "cot-code" in c.metadata.get("tags", []))
    names: dict[str, Any] = {}
    exec(compile(code, str(CHAPTER), "exec"), names)  # noqa: S102 - the book's own cells
    return names


def _train_point(index: int, point: dict[str, Any], s: dict[str, Any], device: str) -> list[dict[str, Any]]:
    """One one-layer GPT of width ``point["d_model"]`` on every k of its chain format: its test rows."""
    import torch

    from hoplib.lower_bounds import cot

    del index
    cells, seed = chapter_cells(), point["seed"]
    task = cot.CotTask(seq_len=s["seq_len"], alphabet_size=s["alphabet_size"], max_hops=s["max_hops"],
                       chain=point["chain"])
    torch.manual_seed(seed)
    model = cot.cot_model(task, d_model=point["d_model"], heads=s["heads"])
    hist = cells["train_cot"](model, task, steps=s["steps"], lr=s["lr"], batch_size=s["batch_size"],
                              warmup_steps=s["warmup_steps"], seed=seed, device=device, progress=False)
    tail = hist["loss"][-max(1, s["steps"] // 20):]
    errs = cells["cot_errors"](model, task, n_samples=s["n_eval"], seed=seed, device=device)
    return [{**point, "k": k, **e, "final_loss": sum(tail) / len(tail), "train_time_s": hist["wall_time_s"]}
            for k, e in errs.items()]


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", default="cpu", choices=tuple(PROFILES))
    p.add_argument("--out", required=True, help="results root")
    add_run_options(p, seed_help="seeds other than 0 add _seed<seed> to the file name and shift every seed")
    args = p.parse_args(argv)
    device, s = run_device(args), dict(PROFILES[args.profile])
    s["seeds"] = [args.seed + v for v in s["seeds"]]
    path = Path(args.out) / "chain_of_thought" / args.profile / (
        "width_sweep" + (f"_seed{args.seed}" if args.seed else "") + ".json")
    points = [{"seed": seed, "d_model": m, "chain": chain} for seed in s["seeds"] for m in s["widths"]
              for chain in s["chains"]]  # one seed's whole grid before the next seed's
    params = {"chapter": "chain_of_thought", "part": "width", "profile": args.profile, "device": device, **s}
    run_sweep(functools.partial(_train_point, s=s, device=device), points, path, params, device=device,
              workers=args.workers, overwrite=args.overwrite, executor=executor_from_args(args))
    return path


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
