"""One thread or several per process when other processes compete for the cores: the time of a
training batch of the paper's task (``HopTask().sample(32)``), of 1024 samples (an evaluation's size) and of a
small training step (``hoplib.train.fit`` of a 2-layer GPT, m = 64, on N = 32), at each thread count, in rounds
that alternate the counts so that a changing load hits both alike. Prints the median time per call and the
ratio to the first thread count.

Run it by hand on a machine under the load you care about (it does not create one), e.g. beside a sweep:

    nice -n 10 python benchmarks/bench_threads.py --threads 1,2 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from hoplib.models import gpt_for_task
from hoplib.tasks import HopTask
from hoplib.train import TrainConfig, fit


def per_call(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - t0) / calls


def main(argv: list[str] | None = None) -> dict[str, dict[int, float]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batches", type=int, default=50, help="data batches timed per round")
    p.add_argument("--steps", type=int, default=20, help="training steps timed per round")
    a = p.parse_args(argv)
    counts = [int(v) for v in a.threads.split(",")]
    paper, small = HopTask(), HopTask(seq_len=32, max_hops=4)
    model = gpt_for_task(small, depth=2, d_model=64, heads=4)
    cfg = TrainConfig(steps=a.steps, lr=1e-3, warmup_steps=2)
    jobs = {"data (paper task, batch 32)": (lambda i: paper.sample(32, seed=i), a.batches),
            "data (paper task, batch 1024)": (lambda i: paper.sample(1024, seed=i), max(1, a.batches // 10)),
            "training step (L=2, m=64, N=32)": (lambda i: fit(model, small, cfg, device="cpu", progress=False),
                                                 1)}
    times: dict[str, dict[int, list[float]]] = {name: {n: [] for n in counts} for name in jobs}
    for name, (fn, calls) in jobs.items():
        fn(0)  # warm-up
        for _ in range(a.rounds):
            for n in counts:
                torch.set_num_threads(n)
                times[name][n].append(per_call(fn, calls) / (a.steps if calls == 1 else 1))
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} (1 min) at the end, torch "
          f"{torch.__version__}; median of {a.rounds} rounds, seconds per batch or step")
    out = {}
    for name in jobs:
        out[name] = {n: statistics.median(v) for n, v in times[name].items()}
        cells = ", ".join(f"{n} thread{'s' * (n > 1)}: {s * 1e3:.2f} ms ({s / out[name][counts[0]]:.2f}x)"
                          for n, s in out[name].items())
        print(f"{name}: {cells}")
    return out


if __name__ == "__main__":
    main()
