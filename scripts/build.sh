#!/usr/bin/env bash
# Build the book: install what is missing, regenerate the Colab notebooks, execute every chapter (quick profile,
# CPU) and render _build/html. Warnings are errors; an execution error fails the build; then every built page is
# checked for rendering defects a reader would see (hoplib._book.html_check: raw tables, stray $, unrendered
# roles, ?? references, figures without captions).
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
python scripts/notebooks.py sync
start=$(date +%s)
jupyter-book build . -W -n --keep-going "$@"
python -m hoplib._book.html_check _build/html
echo "book built in $(( $(date +%s) - start )) s: open _build/html/index.html"
