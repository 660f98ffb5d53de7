#!/usr/bin/env bash
# On a CUDA machine: run every training chapter with profile "gpu" (what a Colab user with a GPU runs), then
# measure training throughput on the paper grid (Section 4.2 / Appendix G). From the repository root:
#   bash scripts/gpu_session.sh
# Needs torch with CUDA, numpy, pandas, matplotlib and tqdm; no Jupyter: each chapter's Colab notebook runs
# in plain Python through benchmarks/run_plain.py, which times every cell. Within TOTAL_S seconds (default 3600):
#   1. a record of the machine (GPU, driver, CUDA, torch) in $OUT/env.txt;
#   2. the chapters in CHAPTERS, each with -p profile gpu -p device cuda and its results under
#      $OUT/work/runs (rerunning resumes them), each into $OUT/work/<chapter>.ipynb with every cell's wall
#      time; all at once when CONCURRENT=1 (then their times include each other's load), else one by one;
#      each stopped at CHAPTER_S seconds;
#   3. benchmarks/bench_gpu.py for the time left, at most BENCH_S (default 300) seconds:
#      $OUT/work/bench_gpu_cuda.json (copy it to results/training/ to show it in the training appendix);
#   4. $OUT/summary.json (benchmarks/gpu_summary.py: per chapter its status, wall time, slowest cells and
#      training progress) and $OUT/session.tar.gz (everything under $WORK but model weights).
# SWEEPS: stored sweeps run beside the chapters, ';'-separated commands of scripts/ (each given --device $DEVICE
# --out results, stopped with the chapters; their finished and partial files copied to $WORK/results), e.g.
#   SWEEPS="run_rnn.py --part capacity --seed 0 --steps 8000 --workers 7"
# The paper grid itself: python scripts/run_training.py --grid paper --ensemble --device cuda --out runs/paper.
# PARAMS adds chapter parameters (PARAMS="-p max_steps 200": a trial of every cell, each run cut to 200 steps).
# Other settings (environment): OUT (.tmp/gpu_out), WORK ($OUT/work), DEVICE (cuda), PYTHON (python3),
# SOURCE_COMMIT (the commit every results file records: a copy sent to a GPU machine may carry no history, or
# another commit's). A dry run on a CPU:
#   DEVICE=cpu PROFILE=quick BENCH_ARGS=--tiny TOTAL_S=300 PYTHON=python bash scripts/gpu_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.tmp/gpu_out}
DEVICE=${DEVICE:-cuda}
PROFILE=${PROFILE:-gpu}
PY=${PYTHON:-python3}
TOTAL_S=${TOTAL_S:-3600}
BENCH_S=${BENCH_S:-300}
CHAPTER_S=${CHAPTER_S:-$((TOTAL_S - 120))}
CHAPTERS=${CHAPTERS-training rnn efficient_attention chain_of_thought gnn}
WORK=${WORK:-$OUT/work}
mkdir -p "$WORK/runs"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 MPLBACKEND=Agg
if [ -n "${SOURCE_COMMIT:-}" ]; then export HOPLIB_SOURCE_COMMIT=$SOURCE_COMMIT; fi
commit=${SOURCE_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
start=$SECONDS
left() { echo $((TOTAL_S - (SECONDS - start) - 40)); }

echo "== environment (source commit $commit)"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  "$PY" -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"; nproc
} 2>&1 | tee "$OUT/env.txt"

chapter() {  # one chapter with the profile, stopped at its time box; its exit status and wall time in a file
  local name=$1 box=$2 t0=$SECONDS
  timeout "$box" "$PY" benchmarks/run_plain.py "chapters/$name.ipynb" --out "$WORK/$name.ipynb" \
    -p profile "$PROFILE" -p device "$DEVICE" -p out_dir "$WORK/runs" ${PARAMS:-} > "$WORK/$name.log" 2>&1
  echo "$name exit $? wall $((SECONDS - t0)) s" | tee "$WORK/$name.status"
}
sweeps=()
if [ -n "${SWEEPS:-}" ]; then
  IFS=';' read -ra sweeps <<< "$SWEEPS"
  echo "== ${#sweeps[@]} sweeps beside the chapters"
  for i in "${!sweeps[@]}"; do
    timeout $(( $(left) - BENCH_S )) "$PY" scripts/${sweeps[$i]} --device "$DEVICE" --out results \
      > "$WORK/sweep_$i.log" 2>&1 &
  done
fi
n=$(echo $CHAPTERS | wc -w); n=$((n > 0 ? n : 1))
echo "== chapters with profile $PROFILE: $CHAPTERS"
if [ "${CONCURRENT:-0}" = 1 ]; then
  export OMP_NUM_THREADS=$(( $(nproc) / n > 0 ? $(nproc) / n : 1 ))
  box=$(( $(left) - BENCH_S < CHAPTER_S ? $(left) - BENCH_S : CHAPTER_S ))
  for c in $CHAPTERS; do chapter "$c" "$box" & done
  wait
else
  for c in $CHAPTERS; do
    box=$(( $(left) < CHAPTER_S ? $(left) : CHAPTER_S ))
    [ "$box" -gt 10 ] && chapter "$c" "$box"
  done
fi
unset OMP_NUM_THREADS
if [ ${#sweeps[@]} -gt 0 ]; then
  wait  # the sweeps, each stopped at its time box
  mkdir -p "$WORK/results"
  find results -newer "$OUT/env.txt" -name '*.json' -exec cp --parents {} "$WORK" \;
  for f in "$WORK"/sweep_*.log; do echo "$f: $(tail -c 300 "$f" | tr '\r' '\n' | tail -n 2)"; done
fi

b=$(( $(left) < BENCH_S ? $(left) : BENCH_S ))
if [ "$b" -gt 30 ]; then
  echo "== benchmark (budget ${b} s)"
  timeout $((b + 20)) "$PY" benchmarks/bench_gpu.py --device "$DEVICE" --budget-s "$((b - 15))" \
    --out "$WORK/bench_gpu_$DEVICE.json" ${BENCH_ARGS:-} > "$WORK/bench_gpu.log" 2>&1
  tail -n 25 "$WORK/bench_gpu.log"
else
  echo "== no time left for the benchmark"
fi

"$PY" benchmarks/gpu_summary.py "$WORK" --env "$OUT/env.txt" --out "$OUT/summary.json" --overwrite \
  --chapters "$CHAPTERS" --profile "$PROFILE" --params "${PARAMS:-}" --source-commit "$commit" \
  $([ "${CONCURRENT:-0}" = 1 ] && echo --concurrent)
"$PY" -c "import json, sys; [print(c) for c in json.load(open(sys.argv[1]))['data']['chapters']]" \
  "$OUT/summary.json"
tar -czf "$OUT/session.tar.gz" -C "$WORK" --exclude='*.pt' --exclude='*.pth' .
ls -l "$OUT"
echo "total ${SECONDS} s"
