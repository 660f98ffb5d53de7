#!/usr/bin/env bash
# Build the book: install what is missing, execute every chapter once (quick profile, CPU) and render
# _build/html; warnings are errors and an execution error fails the build. Then fill the Colab notebooks
# (chapters/*.ipynb and the pages' download notebooks) with the build's glued values, and check every built page
# for rendering defects a reader would see (scripts/html_check.py: raw tables, stray $, unrendered roles,
# ?? references, figures without captions).
#
# Execution results are cached in _build/.jupyter_cache (a page re-executes when its code cells change). The
# cache does not see edits to hoplib or results/, so it is dropped (with Sphinx's saved pages) whenever those
# change.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
start=$(date +%s)
stamp=$(book_stamp)
if [ "$(cat _build/.hoplib-stamp 2>/dev/null)" != "$stamp" ]; then
  rm -rf _build/.jupyter_cache _build/.doctrees  # re-read and re-execute every page
  mkdir -p _build && echo "$stamp" > _build/.hoplib-stamp  # a failed build keeps the pages it executed
fi
# the student edition: no exercise solutions or lab answer keys (scripts/build_instructor.sh shows them, and
# puts them in _build/html/instructor/: an older instructor edition is removed here, not published stale)
rm -rf _build/html/instructor
HOPLIB_EDITION=student jupyter-book build . -W -n --keep-going "$@"
python scripts/notebooks.py sync --from-build
python scripts/html_check.py _build/html
echo "book built in $(( $(date +%s) - start )) s: open _build/html/index.html"
