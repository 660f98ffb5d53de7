"""Score the finished runs of a stored training sweep sequence by sequence, for bootstrap intervals.

    python scripts/score_runs.py results/training/depth --out results/training/depth-per-sequence.json

For every complete run folder under the sweep folder, re-draws the run's own test sequences (its
``eval_samples`` per k, test seed ``eval_seed + k``, as :func:`hoplib.evaluate.per_k_error` does) and stores
the paper-metric error of each sequence, so the mean over sequences is the run's stored ``per_k_error`` and a
bootstrap over sequences gives its sampling spread. Resumable; refuses to replace ``--out`` without
``--overwrite``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from hoplib.evaluate import predictions
from hoplib.models import GPT, GPTConfig
from hoplib.sweep import run_sweep
from hoplib.train import RunConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/, also when loaded by path
from cli import add_run_options, run_cli, run_device  # noqa: E402


def sequence_errors(model: torch.nn.Module, config: RunConfig, k: int) -> list[float]:
    """Paper-metric error of each of the run's test sequences of hop count k."""
    task, n = config.task, config.train.eval_samples
    x, y = task.sample(n, k=k, seed=config.eval_seed + k, device="cpu")
    pred = predictions(model, x, num_classes=task.vocab_size)
    v = task.vocab
    letter = (y >= v.first_letter) & (y < v.no_answer)
    wrong = ((pred != y) & letter).sum(1).double() / letter.sum(1).clamp(min=1)
    return [round(float(e), 6) for e in wrong]


def score_run(_: int, run: str, *, folder: str) -> list[dict[str, Any]]:
    """One row per k of the run in ``folder/run``: its depth, seed and per-sequence errors."""
    rec = json.loads((Path(folder) / run / "results.json").read_text(encoding="utf-8"))
    config = RunConfig.from_dict(rec["config"])
    model = GPT(GPTConfig(**{k: v for k, v in rec["model"].items() if k != "parameters"}))
    state = torch.load(Path(folder) / run / "model.pt", map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    model.eval()
    rows = []
    for k in range(1, config.max_hops + 1):
        errors = sequence_errors(model, config, k)
        mean, stored = sum(errors) / len(errors), rec["per_k_error"][str(k)]
        if abs(mean - stored) > 1e-6:  # not the run's test set: the bootstrap would describe another number
            raise RuntimeError(f"{run}, k = {k}: mean error {mean:.6f} but results.json has {stored:.6f}")
        rows.append({"run": run, "depth": config.depth, "seed": config.train.seed, "k": k, "errors": errors})
    return rows


def complete_runs(folder: Path) -> list[str]:
    """Names of the run folders whose results.json says complete."""
    runs = []
    for f in sorted(folder.glob("*/results.json")):
        if json.loads(f.read_text(encoding="utf-8")).get("complete") is True:
            runs.append(f.parent.name)
    return runs


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder", help="a stored sweep folder, e.g. results/training/depth")
    p.add_argument("--out", required=True, help="results file to write")
    add_run_options(p, seed_help="unused (the runs' own test seeds are used)")
    args = p.parse_args(argv)
    folder = Path(args.folder)
    if not folder.is_dir():
        p.error(f"{folder} is not a folder")
    runs = complete_runs(folder)
    if not runs:
        p.error(f"{folder} holds no complete run")
    device = run_device(args)
    params = {"folder": folder.as_posix(), "runs": runs}
    job = _Job(folder.as_posix())
    run_sweep(job, runs, args.out, params, device=device, workers=args.workers, overwrite=args.overwrite)
    return Path(args.out)


class _Job:  # picklable for worker processes
    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __call__(self, i: int, run: str) -> list[dict[str, Any]]:
        return score_run(i, run, folder=self.folder)


if __name__ == "__main__":
    sys.exit(run_cli(main))
