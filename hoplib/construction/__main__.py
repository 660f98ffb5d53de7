"""``python -m hoplib.construction precision|search --out FILE`` (see :mod:`hoplib.construction.cli`)."""

from hoplib.construction.cli import main

main()
