#!/usr/bin/env bash
# The one command of a GPU session for issue 4 (Section 4.2 / Appendix G): the throughput benchmark of the paper
# grid, then, with the time left, a time-boxed start of the paper sweep (its first architecture group, L=2 m=128,
# three regimes stacked). Everything it keeps lands in $OUT (at most 8 files, 16 MiB each, 2 folders deep).
#
# From a session lent a GPU (one call, nothing to carry: the machine's python3 has torch, numpy, tqdm, and hoplib
# runs from this checkout through PYTHONPATH):
#   run(command="SOURCE_COMMIT=$(git rev-parse HEAD) bash scripts/gpu_session.sh", timeout_s=580)
# with the commit pasted in (the machine has no .git). Then copy $OUT's bench_gpu_cuda.json to
# results/training/ and report. Knobs (environment): TOTAL_S (default 520), BENCH_S (300), SWEEP_SHARD (0/10);
# for a CPU dry run of this script: DEVICE=cpu BENCH_ARGS=--tiny CHECKPOINT_EVERY=2 TOTAL_S=150 PYTHON=python.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.tmp/gpu_out}
DEVICE=${DEVICE:-cuda}
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-1000}
PY=${PYTHON:-python3}
TOTAL_S=${TOTAL_S:-520}
BENCH_S=${BENCH_S:-300}
SWEEP_SHARD=${SWEEP_SHARD:-0/10}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HOPLIB_SOURCE_COMMIT=${SOURCE_COMMIT:-unknown}
start=$SECONDS

echo "== environment (source commit $HOPLIB_SOURCE_COMMIT)"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  "$PY" -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"; nproc
} 2>&1 | tee "$OUT/env.txt"

echo "== benchmark (budget ${BENCH_S} s)"
timeout $((BENCH_S + 90)) "$PY" benchmarks/bench_gpu.py --device "$DEVICE" --budget-s "$BENCH_S" \
  --out "$OUT/bench_gpu_$DEVICE.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_gpu.log"

left=$((TOTAL_S - (SECONDS - start) - 30))
if [ "$left" -gt 60 ]; then
  echo "== paper sweep, shard $SWEEP_SHARD, for ${left} s"
  timeout "$left" "$PY" scripts/run_training.py --grid paper --ensemble --shard "$SWEEP_SHARD" --device "$DEVICE" \
    --no-progress --checkpoint-every "$CHECKPOINT_EVERY" --out "$WORK/paper" 2>&1 | tee "$OUT/sweep.log"
  echo "sweep exit status ${PIPESTATUS[0]} (124: stopped by its time box; rerunning resumes from the checkpoint)"
  "$PY" - "$WORK/paper" <<'EOF' 2>&1 | tee -a "$OUT/sweep.log"
import sys, pathlib, torch
for ck in sorted(pathlib.Path(sys.argv[1]).glob("_ensembles/*/checkpoint.pt")):
    s = torch.load(ck, map_location="cpu", weights_only=True)
    h = s["history"]
    print(f"{ck.parent.name}: {s['step']} steps in {h['wall_time_s']:.0f} s "
          f"({s['step'] / max(h['wall_time_s'], 1e-9):.1f} steps/s), last losses {h['loss'][-1]}")
EOF
  tar -czf "$OUT/paper_sweep.tar.gz" -C "$WORK" paper
  if [ "$(stat -c %s "$OUT/paper_sweep.tar.gz")" -gt 16000000 ]; then  # too big to come back: drop checkpoints
    tar -czf "$OUT/paper_sweep.tar.gz" --exclude=checkpoint.pt -C "$WORK" paper
    echo "checkpoints left out of paper_sweep.tar.gz (over 16 MB)"
  fi
else
  echo "== no time left for the sweep (${left} s)"
fi
ls -l "$OUT"
echo "total ${SECONDS} s"
