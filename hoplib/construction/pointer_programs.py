"""Exhaustive searches over pointer programs: how many hops can L layers of lookUp / lastOccurrence reach?

Theorem 4.2 of Sanford, Hsu & Telgarsky (arXiv v1) states depth ⌊log₂ k⌋ + 2; its proof (App. D.1) builds
hop_k from the two primitives of Lemmas D.1 (lookUp) and D.2 (lastOccurrence), one per layer. This module
asks, by brute force, which hop counts such programs can reach at a given depth.

Two models, both with *unlimited width* (every register ever computed is kept):

* :func:`reachable_hops` — *composition programs*. A register is a hop count ``a`` (the pointer find^a).
  After layer 2 (the induction head) the registers are {0, 1}. A layer with H heads performs H lookUps, each
  at one register ``a``, fetching every register ``b`` stored there, which adds the registers ``a + b``.
  Every such program of depth L reaches at most 2^(L-2) hops, whatever H is.
* :func:`search_programs` — *semantic programs*, nothing assumed about what a head computes beyond the two
  primitives. Registers are actual pointer maps t -> position, evaluated on probe sequences; the start
  token (position 0) is ⊥. One head per layer, which is one of: a positional lookUp at t - d (d = 1, 2, 3);
  a lookUp at any register a (fetch all registers there); a lastOccurrence that matches the letter at
  register a of the query against the letter at register b of each key j <= t and fetches all registers at
  the latest match (or ⊥). A program computes hop_k if some register's letter equals hop_k at every position
  of every probe (and then of fresh verification data).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from hoplib._book.validate import check_int
from hoplib.tasks import hop

__all__ = ["SearchResult", "probe_sequences", "reachable_hops", "search_programs"]


# --------------------------------------------------------------------------- composition programs
def reachable_hops(n_layers: int, heads: int = 1) -> set[int]:
    """All hop counts held in some register after every composition program of depth ``n_layers``.

    Layers 1-2 are the previous-token head and the induction head (registers {0, 1}); each later layer has
    ``heads`` lookUps at registers of the previous layer's set. Exhaustive over every choice.
    """
    n_layers = check_int("n_layers", n_layers, low=2, high=12)
    heads = check_int("heads", heads, low=1, high=4)
    states = {frozenset({0, 1})}
    for _ in range(n_layers - 2):
        nxt = set()
        for s in states:
            for picks in itertools.combinations_with_replacement(sorted(s), heads):
                new = set(s)
                for a in picks:
                    new |= {a + b for b in s}
                nxt.add(frozenset(new))
        states = nxt
    return set().union(*states)


# --------------------------------------------------------------------------- semantic programs
def probe_sequences(n_seq: int = 48, n: int = 28, alphabet_size: int = 4, seed: int = 0) -> np.ndarray:
    """Half no-repeat sequences (the experiments' data), half uniform ones (with repeats), as an int array."""
    n_seq = check_int("n_seq", n_seq, low=2)
    n = check_int("n", n, low=2)
    alphabet_size = check_int("alphabet_size", alphabet_size, low=2)
    rng = np.random.default_rng(check_int("seed", seed, low=0))
    half = n_seq // 2
    steps = rng.integers(1, alphabet_size, size=(half, n))
    steps[:, 0] = rng.integers(0, alphabet_size, size=half)
    no_rep = np.cumsum(steps, axis=1) % alphabet_size
    uniform = rng.integers(0, alphabet_size, size=(n_seq - half, n))
    return np.concatenate([no_rep, uniform]).astype(np.int64)


class _Machine:
    """Evaluates the primitives on a batch of sequences. Internal positions 0..N, 0 = start token (⊥)."""

    def __init__(self, x: np.ndarray, alphabet_size: int):
        self.x = x
        b, n = x.shape
        self.b, self.t = b, n + 1
        self.sym = np.concatenate([np.full((b, 1), -1), x], axis=1)  # letter at each internal position
        self.alphabet_size = alphabet_size
        self.rows = np.arange(b)[:, None]
        self.pos = np.broadcast_to(np.arange(self.t), (b, self.t))

    def letter(self, reg: np.ndarray) -> np.ndarray:
        return self.sym[self.rows, reg]

    def shift(self, d: int) -> np.ndarray:
        return np.maximum(self.pos - d, 0)

    def last_occurrence(self, q_reg: np.ndarray, k_reg: np.ndarray) -> np.ndarray:
        """j*(t) = max{1 <= j <= t : letter(k_reg)[j] == letter(q_reg)[t]}, 0 if none (⊥ matches nothing)."""
        key = self.letter(k_reg)
        query = self.letter(q_reg)
        out = np.zeros((self.b, self.t), dtype=np.int64)
        for s in range(self.alphabet_size):
            last = np.maximum.accumulate(np.where(key == s, self.pos, 0), axis=1)
            last[:, 0] = 0
            out = np.where(query == s, last, out)
        return out

    def compose(self, reg: np.ndarray, at: np.ndarray) -> np.ndarray:
        """reg evaluated at position at(t): what a lookUp at ``at`` fetches from register ``reg``."""
        return reg[self.rows, at]


@dataclass
class SearchResult:
    """Outcome of :func:`search_programs`: for each depth, the hop counts some program computes, and one
    witness program per count (as readable steps); ``n_programs`` counts the distinct programs tried."""

    found: dict[int, set[int]] = field(default_factory=dict)
    witnesses: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    n_programs: dict[int, int] = field(default_factory=dict)
    n_states: dict[int, int] = field(default_factory=dict)


def _key(reg: np.ndarray) -> bytes:
    return reg.tobytes()


def _hop_targets(x: np.ndarray, ks: list[int]) -> dict[int, np.ndarray]:
    """hop_k of every probe, with ⊥ (-1) at the start token's column 0."""
    return {k: np.concatenate([np.full((x.shape[0], 1), -1), hop(x, k)], axis=1) for k in ks}


def _candidate_ops(names: list[str], max_shift: int) -> list[tuple]:
    """Every head a layer may add: lookUp at t-d, lookUp at a register, lastOccurrence over two registers."""
    r = len(names)
    ops: list[tuple] = [("shift", d) for d in range(1, max_shift + 1)]
    ops += [("lookup", names[a]) for a in range(r)]
    ops += [("last", names[a], names[b]) for a in range(r) for b in range(r)]
    return ops


def _record_hits(result: SearchResult, depth: int, found: set[int], fresh: list[tuple[np.ndarray, str]],
                 program: list[tuple], probes: tuple, verify: tuple) -> None:
    """Add to ``found`` (and a witness to ``result``) every k whose hop_k a fresh register computes."""
    machine, targets = probes
    verifier, verify_targets = verify
    for k, target in targets.items():
        if k in found:
            continue
        for g, nm in fresh:
            if np.array_equal(machine.letter(g), target) and _verify(verifier, program, nm, verify_targets[k]):
                found.add(k)
                result.witnesses[(depth, k)] = [_describe(o) for o in program] + [f"answer: the letter at {nm}"]
                break


def search_programs(max_layers: int = 3, ks: range | list[int] = range(1, 9), n_seq: int = 48, n: int = 28,
                    alphabet_size: int = 4, max_shift: int = 3, seed: int = 0,
                    verify_seq: int = 400) -> SearchResult:
    """Exhaustive search over one-head-per-layer programs of lookUp / lastOccurrence (see module docstring).

    Programs are explored breadth-first, merging programs that produce the same set of register values on the
    probes. Returns which ``ks`` are computed at each depth 1..``max_layers``. A hop count that matches on the
    probes is re-checked on ``verify_seq`` fresh sequences of length 2n before it is reported.
    """
    max_layers = check_int("max_layers", max_layers, low=1, high=4)
    ks = [check_int("k", k, low=1) for k in ks]
    max_shift = check_int("max_shift", max_shift, low=1, high=6)
    x = probe_sequences(n_seq, n, alphabet_size, seed)
    machine = _Machine(x, alphabet_size)
    verify_x = probe_sequences(verify_seq, 2 * n, alphabet_size, seed + 1)
    probes = (machine, _hop_targets(x, ks))
    verify = (_Machine(verify_x, alphabet_size), _hop_targets(verify_x, ks))
    result = SearchResult()
    # a state: (list of register arrays, list of their recipes, program); recipes replay it on other data
    states = [([machine.pos.copy()], ["t"], [])]
    seen_sets: set[frozenset] = set()
    for depth in range(1, max_layers + 1):
        nxt, tried = [], 0
        found: set[int] = set(result.found.get(depth - 1, set()))  # a shallower program can idle a layer
        for k in found:
            result.witnesses.setdefault((depth, k), result.witnesses[(depth - 1, k)])
        for regs, names, steps in states:
            keys = {_key(g) for g in regs}
            for op in _candidate_ops(names, max_shift):
                tried += 1
                new_regs, new_names = _apply(machine, op, regs, names)
                fresh = [(g, nm) for g, nm in zip(new_regs, new_names, strict=True) if _key(g) not in keys]
                _record_hits(result, depth, found, fresh, steps + [op], probes, verify)
                if depth == max_layers:
                    continue
                all_regs = regs + [g for g, _ in fresh]
                sig = frozenset(_key(g) for g in all_regs)
                if sig not in seen_sets:
                    seen_sets.add(sig)
                    nxt.append((all_regs, names + [nm for _, nm in fresh], steps + [op]))
        result.found[depth], result.n_programs[depth], result.n_states[depth] = found, tried, len(states)
        states = nxt
    return result


def _apply(machine: _Machine, op: tuple, regs: list[np.ndarray], names: list[str]
           ) -> tuple[list[np.ndarray], list[str]]:
    by_name = dict(zip(names, regs, strict=True))
    if op[0] == "shift":
        at, at_name = machine.shift(op[1]), f"t-{op[1]}"
    elif op[0] == "lookup":
        at, at_name = by_name[op[1]], op[1]
    else:
        at = machine.last_occurrence(by_name[op[1]], by_name[op[2]])
        at_name = f"last[{op[2]}=={op[1]}]"
    new = [at] + [machine.compose(g, at) for g in regs]
    new_names = [at_name] + [f"{nm}∘({at_name})" for nm in names]
    return new, new_names


def _describe(op: tuple) -> str:
    if op[0] == "shift":
        return f"lookUp at t-{op[1]}"
    if op[0] == "lookup":
        return f"lookUp at {op[1]}"
    return f"lastOccurrence: latest j <= t with letter at {op[2]}(j) == letter at {op[1]}(t)"


def _replay(machine: _Machine, program: list[tuple]) -> dict[str, np.ndarray]:
    """Run ``program`` (ops refer to registers by recipe name) on other data, keeping every register."""
    regs, names = [machine.pos.copy()], ["t"]
    for op in program:
        new, new_names = _apply(machine, op, regs, names)
        for g, nm in zip(new, new_names, strict=True):
            if nm not in names:
                regs.append(g)
                names.append(nm)
    return dict(zip(names, regs, strict=True))


def _verify(machine: _Machine, program: list[tuple], name: str, target: np.ndarray) -> bool:
    """Re-run ``program`` on other data; the named register must again give hop_k everywhere.

    Registers are matched by recipe name, so a coincidence on the probes that does not survive fresh data
    fails here, as it should.
    """
    regs = _replay(machine, program)
    return name in regs and bool(np.array_equal(machine.letter(regs[name]), target))
