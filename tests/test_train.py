"""Tests of hoplib.train (Section 4.2 / Appendix G): schedule, data regimes, TrainConfig, optimise, fit, ensembles,
RunConfig, the CLI, resumable checksummed checkpoints, and refusals of what would corrupt or lose a run."""

from __future__ import annotations

import json
import os
import shutil
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
    DivergedError,
    RunConfig,
    RunConflictError,
    TrainConfig,
    config_argv,
    fit,
    fit_ensemble,
    linear_warmup_decay,
    load_checkpoint,
    optimise,
    save_checkpoint,
    train_run,
    train_seed,
)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "run_training.py"


def _script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_training", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_schedule_warms_up_from_zero_then_decays_to_zero():
    f = [linear_warmup_decay(s, steps=100, warmup_steps=10) for s in range(101)]
    assert f[0] == 0.0 and f[5] == 0.5 and f[10] == 1.0 and f[100] == 0.0
    assert all(a <= b for a, b in zip(f[:10], f[1:11], strict=True))
    assert all(a >= b for a, b in zip(f[10:-1], f[11:], strict=True))
    assert linear_warmup_decay(55, steps=100, warmup_steps=10) == pytest.approx(0.5)


def test_finite_sample_stream_cycles_floor_n_over_b_batches_in_order():
    task = HopTask(seq_len=12, max_hops=3)
    s = DataStream(task, batch_size=8, n_train=30, seed=0, device=torch.device("cpu"))
    assert s.n_used == 24
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


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(**{**dict(steps=30, lr=3e-3, warmup_steps=3, batch_size=8), **kw})


def test_train_config_refuses_what_would_corrupt_the_data_streams():
    c = TrainConfig(steps=5, lr=1, weight_decay=0)
    assert c.lr == 1.0 and isinstance(c.lr, float) and c.batch_size == 32 and c.n_train is None
    assert TrainConfig(steps=5, lr=1) == TrainConfig(steps=5, lr=1.0)
    with pytest.raises(ValueError, match="n_train"):  # no whole batch
        TrainConfig(steps=5, n_train=10, batch_size=32)
    with pytest.raises(ValueError, match="seed"):  # the training streams would reach the test seeds
        TrainConfig(steps=5, seed=128)
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=2**24 + 1)
    with pytest.raises(AttributeError):
        c.steps = 10  # frozen


def test_fit_learns_the_copy_and_one_hop_task():
    task = HopTask(seq_len=12, max_hops=1)
    model = gpt_for_task(task, depth=2, d_model=32, heads=4)
    hist = fit(model, task, _cfg(steps=300, warmup_steps=30, batch_size=32), progress=False, device="cpu")
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
        hist = fit(m, task, TrainConfig(steps=20, warmup_steps=2, lr=1e-2, eval_every=10, eval_samples=5,
                                        n_train=64), progress=False, device="cpu")
        weights.append(m.out.weight.detach().clone())
    assert torch.equal(weights[0], weights[1])
    assert [r["step"] for r in hist["evals"]] == [10, 20] and set(hist["evals"][0]["per_k_error"]) == {0, 1, 2}
    assert hist["n_train_used"] == 64


def test_optimise_trains_any_loss_and_records_per_model_rows():
    torch.manual_seed(0)
    w = nn.Linear(3, 2)
    target = torch.tensor([1.0, -1.0])

    def step_loss(step):  # two "models": the two output units, each with its own loss
        return (w(torch.ones(3)) - target) ** 2

    hist = optimise(w, step_loss, TrainConfig(steps=200, lr=0.05, warmup_steps=5), device="cpu", progress=False)
    assert len(hist["loss"]) == 200 and all(len(row) == 2 for row in hist["loss"])
    assert max(hist["loss"][-1]) < 0.1 * min(hist["loss"][0])


def test_ensemble_training_equals_separate_training():
    task = HopTask(seq_len=12, max_hops=2)
    seeds, n_trains = [0, 1, 2], [None, 64, None]
    inits = []
    for s in seeds:
        torch.manual_seed(100 + s)
        inits.append(gpt_for_task(task, depth=2, d_model=16, heads=2))
    copies = [gpt_for_task(task, depth=2, d_model=16, heads=2) for _ in seeds]
    for c, m in zip(copies, inits, strict=True):
        c.load_state_dict(m.state_dict())
    configs = [_cfg(steps=15, seed=s, n_train=n) for s, n in zip(seeds, n_trains, strict=True)]
    trained, hists = fit_ensemble(copies, task, configs, device="cpu", progress=False)
    for e, (m, c) in enumerate(zip(inits, configs, strict=True)):
        h = fit(m, task, c, device="cpu", progress=False)
        assert hists[e]["loss"] == pytest.approx(h["loss"], rel=1e-4, abs=1e-5)
        for p, q in zip(trained[e].parameters(), m.parameters(), strict=True):
            assert torch.allclose(p, q, atol=1e-5)
    with pytest.raises(ValueError, match="equal up to seed and n_train"):
        fit_ensemble(copies[:2], task, [configs[0], _cfg(steps=16)], device="cpu", progress=False)


def test_ensemble_of_one_model_trains_like_fit():
    # the paper grid's m = 256 architectures are groups of one run in an ensemble sweep
    task = HopTask(seq_len=12, max_hops=2)
    torch.manual_seed(7)
    init = gpt_for_task(task, depth=2, d_model=16, heads=2)
    copy = gpt_for_task(task, depth=2, d_model=16, heads=2)
    copy.load_state_dict(init.state_dict())
    cfg = _cfg(steps=6, warmup_steps=2, seed=3)
    (trained,), (hist,) = fit_ensemble([copy], task, [cfg], device="cpu", progress=False)
    ref = fit(init, task, cfg, device="cpu", progress=False)
    assert len(hist["loss"]) == 6 and hist["loss"] == pytest.approx(ref["loss"], rel=1e-4, abs=1e-5)
    for p, q in zip(trained.parameters(), init.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-5)


def test_checkpoint_roundtrip_and_clear_errors(tmp_path):
    path = tmp_path / "ck.pt"
    save_checkpoint(path, {"model": {"w": torch.ones(2)}, "settings": {"a": 1}})
    assert torch.equal(load_checkpoint(path)["model"]["w"], torch.ones(2))
    with pytest.raises(CheckpointError, match="different run.*a: checkpoint 1 vs now 2"):
        load_checkpoint(path, expected={"a": 2})
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="corrupt or unreadable"):
        load_checkpoint(path)
    torch.save({"format": 2, "model": {}, "evil": Path("x")}, path)  # not loadable with weights_only=True
    with pytest.raises(CheckpointError, match="corrupt or unreadable"):
        load_checkpoint(path)
    torch.save({"something": torch.ones(1)}, path)
    with pytest.raises(CheckpointError, match="not a hoplib training checkpoint"):
        load_checkpoint(path)
    torch.save({"format": 1, "model": {"w": torch.ones(2)}}, path)  # before checksums
    with pytest.raises(CheckpointError, match="not a hoplib training checkpoint"):
        load_checkpoint(path)


def test_checkpoints_with_non_finite_weights_or_a_wrong_checksum_are_refused(tmp_path):
    path = tmp_path / "ck.pt"
    save_checkpoint(path, {"model": {"w": torch.tensor([1.0, float("nan")])}, "settings": {}})
    with pytest.raises(CheckpointError, match="non-finite.*w"):
        load_checkpoint(path)
    state = {"model": {"w": torch.ones(3)}, "settings": {}, "format": 2, "checksum": "0" * 64}
    torch.save(state, path)  # a checksum that does not match the contents
    with pytest.raises(CheckpointError, match="checksum"):
        load_checkpoint(path)


def _flip_tensor_bytes(path: Path, n: int = 64) -> None:
    """Flip ``n`` bytes in the middle of the largest tensor stored in a torch zip checkpoint (its pickle and
    the zip directory stay intact, so torch.load itself succeeds)."""
    import struct
    import zipfile

    with zipfile.ZipFile(path) as zf:
        info = max((i for i in zf.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    raw = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len + info.file_size // 2 - n // 2
    assert info.file_size >= 2 * n and info.compress_type == zipfile.ZIP_STORED
    for i in range(start, start + n):
        raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))


def _tiny_run(**kw) -> RunConfig:
    flat = dict(depth=2, d_model=16, heads=2, seq_len=12, max_hops=3, steps=10, lr=3e-3, warmup_steps=2,
                batch_size=8, eval_samples=10, seed=3)
    return RunConfig.from_dict({**flat, **kw})


def test_flipped_bytes_in_a_checkpoint_give_a_checkpoint_error_not_a_complete_run(tmp_path):
    # 64 flipped bytes inside a checkpoint fail its checksum: not loaded, the run not reported complete
    config = _tiny_run()
    train_run(config, tmp_path, device="cpu", progress=False, checkpoint_every=5)
    (tmp_path / "results.json").unlink()  # as if killed after the last checkpoint
    (tmp_path / "model.pt").unlink()
    _flip_tensor_bytes(tmp_path / "checkpoint.pt")
    torch.load(tmp_path / "checkpoint.pt", weights_only=True)  # torch itself does not notice
    with pytest.raises(CheckpointError, match="damaged.*checksum"):
        train_run(config, tmp_path, device="cpu", progress=False, checkpoint_every=5)
    assert not (tmp_path / "results.json").exists()


def test_fit_resumes_from_its_checkpoint_to_identical_weights(tmp_path):
    task = HopTask(seq_len=12, max_hops=2)
    cfg = _cfg()
    torch.manual_seed(0)
    ref = gpt_for_task(task, depth=2, d_model=16, heads=2, dropout=0.1)
    init = {k: v.clone() for k, v in ref.state_dict().items()}
    ref_hist = fit(ref, task, cfg, device="cpu", progress=False)

    def make():
        m = gpt_for_task(task, depth=2, d_model=16, heads=2, dropout=0.1)
        m.load_state_dict(init)
        return m

    resumed, hist = _fit_interrupted_then_resumed(make, task, tmp_path / "ck.pt", stop_at=23, config=cfg,
                                                  checkpoint_every=10)
    assert hist["loss"] == ref_hist["loss"]
    for p, q in zip(resumed.parameters(), ref.parameters(), strict=True):
        assert torch.equal(p, q)
    with pytest.raises(CheckpointError, match="different run"):
        fit(resumed, task, _cfg(lr=1e-3), checkpoint=tmp_path / "ck.pt", device="cpu", progress=False)


def test_resume_removes_leftover_temporary_checkpoint_files(tmp_path):
    # a kill during an atomic write leaves an empty .checkpoint.pt.<random>.tmp behind
    task = HopTask(seq_len=12, max_hops=2)
    ck = tmp_path / "checkpoint.pt"
    fit(gpt_for_task(task, depth=1, d_model=16, heads=2), task, _cfg(steps=4), checkpoint=ck, device="cpu",
        progress=False)
    leftovers = [tmp_path / ".checkpoint.pt.k1ll3d.tmp", tmp_path / ".checkpoint.pt.x_y.tmp"]
    for p in leftovers:
        p.write_bytes(b"")
    other = tmp_path / ".other.pt.abc.tmp"
    other.write_bytes(b"")
    fit(gpt_for_task(task, depth=1, d_model=16, heads=2), task, _cfg(steps=4), checkpoint=ck, device="cpu",
        progress=False)
    assert not any(p.exists() for p in leftovers) and other.exists() and ck.exists()


def test_a_diverging_fit_raises_and_keeps_the_last_finite_checkpoint(tmp_path):
    task = HopTask(seq_len=12, max_hops=2)
    model = gpt_for_task(task, depth=1, d_model=16, heads=2)
    ck = tmp_path / "ck.pt"
    with pytest.raises(DivergedError, match="diverged.*lower the learning rate") as info:
        fit(model, task, _cfg(steps=50, lr=1e30, warmup_steps=0), checkpoint=ck, checkpoint_every=1,
            device="cpu", progress=False)
    losses = info.value.history["loss"]
    assert not all(v == v and abs(v) != float("inf") for v in losses) and info.value.step == len(losses)
    if ck.exists():  # only finite states are ever saved
        assert load_checkpoint(ck)["step"] < info.value.step


def test_run_config_round_trips_the_stored_runs_and_builds_their_task():
    for folder in ("small", "medium"):  # the cpu grid's runs are stored under medium/
        for path in sorted((ROOT / "results" / "training" / folder).glob("*/results.json")):
            stored = json.loads(path.read_text())["config"]
            config = RunConfig.from_dict(stored)
            assert config.to_dict() == stored, path
            assert RunConfig.from_dict(config.to_dict()) == config
            assert config.task.seq_len == stored["seq_len"] and config.train.steps == stored["steps"]
    c = RunConfig(depth=2, d_model=16, heads=2)
    assert c.train == TrainConfig(steps=100_000) and c.seq_len == 100 and c.max_hops == 16
    assert c.replace(seed=5).train.seed == 5 and c.replace(seed=5).depth == 2
    with pytest.raises(ValueError, match="unknown settings.*colour"):
        RunConfig.from_dict({"depth": 2, "d_model": 16, "heads": 2, "colour": 1})
    with pytest.raises(ValueError, match="multiple of heads"):
        RunConfig(depth=2, d_model=16, heads=3)


# --------------------------------------------------------------------------- the command line
CLI = ["--depth", "2", "--d-model", "16", "--heads", "2", "--batch-size", "8", "--lr", "3e-3", "--seq-len", "12",
       "--alphabet-size", "4", "--max-hops", "3", "--seed", "3", "--device", "cpu", "--warmup-steps", "10",
       "--dropout", "0.1", "--eval-samples", "20", "--no-progress"]


def _cli(out: Path, *extra: str, wait: bool = True, base: list[str] = CLI):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, str(SCRIPT), *base, "--out", str(out), *extra]
    if wait:
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_cli_writes_results_and_skips_a_finished_run(tmp_path):
    out = tmp_path / "run"
    r = _cli(out, "--steps", "40", "--checkpoint-every", "15")
    assert r.returncode == 0, r.stderr
    res = json.loads((out / "results.json").read_text())
    assert res["complete"] is True
    assert set(res["per_k_error"]) == {"0", "1", "2", "3"} and set(res["per_k_error_pooled"]) == {"0", "1", "2", "3"}
    assert all(0.0 <= v <= 1.0 for v in res["per_k_error"].values())
    assert res["config"]["depth"] == 2 and res["config"]["n_train"] is None
    assert RunConfig.from_dict(res["config"]).to_dict() == res["config"]
    prov = res["provenance"]
    assert prov["steps_done"] == 40 and prov["device"] == "cpu"
    assert {"hoplib_version", "git_commit", "torch_version", "wall_time_s"} <= set(prov)
    r2 = _cli(out, "--steps", "40", "--checkpoint-every", "15")
    assert r2.returncode == 0 and "nothing to do" in r2.stdout


def test_cli_refuses_to_overwrite_a_stored_run_of_another_configuration(tmp_path):
    # training another configuration into a finished run's folder is refused; the run is kept
    stored = ROOT / "results" / "training" / "small" / "L2_m16_H1_ninf_s0"
    out = tmp_path / "L2_m16_H1_ninf_s0"
    shutil.copytree(stored, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    r = _cli(out, "--steps", "6")
    line = _one_line(r.stderr)
    assert r.returncode == 2 and str(out) in line and "another configuration" in line
    assert "steps: stored 2000 vs now 6" in line and "d_model: stored 16 vs now 16" not in line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # the stored configuration itself: nothing to do, nothing written
    argv = config_argv(RunConfig.from_dict(json.loads((out / "results.json").read_text())["config"]))
    r = _cli(out, "--device", "cpu", "--no-progress", base=argv)
    assert r.returncode == 0 and "nothing to do" in r.stdout, r.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    r = _cli(out, "--steps", "6", "--overwrite")
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "results.json").read_text())["config"]["steps"] == 6


def test_train_run_refuses_a_folder_with_a_model_of_unknown_origin(tmp_path):
    (tmp_path / "model.pt").write_bytes(b"weights of some other run")
    with pytest.raises(RunConflictError, match="model.pt"):
        train_run(_tiny_run(), tmp_path, device="cpu", progress=False)


def test_cli_stops_a_diverging_run_with_one_line_and_records_it(tmp_path):
    # --lr 1e30 --warmup-steps 0 diverges: exit status 1, one line, recorded as diverged and not complete
    out = tmp_path / "run"
    r = _cli(out, "--steps", "30", "--lr", "1e30", "--warmup-steps", "0", "--checkpoint-every", "5")
    line = _one_line(r.stderr)
    assert r.returncode == 1 and "diverged" in line
    rec = json.loads((out / "results.json").read_text())
    assert rec["complete"] is False and rec["diverged"] is True and "per_k_error" not in rec
    assert not (out / "model.pt").exists()
    r = _cli(out, "--steps", "30", "--lr", "1e30", "--warmup-steps", "0", "--checkpoint-every", "5")
    assert r.returncode == 1 and "nothing to do" in _one_line(r.stderr)


def test_cli_rejects_an_output_path_that_is_a_file_before_training(tmp_path):
    # --out pointing at a file is one error line before training, not an OSError traceback after it
    target = tmp_path / "a_file"
    target.write_text("x")
    r = _cli(target, "--steps", "5")
    assert r.returncode == 2 and "cannot write to the output folder" in _one_line(r.stderr)


@pytest.mark.parametrize("extra, message", [
    (["--steps", "0"], "steps"), (["--seed", "500"], "seed"), (["--heads", "3"], "multiple of heads"),
    (["--n-train", "4"], "n_train"),
])
def test_cli_reports_every_bad_argument_in_one_line_before_any_work(tmp_path, monkeypatch, capsys, extra,
                                                                    message):
    monkeypatch.setattr("hoplib.train.fit", lambda *a, **k: pytest.fail("training started"))
    out = tmp_path / "run"
    code = _script().cli([*CLI, "--steps", "5", "--out", str(out), *extra])
    line = _one_line(capsys.readouterr().err)
    assert code == 2 and message in line
    assert not (out / "checkpoint.pt").exists()


def test_cli_reports_unusable_output_folders_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("hoplib.train.fit", lambda *a, **k: pytest.fail("training started"))
    cli = _script().cli
    (tmp_path / "f").write_text("x")
    assert cli([*CLI, "--steps", "5", "--out", str(tmp_path / "f" / "sub")]) == 2
    assert "cannot write to the output folder" in _one_line(capsys.readouterr().err)
    if os.geteuid() == 0:
        pytest.skip("root may write into a read-only folder")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        assert cli([*CLI, "--steps", "5", "--out", str(locked)]) == 2
        assert "cannot write to the output folder" in _one_line(capsys.readouterr().err)
    finally:
        locked.chmod(0o700)


@pytest.mark.slow
def test_cli_gives_clear_errors_for_corrupt_and_mismatched_checkpoints(tmp_path):
    out = tmp_path / "run"
    assert _cli(out, "--steps", "10", "--checkpoint-every", "5").returncode == 0
    (out / "results.json").unlink()
    (out / "model.pt").unlink()
    r = _cli(out, "--steps", "10", "--checkpoint-every", "5", "--n-train", "64")
    assert r.returncode == 2 and "belongs to a different run" in _one_line(r.stderr)
    (out / "checkpoint.pt").write_bytes(b"\x00garbage")
    r = _cli(out, "--steps", "10", "--checkpoint-every", "5")
    assert r.returncode == 2 and "corrupt or unreadable" in _one_line(r.stderr)


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
    (run / ".checkpoint.pt.interrupted.tmp").write_bytes(b"")  # what a kill inside a save leaves
    r = _cli(run, "--steps", str(steps), *args)
    assert r.returncode == 0, r.stderr
    assert not list(run.glob(".*.tmp"))
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


# --------------------------------------------------------------------------- interrupted runs, compile
class _Interrupt(Exception):
    pass


def _fit_interrupted_then_resumed(make, task, ck, stop_at, config, **kw):
    """Run fit until the batch of step ``stop_at`` raises (a crash), then call fit again on the checkpoint."""
    original = DataStream.batch

    def failing(self, step):
        if step == stop_at:
            raise _Interrupt
        return original(self, step)

    kw = dict(kw, device="cpu", progress=False)
    DataStream.batch = failing
    try:
        with pytest.raises(_Interrupt):
            fit(make(), task, config, checkpoint=ck, **kw)
    finally:
        DataStream.batch = original
    assert torch.load(ck, weights_only=True)["step"] < stop_at + 1
    resumed = make()
    return resumed, fit(resumed, task, config, checkpoint=ck, **kw)


@pytest.mark.slow
def test_fit_compiled_on_cpu_matches_eager_and_resumes_with_plain_state_dict_keys(tmp_path):
    task = HopTask(seq_len=12, max_hops=2)
    cfg = _cfg(steps=10, warmup_steps=2)
    torch.manual_seed(0)
    init = gpt_for_task(task, depth=2, d_model=16, heads=2).state_dict()

    def make():
        m = gpt_for_task(task, depth=2, d_model=16, heads=2)
        m.load_state_dict(init)
        return m

    eager, compiled = make(), make()
    h_eager = fit(eager, task, cfg, device="cpu", progress=False)
    h_comp = fit(compiled, task, cfg, compile=True, checkpoint=tmp_path / "ref.pt", checkpoint_every=5,
                 device="cpu", progress=False)
    assert h_comp["loss"] == pytest.approx(h_eager["loss"], abs=1e-5)
    for p, q in zip(compiled.parameters(), eager.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-5)
    keys = set(torch.load(tmp_path / "ref.pt", weights_only=True)["model"])
    assert keys == set(init) and not any(k.startswith("_orig_mod.") for k in keys)
    resumed, hist = _fit_interrupted_then_resumed(make, task, tmp_path / "ck.pt", stop_at=7, config=cfg,
                                                  compile=True, checkpoint_every=5)
    # A resumed compiled run recompiles; inductor's CPU kernels may then round a reduction differently (seen
    # with 2 threads), so this is equality to float tolerance. Bit-identical resume is tested eager.
    assert hist["loss"] == pytest.approx(h_comp["loss"], abs=1e-5)
    for p, q in zip(resumed.parameters(), compiled.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-5), (p - q).abs().max()  # seen: up to 1.3e-6


def test_the_final_evaluation_predicts_once_per_k_for_both_metrics(tmp_path, monkeypatch):
    import hoplib.evaluate as evaluate
    from hoplib.train import per_k_error, train_run

    config = _tiny_run(steps=3)
    calls = []
    real = evaluate.predictions
    monkeypatch.setattr(evaluate, "predictions", lambda *a, **k: calls.append(1) or real(*a, **k))
    record = train_run(config, tmp_path, device="cpu", progress=False)
    n_k = config.max_hops - config.task.min_hops + 1
    assert len(calls) == n_k  # one pass gives the paper and the pooled metric
    model = config.init_model("cpu")
    model.load_state_dict(torch.load(tmp_path / "model.pt", weights_only=True))
    for name, metric in (("per_k_error", "paper"), ("per_k_error_pooled", "pooled")):
        again = per_k_error(model, config.task, n_samples=config.train.eval_samples, metric=metric)
        assert record[name] == {str(k): v for k, v in again.items()}
