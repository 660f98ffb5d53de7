#!/usr/bin/env bash
# Run every test: lint, hoplib's unit tests, the book checks (notebooks in sync, Colab install cell), and nbval
# over every chapter's generated notebook in the quick profile. Extra arguments go to pytest.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
ruff check .
python -m pytest tests chapters/*.ipynb --nbval-lax --nbval-current-env --nbval-cell-timeout=600 \
  --durations=15 "$@"
