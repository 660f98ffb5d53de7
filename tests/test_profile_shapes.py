"""No profile ships untried: every model a chapter's ``gpu`` and ``paper`` profiles train (each family, depth,
width, N, alphabet, head, dropout and data regime; the profiles read from the chapters' own settings cells) is
built, trained for one step of batch 2 and evaluated once on a CPU; the profiles have one meaning everywhere;
the costs the parameters cells state are the estimator's."""

from __future__ import annotations

import math
import re

import pytest
import torch
from _scripts import load_script

from hoplib import grids
from hoplib.results import load_stored

P = load_script("profiles")
costs = load_script("step_costs")

TABLES = {c: P.chapter_profiles(c) for c in P.TRAINING_CHAPTERS + P.OTHER_CHAPTERS}
SHAPES = {}  # (chapter, key) -> job, one per shape over both profiles
for _chapter in P.TRAINING_CHAPTERS:
    for _profile in ("gpu", "paper"):
        for _job in P.jobs(_chapter, _profile, TABLES[_chapter]):
            SHAPES.setdefault((_chapter, _job.key), _job)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_chapters_that_train_have_the_four_profiles_and_the_others_quick_and_paper():
    for chapter in P.TRAINING_CHAPTERS:
        assert sorted(TABLES[chapter]) == sorted(P.PROFILE_NAMES), chapter
    for chapter in P.OTHER_CHAPTERS:
        assert sorted(TABLES[chapter]) == ["paper", "quick"], chapter


def test_the_gpu_and_paper_profiles_train_every_family_depth_and_width_listed():
    keys = {key for chapter, key in SHAPES}
    assert {f"gpt L{d} m{m} H{h} N100 a4 k16 layernorm p0.1 {data}" for d in range(2, 7) for m, h in
            ((128, 4), (256, 8)) for data in ("fresh",) + (("n1000", "n3000") if m == 128 else ())} <= keys
    assert {f"{kind} L{d} m{w} N100 a4 k16" for kind in ("gru", "lstm", "mamba", "transformer")
            for d in range(1, 7) for w in (64, 128)} <= keys
    assert any(k.startswith("gnn ") and " L13 " in k for k in keys)  # D = 12: depths 11, 12, 13
    assert {k.split()[-1] for k in keys if k.startswith("cot-gpt")} == {"none", "half", "full"}
    assert len(SHAPES) == len({(c, j.key) for c, j in SHAPES.items()})


@pytest.mark.parametrize(("chapter", "key"), sorted(SHAPES), ids=lambda v: str(v).replace(" ", "_"))
def test_every_model_of_the_gpu_and_paper_profiles_trains_a_step_and_evaluates(chapter, key):
    out = SHAPES[chapter, key].run(1, 2)
    values = _numbers(out)
    assert values and all(math.isfinite(v) for v in values), (chapter, key)


def _numbers(out) -> list[float]:
    """The error and accuracy values of a job's result (a record, a list of records, or {k: {...}})."""
    if isinstance(out, list):
        return [v for r in out for v in _numbers(r)]
    if isinstance(out, dict):
        found = [float(out[k]) for k in ("error", "accuracy") if k in out]
        for name in ("per_k_error", "per_k_error_pooled"):
            found += [float(v) for v in out.get(name, {}).values()]
        return found + [v for x in out.values() if isinstance(x, dict) and "error" in x for v in _numbers(x)]
    return []


@pytest.mark.parametrize("name", ["gpu", "paper"])
def test_the_training_grids_train_as_width_ensembles_for_one_step(tmp_path, name):
    g = grids.grid(name).cut(1)
    g = grids.Grid(g.depths, g.widths, g.n_trains, g.seeds, {**g.settings, "batch_size": 2, "eval_samples": 8},
                   g.exclude)
    rows = grids.train_grid(g, tmp_path, device="cpu", progress=False, ensemble="width")
    assert {(r["run"]) for r in rows} == {grids.run_name(c) for c in g.configs()}
    assert all(math.isfinite(r["error"]) for r in rows)


def test_a_gpt_step_is_counted_at_the_standard_matrix_product_flops():
    from hoplib.train import fit

    c = grids.grid("paper").configs()[0].replace(batch_size=2, warmup_steps=1)
    step = costs.per_step(lambda n: fit(c.init_model(), c.task, c.replace(steps=n).train, device="cpu",
                                        progress=False))
    m, t, layers = c.d_model, c.task.length, c.depth  # 2 * (12 m^2 weights) per token, 4 B T^2 m attention
    forward = 2 * layers * 12 * m * m * 2 * t + layers * 4 * 2 * t * t * m
    assert step.flops == 3 * forward
    assert 20 * layers < step.launches < 200 * layers  # tens of kernels a layer, forward and backward


def test_a_cudnn_recurrent_layer_is_counted_per_time_step_not_per_cpu_operation():
    gru = torch.nn.GRU(8, 8, batch_first=True)
    x = torch.randn(2, 50, 8)
    with costs.counting() as counted:
        gru(x)[0].sum().backward()
    assert counted.rnn_forward > 50 * costs.CUDNN_LAUNCHES_PER_TIMESTEP  # the CPU runs many ops a step
    assert counted.launches < 6 * 50 * costs.CUDNN_LAUNCHES_PER_TIMESTEP


def test_gpu_time_adds_flops_at_the_assumed_rate_and_launches():
    step = costs.StepCost(flops=costs.T4_FP32_FLOPS * costs.EFFICIENCY, launches=1000)
    assert costs.gpu_seconds(step, 10) == pytest.approx(10 * (1 + 1000 * costs.LAUNCH_S))


_STATED = re.compile(r'^# "(gpu|paper)":.*T4 ≈ ([0-9.]+ (?:s|min|h|days)) \(estimate\)', re.M)


@pytest.mark.parametrize("chapter", P.TRAINING_CHAPTERS)
def test_the_parameters_cell_states_the_estimated_t4_time_of_gpu_and_paper(chapter):
    stored = P.stored_step_costs()
    cell = P.code_cells(chapter)[0]
    stated = dict(_STATED.findall(cell))
    assert set(stated) == {"gpu", "paper"}, cell
    for profile, text in stated.items():
        est = P.estimate(chapter, profile, stored, TABLES[chapter])
        assert text == costs.duration(est["t4_seconds"]), (chapter, profile, est)
    assert all(len(line) <= 84 for line in cell.splitlines())


_SHARED = re.compile(r"^#\s+one H200 shared by 5 chapters: (.+) \(measured rate\)$", re.M)


@pytest.mark.parametrize("chapter", P.TRAINING_CHAPTERS)
def test_the_parameters_cell_states_the_gpu_profiles_time_on_the_stored_h200_run(chapter):
    stated = _SHARED.findall(P.code_cells(chapter)[0])
    measured = P.gpu_measured(chapter)
    assert stated == ([] if measured == "not timed" else [measured.split(" (")[0]])


def test_the_readme_cost_table_is_the_generated_one():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- cost table: generated, do not edit -->\n")[1].split("\n<!-- end of cost table -->")[0]
    assert block == P.cost_table_markdown()


def test_the_pages_cost_table_is_the_generated_one():
    stored = load_stored(P.TABLE_FILE).data  # python scripts/profiles.py --table rewrites it
    assert stored["summary"] == P.cost_table().reset_index().to_dict(orient="records")
    assert stored["detail"] == P.cost_table(detail=True).reset_index().to_dict(orient="records")
