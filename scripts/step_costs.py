"""What a training step costs, counted on a CPU, and the GPU time that implies: an ESTIMATE, never a measurement.

:func:`counting` counts, while a piece of training runs, the FLOPs of its matrix products (torch's
``FlopCounterMode``: matrix products, convolutions, attention) and the kernels a GPU would launch (every tensor
operation that is not a view, in the forward and backward passes). Two corrections make the CPU's count a GPU's:
AdamW is CUDA's fused kernel there (:data:`FUSED_ADAMW_LAUNCHES` a step, whatever the CPU's loop did), and a GRU
or LSTM layer is cuDNN's (:data:`CUDNN_LAUNCHES_PER_TIMESTEP` kernels per time step forward, the backward scaled
alike) rather than the CPU's step-by-step decomposition. :func:`per_step` takes the difference of two runs of a
training function (``steps=long`` and ``steps=short``), so model building, data set-up and the evaluation cancel
and one step's FLOPs and launches remain, data sampling included. :func:`gpu_seconds` turns a step into time:
FLOPs at ``efficiency`` x the GPU's peak, plus ``launch_s`` per launch (the defaults: Colab's free T4 in float32,
8.1 TFLOP/s, an assumed 30 % of it, 10 microseconds a launch; no overlap of the two, no CUDA graphs).
Left out: elementwise FLOPs and memory traffic (the share of peak stands for them), the optimiser's FLOPs (about
1 % of a step here) and evaluations.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.optim.optimizer as _optim

T4_FP32_FLOPS = 8.1e12
"""Peak float32 rate of an NVIDIA T4 (Colab's free GPU; it has no bf16, so the book trains there in float32)."""
EFFICIENCY = 0.3
"""The share of peak assumed for a step's matrix products (small matrices: m = 64 to 256, B x T = 2,000-6,400)."""
LAUNCH_S = 10e-6
"""Assumed cost of one kernel launch, seconds."""
FUSED_ADAMW_LAUNCHES = 2
"""Kernels of CUDA's fused AdamW step (one multi-tensor kernel, plus the step counters)."""
CUDNN_LAUNCHES_PER_TIMESTEP = 2
"""Forward kernels per time step and layer of a cuDNN GRU or LSTM (its recurrent product and the cell update)."""
_NO_KERNEL = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach", "lift_fresh",
              "split", "unsafe_split", "split_with_sizes", "unbind", "_unsafe_view", "alias", "set_",
              "_local_scalar_dense", "is_nonzero", "sym_size", "sym_stride"}


@dataclass(frozen=True)
class StepCost:
    """FLOPs (matrix products) and kernel launches of one training step, as a GPU would run it."""

    flops: float
    launches: float

    def __add__(self, other: StepCost) -> StepCost:
        return StepCost(self.flops + other.flops, self.launches + other.launches)

    def __sub__(self, other: StepCost) -> StepCost:
        return StepCost(self.flops - other.flops, self.launches - other.launches)

    def scaled(self, flops: float = 1.0, launches: float = 1.0) -> StepCost:
        """This cost with the FLOPs times ``flops`` and the launches times ``launches``."""
        return StepCost(self.flops * flops, self.launches * launches)


class _Counts:
    """Running totals of :func:`counting`."""

    def __init__(self) -> None:
        self.forward = self.backward = self.rnn_forward = self.rnn_modelled = 0
        self.optimiser_steps = 0
        self.flops = 0.0

    @property
    def launches(self) -> float:
        """Forward kernels (cuDNN's count for RNN layers) plus backward ones scaled alike, plus fused AdamW."""
        forward = self.forward - self.rnn_forward + self.rnn_modelled
        scale = forward / self.forward if self.forward else 1.0
        return forward + self.backward * scale + FUSED_ADAMW_LAUNCHES * self.optimiser_steps

    def cost(self) -> StepCost:
        return StepCost(self.flops, self.launches)


def _mode(counts: _Counts, paused: list[bool], in_rnn: list[int]):
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry  # torch's FLOP formulas, as FlopCounterMode uses them

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if paused[0]:
                return out
            if (formula := flop_registry.get(func.overloadpacket)) is not None:
                counts.flops += formula(*args, **kwargs, out_val=out)
            if not (func.is_view or func.overloadpacket.__name__ in _NO_KERNEL):
                if torch._C._current_graph_task_id() >= 0:  # inside a backward pass
                    counts.backward += 1
                else:
                    counts.forward += 1
                    counts.rnn_forward += in_rnn[0] > 0
            return out

    return Counter()


@contextmanager
def counting() -> Iterator[_Counts]:
    """Count the matrix-product FLOPs and the GPU kernel launches of everything run inside (see the module doc);
    the yielded object's :meth:`cost` is the total so far. Optimiser steps count as CUDA's fused AdamW."""
    counts, paused, in_rnn = _Counts(), [False], [0]

    def opt_pre(*_: Any) -> None:
        paused[0] = True

    def opt_post(*_: Any) -> None:
        paused[0] = False
        counts.optimiser_steps += 1

    def rnn_pre(module: torch.nn.Module, args: tuple) -> None:
        in_rnn[0] += 1
        x = args[0]
        steps = x.shape[1] if module.batch_first else x.shape[0]
        counts.rnn_modelled += CUDNN_LAUNCHES_PER_TIMESTEP * steps * module.num_layers

    def rnn_post(*_: Any) -> None:
        in_rnn[0] -= 1

    hooks = [_optim.register_optimizer_step_pre_hook(opt_pre),
             _optim.register_optimizer_step_post_hook(opt_post),
             torch.nn.modules.module.register_module_forward_pre_hook(
                 lambda m, a: rnn_pre(m, a) if isinstance(m, torch.nn.RNNBase) else None),
             torch.nn.modules.module.register_module_forward_hook(
                 lambda m, a, o: rnn_post() if isinstance(m, torch.nn.RNNBase) else None)]
    # oneDNN runs an LSTM as one opaque op; without it every layer's products are seen (and counted)
    with warnings.catch_warnings():  # the flags' setter warns about Intel GPUs
        warnings.simplefilter("ignore", UserWarning)
        mkldnn = torch.backends.mkldnn.flags(enabled=False)
        mkldnn.__enter__()
    try:
        with _mode(counts, paused, in_rnn):
            yield counts
    finally:
        for h in hooks:
            h.remove()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            mkldnn.__exit__(None, None, None)


def per_step(train: Callable[[int], Any], *, short: int = 1, long: int = 3) -> StepCost:
    """One training step's :class:`StepCost`: the counts of ``train(long)`` less those of ``train(short)``
    (``train(steps)`` builds, trains for ``steps`` steps and evaluates), over ``long - short``."""
    costs = []
    for steps in (short, long):
        with counting() as c:
            train(steps)
        costs.append(c.cost())
    diff = costs[1] - costs[0]
    return diff.scaled(1 / (long - short), 1 / (long - short))


def gpu_seconds(step: StepCost, steps: int, *, peak: float = T4_FP32_FLOPS, efficiency: float = EFFICIENCY,
                launch_s: float = LAUNCH_S) -> float:
    """ESTIMATED seconds of ``steps`` steps of cost ``step`` on a GPU: FLOPs at ``efficiency`` x ``peak`` plus
    ``launch_s`` per launch (defaults: a T4 in float32, 30 %, 10 us)."""
    return steps * (step.flops / (efficiency * peak) + step.launches * launch_s)


def duration(seconds: float) -> str:
    """``seconds`` rounded for reading: "40 s", "12 min", "3.4 h", "2.5 days"."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    if seconds < 48 * 3600:
        hours = seconds / 3600
        return f"{hours:.1f} h" if hours < 10 else f"{round(hours)} h"
    return f"{seconds / 86400:.1f} days"


def flops_text(flops: float) -> str:
    """``flops`` as "3.1e16"."""
    if flops <= 0:
        return "0"
    exp = math.floor(math.log10(flops))
    return f"{flops / 10**exp:.1f}e{exp}"
