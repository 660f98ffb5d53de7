"""scripts/score_runs.py: per-sequence errors whose means are the stored runs' errors, written once."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hoplib.train import RunConfig, train_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import score_runs  # noqa: E402


def _run(folder: Path, depth: int) -> None:
    config = RunConfig.from_dict(dict(depth=depth, d_model=16, heads=2, seq_len=12, max_hops=3, steps=10,
                                      lr=3e-3, warmup_steps=2, batch_size=8, eval_samples=10, seed=1))
    train_run(config, folder / f"L{depth}", device="cpu", progress=False)


def test_scores_reproduce_each_runs_stored_error_and_are_not_overwritten(tmp_path):
    for depth in (1, 2):
        _run(tmp_path / "sweep", depth)
    (tmp_path / "sweep" / "L3").mkdir()  # an unfinished run: no results.json, skipped
    out = tmp_path / "scores.json"
    score_runs.main([str(tmp_path / "sweep"), "--out", str(out)])
    data = json.loads(out.read_text())
    assert data["parameters"]["runs"] == ["L1", "L2"]
    for row in data["data"]:
        stored = json.loads((tmp_path / "sweep" / row["run"] / "results.json").read_text())
        assert len(row["errors"]) == 10
        assert sum(row["errors"]) / 10 == pytest.approx(stored["per_k_error"][str(row["k"])], abs=1e-6)
    before = out.read_text()
    with pytest.raises(ValueError, match="--overwrite"):
        score_runs.main([str(tmp_path / "sweep"), "--out", str(out)])
    assert out.read_text() == before
