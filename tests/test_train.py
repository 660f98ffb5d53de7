"""Tests of hoplib.train: schedule, data regimes, fit, ensembles, the CLI and its resumable checkpoints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from hoplib.evaluate import per_k_error
from hoplib.models import gpt_for_task
from hoplib.tasks import HopTask
from hoplib.train import (
    CheckpointError,
    DataStream,
    fit,
    fit_ensemble,
    linear_warmup_decay,
    load_checkpoint,
    save_checkpoint,
    train_seed,
)

ROOT = Path(__file__).resolve().parents[1]


def test_schedule_warms_up_from_zero_then_decays_to_zero():
    f = [linear_warmup_decay(s, steps=100, warmup_steps=10) for s in range(101)]
    assert f[0] == 0.0 and f[5] == 0.5 and f[10] == 1.0 and f[100] == 0.0
    assert all(a <= b for a, b in zip(f[:10], f[1:11], strict=True))
    assert all(a >= b for a, b in zip(f[10:-1], f[11:], strict=True))
    assert linear_warmup_decay(55, steps=100, warmup_steps=10) == pytest.approx(0.5)


def test_finite_sample_stream_cycles_floor_n_over_b_batches_in_order():
    task = HopTask(seq_len=12, max_hops=3)
    s = DataStream(task, batch_size=8, n_train=30, seed=0, device=torch.device("cpu"))
    assert s.n_used == 24 and s.n_batches == 3
    xs = [s.batch(t)[0] for t in range(7)]
    assert torch.equal(xs[0], xs[3]) and torch.equal(xs[1], xs[4]) and torch.equal(xs[0], xs[6])
    assert not torch.equal(xs[0], xs[1])
    assert torch.equal(torch.cat(xs[:3]), s.fixed[0])


def test_infinite_stream_is_fresh_each_step_reproducible_and_disjoint_from_test_data():
    task = HopTask(seq_len=40, max_hops=3)
    a = DataStream(task, 16, None, seed=0, device=torch.device("cpu"))
    b = DataStream(task, 16, None, seed=1, device=torch.device("cpu"))
    assert torch.equal(a.batch(5)[0], a.batch(5)[0])
    assert not torch.equal(a.batch(5)[0], a.batch(6)[0])
    assert not torch.equal(a.batch(5)[0], b.batch(5)[0])
    test_x = torch.cat([task.sample(100, k=k, seed=s + k)[0][:, 1:] for k in range(4) for s in range(30)])
    train_x = torch.cat([a.batch(t)[0][:, 1:] for t in range(20)])
    assert all(2**31 <= train_seed(sd, t) < 2**32 for sd in (0, 127) for t in (0, 2**24 - 1))
    assert not (test_x.unsqueeze(1) == train_x.unsqueeze(0)).all(-1).any()


def test_fit_learns_the_copy_and_one_hop_task():
    task = HopTask(seq_len=12, max_hops=1)
    model = gpt_for_task(task, depth=2, d_model=32, heads=4)
    hist = fit(model, task, steps=300, lr=3e-3, warmup_steps=30, progress=False, device="cpu")
    assert len(hist["loss"]) == 300 and hist["steps_done"] == 300
    assert sum(hist["loss"][-20:]) / 20 < 0.5 * sum(hist["loss"][:20]) / 20
    err = per_k_error(model, task, n_samples=50, device="cpu")
    assert err[0] < 0.05  # copying the current letter is learnt fast


def test_fit_is_deterministic_and_accepts_any_sequence_model():
    task = HopTask(seq_len=10, max_hops=2)

    class Tiny(nn.Module):  # not a GPT: embedding + linear, still the sequence-model interface
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(task.vocab_size, 16)
            self.out = nn.Linear(16, task.vocab_size)

        def forward(self, ids):
            return self.out(self.emb(ids))

    weights = []
    for _ in range(2):
        torch.manual_seed(0)
        m = Tiny()
        hist = fit(m, task, steps=20, warmup_steps=2, lr=1e-2, progress=False, device="cpu", eval_every=10,
                   eval_samples=5, n_train=64)
        weights.append(m.out.weight.detach().clone())
    assert torch.equal(weights[0], weights[1])
    assert [r["step"] for r in hist["evals"]] == [10, 20] and set(hist["evals"][0]["per_k_error"]) == {0, 1, 2}
    assert hist["n_train_used"] == 64


def test_fit_rejects_bad_arguments_and_bad_models():
    task = HopTask(seq_len=10, max_hops=2)
    model = gpt_for_task(task, depth=1, d_model=16, heads=2)
    with pytest.raises(ValueError, match="n_train"):
        fit(model, task, steps=5, n_train=10, batch_size=32, device="cpu", progress=False)
    with pytest.raises(ValueError, match="lr"):
        fit(model, task, steps=5, lr=-1.0, device="cpu", progress=False)
    with pytest.raises(TypeError, match="steps"):
        fit(model, task, steps=5.0, device="cpu", progress=False)
    with pytest.raises(TypeError, match="task"):
        fit(model, "hop", steps=5, device="cpu", progress=False)

    class Wrong(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(1, 3)

        def forward(self, ids):
            return self.lin(ids.float().unsqueeze(-1))

    with pytest.raises(ValueError, match="logits"):
        fit(Wrong(), task, steps=2, device="cpu", progress=False)


def test_ensemble_training_equals_separate_training():
    task = HopTask(seq_len=12, max_hops=2)
    seeds, n_trains = [0, 1, 2], [None, 64, None]
    inits = []
    for s in seeds:
        torch.manual_seed(100 + s)
        inits.append(gpt_for_task(task, depth=2, d_model=16, heads=2))
    kw = dict(steps=15, lr=3e-3, warmup_steps=3, batch_size=8, device="cpu", progress=False)
    copies = [gpt_for_task(task, depth=2, d_model=16, heads=2) for _ in seeds]
    for c, m in zip(copies, inits, strict=True):
        c.load_state_dict(m.state_dict())
    trained, hists = fit_ensemble(copies, task, seeds=seeds, n_trains=n_trains, **kw)
    for e, (m, s, n) in enumerate(zip(inits, seeds, n_trains, strict=True)):
        h = fit(m, task, seed=s, n_train=n, **kw)
        assert hists[e]["loss"] == pytest.approx(h["loss"], rel=1e-4, abs=1e-5)
        for p, q in zip(trained[e].parameters(), m.parameters(), strict=True):
            assert torch.allclose(p, q, atol=1e-5)


def test_ensemble_of_one_model_trains_like_fit():
    # the paper grid's m = 256 architectures are groups of one run in an ensemble sweep
    task = HopTask(seq_len=12, max_hops=2)
    torch.manual_seed(7)
    init = gpt_for_task(task, depth=2, d_model=16, heads=2)
    copy = gpt_for_task(task, depth=2, d_model=16, heads=2)
    copy.load_state_dict(init.state_dict())
    kw = dict(steps=6, lr=3e-3, warmup_steps=2, batch_size=8, device="cpu", progress=False)
    (trained,), (hist,) = fit_ensemble([copy], task, seeds=[3], **kw)
    ref = fit(init, task, seed=3, **kw)
    assert len(hist["loss"]) == 6 and hist["loss"] == pytest.approx(ref["loss"], rel=1e-4, abs=1e-5)
    for p, q in zip(trained.parameters(), init.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-5)


def test_checkpoint_roundtrip_and_clear_errors(tmp_path):
    path = tmp_path / "ck.pt"
    save_checkpoint(path, {"format": 1, "model": {"w": torch.ones(2)}, "settings": {"a": 1}})
    assert torch.equal(load_checkpoint(path)["model"]["w"], torch.ones(2))
    with pytest.raises(CheckpointError, match="different run.*a: checkpoint 1 vs now 2"):
        load_checkpoint(path, expected={"a": 2})
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="corrupt or unreadable"):
        load_checkpoint(path)
    torch.save({"format": 1, "model": {}, "evil": Path("x")}, path)  # not loadable with weights_only=True
    with pytest.raises(CheckpointError, match="corrupt or unreadable"):
        load_checkpoint(path)
    torch.save({"something": torch.ones(1)}, path)
    with pytest.raises(CheckpointError, match="not a hoplib training checkpoint"):
        load_checkpoint(path)


def test_fit_resumes_from_its_checkpoint_to_identical_weights(tmp_path):
    task = HopTask(seq_len=12, max_hops=2)
    kw = dict(steps=30, lr=3e-3, warmup_steps=3, batch_size=8, device="cpu", progress=False)
    torch.manual_seed(0)
    ref = gpt_for_task(task, depth=2, d_model=16, heads=2, dropout=0.1)
    init = {k: v.clone() for k, v in ref.state_dict().items()}
    ref_hist = fit(ref, task, **kw)
    # A run that stopped after 20 steps (its last checkpoint) is resumed by a longer call on the same file.
    part = gpt_for_task(task, depth=2, d_model=16, heads=2, dropout=0.1)
    part.load_state_dict(init)
    ck = tmp_path / "ck.pt"
    fit(part, task, checkpoint=ck, checkpoint_every=10, **kw)
    state = torch.load(ck, weights_only=True)
    assert state["step"] == 30
    resumed = gpt_for_task(task, depth=2, d_model=16, heads=2, dropout=0.1)
    hist = fit(resumed, task, checkpoint=ck, **kw)  # already complete: loads and returns
    assert hist["loss"] == ref_hist["loss"]
    for p, q in zip(resumed.parameters(), ref.parameters(), strict=True):
        assert torch.equal(p, q)
    with pytest.raises(CheckpointError, match="different run"):
        fit(resumed, task, checkpoint=ck, **{**kw, "lr": 1e-3})


# --------------------------------------------------------------------------- the command line, in subprocesses
CLI = ["--depth", "2", "--d-model", "16", "--heads", "2", "--batch-size", "8", "--lr", "3e-3", "--seq-len", "12",
       "--alphabet-size", "4", "--max-hops", "3", "--seed", "3", "--device", "cpu", "--warmup-steps", "10",
       "--dropout", "0.1", "--eval-samples", "20", "--no-progress"]


def _cli(out: Path, *extra: str, wait: bool = True):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, "-m", "hoplib.train", *CLI, "--out", str(out), *extra]
    if wait:
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_cli_writes_results_and_skips_a_finished_run(tmp_path):
    out = tmp_path / "run"
    r = _cli(out, "--steps", "40", "--checkpoint-every", "15")
    assert r.returncode == 0, r.stderr
    res = json.loads((out / "results.json").read_text())
    assert res["complete"] is True
    assert set(res["per_k_error"]) == {"0", "1", "2", "3"} and set(res["per_k_error_pooled"]) == {"0", "1", "2", "3"}
    assert all(0.0 <= v <= 1.0 for v in res["per_k_error"].values())
    assert res["config"]["depth"] == 2 and res["config"]["n_train"] is None
    prov = res["provenance"]
    assert prov["steps_done"] == 40 and prov["device"] == "cpu"
    assert {"hoplib_version", "git_commit", "torch_version", "wall_time_s"} <= set(prov)
    r2 = _cli(out, "--steps", "40", "--checkpoint-every", "15")
    assert r2.returncode == 0 and "nothing to do" in r2.stdout


@pytest.mark.slow
def test_cli_gives_clear_errors_for_corrupt_and_mismatched_checkpoints(tmp_path):
    out = tmp_path / "run"
    assert _cli(out, "--steps", "10", "--checkpoint-every", "5").returncode == 0
    (out / "results.json").unlink()
    r = _cli(out, "--steps", "10", "--checkpoint-every", "5", "--n-train", "64")
    assert r.returncode == 2 and "belongs to a different run" in r.stderr and "Traceback" not in r.stderr
    (out / "checkpoint.pt").write_bytes(b"\x00garbage")
    r = _cli(out, "--steps", "10", "--checkpoint-every", "5")
    assert r.returncode == 2 and "corrupt or unreadable" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_sigkill_and_resume_gives_bit_identical_weights_and_results(tmp_path):
    steps, args = 400, ("--checkpoint-every", "25", "--n-train", "100")
    ref = tmp_path / "ref"
    assert _cli(ref, "--steps", str(steps), *args).returncode == 0
    run = tmp_path / "killed"
    proc = _cli(run, "--steps", str(steps), *args, wait=False)
    ck = run / "checkpoint.pt"
    deadline = time.time() + 120
    while not ck.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)
    alive = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert alive, "the training process finished before it could be killed; make the run longer"
    killed_at = torch.load(ck, weights_only=True)["step"]
    assert 0 < killed_at < steps and not (run / "results.json").exists()
    r = _cli(run, "--steps", str(steps), *args)
    assert r.returncode == 0, r.stderr
    a = json.loads((ref / "results.json").read_text())
    b = json.loads((run / "results.json").read_text())
    for key in ("per_k_error", "per_k_error_pooled", "loss_curve", "final_loss", "config"):
        assert a[key] == b[key], key
    wa = torch.load(ref / "checkpoint.pt", weights_only=True)
    wb = torch.load(ck, weights_only=True)
    assert wa["step"] == wb["step"] == steps
    for name, t in wa["model"].items():
        assert torch.equal(t, wb["model"][name]), name
    for s, t in zip(wa["optimizer"]["state"].values(), wb["optimizer"]["state"].values(), strict=True):
        assert torch.equal(s["exp_avg_sq"], t["exp_avg_sq"])


# --------------------------------------------------------------------------- speed options: fused kernels, compile
def _needs_kernels():
    from hoplib import fast

    if not fast.available():
        pytest.skip(f"hoplib.fast kernels unavailable: {fast.status()['error']}")
    return fast


def test_fast_dropout_keeps_one_minus_p_scales_and_reuses_its_mask_in_backward():
    fast = _needs_kernels()
    x = torch.randn(200_000, requires_grad=True)
    res = torch.randn(200_000, requires_grad=True)
    y = fast.dropout(x, 0.1, seed=7, residual=res)
    mask = fast.dropout_mask((200_000,), 0.1, seed=7)
    assert abs(mask.float().mean().item() - 0.9) < 0.003  # binomial sd ~ 0.0007
    assert torch.allclose(y, res + mask * x / 0.9, atol=1e-6)
    g = torch.randn(200_000)
    y.backward(g)
    assert torch.allclose(x.grad, mask * g / 0.9, atol=1e-6) and torch.equal(res.grad, g)
    assert torch.equal(fast.dropout_mask((1000,), 0.1, 7), fast.dropout_mask((1000,), 0.1, 7))
    assert not torch.equal(fast.dropout_mask((1000,), 0.1, 7), fast.dropout_mask((1000,), 0.1, 8))
    assert fast.dropout_mask((1000,), 0.0, 3).all()
    x2 = torch.randn(50, 40, requires_grad=True)
    bias = torch.randn(40, requires_grad=True)
    y2 = fast.dropout(x2, 0.3, seed=11, bias=bias)
    keep = fast.dropout_mask((50, 40), 0.3, seed=11)
    assert torch.allclose(y2, keep * (x2 + bias) / 0.7, atol=1e-6)
    y2.sum().backward()
    assert torch.allclose(bias.grad, (keep / 0.7).sum(0), atol=1e-5)
    with pytest.raises(ValueError, match="p must be"):
        fast.dropout(x, 1.0, seed=0)
    with pytest.raises(ValueError, match="float32 CPU"):
        fast.dropout(x.double(), 0.1, seed=0)


def test_fast_gelu_matches_torch_tanh_gelu_and_its_gradient():
    fast = _needs_kernels()
    torch.manual_seed(0)
    x = torch.cat([torch.linspace(-30, 30, 10_001), torch.randn(10_000)]).requires_grad_(True)
    ref_x = x.detach().clone().requires_grad_(True)
    y, ref = fast.gelu(x), F.gelu(ref_x, approximate="tanh")
    assert torch.allclose(y, ref, atol=2e-6, rtol=1e-5)
    g = torch.randn_like(y)
    y.backward(g)
    ref.backward(g)
    # near x = -5 torch's tanh saturates to -1 and its gradient is 0, ours ~1e-6: agree to 1e-5 absolute
    assert torch.allclose(x.grad, ref_x.grad, atol=1e-5, rtol=1e-5)
    z = torch.randn(30, 16, requires_grad=True)
    bias = torch.randn(16, requires_grad=True)
    fast.gelu(z, bias=bias).pow(2).sum().backward()
    z2, b2 = z.detach().clone().requires_grad_(True), bias.detach().clone().requires_grad_(True)
    F.gelu(z2 + b2, approximate="tanh").pow(2).sum().backward()
    assert torch.allclose(z.grad, z2.grad, atol=1e-5) and torch.allclose(bias.grad, b2.grad, atol=1e-5)


@pytest.mark.parametrize("p", [0.0, 0.25])
@pytest.mark.parametrize("shape", [(3, 11, 2, 8), (2, 37, 2, 32), (2, 8, 1, 24), (1, 1, 1, 16), (2, 13, 3, 5)])
def test_fast_causal_attention_matches_softmax_attention_with_the_same_mask(p, shape):
    # head sizes 8, 16, 24, 32 take the fused causal kernels (tiles of 8 and 16 columns, ragged last row tiles);
    # 5 takes the batched-product path
    fast = _needs_kernels()
    b, t, h, d = shape
    torch.manual_seed(0)
    qkv = torch.randn(b, t, 3 * h * d, requires_grad=True)
    bias = torch.randn(3 * h * d, requires_grad=True)
    ref_in = qkv.detach().clone().requires_grad_(True)
    ref_bias = bias.detach().clone().requires_grad_(True)
    y = fast.causal_attention(qkv, h, p, seed=5, bias=bias)
    q, k, v = (z.view(b, t, h, d).transpose(1, 2) for z in (ref_in + ref_bias).split(h * d, dim=-1))
    scores = (q @ k.transpose(-2, -1)) / d**0.5
    scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    keep = fast.dropout_mask((b * h, t, t), p, seed=5).view(b, h, t, t)
    ref = ((scores.softmax(-1) * keep / (1 - p)) @ v).transpose(1, 2).reshape(b, t, h * d)
    assert torch.allclose(y, ref, atol=1e-5)
    g = torch.randn_like(y)
    y.backward(g)
    ref.backward(g)
    assert torch.allclose(qkv.grad, ref_in.grad, atol=1e-5) and torch.allclose(bias.grad, ref_bias.grad, atol=1e-5)
    if p > 0 and keep.numel() > 50:  # some weights were dropped
        assert not keep.all()


@pytest.mark.parametrize("head", ["linear", "layernorm"])
def test_fast_gpt_forward_equals_model_forward_and_gradients_without_dropout(head):
    fast = _needs_kernels()
    task = HopTask(seq_len=12, max_hops=3)
    torch.manual_seed(0)
    model = gpt_for_task(task, depth=2, d_model=32, heads=4, head=head)
    assert fast.supports(model)
    x, y = task.sample(6, seed=1)
    out, ref = fast.gpt_forward(model, x), model(x)
    assert torch.allclose(out, ref, atol=1e-5)
    c = ref.shape[-1]
    g1 = torch.autograd.grad(F.cross_entropy(out.reshape(-1, c), y.reshape(-1)), list(model.parameters()))
    g2 = torch.autograd.grad(F.cross_entropy(ref.reshape(-1, c), y.reshape(-1)), list(model.parameters()))
    for a, b in zip(g1, g2, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)

    class Other(nn.Module):
        def forward(self, ids):
            return ids

    assert not fast.supports(Other())
    with pytest.raises(ValueError, match="plain hoplib.models.GPT"):
        fast.gpt_forward(Other(), x)


def test_fit_fused_reproduces_eager_losses_without_dropout_and_falls_back_for_other_models():
    _needs_kernels()
    task = HopTask(seq_len=12, max_hops=2)
    kw = dict(steps=8, lr=3e-3, warmup_steps=2, batch_size=8, device="cpu", progress=False)
    torch.manual_seed(0)
    init = gpt_for_task(task, depth=2, d_model=16, heads=2).state_dict()
    hists = {}
    for fused in (False, True):
        m = gpt_for_task(task, depth=2, d_model=16, heads=2)
        m.load_state_dict(init)
        hists[fused] = fit(m, task, fused=fused, **kw)
    assert hists[True]["fused"] is True and hists[False]["fused"] is False
    assert hists[True]["loss"] == pytest.approx(hists[False]["loss"], abs=1e-5)

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(task.vocab_size, task.vocab_size)

        def forward(self, ids):
            return self.emb(ids)

    assert fit(Tiny(), task, fused=True, **kw)["fused"] is False
    with pytest.raises(ValueError, match="exclude each other"):
        fit(Tiny(), task, fused=True, compile=True, **kw)
    with pytest.raises(TypeError, match="fused"):
        fit(Tiny(), task, fused=1, **kw)


class _Interrupt(Exception):
    pass


def _fit_interrupted_then_resumed(make, task, ck, stop_at, **kw):
    """Run fit until the batch of step ``stop_at`` raises (a crash), then call fit again on the checkpoint."""
    original = DataStream.batch

    def failing(self, step):
        if step == stop_at:
            raise _Interrupt
        return original(self, step)

    DataStream.batch = failing
    try:
        with pytest.raises(_Interrupt):
            fit(make(), task, checkpoint=ck, **kw)
    finally:
        DataStream.batch = original
    assert torch.load(ck, weights_only=True)["step"] < stop_at + 1
    resumed = make()
    return resumed, fit(resumed, task, checkpoint=ck, **kw)


def test_fit_fused_with_dropout_is_reproducible_and_resumes_bit_identically(tmp_path):
    _needs_kernels()
    task = HopTask(seq_len=12, max_hops=2)
    kw = dict(steps=12, lr=3e-3, warmup_steps=2, batch_size=8, device="cpu", progress=False, fused=True,
              checkpoint_every=4)
    torch.manual_seed(0)
    init = gpt_for_task(task, depth=2, d_model=16, heads=2, dropout=0.1).state_dict()

    def make():
        m = gpt_for_task(task, depth=2, d_model=16, heads=2, dropout=0.1)
        m.load_state_dict(init)
        return m

    ref = make()
    ref_hist = fit(ref, task, checkpoint=tmp_path / "ref.pt", **kw)
    again = make()
    assert fit(again, task, **{k: v for k, v in kw.items() if k != "checkpoint_every"})["loss"] == ref_hist["loss"]
    resumed, hist = _fit_interrupted_then_resumed(make, task, tmp_path / "ck.pt", stop_at=9, **kw)
    assert hist["loss"] == ref_hist["loss"] and hist["fused"] is True
    for p, q in zip(resumed.parameters(), ref.parameters(), strict=True):
        assert torch.equal(p, q)
    state = torch.load(tmp_path / "ck.pt", weights_only=True)
    assert state["settings"]["fused"] is True
    with pytest.raises(CheckpointError, match="different run"):  # a plain run does not silently continue it
        fit(make(), task, checkpoint=tmp_path / "ck.pt", **{**kw, "fused": False})


@pytest.mark.slow
def test_fit_compiled_on_cpu_matches_eager_and_resumes_with_plain_state_dict_keys(tmp_path):
    task = HopTask(seq_len=12, max_hops=2)
    kw = dict(steps=10, lr=3e-3, warmup_steps=2, batch_size=8, device="cpu", progress=False)
    torch.manual_seed(0)
    init = gpt_for_task(task, depth=2, d_model=16, heads=2).state_dict()

    def make():
        m = gpt_for_task(task, depth=2, d_model=16, heads=2)
        m.load_state_dict(init)
        return m

    eager, compiled = make(), make()
    h_eager = fit(eager, task, **kw)
    h_comp = fit(compiled, task, compile=True, checkpoint=tmp_path / "ref.pt", checkpoint_every=5, **kw)
    assert h_comp["loss"] == pytest.approx(h_eager["loss"], abs=1e-5)
    for p, q in zip(compiled.parameters(), eager.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-5)
    keys = set(torch.load(tmp_path / "ref.pt", weights_only=True)["model"])
    assert keys == set(init) and not any(k.startswith("_orig_mod.") for k in keys)
    resumed, hist = _fit_interrupted_then_resumed(make, task, tmp_path / "ck.pt", stop_at=7, compile=True,
                                                  checkpoint_every=5, **kw)
    # A resumed compiled run recompiles; inductor's CPU kernels may then round a reduction differently (seen
    # with 2 threads), so this is equality to float tolerance. Bit-identical resume is tested eager and fused.
    assert hist["loss"] == pytest.approx(h_comp["loss"], abs=1e-5)
    for p, q in zip(resumed.parameters(), compiled.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-5), (p - q).abs().max()  # seen: up to 1.3e-6


def test_cli_fused_option_records_the_kernels_in_the_provenance(tmp_path):
    _needs_kernels()
    from hoplib.train import main

    out = tmp_path / "run"
    argv = [*CLI, "--steps", "6", "--checkpoint-every", "3", "--out", str(out), "--fused"]
    rec = main(argv)
    assert rec["complete"] and rec["provenance"]["fused_kernels"] is True
    assert json.loads((out / "results.json").read_text())["provenance"]["fused_kernels"] is True
