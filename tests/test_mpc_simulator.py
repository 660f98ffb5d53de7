"""The MPC simulator enforces the model: memory, send and receive limits, addresses and locality."""

import numpy as np
import pytest

from hoplib.mpc import Message, MPCLimitError, MPCProtocolError, MPCSimulator, Table


def _loaded(q=4, s=10, per=2):
    sim = MPCSimulator(q, s, audit=True)
    m = np.repeat(np.arange(q), per)
    sim.load("a", m, np.column_stack([np.arange(q * per), np.arange(q * per) * 10]))
    return sim


def test_limit_error_is_an_exception_naming_round_machine_limit_amount():
    err = MPCLimitError("send", 3, 2, 10, 12)
    assert isinstance(err, Exception)
    assert (err.round, err.machine, err.limit, err.amount) == (3, 2, 10, 12)
    assert "round 3" in str(err) and "machine 2" in str(err) and "10" in str(err) and "12" in str(err)


def test_a_correct_round_delivers_every_message_and_counts_words():
    sim = _loaded()

    def shift(ctx, mem):  # every machine passes its records to the next machine
        t = mem["a"]
        return {}, {"a": Message(t.machine, (t.machine + 1) % ctx.num_machines, t.data)}

    sim.round(shift)
    t = sim.table("a")
    assert sorted(t.data[:, 0].tolist()) == list(range(8))
    assert np.all(t.machine == (t.data[:, 0] // 2 + 1) % 4)
    assert sim.stats.rounds == 1 and sim.stats.words_per_round == [16] and sim.stats.max_memory == 4


def test_loading_too_much_raises_memory_error():
    sim = MPCSimulator(2, 5)
    with pytest.raises(MPCLimitError) as info:
        sim.load("a", np.zeros(3, np.int64), np.zeros((3, 2), np.int64))
    assert info.value.kind == "memory" and info.value.machine == 0 and info.value.amount == 6


def test_faulty_protocol_sending_too_much_is_caught():
    sim = _loaded(s=10)

    def chatty(ctx, mem):  # machine 1 sends its 2 records 3 times: 12 words > 10
        t = mem["a"]
        sel = t.machine == 1
        src = np.repeat(t.machine[sel], 3)
        return mem, {"b": Message(src, (src + 1) % ctx.num_machines, np.repeat(t.data[sel], 3, axis=0))}

    with pytest.raises(MPCLimitError) as info:
        sim.round(chatty)
    e = info.value
    assert (e.kind, e.round, e.machine, e.limit, e.amount) == ("send", 1, 1, 10, 12)


def test_faulty_protocol_flooding_one_machine_is_caught():
    sim = _loaded(q=4, s=10)

    def flood(ctx, mem):  # everybody sends everything to machine 0: 12 words from the others
        t = mem["a"]
        return mem, {"b": Message(t.machine, np.zeros(len(t), np.int64), t.data)}

    with pytest.raises(MPCLimitError) as info:
        sim.round(flood)
    assert info.value.kind == "receive" and info.value.machine == 0 and info.value.amount == 16


def test_faulty_protocol_overflowing_memory_after_delivery_is_caught():
    sim = _loaded(q=4, s=10)

    def hoard(ctx, mem):  # machine 0 keeps its 4 words and receives 8 more from machines 1 and 2
        t = mem["a"]
        sel = (t.machine == 1) | (t.machine == 2)
        return mem, {"a": Message(t.machine[sel], np.zeros(sel.sum(), np.int64), t.data[sel])}

    with pytest.raises(MPCLimitError) as info:
        sim.round(hoard)
    assert info.value.kind == "memory" and info.value.machine == 0 and info.value.amount == 12


def test_faulty_protocol_addressing_a_missing_machine_is_caught():
    sim = _loaded()

    def lost(ctx, mem):
        t = mem["a"]
        return mem, {"b": Message(t.machine, t.machine + 4, t.data)}

    with pytest.raises(MPCProtocolError, match="machine 4"):
        sim.round(lost)


def test_faulty_protocol_reading_another_machines_memory_is_caught_by_the_audit():
    sim = _loaded()

    def peek(ctx, mem):  # each machine keeps the global maximum: needs everybody's records
        t = mem["a"]
        best = t.data[:, 1].max() if len(t) else 0
        return {"a": Table(t.machine, np.column_stack([t.data[:, 0], np.full(len(t), best)]))}, {}

    with pytest.raises(MPCProtocolError, match="not local"):
        sim.round(peek)


def test_faulty_protocol_moving_records_without_a_message_is_caught_by_the_audit():
    sim = _loaded()

    def teleport(ctx, mem):
        t = mem["a"]
        return {"a": Table((t.machine + 1) % ctx.num_machines, t.data)}, {}

    with pytest.raises(MPCProtocolError, match="without a message"):
        sim.round(teleport)


def test_without_audit_a_peeking_step_goes_unnoticed_which_is_why_tests_audit():
    sim = _loaded()
    sim.audit = False

    def peek(ctx, mem):
        t = mem["a"]
        return {"a": Table(t.machine, np.column_stack([t.data[:, 0], np.full(len(t), t.data[:, 1].max())]))}, {}

    sim.round(peek)
    assert np.all(sim.table("a").data[:, 1] == 70)

