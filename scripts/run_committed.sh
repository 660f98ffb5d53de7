#!/usr/bin/env bash
# Run a chapter through papermill from a clean checkout of HEAD, so that the results' provenance names a commit
# that really contains the code that produced them, and store them under results/.
#   bash scripts/run_committed.sh mpc -p profile paper
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
chapter=$1; shift
wt=$(mktemp -d)/book
git -C "$root" worktree add -q --detach "$wt" HEAD
trap 'git -C "$root" worktree remove --force "$wt"' EXIT
out=$(mktemp -d)
(cd "$wt" && PYTHONPATH="$wt" python scripts/notebooks.py run "$chapter" --out "$out" "$@")
mkdir -p "$root/results/$chapter"
cp -r "$out/$chapter/." "$root/results/$chapter/"
echo "stored under results/$chapter/"
