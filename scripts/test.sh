#!/usr/bin/env bash
# Run the tests: lint, hoplib's unit tests and the book checks (notebooks in sync; every chapter's Colab notebook
# run top to bottom in a fresh environment, as a Colab user runs it). The chapters' MyST sources are executed by
# the book build
# (scripts/build.sh), which fails on any error or failed assertion. To run one Colab notebook under nbval:
#   python -m pytest --nbval-lax --nbval-current-env chapters/hop_task.ipynb
# Extra arguments go to pytest.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
ruff check .
python -m pytest tests --durations=15 "$@"
