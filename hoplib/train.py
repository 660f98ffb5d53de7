"""The book's one training loop (Section 4.2, Appendix G): :func:`optimise` (every model family), :func:`fit`
(one model on hop_k), :func:`fit_ensemble` (E GPTs at once), :func:`train_run` (a stored :class:`RunConfig`).

Checkpoints carry a sha256, are written atomically, loaded with ``weights_only=True`` and refused when damaged,
non-finite or of another run; a run killed at any moment resumes to the weights of an uninterrupted one (CPU).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from hoplib.device import autocast, get_device, seed_everything
from hoplib.evaluate import per_k_error, per_k_errors, samples_per_k
from hoplib.models import GPT, GPTConfig, GPTEnsemble, check_ids, count_parameters
from hoplib.results import (
    LockedError,
    atomic_write,
    atomic_write_text,
    check_writable,
    output_path,
    provenance,
    read_json,
    take_lock,
)
from hoplib.tasks import HopTask

CHECKPOINT_FORMAT = 2  # 2: with a sha256 checksum of the contents
# Seeds live in [0, 2**32): test data (hoplib.evaluate) below 2**30, the fixed training set 2**30 + seed, the
# batch of step t 2**31 + seed * 2**24 + t. The three ranges are disjoint.
_FINITE_SEED_BASE = 2**30
_TRAIN_SEED_BASE = 2**31
MAX_SEED = 127
MAX_STEPS = 2**24
_FLUSH_EVERY = 100  # losses are read (one device sync) every this many steps and at evaluations, checkpoints, the end


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read, is damaged, or belongs to a different run."""


class DivergedError(RuntimeError):
    """Training stopped because a loss (or a weight) stopped being finite; ``history`` holds the run so far."""

    def __init__(self, message: str, history: dict[str, Any], step: int):
        super().__init__(message)
        self.history, self.step = history, step


class RunConflictError(ValueError):
    """An output folder that holds the results or the model of another run."""


@dataclass(frozen=True)
class TrainConfig:
    """The optimisation settings of one run; the defaults are the authors' recipe (Appendix G: AdamW, linear
    warmup and decay). ``n_train=None`` draws fresh samples every step; ``seed`` (0..127) fixes the data and
    dropout; every ``eval_every`` steps the loop records :func:`hoplib.evaluate.per_k_error`."""

    steps: int
    batch_size: int = 32
    lr: float = 1e-4
    warmup_steps: int = 1000
    weight_decay: float = 0.01
    n_train: int | None = None
    seed: int = 0
    eval_every: int | None = None
    eval_samples: int = 100

    def __post_init__(self) -> None:  # out of range, train and test seeds would overlap silently
        if not (0 <= self.seed <= MAX_SEED and 1 <= self.steps <= MAX_STEPS):
            raise ValueError(f"seed must be in 0..{MAX_SEED} and steps in 1..{MAX_STEPS}, got {self}")
        if self.n_train is not None and self.n_train < self.batch_size:
            raise ValueError(f"n_train = {self.n_train} holds no whole batch of {self.batch_size}")
        if self.eval_every is not None and self.eval_every < 1:  # 0 would switch evaluations off without a word
            raise ValueError(f"eval_every must be at least 1 (or None: no evaluations), got {self.eval_every}")
        object.__setattr__(self, "lr", float(self.lr))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------- schedule and data
def linear_warmup_decay(step: int, *, steps: int, warmup_steps: int) -> float:
    """Learning-rate factor at ``step``: step/warmup during warmup, then linear down to 0 at ``steps``."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    return max(0.0, (steps - step) / max(1, steps - warmup_steps))


@dataclass
class _Schedule:
    """:func:`linear_warmup_decay` for LambdaLR, whose state dict (in checkpoints) holds these two fields."""

    steps: int
    warmup_steps: int

    def __call__(self, step: int) -> float:
        return linear_warmup_decay(step, steps=self.steps, warmup_steps=self.warmup_steps)


def train_seed(seed: int, step: int) -> int:
    """Seed of the training batch drawn at ``step`` for run seed ``seed`` (fresh-sample mode)."""
    return _TRAIN_SEED_BASE + seed * 2**24 + step


class DataStream:
    """Training batches for one model: fresh samples each step, or ``n_train`` fixed samples cycled in order
    (only ``n_used = floor(n_train / B) * B`` of them, as in the authors' code)."""

    def __init__(self, task: HopTask, batch_size: int, n_train: int | None, seed: int, device: torch.device):
        self.task, self.batch_size, self.seed, self.device = task, batch_size, seed, device
        self.fixed, self.n_used = None, None
        if n_train is not None:
            self.n_used = n_train // batch_size * batch_size
            x, y = task.sample(n_train, seed=_FINITE_SEED_BASE + seed, device=device)
            self.fixed = (x[:self.n_used], y[:self.n_used])

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.fixed is None:
            return self.task.sample(self.batch_size, seed=train_seed(self.seed, step), device=self.device)
        i = step * self.batch_size % self.n_used
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
    elif isinstance(obj, (list, tuple)) and obj and all(type(v) is float for v in obj):  # loss histories
        h.update(b"F" + array("d", obj).tobytes())
    elif isinstance(obj, (list, tuple)):
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
    """``torch.save`` of ``state`` with its format and checksum to a temporary file, then an atomic rename."""
    state = {**state, "format": CHECKPOINT_FORMAT}
    state["checksum"] = checksum(state)
    return atomic_write(path, lambda fh: torch.save(state, fh), binary=True)


def remove_stale_temporaries(path: str | os.PathLike) -> None:
    """Delete the temporary files ``.<name>.*.tmp`` that a killed atomic write of ``path`` left behind."""
    path = Path(path)
    for p in path.parent.glob(f".{path.name}.*.tmp") if path.parent.is_dir() else []:
        p.unlink(missing_ok=True)


def _non_finite(state: dict[str, Any]) -> str | None:
    """Name of the first non-finite floating tensor among the model's and the optimiser's, else None."""
    tensors = list(state["model"].items())
    for i, s in enumerate(state.get("optimizer", {}).get("state", {}).values()):
        tensors += [(f"optimizer state {i} {k}", v) for k, v in s.items()]
    return next((name for name, t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point()
                 and not bool(torch.isfinite(t).all())), None)


def load_checkpoint(path: str | os.PathLike, *, expected: dict[str, Any] | None = None,
                    map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``; :class:`CheckpointError` if it is unreadable, not a
    hoplib checkpoint, damaged (checksum), non-finite, or written with settings other than ``expected``."""
    fix = "delete it to start over"
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds of errors for a damaged file
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        raise CheckpointError(f"checkpoint {path} is corrupt or unreadable ({type(exc).__name__}: {first}); "
                              f"{fix}") from exc
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT or "model" not in state:
        raise CheckpointError(f"{path} is not a hoplib training checkpoint (format {CHECKPOINT_FORMAT}); {fix}")
    if state.get("checksum") != checksum(state):
        raise CheckpointError(f"checkpoint {path} is damaged: its sha256 checksum does not match; {fix}")
    if (bad := _non_finite(state)) is not None:
        raise CheckpointError(f"checkpoint {path} holds non-finite values ({bad}); {fix}")
    saved = state.get("settings", {})
    if expected is not None and saved != expected:
        details = ", ".join(f"{k}: checkpoint {saved.get(k)!r} vs now {expected.get(k)!r}"
                            for k in sorted(set(saved) | set(expected)) if saved.get(k) != expected.get(k))
        raise CheckpointError(f"checkpoint {path} belongs to a different run ({details}); "
                              "use another output folder or delete the checkpoint")
    return state


def _resume(model: nn.Module, opt: Any, sched: Any, config: TrainConfig, dev: torch.device,
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


# --------------------------------------------------------------------------- the one training loop
def _check_every(checkpoint_every: int | None) -> None:
    if checkpoint_every is not None and (isinstance(checkpoint_every, bool) or checkpoint_every < 1):
        raise ValueError(f"checkpoint_every must be at least 1 (or None: at the end only), got {checkpoint_every}")


class Progress:
    """A progress bar over the steps of one run or of a whole sweep (``tqdm.auto``: a widget in Jupyter and
    Colab, text elsewhere) that prints, once ``eta_after`` steps have run, the estimated time left and the
    finish time. A sweep makes one for all its runs and hands it to each :func:`optimise`; the steps a resumed
    run had done before are taken off the total, so the estimate counts only the steps still to run. With
    ``enabled=False`` it shows and prints nothing."""

    def __init__(self, total: int, desc: str = "train", *, enabled: bool = True, eta_after: int = 300,
                 leave: bool = True):
        self.total, self.desc, self.enabled, self.eta_after = total, desc, enabled, eta_after
        self.done, self.first, self.told = 0, None, False
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="step", leave=leave, mininterval=1.0)

    def resumed(self, steps: int) -> None:
        """``steps`` of the total were done before this process started."""
        self.total -= steps
        if self.bar is not None and steps:
            self.bar.total = self.total
            self.bar.refresh()

    def update(self, steps: int = 1) -> None:
        """Count ``steps`` more steps; print the estimate once ``eta_after`` have run since the first."""
        self.done += steps
        if self.bar is not None:
            self.bar.update(steps)
        now = time.perf_counter()
        if self.first is None:  # the rate leaves the first step out (warm-up, compilation)
            self.first = (self.done, now)
            return
        if self.enabled and not self.told and self.done - self.first[0] >= self.eta_after:
            self.told = True
            left = (self.total - self.done) * (now - self.first[1]) / (self.done - self.first[0])
            end = time.strftime("%H:%M", time.localtime(time.time() + left))
            print(f"{self.desc}: {self.done:,} of {self.total:,} steps done; about {_clock(left)} to go "
                  f"(finish around {end})", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _clock(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _flush(buf: list[torch.Tensor], history: dict[str, Any], config: TrainConfig) -> None:
    """Copy the losses kept on the device to the history (one sync); a non-finite one stops the run."""
    if not buf:
        return
    vals = torch.stack(buf).float().cpu()
    buf.clear()
    rows, first = vals.tolist(), len(history["loss"])
    bad = (~torch.isfinite(vals)).reshape(len(rows), -1).any(dim=1).nonzero().flatten().tolist()
    history["loss"].extend(rows[:bad[0] + 1] if bad else rows)
    if bad:
        step = first + bad[0] + 1
        raise DivergedError(f"training diverged: the loss is {rows[bad[0]]} at step {step} of {config.steps} "
                            f"(lr={config.lr:g}, warmup_steps={config.warmup_steps}); lower the learning rate "
                            "or lengthen the warmup", history, step)


def _check_finite_weights(model: nn.Module, step: int, history: dict[str, Any]) -> None:
    if not bool(torch.stack([torch.isfinite(p).all() for p in model.parameters() if p.is_floating_point()]).all()):
        raise DivergedError(f"training diverged: the weights are not finite after step {step}; lower the "
                            "learning rate or lengthen the warmup", history, step)


def optimise(model: nn.Module, step_loss: Callable[[int], torch.Tensor],
             config: TrainConfig, *, device: str | torch.device,
             progress: bool | Progress = True, desc: str = "train",
             eval_fn: Callable[[], dict] | None = None,
             checkpoint: str | os.PathLike | None = None,
             checkpoint_every: int | None = None,
             settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """THE loop: AdamW, linear warmup and decay, on ``step_loss(step)`` (one loss,
    or one per model of an ensemble). With ``checkpoint``, saves every
    ``checkpoint_every`` steps and resumes a checkpoint of the same ``config``
    and ``settings``; ``progress``: a bar of this run, or a sweep's
    :class:`Progress`. Returns ``{"loss", "evals", "steps_done",
    "wall_time_s"}``."""
    dev = get_device(device)
    params = list(model.parameters())
    fused = dev.type == "cuda" and all(p.is_cuda and p.is_floating_point()
                                       for p in params)
    opt = torch.optim.AdamW(params, lr=config.lr,
                            weight_decay=config.weight_decay,
                            **({"fused": True} if fused else {}))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, _Schedule(config.steps, config.warmup_steps))
    _check_every(checkpoint_every)
    checkpoint = None if checkpoint is None else Path(checkpoint)
    identity = {**config.to_dict(), **(settings or {})}
    history, start = _resume(model, opt, sched, config, dev, checkpoint,
                             identity)
    buf: list[torch.Tensor] = []
    wall0, t0 = float(history["wall_time_s"]), time.perf_counter()

    def due(done: int, every: int | None) -> bool:
        every_step = every is not None and done % every == 0
        return every_step or done == config.steps

    own = not isinstance(progress, Progress)
    bar = Progress(config.steps, desc, enabled=progress,
                   leave=False) if own else progress
    bar.resumed(start)
    model.train()
    try:
        for step in range(start, config.steps):
            with autocast(dev):
                loss = step_loss(step)
            opt.zero_grad(set_to_none=True)
            loss.float().sum().backward()
            opt.step()
            sched.step()
            buf.append(loss.detach())
            done = history["steps_done"] = step + 1
            do_eval = eval_fn and config.eval_every and due(done, config.eval_every)
            save = checkpoint is not None and due(done, checkpoint_every)
            if do_eval or save or len(buf) >= _FLUSH_EVERY:
                _flush(buf, history, config)
            if do_eval:
                _check_finite_weights(model, done, history)
                history["evals"].append({"step": done, **eval_fn()})
                model.train()
            if save:
                _check_finite_weights(model, done, history)
                history["wall_time_s"] = wall0 + time.perf_counter() - t0
                save_checkpoint(checkpoint, {
                    "step": done, "settings": identity,
                    "model": model.state_dict(), "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(), "rng": _rng_state(dev),
                    "history": history})
            bar.update(1)
        _flush(buf, history, config)
        _check_finite_weights(model, history["steps_done"], history)
    finally:
        if own:
            bar.close()
        history["wall_time_s"] = wall0 + time.perf_counter() - t0
    return history


# --------------------------------------------------------------------------- hop_k training
def _cross_entropy(logits: torch.Tensor, y: torch.Tensor, **kw: Any) -> torch.Tensor:
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), **kw)


def _step_forward(model: nn.Module, compile: bool | str, first_ids: torch.Tensor) -> Callable:
    """``model`` as the training step calls it: ``torch.compile``d (``compile``: True, or a mode such as
    "reduce-overhead", CUDA graphs on a GPU), else a GPT's forward without the check of its ids (a device sync
    per step); a GPT's ids are checked once instead, on ``first_ids``, the stream's first batch."""
    if hasattr(model, "forward_unchecked"):
        check_ids(first_ids, model.config.vocab_size, model.config.n_positions)
    forward = getattr(model, "forward_unchecked", model)
    if not compile:
        return forward
    return torch.compile(forward, mode=None if compile is True else compile)  # no step keeps a graph's outputs


def fit(model: nn.Module, task: HopTask, config: TrainConfig, *,
        device: str | torch.device = "auto", progress: bool | Progress = True,
        compile: bool | str = False, checkpoint: str | os.PathLike | None = None,
        checkpoint_every: int | None = None,
        checkpoint_meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train ``model`` (ids (B, T) -> logits (B, T, C)) on ``task`` through
    :func:`optimise`: cross-entropy over every position of a batch from a
    :class:`DataStream`. Returns the history plus ``n_train_used``."""
    dev = get_device(device)
    model.to(dev)
    stream = DataStream(task, config.batch_size, config.n_train, config.seed,
                        dev)
    forward = _step_forward(model, compile, stream.batch(0)[0])  # ids checked once

    def step_loss(step: int) -> torch.Tensor:
        x, y = stream.batch(step)
        return _cross_entropy(forward(x), y)

    def eval_fn() -> dict[str, Any]:
        n = config.eval_samples
        return {"per_k_error": per_k_error(model, task, n_samples=n, device=dev)}

    settings = {"task": repr(task), "model_class": type(model).__name__,
                **(checkpoint_meta or {})}
    hist = optimise(model, step_loss, config, device=dev, progress=progress,
                    eval_fn=eval_fn if config.eval_every else None,
                    checkpoint=checkpoint, checkpoint_every=checkpoint_every,
                    settings=settings)
    return {**hist, "n_train_used": stream.n_used}


def fit_ensemble(models: Sequence[nn.Module], task: HopTask, configs: Sequence[TrainConfig], *,
                 device: str | torch.device = "auto", progress: bool | Progress = True,
                 compile: bool | str = False, checkpoint: str | os.PathLike | None = None,
                 checkpoint_every: int | None = None) -> tuple[list[nn.Module], list[dict[str, Any]]]:
    """Train E GPTs of one architecture up to depth (deepest first) at once, as one :class:`GPTEnsemble`;
    their configs may differ only in ``seed`` and ``n_train``. Model e sees exactly the data of
    ``fit(models[e], task, configs[e])``; AdamW is elementwise, so this equals E separate runs up to rounding."""
    c0, e = configs[0], len(models)
    if len(configs) != e or len({dataclasses.replace(c, seed=0, n_train=None) for c in configs}) != 1:
        raise ValueError("an ensemble needs one TrainConfig per model, equal up to seed and n_train")
    dev = get_device(device)
    ens = GPTEnsemble([m.to(dev) for m in models]).to(dev)
    streams = [DataStream(task, c.batch_size, c.n_train, c.seed, dev) for c in configs]
    forward = _step_forward(ens, compile, torch.stack([s.batch(0)[0] for s in streams]))

    def step_loss(step: int) -> torch.Tensor:
        x, y = (torch.stack(b) for b in zip(*(s.batch(step) for s in streams), strict=True))
        return _cross_entropy(forward(x), y, reduction="none").view(e, -1).mean(dim=1)

    def eval_fn() -> dict[str, Any]:
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


# --------------------------------------------------------------------------- one stored run
_PAPER_TASK = HopTask()  # N = 100, 4 letters, k <= 16: the paper's task, the default of a run
_MODEL_KEYS = ("depth", "d_model", "heads", "head", "dropout")
_TASK_KEYS = ("seq_len", "alphabet_size", "max_hops")
_TRAIN_KEYS = tuple(f.name for f in dataclasses.fields(TrainConfig))
RUN_KEYS = _MODEL_KEYS + _TASK_KEYS + _TRAIN_KEYS + ("eval_seed",)


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a stored run (task, GPT, ``train``, final evaluation seed); the defaults are
    the paper's task and recipe with 10^5 steps, with the book's ``head="linear"`` and ``dropout=0``. Stored in
    results.json as the flat dict :meth:`to_dict`, read back with :meth:`from_dict`."""

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
        object.__setattr__(self, "dropout", float(self.dropout))
        self.model_config()  # validates the architecture against the task

    @property
    def task(self) -> HopTask:
        return HopTask(seq_len=self.seq_len, alphabet_size=self.alphabet_size, max_hops=self.max_hops)

    def model_config(self) -> GPTConfig:
        task = self.task
        return GPTConfig(vocab_size=task.vocab_size, n_positions=task.length, depth=self.depth,
                         d_model=self.d_model, heads=self.heads, dropout=self.dropout, head=self.head,
                         n_classes=None if self.head == "layernorm" else task.vocab_size)

    def init_model(self, device: str | torch.device = "cpu") -> GPT:
        """The freshly initialised GPT of the run (torch's RNGs are seeded with ``train.seed`` first)."""
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
        """The configuration of a flat dict (missing settings take the defaults; unknown ones are refused)."""
        if unknown := sorted(set(flat) - set(RUN_KEYS)):
            raise ValueError(f"run configuration: unknown settings {unknown}; allowed: {RUN_KEYS}")
        base = cls.__dataclass_fields__["train"].default.to_dict()
        train = TrainConfig(**{k: flat.get(k, base[k]) for k in _TRAIN_KEYS})
        return cls(train=train, **{k: flat[k] for k in flat if k not in _TRAIN_KEYS})

    def replace(self, **flat: Any) -> RunConfig:
        """A copy with some flat settings changed, e.g. ``config.replace(seed=1, n_train=None)``."""
        return RunConfig.from_dict({**self.to_dict(), **flat})


def read_record(path: Path) -> dict[str, Any]:
    """A results.json record; ``ValueError`` naming the file when it is not one (or not strict JSON: NaN)."""
    try:
        rec = read_json(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} cannot be read as JSON ({exc})") from exc
    if not isinstance(rec, dict) or not isinstance(rec.get("config"), dict):
        raise ValueError(f"{path} is not a run record (a JSON object with a 'config' object)")
    if bad := [k for k in ("complete", "diverged") if not isinstance(rec.get(k, False), bool)]:  # "false" is truthy
        raise ValueError(f"{path}: {bad[0]!r} must be true or false, got {rec[bad[0]]!r}")
    return rec


def _finished(rec: dict[str, Any]) -> bool:
    return rec.get("complete") is True or rec.get("diverged") is True


def finished_results(out: str | os.PathLike, config: RunConfig) -> dict[str, Any] | None:
    """The record in ``out`` if ``config`` produced it and it is finished (complete or diverged), else None."""
    path = Path(out) / "results.json"
    rec = read_record(path) if path.exists() else None
    return rec if rec and rec["config"] == config.to_dict() and _finished(rec) else None


def _claim_output(out: Path, config: RunConfig, overwrite: bool) -> dict[str, Any] | None:
    """The finished record of ``config`` in ``out`` (nothing to do), or None to train; with ``overwrite`` the
    folder's run files are discarded first; otherwise :class:`RunConflictError` if they belong to another run.
    A folder without room for a file is refused here, before training (:func:`check_writable`)."""
    check_writable(out)
    files = [out / n for n in ("results.json", "model.pt", "checkpoint.pt")]
    for f in files:
        remove_stale_temporaries(f)
        if overwrite:
            f.unlink(missing_ok=True)
    hint = "pass --overwrite (overwrite=True) to replace it, or choose another output folder"
    if files[0].exists():
        try:
            rec = read_record(files[0])
        except ValueError as exc:
            raise RunConflictError(f"{out} holds a results.json that is not a run record ({exc}); {hint}") from exc
        stored, now = rec["config"], config.to_dict()
        if stored != now:
            diff = ", ".join(f"{k}: stored {stored.get(k, 'unset')!r} vs now {now.get(k, 'unset')!r}"
                             for k in sorted(set(stored) | set(now)) if stored.get(k) != now.get(k))
            raise RunConflictError(f"{out} holds a run of another configuration ({diff}); {hint}")
        return rec if _finished(rec) else None
    if files[1].exists() and not files[2].exists():
        raise RunConflictError(f"{out} holds a model.pt with neither results.json nor checkpoint.pt (a model "
                               f"of an unknown configuration); {hint}")
    return None  # nothing stored yet: train


def _history_part(hist: dict[str, Any], config: RunConfig, device: torch.device, command: str,
                  **extra: Any) -> dict[str, Any]:
    losses = hist["loss"]
    every = max(1, len(losses) // 200)
    return {"config": config.to_dict(),
            "loss_curve": {"step": list(range(1, len(losses) + 1, every)), "loss": losses[::every]},
            "final_loss": losses[-1] if losses else None, "n_train_used": hist.get("n_train_used"),
            **({"evals": hist["evals"]} if hist.get("evals") else {}),
            "provenance": provenance(device, hist["wall_time_s"], steps_done=hist["steps_done"], command=command,
                                     **extra)}


def results_record(model: nn.Module, task: HopTask, hist: dict[str, Any], config: RunConfig,
                   device: torch.device, command: str, **extra: Any) -> dict[str, Any]:
    """Evaluate a trained model (both metrics of :mod:`hoplib.evaluate`) and build the results.json record."""
    errors = per_k_errors(model, task, n_samples=config.train.eval_samples, seed=config.eval_seed,
                          device=device, metrics=("paper", "pooled"))  # one pass, both metrics
    return {**{name: {str(k): v for k, v in errors[metric].items()}
               for name, metric in (("per_k_error", "paper"), ("per_k_error_pooled", "pooled"))},
            **_history_part(hist, config, device, command, **extra),
            "model": {"parameters": count_parameters(model), **model.config.to_dict()},
            "complete": hist["steps_done"] >= config.train.steps}


def write_run(out: str | os.PathLike, model: nn.Module, record: dict[str, Any]) -> Path:
    """Write ``model.pt`` (final weights, a plain state dict) and then ``results.json``, both atomically."""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    atomic_write(Path(out) / "model.pt", lambda fh: torch.save(state, fh), binary=True)
    return atomic_write_text(Path(out) / "results.json", json.dumps(record, indent=2, allow_nan=False) + "\n")


def train_run(config: RunConfig, out: str | os.PathLike, *, device: str | torch.device = "auto",
              progress: bool | Progress = True, compile: bool | str = False, checkpoint_every: int | None = 1000,
              command: str | None = None, overwrite: bool = False) -> dict[str, Any]:
    """Train, evaluate and record one run in ``out``: skip it if finished, resume it if interrupted; refuse
    another run's folder unless ``overwrite`` (:class:`RunConflictError`). A diverged run is recorded with
    ``diverged: true`` (no model.pt) before :class:`DivergedError` is raised. Returns the results record."""
    dev, out, task, n = get_device(device), output_path(out, option="out"), config.task, config.train.eval_samples
    _check_every(checkpoint_every)
    for seed in {config.eval_seed, *([0] if config.train.eval_every else [])}:  # else a NaN error, not JSON
        for k, _, y in samples_per_k(task, None, n, seed, dev):
            if not bool(((y >= task.vocab.first_letter) & (y < task.vocab.no_answer)).any()):
                raise ValueError(f"{task!r} has no letter target at k = {k} in its {n} test samples (seed {seed}):"
                                 " the error there is undefined; lower max_hops or raise seq_len or eval_samples")
    try:  # fail before training, not after; the lock is taken over only from a process that is gone
        out.mkdir(parents=True, exist_ok=True)
        lock = take_lock(out / ".lock", out)
    except LockedError as exc:  # a live process holds it: named with its host
        raise RunConflictError(str(exc)) from None
    except OSError as exc:
        raise ValueError(f"cannot write to the output folder {out}: {exc.strerror or exc}") from exc
    try:
        if (done := _claim_output(out, config, overwrite)) is not None:
            return done
        model = config.init_model(dev)
        command = command or "python scripts/run_training.py " + " ".join(config_argv(config) + ["--out", str(out)])
        speed = {"compiled": compile} if compile else {}
        try:
            hist = fit(model, task, config.train, device=dev, progress=progress, compile=compile,
                       checkpoint=out / "checkpoint.pt", checkpoint_every=checkpoint_every,
                       checkpoint_meta={"model_config": model.config.to_dict()})
        except DivergedError as exc:
            finite = {**exc.history, "loss": [v for v in exc.history["loss"] if math.isfinite(v)]}
            record = {**_history_part(finite, config, dev, command, **speed), "complete": False,
                      "diverged": True, "error": str(exc)}
            atomic_write_text(out / "results.json", json.dumps(record, indent=2, allow_nan=False) + "\n")
            raise
        record = results_record(model, task, hist, config, dev, command, **speed)
        write_run(out, model, record)
        return record
    finally:
        lock.release()


def config_argv(config: RunConfig) -> list[str]:
    """Arguments of ``scripts/run_training.py`` that reproduce ``config``."""
    return [a for k, v in config.to_dict().items() if v is not None for a in ("--" + k.replace("_", "-"), str(v))]
