"""Every option a command's ``--help`` lists is honoured: read by the command, and the sweep options reach the one
runner (``hoplib.sweep.run_sweep``): ``--workers``, ``--slurm`` with ``--partition``, ``--overwrite``."""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

import pytest
from _scripts import SCRIPTS, load_script, parser_of

import hoplib.sweep

ROOT = SCRIPTS.parent
COMMANDS = sorted(p.stem for p in SCRIPTS.glob("run_*.py")) + ["score_runs"]


def _source(command: str) -> str:
    """The command's source and that of the commands it imports (run_efficient_attention uses run_rnn's)."""
    text = (SCRIPTS / f"{command}.py").read_text()
    others = set(re.findall(r"^from (run_\w+|score_runs) import", text, flags=re.M))
    return text + "".join((SCRIPTS / f"{name}.py").read_text() for name in others)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_a_command_lists_is_read_by_it(command):
    parser, text = parser_of(command), _source(command)
    shared = {"device": "run_device(args)", "slurm": "executor_from_args(args)",
              "partition": "executor_from_args(args)"}  # read by scripts/cli.py's helpers, whose result it uses
    unread = []
    for action in parser._actions:
        dest = action.dest
        if isinstance(action, argparse._HelpAction) or re.search(rf"\bargs\.{dest}\b", text):
            continue
        if shared.get(dest, "\0") in text:
            continue
        if "vars(args)" in text and "RUN_KEYS" in text and dest in load_script("run_training").RUN_KEYS:
            continue  # a single run's settings, read together into its RunConfig
        unread.append("/".join(action.option_strings) or dest)
    assert not unread, f"scripts/{command}.py lists options it never reads: {unread}"


class _Executor:
    """Stands in for submitit's Slurm executor (no Slurm here): what the command asked for."""

    def __init__(self, folder, **parameters):
        self.folder, self.parameters = str(folder), parameters


def _observe_runner(monkeypatch) -> dict:
    """Replace the one runner with a recorder (nothing runs) and Slurm with :class:`_Executor`."""
    seen: dict = {}

    def run_sweep(job, points, path, params, **kw):
        seen.update(kw, path=Path(path), points=list(points))
        return []

    monkeypatch.setattr(hoplib.sweep, "run_sweep", run_sweep)
    monkeypatch.setitem(sys.modules, "submitit", None)  # a real executor would be a mistake here
    cli = load_script("cli")
    monkeypatch.setattr(sys.modules["cli"] if "cli" in sys.modules else cli, "slurm_executor", _Executor)
    return seen


def test_a_training_grid_hands_workers_slurm_partition_and_overwrite_to_the_one_runner(tmp_path, monkeypatch):
    script = load_script("run_training")
    seen = _observe_runner(monkeypatch)
    monkeypatch.setattr(script, "executor_from_args", sys.modules["cli"].executor_from_args)
    out = tmp_path / "grid"
    assert script.cli(["--grid", "quick", "--out", str(out), "--workers", "2", "--overwrite", "--no-progress"]) == 0
    assert (seen["workers"], seen["overwrite"], seen["executor"]) == (2, True, None)
    assert seen["path"] == out / "table.json" and len(seen["points"]) == len(script.grids.grid("quick").configs())
    seen.clear()
    assert script.cli(["--grid", "quick", "--out", str(out), "--slurm", str(tmp_path / "logs"), "--partition",
                       "gpu", "--device", "cuda", "--no-progress"]) == 0
    executor = seen["executor"]
    assert isinstance(executor, _Executor) and executor.folder == str(tmp_path / "logs")
    assert executor.parameters == {"slurm_partition": "gpu"} and seen["overwrite"] is False
    assert seen["device"] == "cuda"  # resolved on the array's nodes, not on this machine


def test_scoring_hands_workers_slurm_partition_and_overwrite_to_the_one_runner(tmp_path, monkeypatch):
    stored = ROOT / "results" / "training" / "small" / "L2_m16_H1_ninf_s0"
    shutil.copytree(stored, tmp_path / "sweep" / stored.name)
    script = load_script("score_runs")
    seen = _observe_runner(monkeypatch)
    monkeypatch.setattr(script, "run_sweep", hoplib.sweep.run_sweep)
    monkeypatch.setattr(script, "executor_from_args", sys.modules["cli"].executor_from_args)
    argv = [str(tmp_path / "sweep"), "--out", str(tmp_path / "s.json"), "--workers", "2", "--overwrite",
            "--slurm", str(tmp_path / "logs"), "--partition", "gpu"]
    script.main(argv)
    assert (seen["workers"], seen["overwrite"], seen["points"]) == (2, True, [stored.name])
    assert seen["executor"].folder == str(tmp_path / "logs")
    assert seen["executor"].parameters == {"slurm_partition": "gpu"}
