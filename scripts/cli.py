"""The scripts' one command-line convention: the options every stored-sweep command shares, and one line on
stderr with an exit status that says whose fault it was.

Scripts run as ``python scripts/x.py`` import it as ``from cli import run_cli`` (``scripts/`` is on the path)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hoplib.device import get_device
from hoplib.results import output_path
from hoplib.sweep import slurm_executor
from hoplib.validate import check_choice


def run_cli(main: Callable[[list[str] | None], Any], argv: list[str] | None = None, *,
            failures: tuple[type[BaseException], ...] = ()) -> int:
    """Run ``main(argv)``; return 0, 2 for a user error (argparse, ``ValueError``, ``TypeError``,
    ``SystemExit("message")``: bad arguments, unusable or full output folders, files that exist, bad files), or 1
    for one of ``failures`` (e.g. a diverged training run) or an ``OSError`` in the middle of the work (a disk
    that fills: :class:`~hoplib.results.OutputError` says what was kept), each printed as one line
    ``error: ...`` on stderr instead of a traceback."""
    try:
        main(argv)
    except SystemExit as exc:  # argparse's one-line errors (status 2), --help (0), sys.exit("message")
        if isinstance(exc.code, int) or exc.code is None:
            return exc.code or 0
        print(f"error: {exc.code}", file=sys.stderr)
        return 2
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except failures as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # after the checks before the work: a fault of the machine, not of the arguments
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def out_path(value: str) -> Path:
    """The ``type`` of every ``--out``: a path, never empty (``--out ''`` would write into the working folder)."""
    try:
        return output_path(value, option="the path")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int(value: str) -> int:
    """The ``type`` of counts that must be at least 1 (``--steps``, ``--checkpoint-every``): 0 is refused, not
    read as "unset" or divided by."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def add_run_options(parser: argparse.ArgumentParser, *, seed_help: str | None) -> None:
    """The options every stored-sweep command shares (checked by :func:`run_device`; ``--slurm`` and
    ``--partition`` read by :func:`executor_from_args`); ``seed_help=None`` for a command without a seed."""
    parser.add_argument("--workers", type=int, default=1,
                        help="worker processes, one thread each (on a GPU, they share it)")
    if seed_help is not None:
        parser.add_argument("--seed", type=int, default=0, help=seed_help)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing results file")
    parser.add_argument("--slurm", metavar="FOLDER", default=None,
                        help="submit the points as a Slurm job array (submitit), logs in FOLDER")
    parser.add_argument("--partition", default=None, help="Slurm partition (with --slurm)")


def run_device(args: argparse.Namespace) -> str:
    """The resolved device of :func:`add_run_options` (with ``--slurm``, the device the array's nodes resolve:
    not looked for on this machine); several local workers on a GPU share it."""
    if args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
    if getattr(args, "slurm", None):
        return check_choice("--device", args.device, ("auto", "cpu", "cuda", "mps"))
    return str(get_device(args.device))


def executor_from_args(args: argparse.Namespace) -> Any:
    """The Slurm executor that ``--slurm``/``--partition`` ask for, or ``None`` for local workers; a one-line
    ValueError when Slurm or submitit is missing (:func:`hoplib.sweep.slurm_executor`) or ``--partition`` comes
    without ``--slurm``."""
    if args.partition and not args.slurm:
        raise ValueError("--partition is for Slurm job arrays: it needs --slurm FOLDER")
    if not args.slurm:
        return None
    return slurm_executor(args.slurm, **({"slurm_partition": args.partition} if args.partition else {}))
