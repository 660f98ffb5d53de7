"""The book's exercises for teachers: chapter, kind, difficulty and expected time of each one.

Difficulty is 1 (a direct use of a definition), 2 (combines two ideas or needs care with edge cases) or 3 (a
short proof or a formula that must be derived); minutes are the time a student who has read the chapter should
expect. Kinds: ``"code"`` exercises have a checker in ``hoplib.exercises.<chapter>``; ``"formula"`` exercises
ask for a formula that a checker compares with a measurement; ``"proof"`` and ``"explain"`` exercises are
answered in words, with a hidden solution. ``tests/test_layout.py`` checks that this table lists exactly the
exercises of the chapters. The "Teaching with this book" page is built from it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Exercise:
    """One exercise of the book, as a teacher plans with it."""

    label: str
    chapter: str
    kind: str
    difficulty: int
    minutes: int
    summary: str


_ROWS = [
    ("ex-find", "hop_task", "code", 1, 15, "find¹ by a backwards scan"),
    ("ex-hop", "hop_task", "code", 1, 15, "hop_k from find¹, with ⊥"),
    ("ex-share", "hop_task", "explain", 2, 15, "why ⊥ targets are rare at k = 1"),
    ("ex-construction-program", "construction", "code", 2, 25, "the layer program of the construction"),
    ("ex-construction-temperature", "construction", "formula", 2, 20, "Lemma A.2's inverse temperature"),
    ("ex-construction-read", "construction", "code", 2, 20, "reading a head's attention in a trace"),
    ("ex-construction-doubling", "construction", "proof", 3, 30, "the doubling bound on one-lookup layers"),
    ("ex-training-metric", "training", "code", 1, 15, "the paper's error metric"),
    ("ex-training-schedule", "training", "code", 1, 10, "linear warmup and decay"),
    ("ex-training-alignment", "training", "code", 2, 20, "the head-alignment score of Appendix G.4"),
    ("ex-mpc-sum", "mpc", "code", 1, 20, "a one-round MPC step under the memory limit"),
    ("ex-mpc-doubling", "mpc", "formula", 2, 20, "rounds of pointer doubling in hop_protocol"),
    ("ex-mpc-layer", "mpc", "formula", 3, 30, "rounds to simulate one attention layer (Theorem 3.4)"),
    ("ex-mpc-width", "mpc", "explain", 3, 30, "routing slots against Lemma 3.2's width"),
    ("ex-rnn-step", "rnn", "code", 2, 25, "one step of the hand-built hop_k RNN"),
    ("ex-rnn-encoding", "rnn", "code", 2, 25, "pointer chasing as a hop_k input (Proposition E.4)"),
    ("ex-rnn-bits", "rnn", "formula", 2, 20, "bits posted by the RNN protocol"),
    ("ex-rnn-collapse", "rnn", "explain", 3, 25, "collapsing depth into width"),
    ("ex-eff-mask", "efficient_attention", "code", 1, 15, "the causal Longformer mask"),
    ("ex-eff-bits", "efficient_attention", "formula", 2, 25, "bits of the Longformer protocol (Corollary 5.4)"),
    ("ex-cot-chain", "chain_of_thought", "code", 2, 20, "writing the chain of thought"),
    ("ex-cot-lookups", "chain_of_thought", "code", 2, 20, "dependent lookups per generated token"),
    ("ex-gnn-reach", "gnn", "code", 1, 15, "one layer of the reachability GNN"),
    ("ex-gnn-squarings", "gnn", "formula", 2, 20, "squarings until the reachability matrix is fixed"),
]

EXERCISES: dict[str, Exercise] = {row[0]: Exercise(*row) for row in _ROWS}
