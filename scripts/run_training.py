"""Train the training chapter's runs (Section 4.2 / Appendix G): a named grid, or one run; resumable.

    python scripts/run_training.py --grid cpu --out results/training/medium --workers 2
    python scripts/run_training.py --grid paper --out runs/paper --device cuda --ensemble --slurm runs/slurm
    python scripts/run_training.py --grid paper --out runs/pw --device cuda --ensemble width --compile reduce-overhead
    python scripts/run_training.py --depth 4 --d-model 128 --heads 4 --steps 100000 --out runs/L4

A grid goes through the one sweep runner (hoplib.sweep.run_sweep): its runs (or, with --ensemble, its
architecture groups) in this process, in --workers local processes, or as a Slurm job array (--slurm); the
table of the complete runs is stored in <out>/table.json. Rerunning a command skips finished runs and resumes
interrupted ones from their checkpoints; --overwrite trains afresh. A folder that holds another
configuration's run is refused unless --overwrite. Exit status: 0, 2 for a user error (bad argument, unusable
folder, bad checkpoint; one line on stderr), 1 when a run diverged.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hoplib import grids
from hoplib.results import OutputError, check_writable
from hoplib.train import RUN_KEYS, DivergedError, RunConfig, finished_results, load_checkpoint, read_record, train_run

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/, also when loaded by path (tests)
from cli import add_run_options, executor_from_args, out_path, positive_int, run_cli, run_device  # noqa: E402

_TYPES = {"head": str, "dropout": float, "lr": float, "weight_decay": float}
_ENSEMBLE = {None: False, "arch": True, "width": "width"}  # --ensemble -> train_grid(ensemble=...)
_COMPILE = {None: False, "default": True, "reduce-overhead": "reduce-overhead",
            "max-autotune": "max-autotune"}  # --compile -> train_run(compile=...)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit status 2
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="scripts/run_training.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--grid", choices=tuple(grids.GRIDS), help="train a named grid (hoplib.grids)")
    p.add_argument("--out", type=out_path, required=True, help="output folder")
    add_run_options(p, seed_help="run seed of a single run, 0..127 (a grid keeps its own seeds)")
    p.add_argument("--ensemble", nargs="?", const="arch", choices=tuple(_ENSEMBLE)[1:],
                   help="train a grid's runs together as one stacked model: those of one architecture "
                        "(bare --ensemble, or 'arch'), or every depth of one width ('width')")
    p.add_argument("--checkpoint-every", type=positive_int, default=1000)
    p.add_argument("--compile", nargs="?", const="default", choices=tuple(_COMPILE)[1:],
                   help="torch.compile the training step (meant for CUDA): bare --compile or 'default', or "
                        "a torch.compile mode ('reduce-overhead': CUDA graphs)")
    p.add_argument("--no-progress", action="store_true")
    for key in RUN_KEYS:  # one run: the settings of hoplib.train.RunConfig (defaults: the paper's recipe)
        if key != "seed":
            p.add_argument("--" + key.replace("_", "-"), type=_TYPES.get(key, int), default=argparse.SUPPRESS)
    return p


def run_status(out: str | Path, configs: list[RunConfig] | None = None) -> dict[str, str]:
    """``{run folder: "complete" | "diverged" | "unfinished" | "missing"}`` for ``configs`` (default: every
    run folder under ``out`` with a results.json)."""
    status = {}
    for path in grids.result_paths(Path(out), configs):
        if not path.exists():
            status[path.parent.name] = "unfinished" if (path.parent / "checkpoint.pt").exists() else "missing"
            continue
        rec = read_record(path)
        status[path.parent.name] = ("complete" if rec.get("complete") else
                                    "diverged" if rec.get("diverged") else "unfinished")
    return status


def _grid(args: argparse.Namespace, device: str, executor: Any) -> int:
    grids.train_grid(args.grid, args.out, device=device, workers=args.workers, executor=executor,
                     overwrite=args.overwrite, progress=not args.no_progress, ensemble=_ENSEMBLE[args.ensemble],
                     compile=_COMPILE[args.compile], checkpoint_every=args.checkpoint_every)
    status = run_status(args.out, grids.grid(args.grid).configs())
    if diverged := [name for name, s in status.items() if s == "diverged"]:
        print(f"error: {len(diverged)} run(s) diverged: {', '.join(diverged)} (see their results.json)",
              file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    device = run_device(args)
    if not args.grid and (grid_only := [o for o, on in (("--ensemble", args.ensemble), ("--slurm", args.slurm),
                                                           ("--partition", args.partition),
                                                           ("--workers", args.workers > 1)) if on]):
        raise ValueError(f"{', '.join(grid_only)}: for the runs of a grid (--grid); one run trains in this process")
    if args.grid and (single := [k for k in RUN_KEYS if k != "seed" and k in vars(args)] + ["seed"] * bool(args.seed)):
        names = ", ".join("--" + k.replace("_", "-") for k in single)
        raise ValueError(f"{names}: settings of a single run; the grid {args.grid!r} has its own (see "
                         "hoplib.grids.GRIDS)")
    executor = executor_from_args(args)  # no Slurm, no submitit: one line before any training
    check_writable(args.out)  # a file, read-only, no room: one line before any training
    try:
        return _main(args, argv, device, executor)
    except OutputError:
        raise
    except OSError as exc:  # in the middle (a disk that fills): say what is kept
        where = f"{exc.filename}" if exc.filename else args.out
        raise OutputError(f"cannot write to {where} ({exc.strerror or exc}); {_kept(args)}; free space and rerun "
                          "the same command to resume") from exc


def _kept(args: argparse.Namespace) -> str:
    """What a stopped run or grid keeps in ``args.out``."""
    out = Path(args.out)
    if args.grid:
        status = run_status(out, grids.grid(args.grid).configs())
        done = sum(s == "complete" for s in status.values())
        return f"{out} keeps {done} of {len(status)} runs complete (interrupted ones keep their checkpoints)"
    ck = out / "checkpoint.pt"
    if not ck.exists():
        return "no checkpoint was kept"
    try:
        return f"{ck} keeps step {int(load_checkpoint(ck)['step'])}"
    except ValueError as exc:
        return f"{ck} is unreadable ({exc})"


def _main(args: argparse.Namespace, argv: list[str] | None, device: str, executor: Any) -> int:
    if args.grid:
        return _grid(args, device, executor)
    config = RunConfig.from_dict({k: v for k, v in vars(args).items() if k in RUN_KEYS})
    before = None if args.overwrite or not Path(args.out).is_dir() else finished_results(args.out, config)
    if before is not None and before.get("diverged"):
        raise DivergedError(f"{args.out}: this configuration diverged before ({before.get('error')}); "
                            "nothing to do (--overwrite retrains it)", before, 0)
    train_run(config, args.out, device=device, progress=not args.no_progress, compile=_COMPILE[args.compile],
              checkpoint_every=args.checkpoint_every, overwrite=args.overwrite,
              command="python scripts/run_training.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    if before is not None:
        print(f"{Path(args.out) / 'results.json'} is complete for this configuration; nothing to do")
    return 0


def cli(argv: list[str] | None = None) -> int:
    """:func:`main` with one-line errors: exit 2 for a user error, 1 for a diverged run."""
    code = [0]
    return run_cli(lambda a: code.__setitem__(0, main(a)), argv, failures=(DivergedError,)) or code[0]


if __name__ == "__main__":
    sys.exit(cli())
