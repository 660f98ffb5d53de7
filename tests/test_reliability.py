"""Silent wrong results and data-loss paths found by probing the tools, one class per kind: each test
fails on the code before the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from _scripts import load_script as _script

from hoplib import report, train
from hoplib.evaluate import per_k_error
from hoplib.lower_bounds import communication, gnn, graphs
from hoplib.models import GPT, GPTConfig
from hoplib.results import atomic_write_text, load_stored, save_results
from hoplib.tasks import HopTask, hop
from hoplib.train import RunConfig, RunConflictError, TrainConfig, finished_results, read_record, train_run

ROOT = Path(__file__).resolve().parent.parent
TINY = dict(depth=1, d_model=16, heads=2, seq_len=8, max_hops=1)


def _tiny(**train_kw) -> RunConfig:
    return RunConfig(**TINY, train=TrainConfig(**{"steps": 4, "warmup_steps": 1, "eval_samples": 4, **train_kw}))


def _strict_json(path: Path) -> dict:
    def refuse(const: str) -> None:
        raise ValueError(f"{path} holds {const}, which is not JSON")
    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)




# --------------------------------------------------------------------------- 1. "complete" must be a boolean
class TestCompleteIsTheBooleanTrueOnly:
    def test_load_stored_refuses_a_string_complete(self, tmp_path):
        (tmp_path / "run.json").write_text(json.dumps({"provenance": {}, "complete": "false"}))
        with pytest.raises(ValueError, match="'complete' must be true or false, got 'false'"):
            load_stored("run.json", root=tmp_path)
        (tmp_path / "ok.json").write_text(json.dumps({"provenance": {}, "complete": False}))
        assert load_stored("ok.json", root=tmp_path).record["complete"] is False

    def test_a_string_false_run_record_is_not_a_finished_run(self, tmp_path):
        config = _tiny()
        (tmp_path / "results.json").write_text(json.dumps({"config": config.to_dict(), "complete": "false"}))
        with pytest.raises(ValueError, match="'complete' must be true or false"):
            finished_results(tmp_path, config)
        with pytest.raises(ValueError, match="'complete' must be true or false"):
            read_record(tmp_path / "results.json")


# --------------------------------------------------------------------------- 2. a missing k is not solved
class TestAMissingKIsNotSolved:
    def test_largest_solved_stops_at_the_first_missing_k(self):
        assert report.largest_solved({3: {1: 0.0, 2: 0.0, 4: 0.0}}) == {3: 2}
        assert report.largest_solved({3: {0: 0.0, 2: 0.0}}) == {3: 0}

    def test_crossing_k_stops_at_the_first_missing_k(self):
        assert report.crossing_k({1: 0.0, 2: 0.0, 4: 0.0}) == (2.0, True)
        assert report.crossing_k({1: 0.0, 2: 0.05, 3: 0.25}) == (2.25, False)  # no gap: unchanged


# --------------------------------------------------------------------------- 3. results files are strict JSON
class TestResultsAreStrictJson:
    def test_save_results_refuses_nan_and_writes_nothing(self, tmp_path):
        with pytest.raises(ValueError, match="cannot store .*x.json"):
            save_results(tmp_path / "x.json", {"error": float("nan")}, {}, "cpu")
        assert not (tmp_path / "x.json").exists()

    def test_a_task_without_letter_targets_is_refused_before_training(self, tmp_path):
        config = RunConfig(**{**TINY, "seq_len": 4}, train=TrainConfig(steps=4, warmup_steps=1, eval_samples=4))
        with pytest.raises(ValueError, match="no letter target at k = 1"):
            train_run(config, tmp_path / "run", device="cpu", progress=False)
        assert not (tmp_path / "run").exists()

    def test_a_diverged_run_is_recorded_in_strict_json(self, tmp_path):
        with pytest.raises(train.DivergedError):
            train_run(_tiny(lr=1e30, warmup_steps=0), tmp_path, device="cpu", progress=False)
        rec = _strict_json(tmp_path / "results.json")
        assert rec["diverged"] is True and rec["complete"] is False and "nan" in rec["error"].lower()


# --------------------------------------------------------------------------- 4. evaluation of a broken model
class TestEvaluationRefusesNonFiniteWeights:
    def test_per_k_error_refuses_a_model_with_nan_weights(self):
        task = HopTask(seq_len=8, max_hops=1)
        model = GPT(GPTConfig(vocab_size=task.vocab_size, n_positions=task.length, depth=1, d_model=16, heads=2))
        with torch.no_grad():
            next(model.parameters()).fill_(float("nan"))
        with pytest.raises(ValueError, match="non-finite"):
            per_k_error(model, task, n_samples=4, device="cpu")


# --------------------------------------------------------------------------- 5. node ids out of range
class TestNodeIdsOutsideTheGraphAreRefused:
    edges = torch.tensor([[[0, 1], [1, -1]], [[0, 1], [1, 2]]])  # graph 0 names node -1

    def test_graph_helpers_refuse_negative_and_too_large_ids(self):
        with pytest.raises(ValueError, match=r"edges must be node ids in \[0, 3\)"):
            graphs.bfs_distances(self.edges, 3, torch.tensor([0, 0]))
        with pytest.raises(ValueError, match=r"edges must be node ids in \[0, 3\)"):
            graphs.adjacency(self.edges + 1, 3)  # id 3 in graph 1
        with pytest.raises(ValueError, match="sources must be node ids"):
            graphs.bfs_distances(self.edges.clamp(min=0), 3, torch.tensor([0, 5]))

    def test_aggregate_does_not_pass_features_between_graphs(self):
        edges = torch.tensor([[[0, 1], [1, 2]], [[0, -1], [1, 2]]])  # graph 1's -1 was graph 0's node 2
        with pytest.raises(ValueError, match=r"edges must be node ids in \[0, 3\)"):
            gnn.aggregate(torch.arange(6.0).reshape(2, 3, 1), edges)


# --------------------------------------------------------------------------- 6. bits must be 0 or 1
class TestBitsAreZeroOrOne:
    def test_non_bits_are_refused(self):
        with pytest.raises(ValueError, match="bits must hold only 0 and 1, got 0.7"):
            communication.bits_to_int([0.7, 1.9, 1])
        with pytest.raises(ValueError, match="bits must hold only 0 and 1, got 2"):
            communication.bits_to_floats([2] * 32, (1,))
        with pytest.raises(ValueError, match="bits must hold only 0 and 1"):
            communication.Blackboard(1).post(1, 1, [0.7])

    def test_real_bits_still_round_trip(self):
        t = torch.randn(3)
        assert torch.equal(communication.bits_to_floats(communication.floats_to_bits(t), (3,)), t)
        assert communication.bits_to_int(communication.int_to_bits(13, 5)) == 13


# --------------------------------------------------------------------------- 7. uint8 255 is a symbol
class TestUint8SymbolsAreLetters:
    def test_uint8_255_is_a_symbol_not_the_no_answer_value(self):
        x = torch.tensor([1, 255, 1], dtype=torch.uint8)  # hop_1 at the end is x[1] = 255
        assert hop(x, 1).tolist() == [-1, -1, 255]
        assert hop(x.numpy(), 1).tolist() == [-1, -1, 255]
        assert HopTask(alphabet_size=300, max_hops=2).decode(np.array([255], np.uint8)) == "<L252>"
        with pytest.raises(ValueError, match="token must be in"):
            HopTask().decode(np.array([255], np.uint8))


# --------------------------------------------------------------------------- 8. file modes follow the umask
class TestAtomicWritesFollowTheUmask:
    def test_atomic_write_gives_the_mode_of_a_plain_open(self, tmp_path):
        old = os.umask(0o022)
        try:
            atomic_write_text(tmp_path / "atomic.json", "{}")
            (tmp_path / "plain.json").write_text("{}")
        finally:
            os.umask(old)
        mode = (tmp_path / "atomic.json").stat().st_mode & 0o777
        assert mode == (tmp_path / "plain.json").stat().st_mode & 0o777 == 0o644


# --------------------------------------------------------------------------- 9. one writer per run folder
class TestOneRunPerFolder:
    def test_a_folder_held_by_a_live_process_is_refused_naming_its_pid(self, tmp_path):
        holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            (tmp_path / ".lock").write_text(str(holder.pid))
            with pytest.raises(RunConflictError, match=f"live process {holder.pid}"):
                train_run(_tiny(), tmp_path, device="cpu", progress=False)
        finally:
            holder.kill()
            holder.wait()
        assert (tmp_path / ".lock").read_text() == str(holder.pid)
        assert not (tmp_path / "results.json").exists()

    def test_a_stale_lock_is_taken_over_and_the_lock_is_gone_after_the_run(self, tmp_path):
        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout.strip()
        (tmp_path / ".lock").write_text(gone)
        assert train_run(_tiny(), tmp_path, device="cpu", progress=False)["complete"] is True
        assert not (tmp_path / ".lock").exists()

    def test_the_lock_is_removed_when_a_run_fails(self, tmp_path, monkeypatch):
        def broken(*args, **kwargs):
            raise RuntimeError("out of memory")

        monkeypatch.setattr(train, "fit", broken)
        with pytest.raises(RuntimeError, match="out of memory"):
            train_run(_tiny(), tmp_path, device="cpu", progress=False)
        assert not (tmp_path / ".lock").exists()


# --------------------------------------------------------------------------- 10. a chapter is a name, not a path
class TestNotebookRunnerStaysInsideOut:
    def test_a_chapter_path_is_refused_and_nothing_is_written_outside_out(self, tmp_path, monkeypatch, capsys):
        sys.path.insert(0, str(ROOT / "scripts"))
        import notebooks

        def forbidden(*args, **kwargs):
            raise AssertionError("a kernel was started for a chapter path")

        monkeypatch.setattr(notebooks, "execute", forbidden)
        code = notebooks.main(["run", "../chapters/hop_task", "--out", str(tmp_path / "runs")])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "chapter must be one of" in err
        assert not (tmp_path / "chapters").exists() and not (ROOT / "chapters" / "hop_task").exists()


# --------------------------------------------------------------------------- 11. construction study sizes
class TestConstructionStudyRefusesEmptySizes:
    def test_non_positive_sizes_are_refused_before_a_file_is_written(self, tmp_path):
        script, out = _script("run_construction"), tmp_path / "precision.json"
        with pytest.raises(ValueError, match="total_letters=0"):
            script.main(["precision", "--ns", "16", "--total-letters", "0", "--out", str(out)])
        with pytest.raises(ValueError, match=r"ns=\[16, -4\]"):
            script.main(["precision", "--ns", "16,-4", "--out", str(out)])
        assert not out.exists()
        out.write_text("kept")
        with pytest.raises(SystemExit, match="exists"):  # and an existing file needs --overwrite
            script.main(["search", "--max-layers", "1", "--out", str(out)])
        assert out.read_text() == "kept"


# --------------------------------------------------------------------------- 12. a missing device, one line
class TestSampleOnAMissingDevice:
    def test_sample_on_a_missing_device_raises_the_library_error(self, monkeypatch):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        with pytest.raises(ValueError, match="device='cuda' was asked for but is not available"):
            HopTask().sample(2, device="cuda")


# --------------------------------------------------------------------------- 13. output faults, before work
SCRIPTS = ROOT / "scripts"
SMALL_SWEEP = ROOT / "results" / "training" / "small"
TRAIN_ARGV = ["--depth", "1", "--d-model", "16", "--heads", "2", "--seq-len", "8", "--max-hops", "1", "--steps", "4",
              "--warmup-steps", "1", "--checkpoint-every", "2", "--no-progress", "--eval-samples", "4"]
FOLDER_OUT = {  # every command whose --out is a folder: the arguments before --out
    "run_training": ["run_training.py", *TRAIN_ARGV],
    "run_training --grid": ["run_training.py", "--grid", "quick", "--no-progress"],
    "run_rnn": ["run_rnn.py", "--part", "training"],
    "run_efficient_attention": ["run_efficient_attention.py", "--part", "matched"],
    "run_gnn": ["run_gnn.py", "--profile", "quick", "--part", "edge"],
    "evaluate_released": ["evaluate_released.py", "--cache-dir", "{tmp}/no-cache"],
    "notebooks run": ["notebooks.py", "run", "hop_task"],
}
FILE_OUT = {  # every command whose --out is a results file
    "run_mpc": ["run_mpc.py", "layer-regime", "--ns", "64", "--deltas", "0.9"],
    "run_construction": ["run_construction.py", "precision", "--ns", "16", "--total-letters", "64"],
    "score_runs": ["score_runs.py", str(SMALL_SWEEP)],
}
_DRIVER = """\
import contextlib, io, json, resource, runpy, sys, traceback
cases, fsize = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.path.insert(0, {scripts!r})
import torch, hoplib.train, hoplib.sweep  # imported before the cap: only the commands' own writes meet it
if fsize is not None:  # Python ignores SIGXFSZ: a write past the cap fails with EFBIG, as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
results = {{}}
for name, argv in cases.items():
    err, code = io.StringIO(), 0
    sys.argv = argv
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else "SystemExit " + str(exc.code)
        except BaseException:
            code = "traceback"
            err.write(traceback.format_exc())
    results[name] = [code, err.getvalue()]
print(json.dumps(results))
"""
AS_READ_ONLY = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
                "--bounding-set=-dac_override,-dac_read_search", "--"]


def _commands(cases: dict[str, list[str]], tmp: Path, out: Path | str) -> dict[str, list[str]]:
    return {name: [str(SCRIPTS / argv[0]), *(a.replace("{tmp}", str(tmp)) for a in argv[1:]),
                   "--out", str(out).replace("{name}", name.replace(" ", "_"))]
            for name, argv in cases.items()}


def _run_commands(cases: dict[str, list[str]], *, fsize: int | None = None, read_only: bool = False,
                  timeout: int = 600) -> dict[str, tuple]:
    """Each command's (exit status, stderr), all run by their ``__main__`` in one child process (one torch
    import), whose files are capped at ``fsize`` bytes (a full disk) or that runs without the capabilities
    that let root write a read-only folder."""
    prefix = AS_READ_ONLY if read_only and os.geteuid() == 0 else []
    proc = subprocess.run([*prefix, sys.executable, "-c", _DRIVER.format(scripts=str(SCRIPTS)), json.dumps(cases),
                           json.dumps(fsize)], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {name: tuple(v) for name, v in json.loads(proc.stdout.splitlines()[-1]).items()}


def _one_line_exit_2(results: dict[str, tuple]) -> None:
    for name, (code, err) in results.items():
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, f"{name}: {code} {err}"


def _read_only_folder(tmp_path: Path) -> Path:
    if os.geteuid() == 0 and subprocess.run([*AS_READ_ONLY, "true"], capture_output=True).returncode != 0:
        pytest.skip("running as root without setpriv: chmod cannot make a folder read-only")
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


class TestOutputFaultsAreOneLineBeforeAnyWork:
    def test_an_out_that_is_a_file_or_inside_one(self, tmp_path):
        afile = tmp_path / "afile"
        afile.write_text("kept")
        results = _run_commands({**_commands(FOLDER_OUT, tmp_path, afile),
                                 **_commands(FILE_OUT, tmp_path, afile / "x.json")})
        _one_line_exit_2(results)
        assert "a file" in results["run_rnn"][1] and afile.read_text() == "kept"

    def test_an_out_that_is_a_folder_where_a_results_file_is_expected(self, tmp_path):
        (tmp_path / "folder").mkdir()
        results = _run_commands(_commands(FILE_OUT, tmp_path, tmp_path / "folder"))
        _one_line_exit_2(results)
        assert all("is a folder" in err for _, err in results.values())

    def test_a_read_only_output_folder(self, tmp_path):
        folder = _read_only_folder(tmp_path)
        results = _run_commands({**_commands(FOLDER_OUT, tmp_path, folder / "{name}"),
                                 **_commands(FILE_OUT, tmp_path, folder / "{name}.json")}, read_only=True)
        _one_line_exit_2(results)
        assert "Permission denied" in results["run_training --grid"][1] and not any(folder.iterdir())

    def test_a_full_disk(self, tmp_path):
        results = _run_commands({**_commands(FOLDER_OUT, tmp_path, tmp_path / "{name}"),
                                 **_commands(FILE_OUT, tmp_path, tmp_path / "{name}.json")}, fsize=0)
        _one_line_exit_2(results)
        assert "File too large" in results["run_gnn"][1]  # EFBIG: the cap's form of "No space left on device"
        assert not list(tmp_path.rglob("*.lock")) and not list(tmp_path.rglob("*.tmp"))


# --------------------------------------------------------------------------- 14. a disk that fills mid-run
def _cli(argv: list[str], fsize: int | None = None) -> subprocess.CompletedProcess:
    def cap() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=cap if fsize else None)


class TestADiskThatFillsMidRunSaysWhatWasKept:
    def test_a_stored_sweep_says_how_many_points_it_kept_and_resumes(self, tmp_path):
        argv = [str(SCRIPTS / "run_construction.py"), "precision", "--ns", "16,24,32,40,48,56,64,72,80",
                "--total-letters", "64"]  # files over the 4 KiB that the folder check writes
        free = _cli([*argv, "--out", str(tmp_path / "free.json")])
        assert free.returncode == 0, free.stderr
        full = _cli([*argv, "--out", str(tmp_path / "full.json")], fsize=(tmp_path / "free.json").stat().st_size - 1)
        assert full.returncode == 1 and len(full.stderr.strip().splitlines()) == 1, full.stderr
        assert "Traceback" not in full.stderr and " keeps " in full.stderr and "resume" in full.stderr
        again = _cli([*argv, "--out", str(tmp_path / "full.json")])
        assert again.returncode == 0 and "points already done" in again.stdout, again.stderr
        rows = [json.loads((tmp_path / f).read_text())["data"] for f in ("free.json", "full.json")]
        assert rows[1] == rows[0]  # every N, measured once, none lost

    def test_a_training_run_whose_checkpoint_does_not_fit(self, tmp_path):
        argv = [str(SCRIPTS / "run_training.py"), *TRAIN_ARGV, "--out", str(tmp_path / "run")]
        full = _cli(argv, fsize=8192)  # room for the folder check and the lock, not for a checkpoint
        assert full.returncode == 1 and len(full.stderr.strip().splitlines()) == 1, full.stderr
        assert "no checkpoint was kept" in full.stderr and not (tmp_path / "run" / ".lock").exists()
        assert _cli(argv).returncode == 0 and read_record(tmp_path / "run" / "results.json")["complete"] is True

    def test_the_sweep_runner_says_what_the_partial_file_keeps(self, tmp_path, monkeypatch):
        from hoplib import results
        from hoplib.sweep import run_sweep

        real, calls = results.atomic_write_text, []

        def fills(path, text):  # the disk fills at the third write
            calls.append(path)
            if len(calls) == 3:
                raise OSError(28, "No space left on device")
            return real(path, text)

        monkeypatch.setattr(results, "atomic_write_text", fills)
        with pytest.raises(results.OutputError, match=r"after 3 of 4 points; .*sweep.partial.json keeps 2 of them"):
            run_sweep(_square, [1, 2, 3, 4], tmp_path / "sweep.json", {"p": 1})
        monkeypatch.setattr(results, "atomic_write_text", real)
        assert run_sweep(_square, [1, 2, 3, 4], tmp_path / "sweep.json", {"p": 1}) == [1, 4, 9, 16]

    def test_workers_start_no_further_point_after_a_failed_save(self, tmp_path, monkeypatch):
        from hoplib import results
        from hoplib.sweep import run_sweep

        def full(path, text):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(results, "atomic_write_text", full)
        points = [str(tmp_path / f"ran{i}") for i in range(8)]
        with pytest.raises(results.OutputError, match="no point was stored"):
            run_sweep(_mark, points, tmp_path / "sweep.json", {"p": 1}, workers=2)
        assert len(list(tmp_path.glob("ran*"))) < 8


def _square(_: int, x: int) -> int:
    return x * x


def _mark(_: int, path: str) -> int:
    import time

    Path(path).write_text("ran")
    time.sleep(0.5)
    return 0


# --------------------------------------------------------------------------- 15. resume, never replace, one writer
class TestSweepsResumeAndNeverReplace:
    def test_a_construction_study_stopped_after_2_of_4_points_resumes(self, tmp_path, monkeypatch, capsys):
        script, out, calls = _script("run_construction"), tmp_path / "precision.json", []
        real = script.precision_study

        def stopped_after_two(ns, **kw):
            if len(calls) == 2:
                raise KeyboardInterrupt  # the process is stopped while the third point runs
            calls.append(ns)
            return real(ns, **kw)

        argv = ["precision", "--ns", "16,24,32,40", "--total-letters", "64", "--out", str(out)]
        monkeypatch.setattr(script, "precision_study", stopped_after_two)
        with pytest.raises(KeyboardInterrupt):
            script.main(argv)
        assert not out.exists()
        monkeypatch.setattr(script, "precision_study", lambda ns, **kw: calls.append(ns) or real(ns, **kw))
        script.main(argv)
        assert calls == [[16], [24], [32], [40]] and "2 of 4 points already done" in capsys.readouterr().out
        assert [r["n"] for r in json.loads(out.read_text())["data"]] == [16, 16, 24, 24, 32, 32, 40, 40]

    def test_an_existing_file_is_refused_in_one_line_without_overwrite(self, tmp_path, capsys):
        run_cli = _script("cli").run_cli
        out = tmp_path / "precision.json"
        out.write_text("stored")
        for name, argv in (("run_construction", ["search", "--max-layers", "1"]),
                           ("run_mpc", ["layer-regime", "--ns", "64", "--deltas", "0.9"])):
            assert run_cli(_script(name).main, [*argv, "--out", str(out)]) == 2
            assert capsys.readouterr().err == f"error: {out} exists; pass --overwrite to replace it" + (
                " or --resume\n" if name == "run_mpc" else "\n")
        assert out.read_text() == "stored"

    def test_finished_points_of_other_settings_are_not_discarded_without_overwrite(self, tmp_path):
        from hoplib.sweep import run_sweep

        path = tmp_path / "sweep.json"
        with pytest.raises(ZeroDivisionError):
            run_sweep(_inverse, [1, 0], path, {"p": 1})  # point 1 is kept, point 2 fails
        partial = tmp_path / "sweep.partial.json"
        before = partial.read_text()
        with pytest.raises(ValueError, match=r"holds 1 finished points of other settings \(differing: p\)"):
            run_sweep(_inverse, [1, 2], path, {"p": 2})
        assert partial.read_text() == before
        assert run_sweep(_inverse, [1, 2], path, {"p": 2}, overwrite=True) == [1.0, 0.5]

    def test_a_second_process_on_one_results_file_is_refused_before_work(self, tmp_path):
        from hoplib.results import LockedError
        from hoplib.sweep import run_sweep

        path = tmp_path / "sweep.json"
        holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            (tmp_path / ".sweep.json.lock").write_text(str(holder.pid))
            with pytest.raises(LockedError, match=f"live process {holder.pid}"):
                run_sweep(_inverse, [1], path, {"p": 1})
        finally:
            holder.kill()
            holder.wait()
        assert not path.exists() and not (tmp_path / "sweep.partial.json").exists()
        assert run_sweep(_inverse, [1], path, {"p": 1}) == [1.0]  # a stale lock is taken over
        assert not (tmp_path / ".sweep.json.lock").exists()


def _inverse(_: int, x: int) -> float:
    return 1 / x
