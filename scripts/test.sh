#!/usr/bin/env bash
# Run the tests: lint, hoplib's unit tests and the book checks. Run it after the book build (scripts/build.sh;
# CI: .ci/run): among the book checks, nbval runs every chapter's Colab notebook as a Colab user runs it (a
# fresh environment, its install cell) and compares it cell by cell with the web build's outputs
# (tests/test_book.py; what may differ is in tests/nbval_sanitize.cfg). Without a build, one test says so and
# the comparisons are skipped. To compare one chapter in this environment:
#   python -m pytest --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
#     _build/html/_sources/chapters/hop_task.ipynb
# Extra arguments go to pytest.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
ruff check .
python -m pytest tests --durations=15 "$@"
