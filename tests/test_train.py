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
