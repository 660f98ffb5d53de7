#!/usr/bin/env bash
# Run a chapter through papermill from a clean checkout of HEAD, so that the results' provenance names a commit
# that really contains the code that produced them, and store them under results/ (never over a stored file: the
# page's results are its own names, apart from those of the scripts' sweeps).
#   bash scripts/run_committed.sh mpc -p profile paper
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
chapter=$1; shift
wt=$(mktemp -d)/book
git -C "$root" worktree add -q --detach "$wt" HEAD
trap 'git -C "$root" worktree remove --force "$wt"' EXIT
out=$(mktemp -d)
(cd "$wt" && PYTHONPATH="$wt" python scripts/notebooks.py run "$chapter" --out "$out" "$@")
taken=$(cd "$out/$chapter" && find . -type f -exec test -e "$root/results/$chapter/{}" \; -print)
if [ -n "$taken" ]; then  # stored files are written once: move the old ones away to replace them
  echo "error: results/$chapter/ already holds $(echo "$taken" | tr '\n' ' ')(this run is kept in $out)" >&2
  exit 2
fi
mkdir -p "$root/results/$chapter"
cp -r "$out/$chapter/." "$root/results/$chapter/"
echo "stored under results/$chapter/"
