"""Peak memory and wall time of the MPC hop_k protocol at s = ceil(N^delta) words per machine (delta = 3/4 unless
--delta says otherwise; at 1/2 the sort has few splitters per machine, at 3/4 up to 255).

    python benchmarks/bench_mpc_memory.py [--ns 100000 1000000 10000000] [--k 16] [--delta 0.75]
        [--out results/benchmarks [--overwrite]]

Each N runs in a fresh subprocess: hop_protocol on N random symbols, timed, with tracemalloc tracking every
Python and numpy allocation (its peak, "peak MB") and the process's peak resident set ("RSS MB", the
interpreter included); then numpy's direct answer (hoplib.tasks.hop) the same way. tracemalloc adds a little
to the times. Prints a table; writes <out>/bench_mpc_memory.json only when --out is given (an existing one only with
--overwrite).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = """
import json, math, resource, sys, time, tracemalloc
import numpy as np
from hoplib.mpc.protocols import hop_min_memory, hop_protocol
from hoplib.tasks import hop
n, k, which, delta = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
x = np.random.default_rng(0).integers(0, 4, n)
s = max(math.ceil(n ** delta - 1e-9), hop_min_memory(n))
tracemalloc.start()
t0 = time.perf_counter()
if which == "mpc":
    answer, st = hop_protocol(x, k, s)
    stats = {"rounds": st.rounds, "machines": st.num_machines, "max_memory": st.max_memory}
else:
    answer, stats = hop(x, k), {}
seconds = time.perf_counter() - t0
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
ok = which != "mpc" or bool(np.array_equal(answer, hop(x, k)))
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"n": n, "s": s, "seconds": seconds, "peak_mb": peak / 2**20, "rss_mb": rss, "correct": ok,
                  **stats}))
"""


def measure(n: int, k: int, which: str, delta: float) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(n), str(k), which, str(delta)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ns", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--delta", type=float, default=0.75, help="memory s = ceil(N^delta) words per machine")
    parser.add_argument("--out", default="")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing <out>/bench_mpc_memory.json")
    args = parser.parse_args()
    path = os.path.join(args.out, "bench_mpc_memory.json")
    if args.out and os.path.exists(path) and not args.overwrite:
        parser.error(f"{path} exists; pass --overwrite to replace it")
    print(f"{'N':>11} {'s':>8} {'machines':>8} {'rounds':>6} {'seconds':>8} {'peak MB':>8} {'RSS MB':>8}"
          f" {'numpy s':>8} {'numpy MB':>8}")
    rows = []
    for n in args.ns:
        mpc, direct = measure(n, args.k, "mpc", args.delta), measure(n, args.k, "numpy", args.delta)
        assert mpc["correct"] and mpc["max_memory"] <= mpc["s"], mpc
        rows.append({"k": args.k, "delta": args.delta, **mpc, "numpy_seconds": direct["seconds"],
                     "numpy_peak_mb": direct["peak_mb"]})
        print(f"{n:>11,} {mpc['s']:>8,} {mpc['machines']:>8} {mpc['rounds']:>6} {mpc['seconds']:>8.1f}"
              f" {mpc['peak_mb']:>8.0f} {mpc['rss_mb']:>8.0f} {direct['seconds']:>8.2f} {direct['peak_mb']:>8.0f}",
              flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(rows, fh, indent=1)
        os.replace(tmp, path)


if __name__ == "__main__":
    main()
