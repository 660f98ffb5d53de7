#!/usr/bin/env bash
# On a CUDA machine: measure training throughput on the paper grid (Section 4.2 / Appendix G), then start the
# paper sweep for the time left. From the repository root, with the CUDA build of torch installed (README):
#   bash scripts/gpu_session.sh
# It runs, within TOTAL_S seconds (default 520):
#   1. a record of the machine (GPU, driver, CUDA, torch) in $OUT/env.txt;
#   2. benchmarks/bench_gpu.py for BENCH_S seconds (default 300): $OUT/bench_gpu_cuda.json, steps per second and
#      the share of the GPU's bf16 peak (copy it to results/training/ to show it in the training appendix);
#   3. with the time left, the paper grid into $OUT/paper, one architecture group after another (the first: L=2,
#      m=128, three regimes stacked), stopped at the time box. Running the script again measures again (replacing
#      the benchmark file) and resumes the grid from its checkpoints; on a cluster the same grid runs as a Slurm
#      job array: python scripts/run_training.py --grid paper --ensemble --device cuda --slurm runs/slurm \
#      --out $OUT/paper.
# $OUT defaults to .tmp/gpu_out. Other settings (environment): DEVICE (cuda), PYTHON (python3),
# CHECKPOINT_EVERY (1000 steps), SOURCE_COMMIT (recorded as the benchmark's source commit where the checkout has
# no .git). A dry run on a CPU: DEVICE=cpu BENCH_ARGS=--tiny CHECKPOINT_EVERY=2 TOTAL_S=150 PYTHON=python.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.tmp/gpu_out}
DEVICE=${DEVICE:-cuda}
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-1000}
PY=${PYTHON:-python3}
TOTAL_S=${TOTAL_S:-520}
BENCH_S=${BENCH_S:-300}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if [ -n "${SOURCE_COMMIT:-}" ]; then export HOPLIB_SOURCE_COMMIT=$SOURCE_COMMIT; fi
commit=${SOURCE_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
start=$SECONDS

echo "== environment (source commit $commit)"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  "$PY" -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"; nproc
} 2>&1 | tee "$OUT/env.txt"

echo "== benchmark (budget ${BENCH_S} s)"
timeout $((BENCH_S + 90)) "$PY" benchmarks/bench_gpu.py --device "$DEVICE" --budget-s "$BENCH_S" \
  --out "$OUT/bench_gpu_$DEVICE.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_gpu.log"

left=$((TOTAL_S - (SECONDS - start) - 30))
if [ "$left" -gt 60 ]; then
  echo "== paper grid, for ${left} s"
  timeout "$left" "$PY" scripts/run_training.py --grid paper --ensemble --device "$DEVICE" \
    --no-progress --checkpoint-every "$CHECKPOINT_EVERY" --out "$OUT/paper" 2>&1 | tee "$OUT/sweep.log"
  echo "sweep exit status ${PIPESTATUS[0]} (124: stopped by its time box; rerunning resumes from the checkpoint)"
  "$PY" - "$OUT/paper" <<'EOF' 2>&1 | tee -a "$OUT/sweep.log"
import sys, pathlib, torch
for ck in sorted(pathlib.Path(sys.argv[1]).glob("_ensembles/*/checkpoint.pt")):
    s = torch.load(ck, map_location="cpu", weights_only=True)
    h = s["history"]
    print(f"{ck.parent.name}: {s['step']} steps in {h['wall_time_s']:.0f} s "
          f"({s['step'] / max(h['wall_time_s'], 1e-9):.1f} steps/s), last losses {h['loss'][-1]}")
EOF
else
  echo "== no time left for the sweep (${left} s)"
fi
ls -l "$OUT"
echo "total ${SECONDS} s"
