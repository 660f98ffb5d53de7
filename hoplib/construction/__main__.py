"""``python -m hoplib.construction precision|search --out FILE``."""

from hoplib.construction.transformer import _main

_main()
