"""Train the training chapter's runs (Section 4.2 / Appendix G): a named grid, or one run; resumable.

    python scripts/run_training.py --grid cpu --out results/training/medium --workers 2
    python scripts/run_training.py --grid paper --out runs/paper --device cuda --ensemble --shard 0/2
    python scripts/run_training.py --grid paper --out runs/pw --device cuda --ensemble width --compile reduce-overhead
    python scripts/run_training.py --depth 4 --d-model 128 --heads 4 --steps 100000 --out runs/L4

Rerunning a command skips finished runs and resumes interrupted ones from their checkpoints. A folder that
holds another configuration's run is refused unless ``--overwrite``. Exit status: 0, 2 for a user error
(bad argument, unusable folder, bad checkpoint; one line on stderr), 1 when a run diverged.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hoplib._book.results import OutputError, check_writable
from hoplib.sweep import map_points
from hoplib.train import RUN_KEYS, DivergedError, RunConfig, finished_results, load_checkpoint, train_run
from hoplib.training import sweep

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/, also when loaded by path (tests)
from cli import add_run_options, out_path, positive_int, run_cli, run_device  # noqa: E402

_TYPES = {"head": str, "dropout": float, "lr": float, "weight_decay": float}
_ENSEMBLE = {None: False, "arch": True, "width": "width"}  # --ensemble -> run_sweep(ensemble=...)
_COMPILE = {None: False, "default": True, "reduce-overhead": "reduce-overhead",
            "max-autotune": "max-autotune"}  # --compile -> train_run(compile=...)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit status 2
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="scripts/run_training.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--grid", choices=tuple(sweep.GRIDS), help="train a named grid (hoplib.training.sweep)")
    p.add_argument("--out", type=out_path, required=True, help="output folder")
    add_run_options(p, seed_help="run seed of a single run, 0..127 (a grid keeps its own seeds)", slurm=False)
    p.add_argument("--ensemble", nargs="?", const="arch", choices=tuple(_ENSEMBLE)[1:],
                   help="train a grid's runs together as one stacked model: those of one architecture "
                        "(bare --ensemble, or 'arch'), or every depth of one width ('width')")
    p.add_argument("--shard", default="0/1", help="i/n: train the i-th of n interleaved parts of a grid")
    p.add_argument("--checkpoint-every", type=positive_int, default=1000)
    p.add_argument("--compile", nargs="?", const="default", choices=tuple(_COMPILE)[1:],
                   help="torch.compile the training step (meant for CUDA): bare --compile or 'default', or "
                        "a torch.compile mode ('reduce-overhead': CUDA graphs)")
    p.add_argument("--no-progress", action="store_true")
    for key in RUN_KEYS:  # one run: the settings of hoplib.train.RunConfig (defaults: the paper's recipe)
        if key != "seed":
            p.add_argument("--" + key.replace("_", "-"), type=_TYPES.get(key, int), default=argparse.SUPPRESS)
    return p


def _shard(_: int, job: tuple) -> list:
    name, out, shard, kw = job
    return sweep.run_sweep(name, out, shard=shard, **kw)


def _grid(args: argparse.Namespace, device: str) -> int:
    i, _, n = args.shard.partition("/")
    if not (i.isdigit() and n.isdigit() and int(i) < int(n)):
        raise ValueError(f"--shard must be i/n with 0 <= i < n, got {args.shard!r}")
    i, n = int(i), int(n)
    kw = dict(device=device, progress=not args.no_progress, ensemble=_ENSEMBLE[args.ensemble],
              compile=_COMPILE[args.compile], checkpoint_every=args.checkpoint_every)
    if args.workers == 1:
        sweep.run_sweep(args.grid, args.out, shard=(i, n), **kw)
    else:  # every worker a shard of this shard
        shards = [(i + w * n, n * args.workers) for w in range(args.workers)]
        map_points(_shard, [(args.grid, args.out, s, kw) for s in shards], workers=args.workers, device=device)
    status = sweep.run_status(args.out, sweep.grid(args.grid).configs())
    if diverged := [name for name, s in status.items() if s == "diverged"]:
        print(f"error: {len(diverged)} run(s) diverged: {', '.join(diverged)} (see their results.json)",
              file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    device = run_device(args)
    if args.ensemble and not args.grid:
        raise ValueError("--ensemble trains the runs of a grid together: it needs --grid")
    if args.grid and (single := [k for k in RUN_KEYS if k != "seed" and k in vars(args)] + ["seed"] * bool(args.seed)):
        names = ", ".join("--" + k.replace("_", "-") for k in single)
        raise ValueError(f"{names}: settings of a single run; the grid {args.grid!r} has its own (see "
                         "hoplib.training.sweep.GRIDS)")
    check_writable(args.out)  # a file, read-only, no room: one line before any training
    try:
        return _main(args, argv, device)
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
        status = sweep.run_status(out, sweep.grid(args.grid).configs())
        done = sum(s == "complete" for s in status.values())
        return f"{out} keeps {done} of {len(status)} runs complete (interrupted ones keep their checkpoints)"
    ck = out / "checkpoint.pt"
    if not ck.exists():
        return "no checkpoint was kept"
    try:
        return f"{ck} keeps step {int(load_checkpoint(ck)['step'])}"
    except ValueError as exc:
        return f"{ck} is unreadable ({exc})"


def _main(args: argparse.Namespace, argv: list[str] | None, device: str) -> int:
    if args.grid:
        return _grid(args, device)
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
