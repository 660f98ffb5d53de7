"""The MPC chapter's experiments stay in the model's regime: s = N^delta with delta < 1, s below the input."""

from __future__ import annotations

import pytest

from hoplib.mpc import experiments as ex
from hoplib.mpc.protocols import hop_min_memory


def test_memory_for_rounds_powers_exactly():
    assert [ex.memory_for(4096, d) for d in ("1/2", "2/3", "3/4")] == [64, 256, 512]
    assert ex.memory_for(65536, "3/4") == 4096 and ex.memory_for(1000, 0.5) == 32
    with pytest.raises(ValueError, match="delta must be in"):
        ex.memory_for(1000, "1")
    with pytest.raises(ValueError, match="fraction"):
        ex.memory_for(1000, "half")


def test_records_refuse_a_memory_that_could_hold_the_input():
    with pytest.raises(ValueError, match="not below the input size"):
        ex.mpc_record(64, 64, "1/2")
    rec = ex.mpc_record(4096, 256, "2/3", rounds=3)
    assert rec["input_words"] == 4096 and rec["memory"] == 256 and rec["delta"] == pytest.approx(2 / 3)
    assert rec["delta_label"] == "2/3" and rec["rounds"] == 3


def test_every_profile_states_exponents_below_one():
    for settings in ex.PROFILES.values():
        for key in ("deltas", "k_deltas", "cycle_deltas"):
            assert all(0 < ex.parse_delta(d) < 1 for d in settings[key])
        assert all(s < n for n, s in settings["routing"])
        assert all(s < 4 * n for n in settings["layer_ns"] for s in settings["layer_memories"])


def test_hop_grid_leaves_out_memories_below_the_protocols_minimum():
    rows = ex.hop_round_grid([4096], ["1/2", "2/3"], 2)
    assert [r["delta_label"] for r in rows] == ["2/3"]  # 4096^(1/2) = 64 < hop_min_memory(4096) = 144
    assert rows[0]["memory"] == 256 < rows[0]["input_words"] and rows[0]["correct"]
    table = ex.grid_table(rows, [4096], ["1/2", "2/3"]).data
    assert table.loc["4,096", "δ = 1/2"] == f"s = 64 < minimum {hop_min_memory(4096)}"
    assert table.loc["4,096", "δ = 2/3"] == f"s = 256: {rows[0]['rounds']} rounds"


def test_cycles_records_count_the_edge_list_as_the_input():
    assert ex.cycles_rounds([256], ["3/4"]) == []  # 512^(3/4) = 108 words is below the protocol's 128
    rows = ex.cycles_rounds([512], ["3/4"])
    assert len(rows) == 2 and all(r["input_words"] == 1024 and r["memory"] == 182 for r in rows)
    per = ex.rounds_per_iteration(rows)
    assert (per["rounds per iteration"] * per["iterations"] == per["rounds"]).all()


def test_sci_writes_powers_of_ten_for_prose():
    assert ex.sci(10741046220) == "1.1 × 10¹⁰" and ex.sci(0.00025) == "2.5 × 10⁻⁴" and ex.sci(99.99) == "1.0 × 10²"
    with pytest.raises(ValueError):
        ex.sci(0)


def test_layer_records_state_their_exponent():
    rows = ex.layer_rounds_vs_n([64], [64])
    assert rows[0]["input_words"] == 256 and rows[0]["delta"] == pytest.approx(0.75)
