"""Speed properties of training, checked on the CPU: one thread per local worker; what a GPU relies
on: no host read of device values between log points, the same logged losses however often they are read,
divergence still caught, the optional CUDA-graph step (torch.compile "reduce-overhead") equal to the plain one,
ensembles of one width with several depths equal to separate runs."""

from __future__ import annotations

import shutil
import sys

import pytest
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

import hoplib.train as train
from hoplib.models import gpt_for_task
from hoplib.tasks import HopTask
from hoplib.train import DivergedError, TrainConfig, fit, fit_ensemble, optimise

TASK = HopTask(seq_len=12, max_hops=2)


def _threads(index: int, point: int) -> int:
    return torch.get_num_threads()


def test_local_workers_run_one_thread_each():
    # two threads per process, with other processes on the cores, made a small training step 7-15x slower
    from hoplib.sweep import map_points

    assert map_points(_threads, [0, 1, 2], workers=2) == [1, 1, 1]


class HostReads(TorchDispatchMode):
    """Counts reads of a tensor's value by the host (``.item()``, ``bool``, ``int``: a device sync on a GPU),
    leaving out torch.optim's, which read its step counters, kept on the host."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and not self._in_optim():
            self.n += 1
        return func(*args, **(kwargs or {}))

    @staticmethod
    def _in_optim() -> bool:
        frame = sys._getframe()
        while frame is not None and "torch/optim" not in frame.f_code.co_filename.replace("\\", "/"):
            frame = frame.f_back
        return frame is not None


def _reads(steps: int, n_models: int) -> int:
    torch.manual_seed(0)
    models = [gpt_for_task(TASK, depth=1, d_model=16, heads=2) for _ in range(n_models)]
    configs = [TrainConfig(steps=steps, warmup_steps=1, batch_size=8, n_train=32, seed=j) for j in range(n_models)]
    with HostReads() as reads:
        if n_models == 1:
            fit(models[0], TASK, configs[0], device="cpu", progress=False)
        else:
            fit_ensemble(models, TASK, configs, device="cpu", progress=False)
    return reads.n


@pytest.mark.parametrize("n_models", [1, 3])
def test_training_steps_read_no_device_value_between_log_points(n_models):
    # before: the ids were checked on every step (one sync per step, two values read)
    assert _reads(30, n_models) == _reads(10, n_models)


def test_drawing_fresh_training_batches_reads_no_device_value():
    # before: find's int16 sort read the letters' min and max, two host reads a batch
    wide = HopTask(seq_len=40, alphabet_size=40_000, max_hops=5)  # the torch.sort path
    with HostReads() as reads:
        for seed in range(3):
            TASK.sample(8, seed=seed)
            wide.sample(4, seed=seed)
    assert reads.n == 0
    # and with fresh samples, training reads no more device values for more steps
    assert _fresh_reads(30) == _fresh_reads(10)


def _fresh_reads(steps: int) -> int:
    torch.manual_seed(0)
    model = gpt_for_task(TASK, depth=1, d_model=16, heads=2)
    config = TrainConfig(steps=steps, warmup_steps=1, batch_size=8, n_train=None)
    with HostReads() as reads:
        fit(model, TASK, config, device="cpu", progress=False)
    return reads.n


def _tiny_loss():
    torch.manual_seed(0)
    w = nn.Linear(3, 2)
    x = torch.randn(40, 3)

    def step_loss(step: int) -> torch.Tensor:  # two "models", each with its loss
        return (w(x[step]) - 1.0) ** 2

    return w, step_loss


@pytest.mark.parametrize("every", [1, 7])
def test_logged_losses_equal_those_read_at_every_step(monkeypatch, every):
    monkeypatch.setattr(train, "_FLUSH_EVERY", every)
    w, step_loss = _tiny_loss()
    seen = []

    def logged(step: int) -> torch.Tensor:  # the old loop: each step's losses read at once
        loss = step_loss(step)
        seen.append(loss.detach().tolist())
        return loss

    hist = optimise(w, logged, TrainConfig(steps=40, lr=0.05, warmup_steps=3, eval_every=15), device="cpu",
                    progress=False, eval_fn=lambda: {})
    assert hist["loss"] == seen and len(seen) == 40 and [e["step"] for e in hist["evals"]] == [15, 30, 40]


def test_a_nan_loss_stops_the_run_at_the_next_log_point_with_its_step(monkeypatch):
    monkeypatch.setattr(train, "_FLUSH_EVERY", 5)
    w, step_loss = _tiny_loss()
    calls = []

    def poisoned(step: int) -> torch.Tensor:
        calls.append(step)
        loss = step_loss(step)
        return loss * float("nan") if step == 11 else loss

    with pytest.raises(DivergedError, match="loss is .*nan.* at step 12 of 40") as info:
        optimise(w, poisoned, TrainConfig(steps=40, lr=0.05, warmup_steps=3), device="cpu", progress=False)
    losses = info.value.history["loss"]
    assert info.value.step == 12 and len(losses) == 12 and all(v != v for v in losses[-1])
    assert calls[-1] == 14  # found where the losses are read: after step 15, not at every step


@pytest.mark.slow
@pytest.mark.skipif(not (torch._dynamo.is_dynamo_supported() and shutil.which("g++")),
                    reason="torch.compile (inductor) needs dynamo and a C++ compiler")
def test_the_cuda_graph_step_trains_like_the_plain_step(monkeypatch):
    modes, real = [], torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **kw: modes.append(kw.get("mode")) or real(model, **kw))
    cfg = TrainConfig(steps=4, lr=3e-3, warmup_steps=2, batch_size=8)
    torch.manual_seed(0)
    init = gpt_for_task(TASK, depth=1, d_model=16, heads=2).state_dict()
    hists = []
    for compile in (False, "reduce-overhead"):
        model = gpt_for_task(TASK, depth=1, d_model=16, heads=2)
        model.load_state_dict(init)
        hists.append(fit(model, TASK, cfg, device="cpu", progress=False, compile=compile)["loss"])
    assert modes == ["reduce-overhead"] and hists[1] == pytest.approx(hists[0], abs=1e-5)


def test_an_ensemble_of_one_width_and_several_depths_trains_like_separate_runs():
    depths, seeds, n_trains = [3, 2, 2, 1], [0, 1, 2, 3], [None, 64, None, 32]
    inits = []
    for d, s in zip(depths, seeds, strict=True):
        torch.manual_seed(100 + s)
        inits.append(gpt_for_task(TASK, depth=d, d_model=16, heads=2))
    copies = [gpt_for_task(TASK, depth=d, d_model=16, heads=2) for d in depths]
    for c, m in zip(copies, inits, strict=True):
        c.load_state_dict(m.state_dict())
    configs = [TrainConfig(steps=8, lr=3e-3, warmup_steps=2, batch_size=8, seed=s, n_train=n)
               for s, n in zip(seeds, n_trains, strict=True)]
    trained, hists = fit_ensemble(copies, TASK, configs, device="cpu", progress=False)
    for model, init, config, hist in zip(trained, inits, configs, hists, strict=True):
        ref = fit(init, TASK, config, device="cpu", progress=False)
        assert model.config == init.config and hist["loss"] == pytest.approx(ref["loss"], rel=1e-4, abs=1e-5)
        for p, q in zip(model.parameters(), init.parameters(), strict=True):
            assert torch.allclose(p, q, atol=1e-5)
    with pytest.raises(ValueError, match="deepest first"):
        fit_ensemble(copies[::-1], TASK, configs, device="cpu", progress=False)


def test_a_width_ensemble_sweep_groups_every_depth_of_a_width_and_records_each_run(tmp_path):
    from hoplib.grids import GRIDS, Grid, _arch, run_name, train_grid

    paper = GRIDS["paper"].configs()
    assert len({_arch(c, True) for c in paper}) == 10 and len({_arch(c, "width") for c in paper}) == 2
    grid = Grid(depths=(1, 2), widths=((16, 2),), seeds=(0, 1),
                settings=dict(seq_len=12, max_hops=2, steps=3, batch_size=8, warmup_steps=1, eval_samples=10))
    table = train_grid(grid, tmp_path, device="cpu", progress=False, ensemble="width")
    for c in grid.configs():
        rec = train.read_record(tmp_path / run_name(c) / "results.json")
        assert rec["complete"] and rec["config"] == c.to_dict() and rec["model"]["depth"] == c.depth
        assert rec["provenance"]["ensemble_size"] == 4
    assert {r["run"] for r in table} == {run_name(c) for c in grid.configs()}
