"""Silent wrong results and data-loss paths found by probing the tools (issue 28), one class per kind: each test
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
from hoplib._book.results import atomic_write_text, load_stored, save_results
from hoplib.evaluate import per_k_error
from hoplib.lower_bounds import communication, gnn, graphs
from hoplib.models import GPT, GPTConfig
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
            gnn.doubling_connectivity(self.edges + 1, 3)  # id 3 in graph 1
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
