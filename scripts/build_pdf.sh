#!/usr/bin/env bash
# Build the whole book as one printable PDF with Jupyter Book's LaTeX builder: _build/latex/book.pdf.
# Not part of CI (it re-executes every chapter and needs TeX). Debian/Ubuntu packages it needs:
#   apt-get install --no-install-recommends texlive-xetex texlive-latex-extra texlive-fonts-recommended \
#     texlive-fonts-extra texlive-science latexmk fonts-freefont-otf
# Figures are written as 200-dpi PNG (LaTeX cannot include SVG); long code lines wrap (latex_elements in
# _config.yml) instead of running off the page.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
for tool in xelatex latexmk; do
  command -v "$tool" >/dev/null || { echo "error: $tool not found: install the TeX packages listed in $0" >&2; exit 2; }
done
export HOPLIB_FIGURE_FORMAT=png
python scripts/notebooks.py sync
# --all: re-read every page, so the chapters run again with PNG figures; otherwise Sphinx reuses the doctrees
# of an earlier HTML build, whose figures are SVG, and LaTeX falls back to "<Figure size ...>" text.
jupyter-book build . --builder pdflatex --all "$@"
pdf=_build/latex/book.pdf
[ -f "$pdf" ] || { echo "error: no $pdf was written" >&2; exit 1; }
# the page count, by pdfinfo (poppler-utils) when present; a missing count must not fail a finished build
pages=$({ pdfinfo "$pdf" 2>/dev/null || true; } | awk '/^Pages:/ {print $2 " pages"}')
echo "wrote $pdf (${pages:-? pages})"
