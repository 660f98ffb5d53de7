"""Samples per second of HopTask.sample against an authors-style per-sample generator.

    python benchmarks/bench_tasks.py [--device auto] [--batch-size 1024] [--seconds 3] [--out results/benchmarks]

Setting of the foundation issue: batch 1024, seq_len 100, 4 letters, k uniform in 0..16. The authors-style
generator (one Python string per sample, one backwards string search per position per hop) always runs on the
CPU. It and the timing loop are the cells of chapters/hop_task.md tagged ``authors-generator``, run from there
(:func:`chapter_generator`). Writes <out>/bench_tasks_<device>.json with provenance.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from hoplib.device import get_device
from hoplib.results import save_results
from hoplib.tasks import HopTask

CHAPTER = Path(__file__).resolve().parents[1] / "chapters" / "hop_task.md"


def chapter_generator() -> dict:
    """The names defined by the cells of the hop_task chapter tagged ``authors-generator`` (the chapter is
    their source): ``authors_style_sample`` and ``measure_throughput`` among them."""
    import jupytext

    cells = [c.source for c in jupytext.read(CHAPTER, fmt="md:myst").cells
             if "authors-generator" in c.metadata.get("tags", [])]
    if not cells:
        raise ValueError(f"{CHAPTER} has no cell tagged authors-generator")
    namespace: dict = {}
    exec(compile("\n\n".join(cells), str(CHAPTER), "exec"), namespace)  # noqa: S102
    return namespace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--out", default="results/benchmarks")
    args = parser.parse_args()
    dev = get_device(args.device)
    task = HopTask(seq_len=100, alphabet_size=4, max_hops=16)
    sync = torch.cuda.synchronize if dev.type == "cuda" else None
    gen = chapter_generator()
    ours = gen["measure_throughput"](lambda: task.sample(args.batch_size, device=dev), args.batch_size,
                                     min_seconds=args.seconds, warmup=3, sync=sync)
    rng = np.random.default_rng(0)
    theirs = gen["measure_throughput"](lambda: gen["authors_style_sample"](task, 64, rng), 64,
                                       min_seconds=args.seconds, warmup=1)
    ratio = ours["items_per_s"] / theirs["items_per_s"]
    print(f"HopTask.sample, batch {args.batch_size}, {dev.type}: {ours['items_per_s']:,.0f} samples/s")
    print(f"authors-style per-sample generator, CPU:  {theirs['items_per_s']:,.0f} samples/s")
    print(f"ratio: {ratio:,.1f}x  (torch threads: {torch.get_num_threads()})")
    path = save_results(f"{args.out}/bench_tasks_{dev.type}.json",
                        {"hoptask": ours, "authors_style": theirs, "ratio": ratio,
                         "torch_threads": torch.get_num_threads()},
                        vars(args), dev)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
