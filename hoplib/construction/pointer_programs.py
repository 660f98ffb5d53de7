"""How many hops can L layers of lookUp / lastOccurrence reach? An exhaustive search with unlimited width over
programs of the two primitives on pointer maps evaluated on probe sequences (:func:`search_programs`; position 0
is the start token, ⊥); the chapter's simpler search over composition programs on hop counts is in the chapter."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hoplib.tasks import hop


def probe_sequences(n_seq: int = 48, n: int = 28, alphabet_size: int = 4, seed: int = 0) -> np.ndarray:
    """Half no-repeat sequences (the experiments' data), half uniform ones (with repeats)."""
    rng = np.random.default_rng(seed)
    half = n_seq // 2
    steps = rng.integers(1, alphabet_size, size=(half, n))
    steps[:, 0] = rng.integers(0, alphabet_size, size=half)
    no_rep = np.cumsum(steps, axis=1) % alphabet_size
    uniform = rng.integers(0, alphabet_size, size=(n_seq - half, n))
    return np.concatenate([no_rep, uniform]).astype(np.int64)


class _Machine:
    """Evaluates the primitives on a batch of sequences. Internal positions 0..N, 0 = start token (⊥)."""

    def __init__(self, x: np.ndarray, alphabet_size: int):
        b, n = x.shape
        self.b, self.t, self.alphabet_size = b, n + 1, alphabet_size
        self.sym = np.concatenate([np.full((b, 1), -1), x], axis=1)  # letter at each internal position
        self.rows = np.arange(b)[:, None]
        self.pos = np.broadcast_to(np.arange(self.t), (b, self.t))

    def letter(self, reg: np.ndarray) -> np.ndarray:
        return self.sym[self.rows, reg]

    def last_occurrence(self, q_reg: np.ndarray, k_reg: np.ndarray) -> np.ndarray:
        """max{1 <= j <= t : letter(k_reg)[j] == letter(q_reg)[t]}, 0 if none (⊥ matches nothing)."""
        key, query = self.letter(k_reg), self.letter(q_reg)
        out = np.zeros((self.b, self.t), dtype=np.int64)
        for s in range(self.alphabet_size):
            last = np.maximum.accumulate(np.where(key == s, self.pos, 0), axis=1)
            last[:, 0] = 0
            out = np.where(query == s, last, out)
        return out

    def compose(self, reg: np.ndarray, at: np.ndarray) -> np.ndarray:
        """reg evaluated at position at(t): what a lookUp at ``at`` fetches from register ``reg``."""
        return reg[self.rows, at]

    def apply(self, op: tuple, regs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The registers one head adds: the attended position, and every register composed with it."""
        if op[0] == "shift":
            at, at_name = np.maximum(self.pos - op[1], 0), f"t-{op[1]}"
        elif op[0] == "lookup":
            at, at_name = regs[op[1]], op[1]
        else:
            at, at_name = self.last_occurrence(regs[op[1]], regs[op[2]]), f"last[{op[2]}=={op[1]}]"
        return {at_name: at} | {f"{nm}∘({at_name})": self.compose(g, at) for nm, g in regs.items()}

    def hop_targets(self, ks: list[int]) -> dict[int, np.ndarray]:
        """hop_k of every sequence, with ⊥ (-1) at the start token's column 0."""
        return {k: np.concatenate([np.full((self.b, 1), -1), hop(self.sym[:, 1:], k)], axis=1) for k in ks}


@dataclass
class SearchResult:  # per depth: the hop counts found, a witness program for each, programs tried

    found: dict[int, set[int]] = field(default_factory=dict)
    witnesses: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    n_programs: dict[int, int] = field(default_factory=dict)
    n_states: dict[int, int] = field(default_factory=dict)


def _describe(op: tuple) -> str:
    if op[0] != "last":
        return f"lookUp at t-{op[1]}" if op[0] == "shift" else f"lookUp at {op[1]}"
    return f"lastOccurrence: latest j <= t with letter at {op[2]}(j) == letter at {op[1]}(t)"


def _replay(machine: _Machine, program: list[tuple]) -> dict[str, np.ndarray]:
    """Run ``program`` (whose ops name registers by recipe) on other data, keeping every register."""
    regs = {"t": machine.pos.copy()}
    for op in program:
        regs = machine.apply(op, regs) | regs
    return regs


def search_programs(max_layers: int = 3, ks: range | list[int] = range(1, 9), n_seq: int = 48, n: int = 28,
                    alphabet_size: int = 4, max_shift: int = 3, seed: int = 0,
                    verify_seq: int = 400) -> SearchResult:
    """Breadth-first search over one-head-per-layer programs of lookUp / lastOccurrence, merging programs
    that produce the same set of registers on the probes. A hop count matched on the probes is re-checked
    on ``verify_seq`` fresh sequences of length 2n (registers matched by recipe) before it is reported."""
    machine = _Machine(probe_sequences(n_seq, n, alphabet_size, seed), alphabet_size)
    verifier = _Machine(probe_sequences(verify_seq, 2 * n, alphabet_size, seed + 1), alphabet_size)
    targets, verify_targets = machine.hop_targets(list(ks)), verifier.hop_targets(list(ks))
    result = SearchResult()
    states = [({"t": machine.pos.copy()}, [])]  # (registers by recipe name, program)
    seen: set[frozenset] = set()
    for depth in range(1, max_layers + 1):
        nxt, tried = [], 0
        found = set(result.found.get(depth - 1, set()))  # a shallower program can idle a layer
        for k in found:
            result.witnesses[(depth, k)] = result.witnesses[(depth - 1, k)]
        for regs, steps in states:
            keys = {g.tobytes() for g in regs.values()}
            names = list(regs)
            ops = [("shift", d) for d in range(1, max_shift + 1)] + [("lookup", a) for a in names]
            for op in ops + [("last", a, b) for a in names for b in names]:
                tried += 1
                fresh = {nm: g for nm, g in machine.apply(op, regs).items() if g.tobytes() not in keys}
                for k, target in targets.items():
                    hit = next((nm for nm, g in fresh.items() if k not in found
                                and np.array_equal(machine.letter(g), target)
                                and np.array_equal(verifier.letter(_replay(verifier, steps + [op])[nm]),
                                                   verify_targets[k])), None)
                    if hit is not None:
                        found.add(k)
                        result.witnesses[(depth, k)] = [_describe(o) for o in steps + [op]] + [
                            f"answer: the letter at {hit}"]
                sig = frozenset(keys | {g.tobytes() for g in fresh.values()})
                if depth < max_layers and sig not in seen:
                    seen.add(sig)
                    nxt.append((regs | fresh, steps + [op]))
        result.found[depth], result.n_programs[depth], result.n_states[depth] = found, tried, len(states)
        states = nxt
    return result
