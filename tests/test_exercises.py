"""The exercise checkers, defined in each chapter's Exercises section (cells tagged ``exercise-checkers``),
accept right answers and explain wrong ones. The cells are read from the chapters with jupytext and run here."""

from __future__ import annotations

import math
import re
from pathlib import Path
from types import SimpleNamespace

import jupytext
import numpy as np
import pytest

from hoplib.tasks import find, hop

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))


def checker_cells(md: Path) -> list[str]:
    nb = jupytext.read(md, fmt="md:myst")
    return [c.source for c in nb.cells if "exercise-checkers" in c.metadata.get("tags", [])]


# the tags of the chapters' own code that their checkers call
CODE_TAGS = {"efficient_attention": "reduction-code", "gnn": "reach-code", "rnn": "rnn-code"}


def checkers(chapter: str) -> SimpleNamespace:
    """Run a chapter's checker cells on their own (they import what they use), after its cells tagged with its
    :data:`CODE_TAGS` tag (the chapter's own code that a checker calls), and return their names."""
    md = ROOT / "chapters" / f"{chapter}.md"
    uses = CODE_TAGS.get(chapter)
    used = [c.source for c in jupytext.read(md, fmt="md:myst").cells if uses in c.metadata.get("tags", [])]
    namespace: dict = {}
    exec(compile("\n\n".join(used + checker_cells(md)), str(md), "exec"), namespace)  # noqa: S102
    return SimpleNamespace(**namespace)


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_every_code_exercise_names_a_checker_its_chapter_defines(md):
    named = set(re.findall(r"`(check_\w+)`", md.read_text().split("\n## Exercises\n", 1)[1]))
    defined = set(re.findall(r"^def (check_\w+)\(", "\n".join(checker_cells(md)), flags=re.M))
    assert named and named <= defined, f"{md.name}: exercises name {named}, the cells define {defined}"


def test_task_checkers_accept_correct_and_explain_wrong_functions():
    ex = checkers("hop_task")
    assert ex.check_find(lambda x: find(x).tolist()).passed
    assert ex.check_hop(lambda x, k: hop(x, k)).passed
    wrong = ex.check_hop(lambda x, k: hop(x, k + 1))
    assert not wrong.passed and "expected" in wrong.message and "k=" in wrong.message
    crashing = ex.check_find(lambda x: 1 / 0)
    assert not crashing.passed and "ZeroDivisionError" in crashing.message


def test_construction_checkers_accept_right_and_reject_wrong_answers():
    from hoplib.construction import hop_program
    from hoplib.construction.layout import ACC
    from hoplib.report import depth_ceil

    ex = checkers("construction")
    assert ex.check_hop_program(hop_program).passed
    assert not ex.check_hop_program(lambda k: [ACC] * (depth_ceil(k) - 2)).passed
    assert ex.check_hardmax_temperature(lambda n, m, b: (math.log(n - 1) + b * math.log(2)) / m).passed
    assert not ex.check_hardmax_temperature(lambda n, m, b: math.log(n) / m).passed

    def read_find(model, x):
        attn = model.trace(x[None]).attentions[1][0]
        return (attn.argmax(-1)[1:] - 1).tolist()

    assert ex.check_read_find(read_find).passed
    assert not ex.check_read_find(lambda model, x: find(x).clamp(min=0).tolist()).passed


def test_hop_program_checker_covers_k_1():
    ex = checkers("construction")

    def wrong_at_1(k):  # the chapter's old solution: a 3-layer, 2-hop program for k = 1
        a = (k - 1).bit_length()
        if k == 2 ** a:
            return ["keep"] * (a - 1) + ["ptr"]
        return ["acc" if (k >> b) & 1 else "keep" for b in range(a)]

    result = ex.check_hop_program(wrong_at_1)
    assert not result.passed and "k=1" in result.failures[0]
    assert ex.check_hop_program(lambda k: [] if k == 1 else wrong_at_1(k)).passed


def test_training_checkers_accept_the_library_and_reject_pooled_or_shifted_answers():
    from hoplib.evaluate import alignment_score, errors_from_predictions
    from hoplib.train import linear_warmup_decay

    ex = checkers("training")
    assert ex.check_paper_error(lambda p, y: errors_from_predictions(p, y, ex._TASK, "paper")).passed

    def pooled(p, y):
        letter = (y >= 3) & (y < 6)
        return float(((p != y) & letter).sum() / letter.sum())

    assert not ex.check_paper_error(pooled).passed
    assert ex.check_schedule(lambda s, n, w: linear_warmup_decay(s, steps=n, warmup_steps=w)).passed
    assert not ex.check_schedule(lambda s, n, w: linear_warmup_decay(s + 1, steps=n, warmup_steps=w)).passed
    assert ex.check_alignment(alignment_score).passed
    assert not ex.check_alignment(lambda a, m: float((a * m).sum() / (a.norm() * m.norm()))).passed


def _sum_step(ctx, mem):
    from hoplib.mpc import Message

    t = mem["v"]
    sums = np.zeros(ctx.num_machines, dtype=np.int64)
    np.add.at(sums, t.machine, t.data[:, 0])
    return {}, {"sums": Message(ctx.active, np.zeros(len(ctx.active), np.int64), sums[ctx.active])}


def _global_sum_step(ctx, mem):  # not local: every machine sends the total of all machines
    from hoplib.mpc import Message

    total = int(mem["v"].data[:, 0].sum())
    return {}, {"sums": Message(ctx.active, np.zeros(len(ctx.active), np.int64), np.full(len(ctx.active), total))}


def test_mpc_sum_step_checker_accepts_a_local_step_and_rejects_a_peeking_one():
    ex = checkers("mpc")
    assert ex.check_sum_step(_sum_step).passed
    result = ex.check_sum_step(_global_sum_step)
    assert not result.passed and "not local" in result.message


def test_mpc_round_count_checkers():
    from hoplib.mpc.primitives import tree_depth

    ex = checkers("mpc")
    assert ex.check_doubling_rounds(lambda k: 2 * k.bit_length()).passed
    assert not ex.check_doubling_rounds(lambda k: 2 * k).passed
    assert ex.check_layer_rounds(lambda n, s, m, h: 2 * max(1, tree_depth(n, s // (4 * m * h))) + 2).passed
    assert not ex.check_layer_rounds(lambda n, s, m, h: 2 * tree_depth(n, 2) + 3).passed


def test_rnn_checkers_accept_right_answers_and_reject_wrong_ones():
    from hoplib.lower_bounds import pointer_chasing as pc

    ex = checkers("rnn")

    def step(memory, prev, x, y, a):
        memory = list(memory)
        if prev < a:
            memory[prev] = y
        return memory, x, memory[x]

    assert ex.check_hop_step(step).passed
    assert not ex.check_hop_step(lambda m, p, x, y, a: (m, x, m[x])).passed  # forgets to file y
    assert ex.check_encoding(lambda inst: pc.to_hop_sequence(inst)[0]).passed
    assert not ex.check_encoding(lambda inst: pc.to_hop_sequence(inst)[0][:-1]).passed

    def width(q):
        return math.ceil(math.log2(2 * q + 3))

    assert ex.check_protocol_bits(lambda k, q: k * (k - 1) * (2 * q + 3) * width(q) + width(q)).passed
    assert not ex.check_protocol_bits(lambda k, q: k * (k - 1) * (2 * q + 3) * width(q)).passed


def test_efficient_attention_checkers_accept_right_and_reject_wrong_answers():
    from hoplib.lower_bounds import efficient_attention as attn

    ex = checkers("efficient_attention")  # after the Longformer protocol
    assert ex.check_longformer_mask(lambda n, w, g: attn.longformer_mask(n, w, g)).passed
    assert not ex.check_longformer_mask(lambda n, w, g: attn.longformer_mask(n, w + 1, g)).passed
    assert not ex.check_longformer_mask(lambda n, w, g: np.ones((n, n))).passed
    right = ex.check_longformer_bits(lambda n, p, L, m, w, g: ex.measured_longformer_bits(n, p, L, m, w, g))
    assert right.passed
    assert not ex.check_longformer_bits(lambda n, p, L, m, w, g: L * 32 * m * (p - 1) * w).passed


def test_cot_checkers_accept_the_reference_and_reject_a_letter_only_chain() -> None:
    from hoplib.lower_bounds.cot import chain_length, lookups_per_token
    from hoplib.tasks import hop_reference

    ex = checkers("chain_of_thought")

    def good_chain(letters: list[int], k: int) -> list[str]:
        f = find(np.array(letters)).tolist()
        out, p = [], len(letters) - 1
        for j in range(1, k + 1):
            p = f[p] if p >= 0 else -1
            out.append(f"@{p}" if p >= 0 else "~")
            if j < k:
                out.append(f"({p},{chr(97 + letters[p])})" if p >= 0 else "~")
        out.append(chr(97 + letters[p]) if p >= 0 else "~")
        return out

    def letters_only(letters: list[int], k: int) -> list[str]:
        h = [hop_reference(letters, j)[-1] for j in range(1, k + 1)]
        return ["~" if a < 0 else chr(97 + a) for a in h] or [chr(97 + letters[-1])]

    assert ex.check_full_chain(good_chain).passed
    assert not ex.check_full_chain(letters_only).passed
    assert ex.check_lookups(lookups_per_token).passed
    assert not ex.check_lookups(lambda k, chain: [1] * (chain_length(k, chain) + 1)).passed


def test_gnn_checkers_accept_right_and_reject_wrong_answers():
    ex = checkers("gnn")

    def layer(h, edges):
        out = h.copy()
        for u, v in edges:
            out[u] |= h[v]
            out[v] |= h[u]
        return out

    def one_way(h, edges):  # forgets that edges are undirected
        out = h.copy()
        for u, v in edges:
            out[v] |= h[u]
        return out

    assert ex.check_reach_layer(layer).passed
    assert not ex.check_reach_layer(one_way).passed
    assert ex.check_squarings(lambda family, d: math.ceil(math.log2(d))).passed
    assert not ex.check_squarings(lambda family, d: math.floor(math.log2(d))).passed


# ------------------------------------------------------------------------------------------------------ the labs
LAB_CHAPTERS = ("hop_task", "construction", "mpc", "rnn")  # one per part of the book


def lab_steps(chapter: str) -> list[tuple[str, str, str]]:
    """(step text, the student's cell, the solution's code) of each step of a chapter's lab."""
    cells = jupytext.read(ROOT / "chapters" / f"{chapter}.md", fmt="md:myst").cells
    steps = []
    for i, cell in enumerate(cells):
        if "lab-answer" in cell.metadata.get("tags", []):
            before, after, solution = cells[i - 1], cells[i + 1], cells[i + 2]
            assert "{exercise}" in before.source and "{solution-start}" in after.source
            steps.append((before.source.rsplit("{exercise}", 1)[1], cell.source, solution.source))
    return steps


def test_teaching_page_lists_one_lab_per_part_with_its_minutes(monkeypatch):
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    for cell in jupytext.read(ROOT / "teaching.md", fmt="md:myst").cells:
        if cell.cell_type == "code":
            exec(compile(cell.source, "teaching.md", "exec"), namespace)  # noqa: S102
    labs = namespace["labs"]
    assert list(labs["chapter"]) == list(LAB_CHAPTERS)
    assert len(set(labs["part"])) == 4
    for row in labs.itertuples():
        text = (ROOT / "chapters" / f"{row.chapter}.md").read_text()
        assert f"\n## Lab: {row.lab}\n" in text
        minutes = [int(m) for m in re.findall(r"· (\d+) min · Lab step", text)]
        assert row.minutes == sum(minutes) >= 30 and len(minutes) == len(lab_steps(row.chapter))
    headings = [md.stem for md in CHAPTERS for _ in re.findall(r"^## Lab: ", md.read_text(), re.M)]
    assert sorted(headings) == sorted(LAB_CHAPTERS), "every lab is on the teaching page"


@pytest.mark.parametrize("chapter", LAB_CHAPTERS)
def test_every_lab_step_has_an_empty_cell_a_checker_and_a_checked_solution(chapter):
    text = (ROOT / "chapters" / f"{chapter}.md").read_text()
    lab = text.split("\n## Lab: ", 1)[1]
    assert lab.index("\n## ") == lab.index("\n## Exercises\n"), "the lab comes just before the Exercises"
    defined = set(re.findall(r"^def (check_\w+)\(", "\n".join(checker_cells(ROOT / "chapters" / f"{chapter}.md")),
                             flags=re.M))
    steps = lab_steps(chapter)
    assert 3 <= len(steps) <= 5
    for n, (step, student, solution) in enumerate(steps, 1):
        assert re.match(rf" ★+ · \d+ min · Lab step {n}: ", step)
        checker = re.search(r"`(check_\w+)`", step)[1]
        assert checker in defined
        assert all(line.startswith("#") for line in student.splitlines()), "the student's cell is empty"
        assert checker in student and f"result = {checker}(" in solution and "assert result.passed" in solution


@pytest.mark.parametrize("chapter", LAB_CHAPTERS)
def test_lab_answer_keys_pass_their_checkers(chapter):
    namespace = vars(checkers(chapter))
    for _, _, solution in lab_steps(chapter):
        exec(compile(solution, f"{chapter} lab", "exec"), namespace)  # noqa: S102 - each asserts its check passed
        assert namespace["result"].passed


def lab_answers(chapter: str) -> dict:
    """The chapter's checkers with its lab's answer key defined."""
    namespace = vars(checkers(chapter))
    for _, _, solution in lab_steps(chapter):
        exec(compile(solution.split("\n\nresult = ")[0], chapter, "exec"), namespace)  # noqa: S102
    return namespace


def test_hop_task_lab_checkers_reject_reversed_composition_and_a_hop_by_hop_power():
    ex = lab_answers("hop_task")
    reversed_order = ex["check_compose"](lambda f, g: np.where(f >= 0, g[np.maximum(f, 0)], -1))
    assert not reversed_order.passed and "f=" in reversed_order.failures[0]

    def hop_by_hop(f, k, compose):
        out = np.arange(len(f))
        for _ in range(k):
            out = compose(f, out)
        return out

    slow = ex["check_find_power"](hop_by_hop)
    assert not slow.passed and "compositions" in slow.failures[0]
    assert not ex["check_fast_hop"](lambda x, k: hop(x, k + 1)).passed


def test_construction_lab_checkers_reject_a_ptr_that_keeps_a_and_registers_off_by_a_layer():
    ex = lab_answers("construction")
    my_layer = ex["my_layer"]
    assert not ex["check_layer"](lambda p, a, op: my_layer(p, a, "keep" if op == "ptr" else op)).passed
    assert not ex["check_run_program"](lambda x, program: hop(x, len(program))).passed
    read = ex["my_registers"]
    assert not ex["check_registers"](lambda model, x: read(model, x)[:-1]).passed


def test_mpc_lab_checkers_reject_an_extra_round_and_one_hop_per_round_trip():
    ex = lab_answers("mpc")
    trip, update = ex["my_round_trip"], ex["my_update"]

    def slow_double(sim, c):  # the update as a round of its own, not queued
        trip(sim, c, [2])
        sim.round(lambda ctx, mem: (update(mem, [2]), {}))

    assert ex["check_double"](ex["my_double"]).passed and not ex["check_double"](slow_double).passed

    def hop_by_hop(x, k, c):
        sim = ex["lab_machines"](x, c)
        for _ in range(k):
            trip(sim, c, [3])
            sim.defer(lambda ctx, mem: update(mem, [3]))
        sim.finish()
        st = sim.table("st").data
        return st[np.argsort(st[:, 0]), 3], sim.stats.rounds

    result = ex["check_find_k_mpc"](hop_by_hop)
    assert not result.passed and "rounds" in result.failures[0]


def test_mpc_round_trip_checker_reports_a_step_that_is_not_local():
    ex = lab_answers("mpc")
    message = ex["Message"]

    def peeking(sim, c, cols):  # every machine sends the largest pointer of all machines
        def step(ctx, mem):
            d = mem["st"].data
            top = np.full(len(d), int(d[:, 2].max()))
            return mem, {"_ans": message(d[:, 0] // c, d[:, 0] // c, np.c_[d[:, 0], 0 * top + 2, top])}

        sim.round(step)
        sim.round(lambda ctx, mem: (mem, {}))

    result = ex["check_round_trip"](peeking)
    assert not result.passed and "not local" in result.failures[0]


def test_rnn_lab_checkers_reject_a_flipped_state_a_player_that_starts_afresh_and_a_short_count():
    ex = lab_answers("rnn")
    assert not ex["check_state_bits"](lambda h: ex["my_state_bits"](-h)).passed
    player = ex["my_gru_player"]
    assert ex["check_gru_player"](player).passed
    afresh = ex["check_gru_player"](lambda model, block, j, p: player(model, block, j, j))  # ignores P_(j+1)
    assert not afresh.passed and "bits" in afresh.failures[0]
    assert not ex["check_gru_bits"](lambda d, p, c: 32 * d * (p - 1)).passed
