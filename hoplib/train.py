"""Training sequence models on hop_k, as in Section 4.2 and Appendix G of the paper, with resumable checkpoints.

The authors' recipe (paper-spec section 7): AdamW (weight decay 0.01 on every parameter), learning rate 1e-4
with linear warmup from 0 over 1000 steps then linear decay to 0 at the final step (HuggingFace's
``get_linear_schedule_with_warmup``), batch 32, cross-entropy over all positions (so the model also learns to
emit ⊥ and the blank), 10^5 steps, and either fresh samples every step ("infinite") or ``n_train`` fixed
samples cycled in order without reshuffling, of which only ``floor(n_train / B) * B`` are used.

Data are generated on the device by :class:`hoplib.tasks.HopTask`, statelessly: the batch of step t is
``task.sample(B, seed=train_seed(seed, t))``, so resuming needs no data-RNG state; training seeds never
overlap the test seeds of :mod:`hoplib.evaluate` (all seeds stay below 2**32, where torch's CPU generator
would otherwise wrap; run seeds are limited to 0..127 and runs to 2**24 steps). bf16 autocast on CUDA,
float32 elsewhere (CPU runs are bit-reproducible).

Checkpoints (:func:`save_checkpoint`) hold model, optimiser, scheduler, global RNG states, step and history;
they are written to a temporary file and renamed, and loaded with ``torch.load(..., weights_only=True)``.
A run killed at any moment and restarted ends with exactly the weights of an uninterrupted run (CPU).

Speed on CPU: ``fit(..., fused=True)`` (``--fused``) trains a :class:`hoplib.models.GPT` with the fused kernels
of :mod:`hoplib.fast` (dropout masks from a fast counter-based hash, fused GELU and causal softmax + dropout,
the matrix products unchanged) and AdamW's fused implementation: the same maths in faster steps (measured by
``benchmarks/bench_train.py``). ``compile=True`` wraps the forward in ``torch.compile`` (works on CPU with a
C++ compiler, but with dropout inductor's CPU code is not faster there; meant for CUDA).

Command line: ``python -m hoplib.train --depth L --d-model M --heads H --steps S ... --out DIR`` writes
``DIR/results.json`` and ``DIR/checkpoint.pt``; rerunning the same command resumes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from hoplib._book.device import autocast, get_device, seed_everything
from hoplib._book.provenance import atomic_write, atomic_write_text
from hoplib._book.validate import check_int
from hoplib.tasks import HopTask

CHECKPOINT_FORMAT = 1
# torch's CPU generator keeps only the low 32 bits of a seed, so every seed below lives in [0, 2**32):
# test data (hoplib.evaluate) uses seeds below 2**30, the fixed finite training set 2**30 + seed, and the batch
# of step t in infinite mode 2**31 + seed * 2**24 + t. The three ranges are disjoint.
_FINITE_SEED_BASE = 2**30
_TRAIN_SEED_BASE = 2**31
MAX_SEED = 127
MAX_STEPS = 2**24


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read, or that belongs to a different run."""


# --------------------------------------------------------------------------- schedule and data
def linear_warmup_decay(step: int, *, steps: int, warmup_steps: int) -> float:
    """Learning-rate factor at ``step``: step/warmup during warmup, then linear down to 0 at ``steps``."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    return max(0.0, (steps - step) / max(1, steps - warmup_steps))


class _Schedule:
    """Picklable-free callable for LambdaLR (its state is fully given by ``steps`` and ``warmup_steps``)."""

    def __init__(self, steps: int, warmup_steps: int):
        self.steps, self.warmup_steps = steps, warmup_steps

    def __call__(self, step: int) -> float:
        return linear_warmup_decay(step, steps=self.steps, warmup_steps=self.warmup_steps)


def train_seed(seed: int, step: int) -> int:
    """Seed of the training batch drawn at ``step`` for run seed ``seed`` (infinite-sample mode)."""
    return _TRAIN_SEED_BASE + seed * 2**24 + step


class DataStream:
    """Training batches for one model: fresh samples each step, or ``n_train`` fixed samples cycled in order."""

    def __init__(self, task: HopTask, batch_size: int, n_train: int | None, seed: int, device: torch.device):
        self.task, self.batch_size, self.n_train, self.seed, self.device = task, batch_size, n_train, seed, device
        self.fixed: tuple[torch.Tensor, torch.Tensor] | None = None
        if n_train is not None:
            used = (n_train // batch_size) * batch_size
            if used == 0:
                raise ValueError(f"n_train must be >= batch_size = {batch_size}, got {n_train}")
            x, y = task.sample(n_train, seed=_FINITE_SEED_BASE + seed, device=device)
            self.fixed = (x[:used], y[:used])
            self.n_batches = used // batch_size

    @property
    def n_used(self) -> int | None:
        """Number of distinct training samples actually used (floor(n/B)*B), None for infinite."""
        return None if self.fixed is None else self.n_batches * self.batch_size

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.fixed is None:
            return self.task.sample(self.batch_size, seed=train_seed(self.seed, step), device=self.device)
        i = (step % self.n_batches) * self.batch_size
        return self.fixed[0][i:i + self.batch_size], self.fixed[1][i:i + self.batch_size]


# --------------------------------------------------------------------------- checkpoints
def _rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state_all()
    if device.type == "mps":
        state["mps"] = torch.mps.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
    if "mps" in state:
        torch.mps.set_rng_state(state["mps"].cpu())


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> Path:
    """``torch.save`` to a temporary file in the same folder, fsync, then an atomic rename onto ``path``."""
    return atomic_write(path, lambda fh: torch.save(state, fh), binary=True)


def load_checkpoint(path: str | os.PathLike, *, expected: dict[str, Any] | None = None,
                    map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``; raise :class:`CheckpointError` if it is unreadable,
    not a hoplib checkpoint, or was written by a run whose settings differ from ``expected``."""
    path = Path(path)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds of errors for a damaged file
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        raise CheckpointError(f"checkpoint {path} is corrupt or unreadable ({type(exc).__name__}: {first}); "
                              "delete it to start over") from exc
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT or "model" not in state:
        raise CheckpointError(f"{path} is not a hoplib training checkpoint (format {CHECKPOINT_FORMAT}); "
                              "delete it or choose another output folder")
    if expected is not None:
        saved = state.get("settings", {})
        diff = sorted(k for k in set(saved) | set(expected) if saved.get(k) != expected.get(k))
        if diff:
            details = ", ".join(f"{k}: checkpoint {saved.get(k)!r} vs now {expected.get(k)!r}" for k in diff)
            raise CheckpointError(f"checkpoint {path} belongs to a different run ({details}); "
                                  "use another output folder or delete the checkpoint")
    return state


# --------------------------------------------------------------------------- the training loop
def _check_common(task: object, steps: int, batch_size: int, lr: float, warmup_steps: int, weight_decay: float,
                  n_train: int | None, seed: int, eval_every: int | None) -> None:
    if not isinstance(task, HopTask):
        raise TypeError(f"task must be a HopTask, got {type(task).__name__}")
    check_int("steps", steps, low=1, high=MAX_STEPS)
    check_int("batch_size", batch_size, low=1)
    check_int("warmup_steps", warmup_steps, low=0)
    check_int("seed", seed, low=0, high=MAX_SEED)
    for name, val in (("lr", lr), ("weight_decay", weight_decay)):
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            raise TypeError(f"{name} must be a float, got {type(val).__name__}")
        if not math.isfinite(val) or val < 0 or (name == "lr" and val == 0):
            raise ValueError(f"{name} must be a finite number {'> 0' if name == 'lr' else '>= 0'}, got {val}")
    if n_train is not None:
        check_int("n_train", n_train, low=batch_size)
    if eval_every is not None:
        check_int("eval_every", eval_every, low=1)


def _run_loop(*, model: nn.Module, forward, streams: list[DataStream], task: HopTask, steps: int, lr: float,
              warmup_steps: int, weight_decay: float, device: torch.device, progress: bool,
              eval_every: int | None, eval_fn, checkpoint: str | os.PathLike | None,
              checkpoint_every: int | None, settings: dict[str, Any], desc: str,
              opt_kwargs: dict[str, Any] | None = None, stacked: bool = False) -> dict[str, Any]:
    """Shared loop of :func:`fit` and :func:`fit_ensemble` (E = len(streams) models, loss summed over them).

    ``stacked``: the model takes (E, B, T) batches and the loss history holds one row of E losses per step
    (an ensemble, even of one model); otherwise E = 1, (B, T) batches and one float per step.
    """
    if progress:
        from tqdm.auto import tqdm
    else:  # plain tqdm, disabled: importing tqdm.auto warns in notebooks without ipywidgets
        from tqdm import tqdm

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, **(opt_kwargs or {}))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _Schedule(steps, warmup_steps))
    e = len(streams)
    history: dict[str, Any] = {"loss": [], "evals": [], "steps_done": 0, "wall_time_s": 0.0}
    start = 0
    if checkpoint is not None and Path(checkpoint).exists():
        state = load_checkpoint(checkpoint, expected=settings, map_location=device)
        try:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            sched.load_state_dict(state["scheduler"])
        except (RuntimeError, KeyError, ValueError) as exc:
            raise CheckpointError(f"checkpoint {checkpoint} does not fit this model/optimiser: "
                                  f"{str(exc).splitlines()[0][:300]}") from exc
        _set_rng_state(state["rng"])
        history = state["history"]
        start = int(state["step"])

    def snapshot(step: int) -> dict[str, Any]:
        return {"format": CHECKPOINT_FORMAT, "step": step, "settings": settings, "model": model.state_dict(),
                "optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "rng": _rng_state(device),
                "history": history}

    model.train()
    buf: list[torch.Tensor] = []

    def flush() -> None:
        if buf:
            vals = torch.stack(buf).float().cpu()
            history["loss"].extend(vals.tolist() if stacked else vals.view(-1).tolist())
            buf.clear()

    t0 = time.perf_counter()
    wall0 = float(history["wall_time_s"])
    bar = tqdm(total=steps, initial=start, disable=not progress, desc=desc, leave=False)
    try:
        for step in range(start, steps):
            batches = [s.batch(step) for s in streams]
            if not stacked:
                x, y = batches[0]
            else:
                x = torch.stack([b[0] for b in batches])
                y = torch.stack([b[1] for b in batches])
            with autocast(device):
                logits = forward(x)
            c = logits.shape[-1]
            per = F.cross_entropy(logits.float().reshape(-1, c), y.reshape(-1), reduction="none")
            per_model = per.view(e, -1).mean(dim=1)
            loss = per_model.sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            buf.append(per_model.detach())
            done = step + 1
            if len(buf) >= 100 or done == steps:
                flush()
                if history["loss"]:
                    last = history["loss"][-1]
                    bar.set_postfix(loss=f"{(sum(last) / e) if stacked else last:.4f}")
            if eval_every is not None and (done % eval_every == 0 or done == steps):
                flush()
                history["evals"].append({"step": done, **eval_fn()})
                model.train()
            history["steps_done"] = done
            if checkpoint is not None and ((checkpoint_every and done % checkpoint_every == 0) or done == steps):
                flush()
                history["wall_time_s"] = wall0 + time.perf_counter() - t0
                save_checkpoint(checkpoint, snapshot(done))
            bar.update(1)
    finally:
        bar.close()
    flush()
    history["wall_time_s"] = wall0 + time.perf_counter() - t0
    history["steps_done"] = max(start, history["steps_done"])
    return history


def fit(model: nn.Module, task: HopTask, *, steps: int, batch_size: int = 32, lr: float = 1e-4,
        warmup_steps: int = 1000, weight_decay: float = 0.01, n_train: int | None = None, seed: int = 0,
        device: str | torch.device = "auto", progress: bool = True, eval_every: int | None = None,
        compile: bool = False, eval_samples: int = 100, checkpoint: str | os.PathLike | None = None,
        checkpoint_every: int | None = None, checkpoint_meta: dict[str, Any] | None = None,
        fused: bool = False) -> dict[str, Any]:
    """Train ``model`` (ids (B, T) -> logits (B, T, C >= vocab)) on ``task`` as in Sec. 4.2 / App. G.

    AdamW(lr, weight_decay) with linear warmup over ``warmup_steps`` then linear decay to 0 at ``steps``;
    cross-entropy over all positions; fresh data each step (``n_train=None``) or ``n_train`` fixed samples
    cycled in order (only ``floor(n_train / batch_size) * batch_size`` used). The model is moved to ``device``
    and stays there. ``seed`` fixes the data stream and seeds torch's global RNG (dropout) at the start of a
    fresh run. ``eval_every`` records :func:`hoplib.evaluate.per_k_error` (paper metric, ``eval_samples``
    per k) every that many steps. ``compile`` wraps the forward in ``torch.compile`` (CPU or CUDA; the
    state-dict keys stay those of ``model``). ``fused`` trains a :class:`hoplib.models.GPT` on CPU with the
    fused kernels of :mod:`hoplib.fast` (same maths, dropout masks from another random stream) and uses AdamW's
    fused implementation on CPU and CUDA; where the kernels do not apply (CUDA, MPS, another model class, no
    C compiler) the model's own forward is used. ``compile`` and ``fused`` exclude each other.

    With ``checkpoint`` (a file path), state is saved atomically every ``checkpoint_every`` steps and at the
    end, and an existing checkpoint is resumed from (after checking that it was written with the same
    settings and ``checkpoint_meta``; otherwise :class:`CheckpointError`).

    Returns the history: ``loss`` (one float per step), ``evals`` (``{"step", "per_k_error"}`` records),
    ``steps_done``, ``wall_time_s``, ``n_train_used``, ``fused`` (whether the fused kernels ran).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    _check_common(task, steps, batch_size, lr, warmup_steps, weight_decay, n_train, seed, eval_every)
    eval_samples = check_int("eval_samples", eval_samples, low=1)
    if checkpoint_every is not None:
        check_int("checkpoint_every", checkpoint_every, low=1)
    for name, flag in (("compile", compile), ("fused", fused)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
    if compile and fused:
        raise ValueError("compile and fused exclude each other (the fused kernels are opaque to torch.compile); "
                         "choose one")
    dev = get_device(device)
    model.to(dev)
    if checkpoint is None or not Path(checkpoint).exists():
        torch.manual_seed(seed)
    stream = DataStream(task, batch_size, n_train, seed, dev)
    use_kernels = False
    if fused:
        from hoplib import fast

        use_kernels = fast.supports(model, dev)
    if use_kernels:
        def forward(x: torch.Tensor) -> torch.Tensor:
            return fast.gpt_forward(model, x)
    else:
        forward = torch.compile(model) if compile else model
    fused_adamw = fused and dev.type in ("cpu", "cuda") and all(p.dtype == torch.float32 for p in model.parameters())
    settings = {"steps": steps, "batch_size": batch_size, "lr": float(lr), "warmup_steps": warmup_steps,
                "weight_decay": float(weight_decay), "n_train": n_train, "seed": seed, "task": repr(task),
                "model_class": type(model).__name__, **(checkpoint_meta or {})}
    if fused:  # only then: checkpoints of plain runs written before this option existed still match
        settings["fused"] = True

    def eval_fn() -> dict[str, Any]:
        from hoplib.evaluate import per_k_error
        return {"per_k_error": per_k_error(model, task, n_samples=eval_samples, device=dev)}

    def fwd(x: torch.Tensor) -> torch.Tensor:
        logits = forward(x)
        if logits.dim() != 3 or logits.shape[:2] != x.shape or logits.shape[-1] < task.vocab_size:
            raise ValueError(f"model must map ids {tuple(x.shape)} to logits (B, T, C >= {task.vocab_size}), "
                             f"got {tuple(logits.shape)}")
        return logits

    hist = _run_loop(model=model, forward=fwd, streams=[stream], task=task, steps=steps, lr=lr,
                     warmup_steps=warmup_steps, weight_decay=weight_decay, device=dev, progress=progress,
                     eval_every=eval_every, eval_fn=eval_fn, checkpoint=checkpoint,
                     checkpoint_every=checkpoint_every, settings=settings, desc="train",
                     opt_kwargs={"fused": True} if fused_adamw else None)
    hist["n_train_used"] = stream.n_used
    hist["fused"] = use_kernels
    return hist


def fit_ensemble(models: list[nn.Module], task: HopTask, *, steps: int, seeds: list[int],
                 n_trains: list[int | None] | None = None, batch_size: int = 32, lr: float = 1e-4,
                 warmup_steps: int = 1000, weight_decay: float = 0.01, device: str | torch.device = "auto",
                 progress: bool = True, eval_every: int | None = None, eval_samples: int = 100,
                 compile: bool = False, checkpoint: str | os.PathLike | None = None,
                 checkpoint_every: int | None = None) -> tuple[list[nn.Module], list[dict[str, Any]]]:
    """Train E :class:`hoplib.models.GPT` models of one architecture at once, as one :class:`GPTEnsemble`.

    Model e sees exactly the data that ``fit(models[e], seed=seeds[e], n_train=n_trains[e])`` would, and
    since AdamW is elementwise the result equals E separate :func:`fit` runs up to float rounding (and up to
    dropout masks). Returns the trained models (new modules on ``device``) and one history per model.
    """
    from hoplib.models import GPTEnsemble

    if not isinstance(models, (list, tuple)) or not models:
        raise ValueError("models must be a non-empty list of GPT models")
    e = len(models)
    if not isinstance(seeds, (list, tuple)) or len(seeds) != e:
        raise ValueError(f"seeds must be a list of {e} ints (one per model), got {seeds!r}")
    n_trains = [None] * e if n_trains is None else list(n_trains)
    if len(n_trains) != e:
        raise ValueError(f"n_trains must have {e} entries (one per model), got {len(n_trains)}")
    for s, n in zip(seeds, n_trains, strict=True):
        _check_common(task, steps, batch_size, lr, warmup_steps, weight_decay, n, s, eval_every)
    dev = get_device(device)
    ens = GPTEnsemble([m.to(dev) for m in models]).to(dev)
    if checkpoint is None or not Path(checkpoint).exists():
        torch.manual_seed(int(seeds[0]))
    streams = [DataStream(task, batch_size, n, s, dev) for s, n in zip(seeds, n_trains, strict=True)]
    forward = torch.compile(ens) if compile else ens
    settings = {"steps": steps, "batch_size": batch_size, "lr": float(lr), "warmup_steps": warmup_steps,
                "weight_decay": float(weight_decay), "n_trains": list(n_trains), "seeds": list(seeds),
                "task": repr(task), "model_config": ens.config.to_dict(), "n_models": e}

    def eval_fn() -> dict[str, Any]:
        from hoplib.evaluate import per_k_error
        return {"per_k_error": [per_k_error(m, task, n_samples=eval_samples, device=dev) for m in ens.unstack()]}

    hist = _run_loop(model=ens, forward=forward, streams=streams, task=task, steps=steps, lr=lr,
                     warmup_steps=warmup_steps, weight_decay=weight_decay, device=dev, progress=progress,
                     eval_every=eval_every, eval_fn=eval_fn, checkpoint=checkpoint,
                     checkpoint_every=checkpoint_every, settings=settings, desc=f"train x{e}", stacked=True)
    histories = []
    for j in range(e):
        histories.append({"loss": [row[j] for row in hist["loss"]],
                          "evals": [{"step": r["step"], "per_k_error": r["per_k_error"][j]} for r in hist["evals"]],
                          "steps_done": hist["steps_done"], "wall_time_s": hist["wall_time_s"],
                          "n_train_used": streams[j].n_used, "ensemble_size": e})
    return ens.unstack(), histories


# --------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hoplib.train",
                                description="Train one GPT on hop_k (Sec. 4.2 / App. G); resumable.")
    p.add_argument("--depth", type=int, required=True, help="number of layers L")
    p.add_argument("--d-model", type=int, required=True, help="embedding width m")
    p.add_argument("--heads", type=int, required=True, help="attention heads H")
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--warmup-steps", type=int, default=1000)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--seq-len", type=int, default=100, help="N; inputs have N-1 tokens (99 for N=100)")
    p.add_argument("--alphabet-size", type=int, default=4)
    p.add_argument("--max-hops", type=int, default=16)
    p.add_argument("--n-train", type=int, default=None, help="finite training set size (default: infinite)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    p.add_argument("--checkpoint-every", type=int, default=1000)
    p.add_argument("--out", required=True, help="output folder (results.json, checkpoint.pt)")
    p.add_argument("--head", default="linear", choices=["linear", "layernorm"],
                   help="linear unembedding (default) or the authors' LayerNorm-as-logits head")
    p.add_argument("--dropout", type=float, default=0.0, help="dropout (the authors' HF default is 0.1)")
    p.add_argument("--eval-samples", type=int, default=100, help="test samples per k")
    p.add_argument("--eval-seed", type=int, default=0)
    p.add_argument("--compile", action="store_true", help="torch.compile the model (CUDA; works on CPU, not faster)")
    p.add_argument("--fused", action="store_true",
                   help="fused CPU kernels (hoplib.fast) and fused AdamW: same maths, faster steps on CPU")
    p.add_argument("--no-progress", action="store_true")
    return p


RUN_KEYS = ("depth", "d_model", "heads", "steps", "batch_size", "lr", "warmup_steps", "weight_decay", "seq_len",
            "alphabet_size", "max_hops", "n_train", "seed", "head", "dropout", "eval_samples", "eval_seed")


def run_config(args: argparse.Namespace) -> dict[str, Any]:
    """The run's configuration as stored in results.json (everything that determines the result)."""
    return {k: getattr(args, k) for k in RUN_KEYS}


def default_run_config(**overrides: Any) -> dict[str, Any]:
    """A run configuration with the command line's defaults (the authors' recipe), updated by ``overrides``."""
    unknown = set(overrides) - set(RUN_KEYS)
    if unknown:
        raise ValueError(f"unknown run settings {sorted(unknown)}; allowed: {RUN_KEYS}")
    base = vars(build_parser().parse_args(["--depth", "2", "--d-model", "128", "--heads", "4", "--out", "."]))
    config = {k: base[k] for k in RUN_KEYS}
    config.update(overrides)
    return config


def config_to_argv(config: dict[str, Any]) -> list[str]:
    """Command-line arguments that reproduce ``config`` (``--n-train`` omitted for the infinite regime)."""
    argv = []
    for k in RUN_KEYS:
        if config[k] is None:
            continue
        argv += ["--" + k.replace("_", "-"), str(config[k])]
    return argv


def finished_results(out: str | os.PathLike, config: dict[str, Any]) -> dict[str, Any] | None:
    """The results record in ``out`` if it is complete and was produced by ``config``, else None."""
    path = Path(out) / "results.json"
    if not path.exists():
        return None
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if isinstance(old, dict) and old.get("complete") and old.get("config") == config:
        return old
    return None


def task_for(config: dict[str, Any]) -> HopTask:
    """The :class:`HopTask` of a run configuration."""
    return HopTask(seq_len=config["seq_len"], alphabet_size=config["alphabet_size"], max_hops=config["max_hops"])


def model_for(config: dict[str, Any], task: HopTask, device: torch.device) -> nn.Module:
    """The freshly initialised model of a run (torch's RNGs are seeded with the run's seed first)."""
    from hoplib.models import gpt_for_task

    seed_everything(check_int("seed", config["seed"], low=0, high=MAX_SEED))
    return gpt_for_task(task, depth=config["depth"], d_model=config["d_model"], heads=config["heads"],
                        dropout=config["dropout"], head=config["head"]).to(device)


def results_record(model: nn.Module, task: HopTask, hist: dict[str, Any], config: dict[str, Any],
                   device: torch.device, command: str, **extra: Any) -> dict[str, Any]:
    """Evaluate a trained model (both metrics) and build the results.json record of a run."""
    from hoplib._book.provenance import provenance
    from hoplib.evaluate import per_k_error
    from hoplib.models import count_parameters

    kw = dict(n_samples=config["eval_samples"], seed=config["eval_seed"], device=device)
    err = per_k_error(model, task, **kw)
    pooled = per_k_error(model, task, metric="pooled", **kw)
    losses = hist["loss"]
    every = max(1, len(losses) // 200)
    cfg = getattr(model, "config", None)
    return {
        "per_k_error": {str(k): v for k, v in err.items()},
        "per_k_error_pooled": {str(k): v for k, v in pooled.items()},
        "config": config,
        "model": {"parameters": count_parameters(model), **(cfg.to_dict() if cfg is not None else {})},
        "loss_curve": {"step": list(range(1, len(losses) + 1, every)), "loss": losses[::every]},
        "final_loss": losses[-1] if losses else None,
        "n_train_used": hist["n_train_used"],
        "provenance": provenance(device, hist["wall_time_s"], steps_done=hist["steps_done"], command=command,
                                 **extra),
        "complete": hist["steps_done"] >= config["steps"],
    }


def write_run(out: str | os.PathLike, model: nn.Module, record: dict[str, Any]) -> Path:
    """Write ``model.pt`` (final weights, a plain state dict) and then ``results.json``, both atomically."""

    out = Path(out)
    save_checkpoint(out / "model.pt", {k: v.detach().cpu() for k, v in model.state_dict().items()})
    return atomic_write_text(out / "results.json", json.dumps(record, indent=2) + "\n")


def train_run(config: dict[str, Any], out: str | os.PathLike, *, device: str | torch.device = "auto",
              progress: bool = True, compile: bool = False, checkpoint_every: int | None = 1000,
              command: str | None = None, fused: bool = False) -> dict[str, Any]:
    """Train, evaluate and record one run in folder ``out``: skip it if finished, resume it if interrupted.

    Writes ``out/checkpoint.pt`` (every ``checkpoint_every`` steps and at the end), ``out/model.pt`` and
    ``out/results.json``; returns the results record. ``compile`` and ``fused`` are passed to :func:`fit`
    (speed options, recorded in the provenance, not part of the configuration).
    """
    if not isinstance(config, dict) or set(config) != set(RUN_KEYS):
        raise ValueError(f"config must be a dict with exactly the keys {RUN_KEYS} (see default_run_config)")
    done = finished_results(out, config)
    if done is not None:
        return done
    out = Path(out)
    dev = get_device(device)
    task = task_for(config)
    model = model_for(config, task, dev)
    meta = {"model_config": model.config.to_dict()}
    hist = fit(model, task, steps=config["steps"], batch_size=config["batch_size"], lr=config["lr"],
               warmup_steps=config["warmup_steps"], weight_decay=config["weight_decay"], n_train=config["n_train"],
               seed=config["seed"], device=dev, progress=progress, compile=compile,
               checkpoint=out / "checkpoint.pt", checkpoint_every=checkpoint_every, checkpoint_meta=meta,
               fused=fused)
    command = command or "python -m hoplib.train " + " ".join(config_to_argv(config) + ["--out", str(out)])
    speed = {k: v for k, v in (("compiled", compile), ("fused_kernels", hist["fused"])) if v}
    record = results_record(model, task, hist, config, dev, command, **speed)
    write_run(out, model, record)
    return record


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point of ``python -m hoplib.train``; returns the results record it wrote."""
    args = build_parser().parse_args(argv)
    config = run_config(args)
    if finished_results(args.out, config) is not None:
        print(f"{Path(args.out) / 'results.json'} is complete; nothing to do")
    command = "python -m hoplib.train " + " ".join(argv if argv is not None else sys.argv[1:])
    return train_run(config, args.out, device=args.device, progress=not args.no_progress, compile=args.compile,
                     checkpoint_every=args.checkpoint_every, command=command, fused=args.fused)


if __name__ == "__main__":
    try:
        main()
    except (ValueError, TypeError) as exc:  # clear one-line errors for bad arguments and bad checkpoints
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
