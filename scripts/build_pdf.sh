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
jupyter-book build . --builder pdflatex "$@"
pdf=_build/latex/book.pdf
[ -f "$pdf" ] || { echo "error: no $pdf was written" >&2; exit 1; }
pages=$(grep -ao 'Output written on book.xdv ([0-9]* pages' _build/latex/book.log | grep -o '[0-9]* pages')
echo "wrote $pdf (${pages:-? pages})"
