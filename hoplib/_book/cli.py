"""The book's command lines end the same way: one line on stderr, and an exit status that says whose fault it was."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def run_cli(main: Callable[[list[str] | None], Any], argv: list[str] | None = None, *,
            failures: tuple[type[BaseException], ...] = ()) -> int:
    """Run ``main(argv)``; return 0, 2 for a user error (argparse, ``ValueError``, ``TypeError``: bad arguments,
    unusable folders, bad files), or 1 for one of ``failures`` (e.g. a diverged training run), each printed as
    one line ``error: ...`` on stderr instead of a traceback."""
    try:
        main(argv)
    except SystemExit as exc:  # argparse's one-line errors (status 2), --help (0)
        return exc.code if isinstance(exc.code, int) else 1
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except failures as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
