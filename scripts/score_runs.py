"""Score the finished runs of a stored training sweep sequence by sequence, for bootstrap intervals.

    python scripts/score_runs.py results/training/depth --out results/training/depth-per-sequence.json

For every complete run folder under the sweep folder, re-draws the run's own test sequences (its
``eval_samples`` per k, test seed ``eval_seed + k``, as :func:`hoplib.evaluate.per_k_error` does) and stores
the paper-metric error of each sequence, so the mean over sequences is the run's stored ``per_k_error`` and a
bootstrap over sequences gives its sampling spread. Each row names the sha256 of the ``model.pt`` it scored:
a resumed scoring scores again the runs whose model changed since (a folder retrained meanwhile). Resumable;
refuses to replace ``--out`` without ``--overwrite``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
from pathlib import Path
from typing import Any

import torch

from hoplib.evaluate import predictions
from hoplib.models import GPT, GPTConfig
from hoplib.sweep import run_sweep
from hoplib.train import RunConfig, read_record

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/, also when loaded by path
from cli import add_run_options, executor_from_args, out_path, run_cli, run_device  # noqa: E402


def sequence_errors(model: torch.nn.Module, config: RunConfig, k: int) -> list[float]:
    """Paper-metric error of each of the run's test sequences of hop count k."""
    task, n = config.task, config.train.eval_samples
    x, y = task.sample(n, k=k, seed=config.eval_seed + k, device="cpu")
    pred = predictions(model, x, num_classes=task.vocab_size)
    v = task.vocab
    letter = (y >= v.first_letter) & (y < v.no_answer)
    wrong = ((pred != y) & letter).sum(1).double() / letter.sum(1).clamp(min=1)
    return [round(float(e), 6) for e in wrong]


def model_sha256(folder: str | Path, run: str) -> str:
    """sha256 of the run's ``model.pt``: which weights a score came from."""
    return hashlib.sha256((Path(folder) / run / "model.pt").read_bytes()).hexdigest()


def score_run(_: int, run: str, *, folder: str) -> list[dict[str, Any]]:
    """One row per k of the run in ``folder/run``: its depth, seed, model file's sha256, per-sequence errors."""
    rec = read_record(Path(folder) / run / "results.json")
    try:
        config = RunConfig.from_dict(rec["config"])
        model = GPT(GPTConfig(**{k: v for k, v in rec["model"].items() if k != "parameters"}))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{Path(folder) / run / 'results.json'} is not a complete run record ({exc!r})") from exc
    blob = (Path(folder) / run / "model.pt").read_bytes()  # hashed and loaded from the same bytes
    try:
        model.load_state_dict(torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True))
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds of errors for a damaged file
        raise ValueError(f"{Path(folder) / run / 'model.pt'} is corrupt or does not match its results.json "
                         f"({type(exc).__name__})") from exc
    sha = hashlib.sha256(blob).hexdigest()
    model.eval()
    rows = []
    for k in range(1, config.max_hops + 1):
        errors = sequence_errors(model, config, k)
        mean, stored = sum(errors) / len(errors), rec["per_k_error"][str(k)]
        if abs(mean - stored) > 1e-6:  # not the run's test set: the bootstrap would describe another number
            raise ValueError(f"{run}, k = {k}: mean error {mean:.6f} but results.json has {stored:.6f}")
        rows.append({"run": run, "depth": config.depth, "seed": config.train.seed, "k": k, "model_sha256": sha,
                     "errors": errors})
    return rows


def complete_runs(folder: Path) -> list[str]:
    """Names of the run folders whose results.json says complete."""
    return [f.parent.name for f in sorted(folder.glob("*/results.json")) if read_record(f).get("complete") is True]


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder", help="a stored sweep folder, e.g. results/training/depth")
    p.add_argument("--out", type=out_path, required=True, help="results file to write")
    add_run_options(p, seed_help=None)  # no seed: the runs' own test seeds are used
    args = p.parse_args(argv)
    folder = Path(args.folder)
    if not folder.is_dir():
        p.error(f"{folder} is not a folder")
    runs = complete_runs(folder)
    if not runs:
        p.error(f"{folder} holds no complete run")
    device, executor = run_device(args), executor_from_args(args)
    params = {"folder": folder.as_posix(), "runs": runs}
    job = _Job(folder.as_posix())

    def same_model(_: int, run: str, rows: list[dict[str, Any]]) -> bool:  # else the folder was retrained
        return all(r.get("model_sha256") == model_sha256(folder, run) for r in rows)

    run_sweep(job, runs, args.out, params, device=device, workers=args.workers, overwrite=args.overwrite,
              executor=executor, still_valid=same_model)
    return Path(args.out)


class _Job:  # picklable for worker processes
    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __call__(self, i: int, run: str) -> list[dict[str, Any]]:
        return score_run(i, run, folder=self.folder)


if __name__ == "__main__":
    sys.exit(run_cli(main))
