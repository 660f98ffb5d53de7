"""Training sequence models on hop_k (Section 4.2 and Appendix G of the paper): the book's one training loop.

The authors' recipe (paper-spec section 7, Appendix G): AdamW (weight decay 0.01 on every parameter), learning
rate 1e-4 with linear warmup from 0 over 1000 steps then linear decay to 0 at the final step (HuggingFace's
``get_linear_schedule_with_warmup``), batch 32, cross-entropy over all positions (so the model also learns to
emit ⊥ and the blank), 10^5 steps, and either fresh samples every step ("infinite") or ``n_train`` fixed
samples cycled in order without reshuffling, of which only ``floor(n_train / B) * B`` are used.
:class:`TrainConfig` holds these settings (its defaults are the authors'), :func:`optimise` is THE optimiser
loop of the book (every trained model family, GPT, RNNs, GNNs, chain of thought, efficient attention, trains
through it), :func:`fit` trains one model on hop_k with it and :func:`fit_ensemble` E stacked GPTs at once.

Data are generated on the device by :class:`hoplib.tasks.HopTask`, statelessly: the batch of step t is
``task.sample(B, seed=train_seed(seed, t))``, so resuming needs no data-RNG state; training seeds never
overlap the test seeds of :mod:`hoplib.evaluate` (all seeds stay below 2**32, where torch's CPU generator
would otherwise wrap; run seeds are limited to 0..127 and runs to 2**24 steps). bf16 autocast on CUDA,
float32 elsewhere (CPU runs are bit-reproducible). Speed comes from torch: SDPA attention in the models,
``compile=True`` (``torch.compile``, meant for CUDA), batched ensembles, data made on the device, and AdamW's
fused kernel on CUDA.

Reliability: a non-finite loss (or non-finite weights) stops training with :class:`DivergedError`.
Checkpoints (:func:`save_checkpoint`) hold model, optimiser, scheduler, global RNG states, step, history and a
sha256 checksum of all of it; they are written to a temporary file and renamed, loaded with
``torch.load(..., weights_only=True)``, and refused (:class:`CheckpointError`) when damaged, non-finite or
written by another run. A run killed at any moment and restarted ends with exactly the weights of an
uninterrupted run (CPU).

A stored run is described by a :class:`RunConfig` (task, GPT architecture, :class:`TrainConfig`, evaluation
seed) and trained by :func:`train_run` into a folder (``results.json``, ``model.pt``, ``checkpoint.pt``).
Command line: ``python -m hoplib.train --depth L --d-model M --heads H --steps S ... --out DIR``; rerunning the
same command resumes, or does nothing once the run is finished. Every user error is reported in one line
(exit status 2) before any training.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from hoplib._book.cli import run_cli
from hoplib._book.device import autocast, get_device, seed_everything
from hoplib._book.provenance import atomic_write, atomic_write_text
from hoplib._book.validate import check_int
from hoplib.tasks import HopTask

CHECKPOINT_FORMAT = 2  # 2: with a sha256 checksum of the contents
# torch's CPU generator keeps only the low 32 bits of a seed, so every seed below lives in [0, 2**32):
# test data (hoplib.evaluate) uses seeds below 2**30, the fixed finite training set 2**30 + seed, and the batch
# of step t in infinite mode 2**31 + seed * 2**24 + t. The three ranges are disjoint.
_FINITE_SEED_BASE = 2**30
_TRAIN_SEED_BASE = 2**31
MAX_SEED = 127
MAX_STEPS = 2**24
_FLUSH_EVERY = 100  # losses are copied to the host (one device sync) every this many steps


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read, is damaged, or belongs to a different run."""


class DivergedError(RuntimeError):
    """Training stopped because a loss (or a weight) stopped being finite; ``history`` holds the run so far."""

    def __init__(self, message: str, history: dict[str, Any], step: int):
        super().__init__(message)
        self.history, self.step = history, step


class RunConflictError(ValueError):
    """An output folder that holds the results or the model of another run."""


def _check_number(name: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {value}")
    return float(value)


@dataclass(frozen=True)
class TrainConfig:
    """The optimisation settings of one training run (Appendix G); the defaults are the authors' recipe.

    ``steps`` AdamW steps of ``batch_size`` samples, learning rate ``lr`` (linear warmup over ``warmup_steps``,
    then linear decay to 0), ``weight_decay`` on every parameter; ``n_train`` fixed samples cycled in order
    (None: fresh samples every step); ``seed`` (0..127) fixes the data stream and torch's global RNG (dropout);
    every ``eval_every`` steps :func:`hoplib.evaluate.per_k_error` on ``eval_samples`` test samples per k.
    Validated on construction (``TypeError`` / ``ValueError`` naming the field).
    """

    steps: int
    batch_size: int = 32
    lr: float = 1e-4
    warmup_steps: int = 1000
    weight_decay: float = 0.01
    n_train: int | None = None
    seed: int = 0
    eval_every: int | None = None
    eval_samples: int = 100

    def __post_init__(self) -> None:
        put = object.__setattr__  # frozen: normalise numpy ints and int learning rates once, here
        put(self, "steps", check_int("steps", self.steps, low=1, high=MAX_STEPS))
        put(self, "batch_size", check_int("batch_size", self.batch_size, low=1))
        put(self, "lr", _check_number("lr", self.lr, positive=True))
        put(self, "warmup_steps", check_int("warmup_steps", self.warmup_steps, low=0))
        put(self, "weight_decay", _check_number("weight_decay", self.weight_decay, positive=False))
        if self.n_train is not None:
            put(self, "n_train", check_int("n_train", self.n_train, low=self.batch_size))
        put(self, "seed", check_int("seed", self.seed, low=0, high=MAX_SEED))
        if self.eval_every is not None:
            put(self, "eval_every", check_int("eval_every", self.eval_every, low=1))
        put(self, "eval_samples", check_int("eval_samples", self.eval_samples, low=1))

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (the identity of a checkpoint, with the caller's settings)."""
        return dataclasses.asdict(self)


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


def _digest(obj: Any, h: Any) -> None:
    """Feed ``obj`` (nested dicts, lists, tensors, plain values) into the hash ``h``, in a fixed order."""
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(obj, dict):
        h.update(b"{")
        for k, v in obj.items():
            h.update(f"{k!r}:".encode())
            _digest(v, h)
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        if obj and all(type(v) is float for v in obj):  # loss histories: fast path
            h.update(b"F" + array("d", obj).tobytes())
            return
        h.update(b"[")
        for v in obj:
            _digest(v, h)
        h.update(b"]")
    else:
        h.update(f"{type(obj).__name__}:{obj!r};".encode())


def checksum(state: dict[str, Any]) -> str:
    """sha256 of a checkpoint's contents (every tensor's bytes, dtype and shape, and every plain value)."""
    h = hashlib.sha256()
    _digest({k: v for k, v in state.items() if k != "checksum"}, h)
    return h.hexdigest()


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Save ``state`` with its format and :func:`checksum`: ``torch.save`` to a temporary file in the same
    folder, fsync, then an atomic rename onto ``path``."""
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict, got {type(state).__name__}")
    state = {**state, "format": CHECKPOINT_FORMAT}
    state["checksum"] = checksum(state)
    return atomic_write(path, lambda fh: torch.save(state, fh), binary=True)


def remove_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Delete the temporary files ``.<name>.*.tmp`` that a killed atomic write of ``path`` left behind."""
    path = Path(path)
    stale = sorted(path.parent.glob(f".{path.name}.*.tmp")) if path.parent.is_dir() else []
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def _non_finite(state: dict[str, Any]) -> str | None:
    """Name of the first non-finite floating tensor among the model's and the optimiser's, else None."""
    tensors = list(state["model"].items())
    for i, s in enumerate(state.get("optimizer", {}).get("state", {}).values()):
        tensors += [(f"optimizer state {i} {k}", v) for k, v in s.items() if isinstance(v, torch.Tensor)]
    for name, t in tensors:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return name
    return None


def _read_checkpoint(path: Path, map_location: str | torch.device) -> dict[str, Any]:
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds of errors for a damaged file
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        raise CheckpointError(f"checkpoint {path} is corrupt or unreadable ({type(exc).__name__}: {first}); "
                              "delete it to start over") from exc
    if isinstance(state, dict) and state.get("format") == 1:
        raise CheckpointError(f"checkpoint {path} was written by an older hoplib (format 1, no checksum); "
                              "delete it to start over")
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT or "model" not in state:
        raise CheckpointError(f"{path} is not a hoplib training checkpoint (format {CHECKPOINT_FORMAT}); "
                              "delete it or choose another output folder")
    return state


def load_checkpoint(path: str | os.PathLike, *, expected: dict[str, Any] | None = None,
                    map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True`` and check it; raise :class:`CheckpointError` if it is
    unreadable, not a hoplib checkpoint, damaged (checksum mismatch), holds non-finite weights, or was written
    by a run whose settings differ from ``expected``."""
    path = Path(path)
    state = _read_checkpoint(path, map_location)
    if state.get("checksum") != checksum(state):
        raise CheckpointError(f"checkpoint {path} is damaged: its sha256 checksum does not match its contents; "
                              "delete it to start over")
    bad = _non_finite(state)
    if bad is not None:
        raise CheckpointError(f"checkpoint {path} holds non-finite values ({bad}); delete it to start over")
    if expected is not None:
        saved = state.get("settings", {})
        diff = sorted(k for k in set(saved) | set(expected) if saved.get(k) != expected.get(k))
        if diff:
            details = ", ".join(f"{k}: checkpoint {saved.get(k)!r} vs now {expected.get(k)!r}" for k in diff)
            raise CheckpointError(f"checkpoint {path} belongs to a different run ({details}); "
                                  "use another output folder or delete the checkpoint")
    return state


# --------------------------------------------------------------------------- the one training loop
class _Losses:
    """Per-step losses kept on the device and copied to the history in blocks (one device sync per block);
    a non-finite loss raises :class:`DivergedError` when its block is copied."""

    def __init__(self, history: dict[str, Any], config: TrainConfig):
        self.history, self.config, self.buf = history, config, []

    def add(self, loss: torch.Tensor) -> None:
        self.buf.append(loss.detach())

    def last_mean(self) -> float:
        last = self.history["loss"][-1]
        return sum(last) / len(last) if isinstance(last, list) else last

    def flush(self) -> None:
        if not self.buf:
            return
        vals = torch.stack(self.buf).float().cpu()
        self.buf.clear()
        rows, first = vals.tolist(), len(self.history["loss"])
        bad = (~torch.isfinite(vals)).reshape(len(rows), -1).any(dim=1).nonzero().flatten().tolist()
        self.history["loss"].extend(rows[:bad[0] + 1] if bad else rows)
        if bad:
            step = first + bad[0] + 1
            c = self.config
            raise DivergedError(f"training diverged: the loss is {rows[bad[0]]} at step {step} of {c.steps} "
                                f"(lr={c.lr:g}, warmup_steps={c.warmup_steps}); lower the learning rate or "
                                "lengthen the warmup", self.history, step)


def _check_finite_weights(model: nn.Module, step: int, history: dict[str, Any]) -> None:
    params = [p.detach() for p in model.parameters() if p.is_floating_point()]
    if params and not bool(torch.stack([torch.isfinite(p).all() for p in params]).all()):
        raise DivergedError(f"training diverged: the weights are not finite after step {step}; lower the "
                            "learning rate or lengthen the warmup", history, step)


def _check_optimise(model: object, step_loss: object, config: object, eval_fn: object,
                    checkpoint_every: object, settings: object) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not callable(step_loss):
        raise TypeError(f"step_loss must be a callable step -> loss tensor, got {type(step_loss).__name__}")
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a hoplib.train.TrainConfig, got {type(config).__name__}")
    if eval_fn is not None and not callable(eval_fn):
        raise TypeError(f"eval_fn must be a callable () -> dict or None, got {type(eval_fn).__name__}")
    if checkpoint_every is not None:
        check_int("checkpoint_every", checkpoint_every, low=1)
    if settings is not None and not isinstance(settings, dict):
        raise TypeError(f"settings must be a dict or None, got {type(settings).__name__}")


def _as_loss(loss: object, step: int) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor) or loss.dim() > 1 or not loss.requires_grad:
        raise ValueError(f"step_loss({step}) must return a scalar or (E,) loss tensor that requires grad, got "
                         f"{type(loss).__name__}{tuple(loss.shape) if isinstance(loss, torch.Tensor) else ''}")
    return loss


def _start(model: nn.Module, opt: torch.optim.Optimizer, sched: Any, config: TrainConfig, dev: torch.device,
           checkpoint: Path | None, identity: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Resume from ``checkpoint`` if it exists (history, step), else seed torch and start afresh."""
    if checkpoint is not None:
        remove_stale_temporaries(checkpoint)
    if checkpoint is None or not checkpoint.exists():
        torch.manual_seed(config.seed)
        return {"loss": [], "evals": [], "steps_done": 0, "wall_time_s": 0.0}, 0
    state = load_checkpoint(checkpoint, expected=identity, map_location=dev)
    try:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
    except (RuntimeError, KeyError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {checkpoint} does not fit this model/optimiser: "
                              f"{str(exc).splitlines()[0][:300]}") from exc
    _set_rng_state(state["rng"])
    return state["history"], int(state["step"])


def _progress_bar(config: TrainConfig, start: int, progress: bool, desc: str):
    if progress:
        from tqdm.auto import tqdm
    else:  # plain tqdm, disabled: importing tqdm.auto warns in notebooks without ipywidgets
        from tqdm import tqdm
    return tqdm(total=config.steps, initial=start, disable=not progress, desc=desc, leave=False)


def _optimiser(model: nn.Module, config: TrainConfig, dev: torch.device) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW (torch's fused kernel on CUDA) and the linear warmup/decay schedule of ``config``."""
    fused = dev.type == "cuda" and all(p.is_cuda and p.is_floating_point() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay,
                            **({"fused": True} if fused else {}))
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, _Schedule(config.steps, config.warmup_steps))


def _due(done: int, every: int | None, steps: int) -> bool:
    """Whether something done every ``every`` steps (and at the end) is due after step ``done``."""
    return (every is not None and done % every == 0) or done == steps


def optimise(model: nn.Module, step_loss: Callable[[int], torch.Tensor], config: TrainConfig, *,
             device: str | torch.device, progress: bool = True, desc: str = "train",
             eval_fn: Callable[[], dict] | None = None, checkpoint: str | os.PathLike | None = None,
             checkpoint_every: int | None = None, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """THE optimiser loop of the book (Section 4.2 / Appendix G): AdamW(lr, weight_decay) with linear warmup
    over ``config.warmup_steps`` and linear decay to 0 at ``config.steps``.

    ``step_loss(step)`` is called under :func:`hoplib._book.device.autocast` and returns a scalar loss, or an
    (E,) vector of per-model losses (an ensemble), summed for the backward pass; the history keeps one float
    (or one row of E floats) per step. A non-finite loss or weights raise :class:`DivergedError` (the
    checkpoint on disk stays the last finite one). ``eval_fn()`` is recorded every ``config.eval_every`` steps
    and at the end. A fresh start seeds torch with ``config.seed``. With ``checkpoint`` (a file) the state is
    saved atomically every ``checkpoint_every`` steps and at the end, and an existing checkpoint is resumed
    from after checking it (checksum, same ``config`` and ``settings``; else :class:`CheckpointError`).

    Returns the history ``{"loss", "evals", "steps_done", "wall_time_s"}``.
    """
    _check_optimise(model, step_loss, config, eval_fn, checkpoint_every, settings)
    if config.eval_every is not None and eval_fn is None:
        raise ValueError("config.eval_every is set but no eval_fn was given")
    dev = get_device(device)
    opt, sched = _optimiser(model, config, dev)
    checkpoint = None if checkpoint is None else Path(checkpoint)
    identity = {**config.to_dict(), **(settings or {})}
    history, start = _start(model, opt, sched, config, dev, checkpoint, identity)
    losses, wall0, t0 = _Losses(history, config), float(history["wall_time_s"]), time.perf_counter()

    def save(done: int) -> None:
        losses.flush()
        _check_finite_weights(model, done, history)
        history["wall_time_s"] = wall0 + time.perf_counter() - t0
        save_checkpoint(checkpoint, {"step": done, "settings": identity, "model": model.state_dict(),
                                     "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                                     "rng": _rng_state(dev), "history": history})

    model.train()
    bar = _progress_bar(config, start, progress, desc)
    try:
        for step in range(start, config.steps):
            with autocast(dev):
                loss = _as_loss(step_loss(step), step)
            opt.zero_grad(set_to_none=True)
            loss.float().sum().backward()
            opt.step()
            sched.step()
            losses.add(loss)
            done = history["steps_done"] = step + 1
            if len(losses.buf) >= _FLUSH_EVERY or done == config.steps:
                losses.flush()
                bar.set_postfix(loss=f"{losses.last_mean():.4f}")
            if eval_fn is not None and config.eval_every and _due(done, config.eval_every, config.steps):
                losses.flush()
                history["evals"].append({"step": done, **eval_fn()})
                model.train()
            if checkpoint is not None and _due(done, checkpoint_every, config.steps):
                save(done)
            bar.update(1)
        losses.flush()
        _check_finite_weights(model, history["steps_done"], history)
    finally:
        bar.close()
        history["wall_time_s"] = wall0 + time.perf_counter() - t0
    return history


# --------------------------------------------------------------------------- hop_k training
def _check_logits(logits: torch.Tensor, x: torch.Tensor, task: HopTask) -> None:
    if logits.dim() < 3 or logits.shape[:-1] != x.shape or logits.shape[-1] < task.vocab_size:
        raise ValueError(f"model must map ids {tuple(x.shape)} to logits {tuple(x.shape)} + (C >= "
                         f"{task.vocab_size},), got {tuple(logits.shape)}")


def _check_fit(model: object, task: object, config: object, compile: object, meta: object) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(task, HopTask):
        raise TypeError(f"task must be a HopTask, got {type(task).__name__}")
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a hoplib.train.TrainConfig, got {type(config).__name__}")
    if not isinstance(compile, bool):
        raise TypeError(f"compile must be a bool, got {type(compile).__name__}")
    if meta is not None and not isinstance(meta, dict):
        raise TypeError(f"checkpoint_meta must be a dict or None, got {type(meta).__name__}")


def fit(model: nn.Module, task: HopTask, config: TrainConfig, *, device: str | torch.device = "auto",
        progress: bool = True, compile: bool = False, checkpoint: str | os.PathLike | None = None,
        checkpoint_every: int | None = None, checkpoint_meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train ``model`` (ids (B, T) -> logits (B, T, C >= vocab)) on ``task`` as in Sec. 4.2 / App. G.

    Cross-entropy over all positions of ``config.batch_size`` samples per step: fresh data each step
    (``config.n_train=None``) or ``n_train`` fixed samples cycled in order (only ``floor(n_train / B) * B``
    used), through :func:`optimise`. The model is moved to ``device`` and stays there. ``config.eval_every``
    records :func:`hoplib.evaluate.per_k_error` (paper metric, ``config.eval_samples`` per k). ``compile``
    wraps the forward in ``torch.compile`` (state-dict keys stay those of ``model``). ``checkpoint``,
    ``checkpoint_every``: see :func:`optimise`; ``checkpoint_meta`` joins the checkpoint's identity.

    Returns the history of :func:`optimise` plus ``n_train_used``.
    """
    _check_fit(model, task, config, compile, checkpoint_meta)
    dev = get_device(device)
    model.to(dev)
    stream = DataStream(task, config.batch_size, config.n_train, config.seed, dev)
    forward = torch.compile(model) if compile else model

    def step_loss(step: int) -> torch.Tensor:
        x, y = stream.batch(step)
        logits = forward(x)
        _check_logits(logits, x, task)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))

    def eval_fn() -> dict[str, Any]:
        from hoplib.evaluate import per_k_error
        return {"per_k_error": per_k_error(model, task, n_samples=config.eval_samples, device=dev)}

    settings = {"task": repr(task), "model_class": type(model).__name__, **(checkpoint_meta or {})}
    hist = optimise(model, step_loss, config, device=dev, progress=progress, desc="train",
                    eval_fn=eval_fn if config.eval_every else None, checkpoint=checkpoint,
                    checkpoint_every=checkpoint_every, settings=settings)
    hist["n_train_used"] = stream.n_used
    return hist


def _check_ensemble(models: object, configs: object) -> list[TrainConfig]:
    if not isinstance(models, (list, tuple)) or not models:
        raise ValueError("models must be a non-empty list of GPT models")
    if not isinstance(configs, (list, tuple)) or len(configs) != len(models):
        raise ValueError(f"configs must be a list of {len(models)} TrainConfigs (one per model), got {configs!r}")
    for i, c in enumerate(configs):
        if not isinstance(c, TrainConfig):
            raise TypeError(f"configs[{i}] must be a TrainConfig, got {type(c).__name__}")
        if dataclasses.replace(c, seed=0, n_train=None) != dataclasses.replace(configs[0], seed=0, n_train=None):
            raise ValueError(f"configs[{i}] = {c} differs from configs[0] = {configs[0]} in more than seed and "
                             "n_train (the models of an ensemble share every other setting)")
    return list(configs)


def fit_ensemble(models: Sequence[nn.Module], task: HopTask, configs: Sequence[TrainConfig], *,
                 device: str | torch.device = "auto", progress: bool = True, compile: bool = False,
                 checkpoint: str | os.PathLike | None = None,
                 checkpoint_every: int | None = None) -> tuple[list[nn.Module], list[dict[str, Any]]]:
    """Train E :class:`hoplib.models.GPT` models of one architecture at once, as one :class:`GPTEnsemble`.

    ``configs[e]`` is model e's :class:`TrainConfig`; they may differ only in ``seed`` and ``n_train``. Model e
    sees exactly the data that ``fit(models[e], task, configs[e])`` would, and since AdamW is elementwise the
    result equals E separate :func:`fit` runs up to float rounding (and up to dropout masks). Torch is seeded
    with ``configs[0].seed``. Returns the trained models (new modules on ``device``) and one history per model.
    """
    from hoplib.models import GPTEnsemble

    configs = _check_ensemble(models, configs)
    if not isinstance(task, HopTask):
        raise TypeError(f"task must be a HopTask, got {type(task).__name__}")
    dev, e, c0 = get_device(device), len(models), configs[0]
    ens = GPTEnsemble([m.to(dev) for m in models]).to(dev)
    streams = [DataStream(task, c.batch_size, c.n_train, c.seed, dev) for c in configs]
    forward = torch.compile(ens) if compile else ens

    def step_loss(step: int) -> torch.Tensor:
        batches = [s.batch(step) for s in streams]
        x, y = torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])
        logits = forward(x)
        per = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
        return per.view(e, -1).mean(dim=1)

    def eval_fn() -> dict[str, Any]:
        from hoplib.evaluate import per_k_error
        return {"per_k_error": [per_k_error(m, task, n_samples=c0.eval_samples, device=dev) for m in ens.unstack()]}

    settings = {"n_trains": [c.n_train for c in configs], "seeds": [c.seed for c in configs], "task": repr(task),
                "model_config": ens.config.to_dict(), "n_models": e}
    hist = optimise(ens, step_loss, c0, device=dev, progress=progress, desc=f"train x{e}",
                    eval_fn=eval_fn if c0.eval_every else None, checkpoint=checkpoint,
                    checkpoint_every=checkpoint_every, settings=settings)
    histories = [{"loss": [row[j] for row in hist["loss"]],
                  "evals": [{"step": r["step"], "per_k_error": r["per_k_error"][j]} for r in hist["evals"]],
                  "steps_done": hist["steps_done"], "wall_time_s": hist["wall_time_s"],
                  "n_train_used": streams[j].n_used, "ensemble_size": e} for j in range(e)]
    return ens.unstack(), histories


# --------------------------------------------------------------------------- one stored run: RunConfig, train_run
_PAPER_TASK = HopTask()  # N = 100, 4 letters, k <= 16: the paper's task, the default of a run
_MODEL_KEYS = ("depth", "d_model", "heads", "head", "dropout")
_TASK_KEYS = ("seq_len", "alphabet_size", "max_hops")
_TRAIN_KEYS = tuple(f.name for f in dataclasses.fields(TrainConfig))


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a stored run (Section 4.2 / Appendix G): the task (``seq_len``,
    ``alphabet_size``, ``max_hops``), the GPT (``depth``, ``d_model``, ``heads``, ``head``, ``dropout``), the
    optimisation (``train``, a :class:`TrainConfig`; its ``eval_samples`` is also the final evaluation's
    test samples per k) and ``eval_seed`` of the final evaluation. The defaults (defined here only) are the
    paper's task and the authors' recipe with 10^5 steps; ``head="linear"`` and ``dropout=0`` are the book's
    (``head="layernorm", dropout=0.1`` are the authors'). Stored in results.json as the flat dict
    :meth:`to_dict` (the format of every stored run), read back with :meth:`from_dict`.
    """

    depth: int
    d_model: int
    heads: int
    head: str = "linear"
    dropout: float = 0.0
    seq_len: int = _PAPER_TASK.seq_len
    alphabet_size: int = _PAPER_TASK.alphabet_size
    max_hops: int = _PAPER_TASK.max_hops
    train: TrainConfig = TrainConfig(steps=100_000)
    eval_seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.train, TrainConfig):
            raise TypeError(f"train must be a TrainConfig, got {type(self.train).__name__}")
        if isinstance(self.dropout, int) and not isinstance(self.dropout, bool):
            object.__setattr__(self, "dropout", float(self.dropout))
        config = self.model_config()  # validates the task and the architecture (TypeError / ValueError)
        for name in ("depth", "d_model", "heads"):
            object.__setattr__(self, name, getattr(config, name))
        check_int("eval_seed", self.eval_seed, low=0, high=2**30 - 1 - self.max_hops)

    @property
    def task(self) -> HopTask:
        """The run's :class:`hoplib.tasks.HopTask`."""
        return HopTask(seq_len=self.seq_len, alphabet_size=self.alphabet_size, max_hops=self.max_hops)

    def model_config(self):
        """The :class:`hoplib.models.GPTConfig` of the run (as :func:`hoplib.models.gpt_for_task` sizes it)."""
        from hoplib.models import GPTConfig

        task = self.task
        return GPTConfig(vocab_size=task.vocab_size, n_positions=task.length, depth=self.depth,
                         d_model=self.d_model, heads=self.heads, dropout=self.dropout, head=self.head,
                         n_classes=None if self.head == "layernorm" else task.vocab_size)

    def init_model(self, device: str | torch.device = "cpu") -> nn.Module:
        """The freshly initialised GPT of the run (torch's RNGs are seeded with ``train.seed`` first)."""
        from hoplib.models import GPT

        seed_everything(self.train.seed)
        return GPT(self.model_config()).to(get_device(device))

    def to_dict(self) -> dict[str, Any]:
        """The flat dict stored as ``config`` in results.json (``eval_every`` only when set)."""
        train = self.train.to_dict()
        if train["eval_every"] is None:
            del train["eval_every"]
        return {**{k: getattr(self, k) for k in _MODEL_KEYS + _TASK_KEYS}, **train, "eval_seed": self.eval_seed}

    @classmethod
    def from_dict(cls, flat: dict[str, Any]) -> RunConfig:
        """The configuration of a flat dict (the keys of :meth:`to_dict`; missing ones take the defaults)."""
        if not isinstance(flat, dict):
            raise TypeError(f"a run configuration must be a dict, got {type(flat).__name__}")
        unknown = sorted(set(flat) - set(_MODEL_KEYS + _TASK_KEYS + _TRAIN_KEYS + ("eval_seed",)))
        missing = sorted({"depth", "d_model", "heads"} - set(flat))
        if unknown or missing:
            raise ValueError(f"run configuration: unknown settings {unknown}, missing {missing}; allowed: "
                             f"{_MODEL_KEYS + _TASK_KEYS + _TRAIN_KEYS + ('eval_seed',)}")
        base = cls.__dataclass_fields__["train"].default.to_dict()
        train = TrainConfig(**{k: flat.get(k, base[k]) for k in _TRAIN_KEYS})
        return cls(train=train, **{k: flat[k] for k in flat if k not in _TRAIN_KEYS})

    def replace(self, **flat: Any) -> RunConfig:
        """A copy with some flat settings changed, e.g. ``config.replace(seed=1, n_train=None)``."""
        return RunConfig.from_dict({**self.to_dict(), **flat})

    def to_argv(self) -> list[str]:
        """Command-line arguments of ``python -m hoplib.train`` that reproduce this configuration."""
        return [a for k, v in self.to_dict().items() if v is not None for a in ("--" + k.replace("_", "-"), str(v))]


def prepare_output(out: str | os.PathLike) -> Path:
    """Create the output folder ``out`` if needed and check that a file can be written there (a
    ``ValueError`` naming the folder otherwise), so that a bad folder fails before training, not after."""
    if not isinstance(out, (str, os.PathLike)) or str(out) == "":
        raise TypeError(f"out must be a folder path, got {out!r}")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"output folder {path} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test.", suffix=".tmp"):
            pass
    except OSError as exc:
        raise ValueError(f"cannot write to the output folder {path}: {exc.strerror or exc}") from exc
    return path


def read_record(path: Path) -> dict[str, Any]:
    """A results.json record; ``ValueError`` naming the file and what is wrong with it."""
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} cannot be read ({exc})") from exc
    if not isinstance(rec, dict) or not isinstance(rec.get("config"), dict):
        raise ValueError(f"{path} is not a run record (a JSON object with a 'config' object)")
    return rec


def finished_results(out: str | os.PathLike, config: RunConfig) -> dict[str, Any] | None:
    """The results record in ``out`` if it was produced by ``config`` and is finished (complete, or stopped
    by divergence), else None. ``ValueError`` if ``out/results.json`` exists but is not a run record."""
    path = Path(out) / "results.json"
    if not path.exists():
        return None
    rec = read_record(path)
    if rec["config"] == config.to_dict() and (rec.get("complete") or rec.get("diverged")):
        return rec
    return None


def _config_diff(stored: dict[str, Any], now: dict[str, Any]) -> str:
    keys = sorted(k for k in set(stored) | set(now) if stored.get(k, "unset") != now.get(k, "unset"))
    return ", ".join(f"{k}: stored {stored.get(k, 'unset')!r} vs now {now.get(k, 'unset')!r}" for k in keys)


def _claim_output(out: Path, config: RunConfig, overwrite: bool) -> dict[str, Any] | None:
    """The finished record of ``config`` in ``out`` (nothing to do), or None to train; with ``overwrite`` the
    folder's run files are discarded first; otherwise :class:`RunConflictError` if they belong to another run."""
    files = [out / n for n in ("results.json", "model.pt", "checkpoint.pt")]
    for f in files:
        remove_stale_temporaries(f)
    if overwrite:
        for f in files:
            f.unlink(missing_ok=True)
        return None
    hint = "pass --overwrite (overwrite=True) to replace it, or choose another output folder"
    if files[0].exists():
        try:
            rec = read_record(files[0])
        except ValueError as exc:
            raise RunConflictError(f"{out} holds a results.json that is not a run record ({exc}); {hint}") from exc
        if rec["config"] != config.to_dict():
            raise RunConflictError(f"{out} holds a run of another configuration "
                                   f"({_config_diff(rec['config'], config.to_dict())}); {hint}")
        if rec.get("complete") or rec.get("diverged"):
            return rec
    elif files[1].exists() and not files[2].exists():
        raise RunConflictError(f"{out} holds a model.pt with neither results.json nor checkpoint.pt (a model "
                               f"of an unknown configuration); {hint}")
    return None


def results_record(model: nn.Module, task: HopTask, hist: dict[str, Any], config: RunConfig,
                   device: torch.device, command: str, **extra: Any) -> dict[str, Any]:
    """Evaluate a trained model (both metrics of :mod:`hoplib.evaluate`) and build the results.json record."""
    from hoplib.evaluate import per_k_error
    from hoplib.models import count_parameters

    kw = dict(n_samples=config.train.eval_samples, seed=config.eval_seed, device=device)
    err = per_k_error(model, task, **kw)
    pooled = per_k_error(model, task, metric="pooled", **kw)
    cfg = getattr(model, "config", None)
    return {
        "per_k_error": {str(k): v for k, v in err.items()},
        "per_k_error_pooled": {str(k): v for k, v in pooled.items()},
        **_history_part(hist, config, device, command, **extra),
        "model": {"parameters": count_parameters(model), **(cfg.to_dict() if cfg is not None else {})},
        "complete": hist["steps_done"] >= config.train.steps,
    }


def _history_part(hist: dict[str, Any], config: RunConfig, device: torch.device, command: str,
                  **extra: Any) -> dict[str, Any]:
    from hoplib._book.provenance import provenance

    losses = hist["loss"]
    every = max(1, len(losses) // 200)
    return {"config": config.to_dict(),
            "loss_curve": {"step": list(range(1, len(losses) + 1, every)), "loss": losses[::every]},
            "final_loss": losses[-1] if losses else None, "n_train_used": hist.get("n_train_used"),
            **({"evals": hist["evals"]} if hist.get("evals") else {}),
            "provenance": provenance(device, hist["wall_time_s"], steps_done=hist["steps_done"], command=command,
                                     **extra)}


def write_run(out: str | os.PathLike, model: nn.Module, record: dict[str, Any]) -> Path:
    """Write ``model.pt`` (final weights, a plain state dict) and then ``results.json``, both atomically."""
    out = Path(out)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    atomic_write(out / "model.pt", lambda fh: torch.save(state, fh), binary=True)
    return atomic_write_text(out / "results.json", json.dumps(record, indent=2) + "\n")


def train_run(config: RunConfig, out: str | os.PathLike, *, device: str | torch.device = "auto",
              progress: bool = True, compile: bool = False, checkpoint_every: int | None = 1000,
              command: str | None = None, overwrite: bool = False) -> dict[str, Any]:
    """Train, evaluate and record one run in folder ``out``: skip it if finished, resume it if interrupted.

    Every argument and the folder (:func:`prepare_output`) are checked before the first step. A folder that
    holds the results or the model of another configuration is refused (:class:`RunConflictError`) unless
    ``overwrite``, which discards them. Writes ``out/checkpoint.pt`` (every ``checkpoint_every`` steps and at
    the end), ``out/model.pt`` and ``out/results.json``; returns the results record. A run that diverges gets a
    record with ``complete: false, diverged: true`` (and no model.pt), then :class:`DivergedError` is raised.
    ``compile`` is passed to :func:`fit` (a speed option, recorded in the provenance).
    """
    if not isinstance(config, RunConfig):
        raise TypeError(f"config must be a hoplib.train.RunConfig, got {type(config).__name__}")
    if checkpoint_every is not None:
        check_int("checkpoint_every", checkpoint_every, low=1)
    dev = get_device(device)
    out = prepare_output(out)
    done = _claim_output(out, config, overwrite)
    if done is not None:
        return done
    task, model = config.task, config.init_model(dev)
    command = command or "python -m hoplib.train " + " ".join(config.to_argv() + ["--out", str(out)])
    speed = {"compiled": True} if compile else {}
    try:
        hist = fit(model, task, config.train, device=dev, progress=progress, compile=compile,
                   checkpoint=out / "checkpoint.pt", checkpoint_every=checkpoint_every,
                   checkpoint_meta={"model_config": model.config.to_dict()})
    except DivergedError as exc:
        record = {**_history_part(exc.history, config, dev, command, **speed), "complete": False,
                  "diverged": True, "error": str(exc)}
        atomic_write_text(out / "results.json", json.dumps(record, indent=2) + "\n")
        raise
    record = results_record(model, task, hist, config, dev, command, **speed)
    write_run(out, model, record)
    return record


# --------------------------------------------------------------------------- command line
class OneLineErrorParser(argparse.ArgumentParser):
    """argparse with one-line errors (exit status 2), as every hoplib command line."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


_HELP = {"depth": "number of layers L", "d_model": "embedding width m", "heads": "attention heads H",
         "head": "linear unembedding or the authors' LayerNorm-as-logits head ('layernorm')",
         "dropout": "dropout (the authors' HuggingFace default is 0.1)",
         "seq_len": "N; inputs have N-1 tokens (99 for N=100)", "max_hops": "largest k of the task",
         "n_train": "finite training set size (default: fresh samples every step)", "lr": "peak learning rate",
         "seed": "run seed, 0..127 (data and dropout)", "eval_samples": "test samples per k",
         "eval_every": "also evaluate every this many steps during training (stored as 'evals')",
         "eval_seed": "seed of the final evaluation's test data"}


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m hoplib.train``; its defaults are :class:`RunConfig`'s (shown in --help)."""
    p = OneLineErrorParser(prog="python -m hoplib.train", description="Train one GPT on hop_k (Sec. 4.2 / App. G); "
                "resumable. Rerunning a finished run does nothing.")
    defaults = RunConfig(depth=1, d_model=1, heads=1).to_dict()
    for key in _MODEL_KEYS + _TASK_KEYS + _TRAIN_KEYS + ("eval_seed",):
        kind = {"head": str, "dropout": float, "lr": float, "weight_decay": float}.get(key, int)
        required = key in ("depth", "d_model", "heads")
        extra = {"choices": ["linear", "layernorm"]} if key == "head" else {}
        default = "" if required or defaults.get(key) is None else f" (default {defaults[key]})"
        p.add_argument("--" + key.replace("_", "-"), type=kind, required=required, default=argparse.SUPPRESS,
                       help=_HELP.get(key, key.replace("_", " ")) + default, **extra)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    p.add_argument("--checkpoint-every", type=int, default=1000)
    p.add_argument("--out", required=True, help="output folder (results.json, model.pt, checkpoint.pt)")
    p.add_argument("--overwrite", action="store_true", help="discard a run of another configuration in --out")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (meant for CUDA)")
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point of ``python -m hoplib.train``; returns the results record (raises on errors, see
    :func:`cli` for the exit statuses)."""
    args = build_parser().parse_args(argv)
    config = RunConfig.from_dict({k: v for k, v in vars(args).items() if k in
                                  _MODEL_KEYS + _TASK_KEYS + _TRAIN_KEYS + ("eval_seed",)})
    command = "python -m hoplib.train " + " ".join(argv if argv is not None else sys.argv[1:])
    try:  # what is there before: a finished run of this configuration means nothing to do
        before = None if args.overwrite else finished_results(prepare_output(args.out), config)
    except ValueError:  # not a run record: train_run refuses the folder with the full explanation
        before = None
    rec = train_run(config, args.out, device=args.device, progress=not args.no_progress, compile=args.compile,
                    checkpoint_every=args.checkpoint_every, command=command, overwrite=args.overwrite)
    if before is not None and before.get("diverged"):
        raise DivergedError(f"{Path(args.out)}: this configuration diverged before ({before.get('error')}); "
                            "nothing to do (--overwrite retrains it)", before, before["provenance"]["steps_done"])
    if before is not None:
        print(f"{Path(args.out) / 'results.json'} is complete for this configuration; nothing to do")
    return rec


def cli(argv: list[str] | None = None) -> int:
    """Run :func:`main` with one-line errors: exit 2 for a user error (bad argument, unusable folder, another
    run's files, bad checkpoint), 1 for a diverged run, 0 otherwise."""
    return run_cli(main, argv, failures=(DivergedError,))


if __name__ == "__main__":
    sys.exit(cli())
