"""Faults an outside prober found (one class per section): a path out of --out, lock races and foreign locks,
stale partial files, NaN and hand edits read as data, construction inputs, command-line faults, tracebacks.
Each test fails on the code before the fix."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import pytest
import torch
from _scripts import load_script

from hoplib import grids, report
from hoplib import results as store
from hoplib._book.notebook import ChapterRun
from hoplib.construction import count_errors, hop_transformer
from hoplib.results import LockedError, check_writable, exclusive, load_stored, save_results, take_lock
from hoplib.sweep import run_sweep, slurm_executor
from hoplib.tasks import HopTask
from hoplib.train import RunConfig, TrainConfig, train_run

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--depth", "1", "--d-model", "16", "--heads", "2", "--seq-len", "8", "--max-hops", "1", "--steps", "4",
        "--warmup-steps", "1", "--no-progress", "--eval-samples", "4"]


def _one_line(err: str) -> bool:
    return len(err.strip().splitlines()) == 1 and "Traceback" not in err


def _release(held) -> None:  # a lock of this code (an object) or of the code before (a PID file's path)
    held.release() if hasattr(held, "release") else Path(held).unlink(missing_ok=True)


# --------------------------------------------------------------------------- 1. a parameter never leaves --out
class TestNoPathLeavesTheOutputFolder:
    def test_an_empty_out_is_refused_before_anything_is_written(self, tmp_path, monkeypatch, capsys):
        monkeypatch.chdir(tmp_path)  # Path("") is the working folder: the repository root, for the prober
        rt = load_script("run_training")
        assert rt.cli([*TINY, "--checkpoint-every", "2", "--out", ""]) == 2
        construction = load_script("run_construction")
        argv = ["precision", "--ns", "16", "--total-letters", "64", "--out", ""]
        assert load_script("cli").run_cli(construction.main, argv) == 2
        assert all(_one_line(line) for line in capsys.readouterr().err.strip().split("\n"))
        assert list(tmp_path.iterdir()) == []

    def test_library_outputs_refuse_an_empty_path(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        config = RunConfig(depth=1, d_model=16, heads=2, seq_len=8, max_hops=1,
                           train=TrainConfig(steps=2, warmup_steps=1, eval_samples=4))
        for call in (lambda: train_run(config, "", device="cpu", progress=False), lambda: check_writable(""),
                     lambda: grids.train_grid("quick", "", progress=False)):
            with pytest.raises(ValueError, match="must name a file or folder"):
                call()
        assert list(tmp_path.iterdir()) == []

    def test_a_chapter_results_name_cannot_lead_out_of_its_folder(self, tmp_path):
        run = ChapterRun("hop_task", "quick", torch.device("cpu"), 0, {}, tmp_path / "runs" / "hop_task" / "quick")
        for name in ("../../../escaped", "/tmp/escaped", "a/b", ""):
            with pytest.raises(ValueError, match="plain name"):
                run.save(name, {"x": 1})
        assert not list(tmp_path.rglob("*.json"))
        assert run.save("ok", {"x": 1}).parent == tmp_path / "runs" / "hop_task" / "quick"


# --------------------------------------------------------------------------- 2. one lock, atomic, host-aware
def _dies_holding(lock: str) -> None:  # a run killed while it holds the lock: the file stays, its owner is gone
    take_lock(lock, "out")
    os._exit(0)


def _race(lock: str, barrier, outcomes) -> None:
    real = store._alive

    def slow_alive(*args, **kwargs):  # a process that is slow inside the liveness check
        time.sleep(0.05)
        return real(*args, **kwargs)

    store._alive = slow_alive
    barrier.wait()
    try:
        held = take_lock(lock, "out")
    except LockedError:
        held = None
    outcomes.put(held is not None)
    barrier.wait()  # every process has tried before the winner lets go
    if held is not None:
        _release(held)


class TestOneLockHeldByOneProcess:
    def test_a_stale_lock_raced_by_four_reruns_is_taken_by_exactly_one(self, tmp_path):
        ctx = multiprocessing.get_context("fork")
        lock, winners = str(tmp_path / ".out.lock"), []
        for _ in range(16):
            dead = ctx.Process(target=_dies_holding, args=(lock,))
            dead.start()
            dead.join()
            assert Path(lock).exists()  # left behind by a process that is gone
            barrier, outcomes = ctx.Barrier(4, timeout=120), ctx.Queue()
            racers = [ctx.Process(target=_race, args=(lock, barrier, outcomes)) for _ in range(4)]
            for p in racers:
                p.start()
            got = [outcomes.get(timeout=120) for _ in racers]
            for p in racers:
                p.join()
            winners.append(sum(got))
        assert winners == [1] * 16

    def test_a_lock_of_a_process_on_another_host_is_refused_naming_host_and_pid(self, tmp_path):
        lock = tmp_path / ".sweep.json.lock"
        foreign = json.dumps({"host": "node-elsewhere", "boot_id": "another-kernel", "pid": 4242,
                              "started": time.time()})
        lock.write_text(foreign)
        with pytest.raises(LockedError) as info:
            run_sweep(_square, [1, 2], tmp_path / "sweep.json", {"p": 1})
        message = str(info.value)
        assert "node-elsewhere" in message and "4242" in message and "\n" not in message
        assert lock.read_text() == foreign and not (tmp_path / "sweep.json").exists()

    def test_a_live_holder_whose_pid_this_process_cannot_see_is_refused(self, tmp_path):
        """A process of another PID namespace (a container on this machine): its PID means nothing here."""
        lock = tmp_path / ".lock"
        holder = subprocess.Popen([sys.executable, "-c", "import sys; from hoplib.results import take_lock; "
                                   f"held = take_lock({str(lock)!r}, 'out'); print('held', flush=True); "
                                   "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "held"
            gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                                  text=True, check=True).stdout.strip()
            lock.write_text(gone)  # what the holder's PID looks like from another namespace: no such process
            with pytest.raises(LockedError):
                take_lock(lock, "out")
        finally:
            holder.kill()
            holder.wait()

    def test_the_lock_records_host_pid_and_start_time(self, tmp_path):
        import socket

        with exclusive(tmp_path / "x.json"):
            record = json.loads((tmp_path / ".x.json.lock").read_text())
        assert record["host"] == socket.gethostname() and record["pid"] == os.getpid()
        assert isinstance(record["started"], float) and record["started"] <= time.time()
        assert not (tmp_path / ".x.json.lock").exists()


# --------------------------------------------------------------------------- 3. stale partial files
def _square(_: int, x: int) -> int:
    return x * x


def _counted(_: int, point: dict) -> int:
    """Counts its calls in ``point["dir"]``; fails for a point marked ``fail`` while ``fail`` exists there."""
    calls = Path(point["dir"]) / f"calls{point['x']}"
    calls.write_text(str(int(calls.read_text()) + 1 if calls.exists() else 1))
    if point.get("fail") and (Path(point["dir"]) / "fail").exists():
        raise RuntimeError("stopped")
    return point["x"] * 10


class TestStalePartialsAreNotReused:
    def _stopped_after_one(self, tmp_path: Path) -> tuple[list[dict], Path]:
        (tmp_path / "fail").write_text("")
        points = [{"dir": str(tmp_path), "x": 1}, {"dir": str(tmp_path), "x": 2, "fail": True}]
        with pytest.raises(RuntimeError, match="stopped"):
            run_sweep(_counted, points, tmp_path / "sweep.json", {"p": 1})
        (tmp_path / "fail").unlink()
        assert (tmp_path / "sweep.partial.json").exists()
        return points, tmp_path / "sweep.json"

    def test_overwrite_starts_afresh_even_from_a_partial_of_the_same_settings(self, tmp_path):
        points, path = self._stopped_after_one(tmp_path)
        assert run_sweep(_counted, points, path, {"p": 1}, overwrite=True) == [10, 20]
        assert (tmp_path / "calls1").read_text() == "2"  # point 1 ran again, its old result was not reused

    def test_a_partial_of_another_commit_is_refused_then_discarded_with_overwrite(self, tmp_path):
        points, path = self._stopped_after_one(tmp_path)
        partial = tmp_path / "sweep.partial.json"
        record = json.loads(partial.read_text())
        record["provenance"]["git_commit"] = "0" * 40  # left by an older version of the code
        partial.write_text(json.dumps(record))
        with pytest.raises(ValueError, match=r"made by commit 0{40}, not by this code .*--overwrite"):
            run_sweep(_counted, points, path, {"p": 1})
        assert run_sweep(_counted, points, path, {"p": 1}, overwrite=True) == [10, 20]
        assert (tmp_path / "calls1").read_text() == "2"

    def test_scores_of_a_retrained_run_are_computed_again_on_resume(self, tmp_path, monkeypatch):
        import hashlib

        score_runs = load_script("score_runs")
        base = dict(depth=1, d_model=16, heads=2, seq_len=12, max_hops=3, lr=3e-3, warmup_steps=2, batch_size=8,
                    eval_samples=10, seed=1)
        for depth in (1, 2):
            train_run(RunConfig.from_dict({**base, "depth": depth, "steps": 5}), tmp_path / "sweep" / f"L{depth}",
                      device="cpu", progress=False)
        real, out = score_runs.score_run, tmp_path / "scores.json"

        def stops_at_l2(i, run, *, folder):
            if run == "L2":
                raise KeyboardInterrupt  # the scoring is stopped after L1
            return real(i, run, folder=folder)

        monkeypatch.setattr(score_runs, "score_run", stops_at_l2)
        with pytest.raises(KeyboardInterrupt):
            score_runs.main([str(tmp_path / "sweep"), "--out", str(out)])
        monkeypatch.setattr(score_runs, "score_run", real)
        retrained = RunConfig.from_dict({**base, "depth": 1, "steps": 40, "lr": 1e-2})  # L1's folder, retrained
        train_run(retrained, tmp_path / "sweep" / "L1", device="cpu", progress=False, overwrite=True)
        score_runs.main([str(tmp_path / "sweep"), "--out", str(out)])
        stored = json.loads((tmp_path / "sweep" / "L1" / "results.json").read_text())["per_k_error"]
        sha = hashlib.sha256((tmp_path / "sweep" / "L1" / "model.pt").read_bytes()).hexdigest()
        rows = [r for r in json.loads(out.read_text())["data"] if r["run"] == "L1"]
        assert rows and all(r["model_sha256"] == sha for r in rows)
        assert all(sum(r["errors"]) / 10 == pytest.approx(stored[str(r["k"])], abs=1e-6) for r in rows)


# --------------------------------------------------------------------------- 4. NaN and hand edits are not data
def _stored(tmp_path: Path, record: dict | str, name: str = "x.json") -> str:
    text = record if isinstance(record, str) else json.dumps({"provenance": {}, **record})
    (tmp_path / name).write_text(text)
    return name


class TestTheStoreReadsOnlyWhatItWrites:
    def test_nan_and_infinity_are_refused(self, tmp_path):
        for const in ("NaN", "Infinity", "-Infinity"):
            name = _stored(tmp_path, '{"provenance": {}, "data": [{"k": 1, "error": ' + const + "}]}")
            with pytest.raises(ValueError, match=f"not strict JSON: {const}"):
                load_stored(name, root=tmp_path)

    def test_fields_of_the_wrong_type_are_refused_naming_the_field(self, tmp_path):
        cases = {"data[0].depth": {"data": [{"depth": "1", "k": 1, "error": 0.1}]},
                 "data[0].error": {"data": [{"depth": 1, "k": 1, "error": 1.5}]},
                 "per_k_error[2]": {"per_k_error": {"1": 0.0, "2": "0.3"}},
                 "config.depth": {"config": {"depth": True}}}
        for field, record in cases.items():
            with pytest.raises(ValueError, match=re.escape(f"results/x.json: {field} must be")):
                load_stored(_stored(tmp_path, record), root=tmp_path)
        diverged = {"config": {"depth": 2}, "error": "training diverged: the loss is nan at step 3"}
        assert load_stored(_stored(tmp_path, diverged), root=tmp_path).record["error"].startswith("training")

    def test_an_unfinished_sweep_is_read_only_when_asked_for(self, tmp_path):
        name = _stored(tmp_path, {"parameters": {"p": 1, "complete": False}, "data": []})
        with pytest.raises(ValueError, match="unfinished sweep .* partial=True"):
            load_stored(name, root=tmp_path)
        assert load_stored(name, root=tmp_path, partial=True).data == []
        partial = _stored(tmp_path, {"parameters": {"complete": False}, "data": {}}, "s.partial.json")
        assert load_stored(partial, root=tmp_path).data == {}  # a partial file, asked for by its name

    def test_crossing_k_refuses_a_non_finite_error(self):
        with pytest.raises(ValueError, match="error at k = 2 is nan"):
            report.crossing_k({1: 0.0, 2: math.nan, 3: 0.9})
        assert report.crossing_k({1: 0.0, 2: 0.05, 3: 0.25}) == (2.25, False)

    def test_a_nan_in_a_stored_run_is_no_headline_crossing(self, tmp_path, monkeypatch):
        results = ROOT / "results"
        (tmp_path / "training" / "depth").mkdir(parents=True)
        (tmp_path / "released").symlink_to(results / "released")
        (tmp_path / "training" / "authors-errors.json").symlink_to(results / "training" / "authors-errors.json")
        runs = sorted((results / "training" / "depth").glob("*/results.json"))
        for f in runs:
            (tmp_path / "training" / "depth" / f.parent.name).mkdir()
            (tmp_path / "training" / "depth" / f.parent.name / "results.json").symlink_to(f)
        hit = tmp_path / "training" / "depth" / runs[0].parent.name / "results.json"
        record = json.loads(hit.read_text())
        record["per_k_error"]["2"] = math.nan  # a hand edit, or a reader's bug
        hit.unlink()
        hit.write_text(json.dumps(record))
        monkeypatch.setenv("HOPLIB_RESULTS", str(tmp_path))
        with pytest.raises(ValueError, match=f"{runs[0].parent.name}/results.json is not strict JSON"):
            grids.growth_points("depth")

    def test_collect_refuses_a_depth_that_is_a_string(self, tmp_path):
        run = tmp_path / "L1_m16_H2_ninf_s0"
        run.mkdir()
        config = RunConfig(depth=1, d_model=16, heads=2, seq_len=8, max_hops=1,
                           train=TrainConfig(steps=2, warmup_steps=1)).to_dict()
        errors = {"1": 0.5}
        (run / "results.json").write_text(json.dumps({"config": {**config, "depth": "1"}, "complete": True,
                                                      "per_k_error": errors, "per_k_error_pooled": errors}))
        with pytest.raises(ValueError, match=r"results.json: config.depth must be an integer, got '1'"):
            grids.collect(tmp_path)


# --------------------------------------------------------------------------- 5. construction inputs
class TestTheConstructionRefusesInputsItIsNotExactOn:
    def test_an_inverse_temperature_that_overflows_is_refused(self):
        with pytest.raises(ValueError, match="inverse_temperature 1e.38 overflows torch.float32"):
            hop_transformer(2, 64, 8, inverse_temperature=1e38)
        x = HopTask(seq_len=64, alphabet_size=8).letters(8, torch.Generator().manual_seed(0), torch.device("cpu"))
        for dtype in (torch.float32, torch.float64):
            model = hop_transformer(2, 64, 8, dtype=dtype)
            model.inverse_temperature = model.max_inverse_temperature  # the largest it allows is still exact
            assert count_errors(model, x) == 0
            with pytest.raises(ValueError, match="overflows"):
                model.inverse_temperature = model.max_inverse_temperature * 4

    def test_predict_refuses_float_letters(self):
        model = hop_transformer(1, 8, 4)
        for bad in (torch.tensor([[0.7, 2.9, 1.0]]), torch.tensor([[True, False]])):
            with pytest.raises(ValueError, match="integer letter ids"):
                model.predict(bad)
        assert model.predict(torch.tensor([[0, 2, 0]])).tolist() == [[-1, -1, 2]]


# --------------------------------------------------------------------------- 6. command-line faults
class TestCommandLineFaults:
    def test_checkpoint_every_zero_is_one_line(self, tmp_path, capsys):
        assert load_script("run_training").cli([*TINY, "--checkpoint-every", "0", "--out", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err
        assert _one_line(err) and "--checkpoint-every" in err and "at least 1" in err
        assert not (tmp_path / "r").exists()

    def test_settings_a_grid_would_ignore_are_refused(self, tmp_path, monkeypatch, capsys):
        rt = load_script("run_training")
        monkeypatch.setattr(rt.grids, "train_grid", lambda *a, **k: pytest.fail("the grid started"))
        for extra in (["--steps", "0"], ["--steps", "50"], ["--lr", "1e-2"], ["--seed", "3"]):
            argv = ["--grid", "quick", "--no-progress", *extra, "--out", str(tmp_path / "g")]
            assert rt.cli(argv) == 2
            err = capsys.readouterr().err
            assert _one_line(err) and extra[0] in err and "single run" in err

    def test_steps_zero_is_refused_not_read_as_unset(self, tmp_path, monkeypatch, capsys):
        ea = load_script("run_efficient_attention")

        def forbidden(*args, **kwargs):
            raise AssertionError("the sweep started")

        monkeypatch.setattr(ea, "run_part", forbidden)
        argv = ["--part", "alphabet", "--steps", "0", "--out", str(tmp_path)]
        assert load_script("cli").run_cli(ea.main, argv) == 2
        assert "--steps: must be at least 1" in capsys.readouterr().err

    def test_slurm_without_slurm_is_refused_not_run_locally(self, tmp_path, monkeypatch, capsys):
        monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch
        with pytest.raises(ValueError, match="Slurm is not available|needs the submitit package"):
            slurm_executor(tmp_path / "logs")
        with pytest.raises(ValueError, match="Slurm is not available|needs the submitit package"):
            load_script("cli").executor_from_args(Namespace(slurm=str(tmp_path / "logs"), partition=None))
        argv = [*TINY, "--slurm", "logs", "--out", str(tmp_path / "o")]  # one run: no job array to submit
        assert load_script("cli").run_cli(load_script("run_training").main, argv) == 2
        assert "--slurm: for the runs of a grid" in capsys.readouterr().err
        assert not (tmp_path / "o").exists()

    @pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux)")
    def test_workers_die_with_a_killed_sweep(self, tmp_path):
        (tmp_path / "slowjob.py").write_text("import os, time\nfrom pathlib import Path\n\n"
                                             "def job(i, folder):\n"
                                             "    Path(folder, f'worker-{os.getpid()}').write_text('')\n"
                                             "    time.sleep(600)\n")
        driver = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import slowjob\n"
                  f"from hoplib.sweep import map_points\n"
                  f"map_points(slowjob.job, [{str(tmp_path)!r}] * 2, workers=2)\n")
        parent = subprocess.Popen([sys.executable, "-c", driver], env={**os.environ, "OMP_NUM_THREADS": "1"},
                                  stderr=subprocess.DEVNULL)  # its resource tracker's note on the killed pool
        pids: list[int] = []
        try:
            for _ in range(2400):  # the workers start (each imports torch)
                pids = [int(p.name.split("-")[1]) for p in tmp_path.glob("worker-*")]
                if len(pids) == 2 or parent.poll() is not None:
                    break
                time.sleep(0.1)
            assert len(pids) == 2, "the workers did not start"
            parent.send_signal(signal.SIGKILL)
            parent.wait()
            for _ in range(200):  # a watchdog polls twice a second
                if not [p for p in pids if _running(p)]:
                    break
                time.sleep(0.1)
            assert [p for p in pids if _running(p)] == []
        finally:
            parent.kill()
            for p in pids:
                if _running(p):
                    os.kill(p, signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has ended: only its exit status waits to be collected


# --------------------------------------------------------------------------- 7. one line, not a traceback
class TestOneLineNotATraceback:
    def test_score_runs_on_a_malformed_run_record(self, tmp_path, capsys):
        (tmp_path / "sweep" / "L1").mkdir(parents=True)
        (tmp_path / "sweep" / "L1" / "results.json").write_text("[1, 2]")
        argv = [str(tmp_path / "sweep"), "--out", str(tmp_path / "scores.json")]
        assert load_script("cli").run_cli(load_script("score_runs").main, argv) == 2
        err = capsys.readouterr().err
        assert _one_line(err) and "L1/results.json is not a run record" in err

    def test_a_stored_result_that_is_a_folder(self, tmp_path):
        (tmp_path / "x.json").mkdir()
        with pytest.raises(ValueError, match="results/x.json is a folder"):
            load_stored("x.json", root=tmp_path)


def test_save_results_then_load_stored_round_trips(tmp_path):  # what the store writes, it reads
    save_results(tmp_path / "r.json", [{"depth": 2, "k": 3, "error": 0.25}], {"p": 1}, "cpu")
    assert load_stored("r.json", root=tmp_path).data == [{"depth": 2, "k": 3, "error": 0.25}]
