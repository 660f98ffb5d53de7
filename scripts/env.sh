# Sourced by build.sh and test.sh: use the active virtual environment, or create/activate ./.venv, and install
# the pinned requirements and hoplib (editable) when requirements.txt or pyproject.toml changed since last time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -z "${VIRTUAL_ENV:-}" ]; then
  if [ ! -x .venv/bin/python ]; then
    echo "creating virtual environment .venv" >&2
    python3 -m venv .venv
  fi
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi
stamp="$VIRTUAL_ENV/.hoplib-installed-$(cat requirements.txt pyproject.toml | sha1sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "installing requirements.txt and hoplib into $VIRTUAL_ENV" >&2
  python -m pip install --quiet --disable-pip-version-check -r requirements.txt
  python -m pip install --quiet --disable-pip-version-check --no-deps -e .
  touch "$stamp"
fi
export PYTHONHASHSEED=0

# What the execution cache depends on besides the chapters' code: hoplib, results/ and the requirements.
book_stamp() {
  find hoplib results requirements.txt -type f -not -path "*/__pycache__/*" | sort | xargs cat | sha1sum | cut -c1-16
}
