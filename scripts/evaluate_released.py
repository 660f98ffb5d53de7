"""Re-evaluate the authors' released checkpoints with hoplib (Section 4.2 and Appendix G.4 of the paper).

For every released model present in the cache (``~/.cache/hoplib/released`` or ``--cache-dir``), after copying
them there from a local clone of the authors' repository (``--from-git-dir``) or from GitHub (``--download``,
needs network), write ``<out>/<name>.json`` with hoplib's per-k errors (both metrics, dropout off), the
errors with dropout on (as the authors evaluated), the head alignment scores, and provenance (the checkpoint's
repository, commit, path and SHA-256, and hoplib's commit). Existing results files are skipped unless
``--force``. The weights themselves never enter the book's repository.

    python scripts/evaluate_released.py --out results/released --from-git-dir /path/to/hop-induction-heads
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

import torch

from hoplib import evaluate, models, released
from hoplib.models import GPT
from hoplib.results import OutputError, check_writable, save_results
from hoplib.tasks import HopTask

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/, also when loaded by path
from cli import out_path, run_cli  # noqa: E402


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=out_path, default=Path("results/released"), help="folder for the JSON results")
    p.add_argument("--cache-dir", type=Path, default=None, help="checkpoint cache (default ~/.cache/hoplib/released)")
    p.add_argument("--from-git-dir", type=Path, default=None, help="copy checkpoints from this clone first")
    p.add_argument("--download", action="store_true", help="fetch missing checkpoints from GitHub first")
    p.add_argument("--names", nargs="*", default=None, help="released models to evaluate (default: all cached)")
    p.add_argument("--n-samples", type=int, default=500, help="test samples per k, dropout off")
    p.add_argument("--n-dropout", type=int, default=200, help="test samples per k, dropout on")
    p.add_argument("--n-align", type=int, default=10, help="samples per k for the alignment scores")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--force", action="store_true", help="overwrite existing results files")
    return p.parse_args(argv)


def extract_from_git(git_dir: str | Path, name: str, cache_dir: str | Path | None = None) -> Path:
    """Copy released model ``name`` out of a local clone (bare or not) of the authors' repository into the
    cache, verified like a download; ``ValueError`` when the clone lacks the commit or the file."""
    git = Path(git_dir).expanduser()
    git = git / ".git" if (git / ".git").is_dir() else git
    path, commit = released.info(name).path, released.COMMIT

    def write(fh: BinaryIO) -> None:
        proc = subprocess.run(["git", "--git-dir", str(git), "show", f"{commit}:{path}"],
                              stdout=fh, stderr=subprocess.PIPE, check=False)
        if proc.returncode != 0:
            raise ValueError(f"{git_dir} has no {path} at {commit[:8]}: {proc.stderr.decode().strip()}")

    return released.fetch_verified(name, cache_dir, write)


@torch.no_grad()
def per_k_error_dropout(model: GPT, task: HopTask, *, n_samples: int = 100, seed: int = 0, dropout_seed: int = 0,
                        metric: str = "pooled", ks: list[int] | None = None) -> dict[int, float]:
    """Per-k error with dropout on (the model in training mode), as the authors' evaluation ran. Same samples
    as :func:`hoplib.evaluate.per_k_error`; the masks come from ``dropout_seed``; the mode is restored."""
    dev = next(model.parameters()).device
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        torch.manual_seed(dropout_seed)
        return {k: evaluate.errors_from_predictions(evaluate.predictions(model, x, 500, dropout=True), y, task, metric)
                for k, x, y in evaluate.samples_per_k(task, ks, n_samples, seed, dev)}


def evaluate_model(model: GPT, *, n_samples: int = 500, n_dropout: int = 200, seed: int = 0,
                   ks: list[int] | None = None, n_align: int = 10, align_seed: int = 0,
                   device: str | torch.device = "cpu") -> dict[str, Any]:
    """The ``data`` of ``results/released/<name>.json``: ``errors`` ``{"paper", "pooled", "pooled_dropout"}``,
    each ``{k: error}``, and ``alignment``, Appendix G.4's scores of every head against prev, find^0..16 and
    start for every k (:func:`hoplib.evaluate.best_find_per_head`, stored by :func:`encode_alignment`)."""
    task = released.released_task()
    ks = list(range(task.min_hops, task.max_hops + 1)) if ks is None else list(ks)
    errors = evaluate.per_k_errors(model, task, n_samples=n_samples, seed=seed, device=device, ks=ks)
    errors["pooled_dropout"] = per_k_error_dropout(model, task, n_samples=n_dropout, seed=seed, ks=ks)
    best = evaluate.best_find_per_head(model, task, ks=ks, js=range(task.max_hops + 1), n_samples=n_align,
                                       seed=align_seed, device=device)
    return {"errors": errors, "alignment": encode_alignment(best)}


def encode_alignment(table: dict[str, Any]) -> dict[str, Any]:
    """Compact JSON form of alignment scores (read back by :func:`hoplib.released.decode_alignment`):
    ``{"ks", "patterns", "scores_permille"}``, the last a nested list [layer][head][k] of strings, each the P
    scores of one cell in thousandths, space-separated."""
    permille = torch.round(torch.as_tensor(table["scores"]).float().clamp(0, 1) * 1000).long().tolist()
    return {"ks": [int(k) for k in table["ks"]], "patterns": list(table["patterns"]),
            "scores_permille": [[[" ".join(map(str, cell)) for cell in head] for head in layer]
                                for layer in permille]}


def fetch(args: argparse.Namespace, wanted: list[str]) -> None:
    """Copy or download the wanted checkpoints into the cache; report the ones that cannot be had."""
    for name in wanted:
        if name in released.available(args.cache_dir):
            continue
        try:
            if args.from_git_dir is not None:
                extract_from_git(args.from_git_dir, name, args.cache_dir)
            elif args.download:
                released.download(name, args.cache_dir)
        except (ValueError, ConnectionError) as exc:
            print(f"skip {name}: {exc}", file=sys.stderr)


def evaluate_one(args: argparse.Namespace, name: str) -> Path:
    model_info = released.info(name)
    path = released.cached_path(name, args.cache_dir)
    sha256 = released.verify(path, name)
    start = time.perf_counter()
    model = released.load(name, args.cache_dir, device="cpu")
    data = evaluate_model(model, n_samples=args.n_samples, n_dropout=args.n_dropout, seed=args.seed,
                                   n_align=args.n_align, align_seed=args.seed, device="cpu")
    data["model"] = {"name": name, "depth": model_info.depth, "d_model": model_info.d_model,
                     "heads": model_info.heads, "n_train": model_info.n_train,
                     "parameters": models.count_parameters(model)}
    params = {"task": released.TASK_SETTINGS, "n_samples": args.n_samples, "n_dropout": args.n_dropout,
              "n_align": args.n_align, "seed": args.seed, "dropout_seed": 0, "align_seed": args.seed,
              "dropout": released.DROPOUT, "threads": torch.get_num_threads()}
    return save_results(args.out / f"{name}.json", data, params, "cpu", time.perf_counter() - start,
                        checkpoint_repository=f"https://github.com/{released.REPOSITORY}",
                        checkpoint_commit=released.COMMIT, checkpoint_file=model_info.path,
                        checkpoint_sha256=sha256, checkpoint_url=model_info.url)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    check_writable(args.out)  # a file, read-only, no room: one line before any copying or evaluating
    if args.threads:
        torch.set_num_threads(args.threads)
    wanted = released.names() if not args.names else [released.info(n).name for n in args.names]
    fetch(args, wanted)
    todo = [n for n in wanted if n in released.available(args.cache_dir)]
    if not todo:
        print("no released checkpoints in the cache; use --from-git-dir or --download", file=sys.stderr)
        return 1
    written: list[str] = []
    for name in todo:
        if (args.out / f"{name}.json").exists() and not args.force:
            print(f"{name}: results exist, skipped (--force to redo)")
            continue
        t = time.perf_counter()
        try:
            out = evaluate_one(args, name)
        except OSError as exc:  # a disk that fills in the middle: say what is kept
            kept = f"the results of {', '.join(written)} are kept" if written else "no new results were kept"
            raise OutputError(f"{name}: {exc}; {kept}; free space and rerun the same command (finished "
                              "models are skipped)") from exc
        written.append(name)
        print(f"{name}: {out} ({time.perf_counter() - t:.0f} s)", flush=True)
    return 0


def cli(argv: list[str] | None = None) -> int:
    """:func:`main` with one-line errors (``error: ...``): exit 2 for an unusable --out, 1 for a failure."""
    code = [0]
    return run_cli(lambda a: code.__setitem__(0, main(a)), argv) or code[0]


if __name__ == "__main__":
    raise SystemExit(cli())
