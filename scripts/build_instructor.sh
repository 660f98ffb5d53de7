#!/usr/bin/env bash
# Build the instructor edition: the same pages as scripts/build.sh, with every exercise solution and lab answer
# key shown open (the student edition leaves them out; _ext/hoplib_editions.py). It renders from the student
# build's execution cache, so run scripts/build.sh first (no chapter runs again: it takes the time of rendering
# the pages, not of executing them); it refuses when hoplib, results/ or the requirements changed since, because
# the cache would then hold outputs of the old code. The pages are built in _build/instructor/ and published
# beside the student edition, in its folder instructor/ (.github/workflows/book.yml runs this script):
#   _build/html/instructor/index.html
# The instructor PDF: HOPLIB_EDITION=instructor bash scripts/build_pdf.sh (it executes the chapters again).
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
start=$(date +%s)
if [ ! -d _build/.jupyter_cache ] || [ "$(cat _build/.hoplib-stamp 2>/dev/null)" != "$(book_stamp)" ]; then
  echo "error: no student build of the current hoplib and results/: run scripts/build.sh first" >&2
  exit 2
fi
HOPLIB_EDITION=instructor jupyter-book build . --path-output _build/instructor -W -n --keep-going "$@"
python scripts/html_check.py _build/instructor/_build/html
rm -rf _build/html/instructor
cp -r _build/instructor/_build/html _build/html/instructor
echo "instructor edition built in $(( $(date +%s) - start )) s: open _build/html/instructor/index.html"
