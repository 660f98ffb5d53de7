"""A Massively Parallel Computation (MPC) simulator that enforces the model (Section 2 of the paper).

q machines, each with a local memory of s words. A round: every machine applies a local function to its
memory and emits addressed messages; the simulator delivers every message at once. A machine that holds
more than s words, or sends or receives more than s words in one round, makes the simulator raise
:class:`MPCLimitError` naming the round, the machine, the limit and the amount.

Memory is a set of named tables. A :class:`Table` is a batch of records, each a fixed number of words (the
columns of ``data``), with the id of the machine that holds it. A word is one array entry (the paper's
p = Theta(log N) bits: an int64, or a float64 for the real-valued tables of Theorem 3.4).

The local step of a round is written *vectorised*: ``step(ctx, mem)`` receives all machines' tables at once
and returns ``(keep, send)``: the tables each machine keeps and a dict of :class:`Message` batches (source,
destination, data) delivered into the table of that name at the destination. So that a vectorised step
cannot cheat (read another machine's memory, or move a record without a message), ``audit=True`` re-runs the
step on every machine's memory *alone* and checks that the union of those runs equals the batched result,
and that each machine only kept and sent records as itself. Tests run protocols with the audit on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hoplib._book.validate import check_int


class MPCLimitError(Exception):
    """A machine broke a limit of the MPC model: memory, words sent or words received in one round."""

    def __init__(self, kind: str, round: int, machine: int, limit: int, amount: int):
        self.kind, self.round, self.machine, self.limit, self.amount = kind, round, machine, limit, amount
        verb = {"memory": "holds", "send": "sends", "receive": "receives"}[kind]
        super().__init__(f"round {round}: machine {machine} {verb} {amount} words, over the {kind} limit of "
                         f"{limit} words")


class MPCProtocolError(Exception):
    """A protocol broke the rules of the model in another way: a bad address, or a non-local step."""


class MPCNotConvergedError(RuntimeError):
    """An iterative protocol stopped at its iteration limit before its output settled.

    ``labels`` (the unfinished output) and ``stats`` (with ``converged = False``) are kept on the exception.
    """

    def __init__(self, message: str, labels: np.ndarray, stats: MPCStats):
        super().__init__(message)
        self.labels, self.stats = labels, stats


@dataclass
class Table:
    """Records held by machines: ``machine`` (n,) int64 and ``data`` (n, w); each record is w words."""

    machine: np.ndarray
    data: np.ndarray

    def __post_init__(self) -> None:
        self.machine = np.asarray(self.machine, dtype=np.int64).reshape(-1)
        d = np.asarray(self.data)
        if d.ndim == 1:
            d = d.reshape(-1, 1)
        if d.ndim != 2 or d.shape[0] != self.machine.shape[0]:
            raise ValueError(f"Table data must have shape (n, w) with n = len(machine) = {self.machine.shape[0]}, "
                             f"got {d.shape}")
        self.data = d

    @property
    def width(self) -> int:
        return self.data.shape[1]

    def __len__(self) -> int:
        return self.machine.shape[0]

    def select(self, mask: np.ndarray) -> Table:
        return Table(self.machine[mask], self.data[mask])


@dataclass
class Message:
    """Addressed messages: ``src`` and ``dest`` (n,) machine ids and ``data`` (n, w), w words each."""

    src: np.ndarray
    dest: np.ndarray
    data: np.ndarray

    def __post_init__(self) -> None:
        self.src = np.asarray(self.src, dtype=np.int64).reshape(-1)
        self.dest = np.asarray(self.dest, dtype=np.int64).reshape(-1)
        d = np.asarray(self.data)
        if d.ndim == 1:
            d = d.reshape(-1, 1)
        if d.ndim != 2 or not (d.shape[0] == self.src.shape[0] == self.dest.shape[0]):
            raise ValueError(f"Message src, dest and data must have the same length, got {self.src.shape}, "
                             f"{self.dest.shape}, {d.shape}")
        self.data = d

    def __len__(self) -> int:
        return self.src.shape[0]


@dataclass
class RoundContext:
    """What every machine knows in a round: the round number (1-based), q, s, and its own id.

    ``active`` holds the ids of the machines this call of the step computes for: all of them in a batched
    call, one in an audit call. A step that acts on machine ids rather than on records must use it.
    """

    round: int
    num_machines: int
    memory: int
    active: np.ndarray


@dataclass
class MPCStats:
    """Per-run statistics: rounds, the largest memory of any machine, and words moved per round."""

    num_machines: int
    memory: int
    rounds: int = 0
    max_memory: int = 0
    words_per_round: list[int] = field(default_factory=list)
    max_sent_per_round: list[int] = field(default_factory=list)
    max_received_per_round: list[int] = field(default_factory=list)
    phases: dict[str, int] = field(default_factory=dict)
    converged: bool | None = None
    """For iterative protocols: whether the output settled before the iteration limit (None: not iterative)."""

    @property
    def total_words(self) -> int:
        return int(sum(self.words_per_round))

    def as_dict(self) -> dict:
        return {"num_machines": self.num_machines, "memory": self.memory, "rounds": self.rounds,
                "max_memory": self.max_memory, "total_words": self.total_words,
                "max_words_per_round": max(self.words_per_round, default=0), "phases": dict(self.phases),
                "converged": self.converged}


Step = Callable[[RoundContext, dict[str, Table]], tuple[dict[str, Table], dict[str, Message]]]


def _words_per_machine(tables: dict[str, Table], q: int) -> np.ndarray:
    total = np.zeros(q, dtype=np.int64)
    for t in tables.values():
        if len(t):
            total += np.bincount(t.machine, minlength=q)[:q] * t.width
    return total


def _canon(a: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Rows of ``[keys | a]`` in lexicographic order (for comparing multisets of records)."""
    n = len(keys)
    m = np.column_stack([keys.reshape(n, -1).astype(np.float64), a.reshape(n, -1).astype(np.float64)])
    order = np.lexsort(m.T[::-1])
    return m[order]


class MPCSimulator:
    """q machines with s words of memory each, run round by round (Section 2; Andoni et al. 2018).

    ``audit=True`` checks locality of every step by re-running it machine by machine (slow: for tests).
    ``float_tol`` is the tolerance of that comparison for float tables (summation order may differ).
    """

    def __init__(self, num_machines: int, memory: int, *, audit: bool = False, float_tol: float = 1e-9):
        self.q = check_int("num_machines", num_machines, low=1)
        self.s = check_int("memory", memory, low=1)
        self.audit = bool(audit)
        self.float_tol = float(float_tol)
        self.mem: dict[str, Table] = {}
        self.stats = MPCStats(self.q, self.s)
        self._phase: str | None = None
        self._pending: list[Callable[[RoundContext, dict[str, Table]], dict[str, Table]]] = []

    # ------------------------------------------------------------------ loading and reading
    def load(self, name: str, machine: np.ndarray, data: np.ndarray) -> None:
        """Place input records before round 1 (the input starts spread over the first machines)."""
        t = Table(machine, data)
        self._check_addresses(t.machine, "load")
        if name in self.mem:
            old = self.mem[name]
            t = Table(np.concatenate([old.machine, t.machine]), np.concatenate([old.data, t.data]))
        self.mem[name] = t
        self._check_memory(self.mem, round_=0)

    def table(self, name: str) -> Table:
        """The table ``name`` as it is now (empty if absent)."""
        return self.mem.get(name, Table(np.zeros(0, np.int64), np.zeros((0, 1), np.int64)))

    def phase(self, name: str | None) -> None:
        """Label the following rounds (for the per-phase round counts in the stats)."""
        self._phase = name

    # ------------------------------------------------------------------ checks
    def _check_addresses(self, ids: np.ndarray, what: str) -> None:
        if len(ids) and (ids.min() < 0 or ids.max() >= self.q):
            bad = int(ids[(ids < 0) | (ids >= self.q)][0])
            raise MPCProtocolError(f"round {self.stats.rounds + 1}: {what} names machine {bad}, but machines "
                                   f"are 0..{self.q - 1}")

    def _check_memory(self, tables: dict[str, Table], round_: int) -> None:
        words = _words_per_machine(tables, self.q)
        m = int(words.argmax()) if len(words) else 0
        if words[m] > self.s:
            raise MPCLimitError("memory", round_, m, self.s, int(words[m]))
        self.stats.max_memory = max(self.stats.max_memory, int(words[m]))

    def defer(self, local: Callable[[RoundContext, dict[str, Table]], dict[str, Table]]) -> None:
        """Queue a purely local computation ``mem -> mem``; it runs at the start of the next round's step."""
        self._pending.append(local)

    def finish(self) -> None:
        """Run queued local computations in one last round with no messages (counted as a round)."""
        if self._pending:
            self.round(lambda ctx, mem: (mem, {}))

    # ------------------------------------------------------------------ one round
    def round(self, step: Step) -> None:
        """Run one round: local step on every machine, then simultaneous delivery of all messages."""
        pending, self._pending = self._pending, []
        if pending:
            inner = step

            def step(ctx: RoundContext, mem: dict[str, Table]):
                for fn in pending:
                    mem = fn(ctx, mem)
                return inner(ctx, mem)

        r = self.stats.rounds + 1
        ctx = RoundContext(r, self.q, self.s, np.arange(self.q))
        keep, send = step(ctx, dict(self.mem))
        keep = {k: v for k, v in keep.items() if v is not None}
        for name, t in keep.items():
            self._check_addresses(t.machine, f"kept table {name!r}")
        if self.audit:
            self._audit(step, ctx, keep, send)
        sent = np.zeros(self.q, dtype=np.int64)
        recv = np.zeros(self.q, dtype=np.int64)
        for name, msg in send.items():
            self._check_addresses(msg.src, f"message {name!r} source")
            self._check_addresses(msg.dest, f"message {name!r} destination")
            w = msg.data.shape[1]
            sent += np.bincount(msg.src, minlength=self.q) * w
            recv += np.bincount(msg.dest, minlength=self.q) * w
        for kind, arr in (("send", sent), ("receive", recv)):
            m = int(arr.argmax())
            if arr[m] > self.s:
                raise MPCLimitError(kind, r, m, self.s, int(arr[m]))
        new = self._deliver(keep, send, r)
        self._check_memory(new, r)
        self.mem = new
        self.stats.rounds = r
        self.stats.words_per_round.append(int(sent.sum()))
        self.stats.max_sent_per_round.append(int(sent.max()))
        self.stats.max_received_per_round.append(int(recv.max()))
        if self._phase is not None:
            self.stats.phases[self._phase] = self.stats.phases.get(self._phase, 0) + 1

    def _deliver(self, keep: dict[str, Table], send: dict[str, Message], r: int) -> dict[str, Table]:
        """Put every message into the table of its name at its destination (all at once)."""
        return deliver_direct(keep, send, r)

    def _audit(self, step: Step, ctx: RoundContext, keep: dict[str, Table], send: dict[str, Message]) -> None:
        """Re-run ``step`` on each machine's memory alone; the union must equal the batched result."""
        per_keep: dict[str, list] = {}
        per_send: dict[str, list] = {}
        for m in range(self.q):
            local = {k: t.select(t.machine == m) for k, t in self.mem.items()}
            k_m, s_m = step(RoundContext(ctx.round, ctx.num_machines, ctx.memory, np.array([m])), local)
            for name, t in k_m.items():
                if t is None:
                    continue
                if len(t) and np.any(t.machine != m):
                    raise MPCProtocolError(f"round {ctx.round}: machine {m}'s local step put records of table "
                                           f"{name!r} on another machine without a message")
                per_keep.setdefault(name, []).append(t)
            for name, msg in s_m.items():
                if len(msg) and np.any(msg.src != m):
                    raise MPCProtocolError(f"round {ctx.round}: machine {m} sent messages {name!r} in another "
                                           f"machine's name")
                per_send.setdefault(name, []).append(msg)

        def same(name: str, a_keys, a_data, b_keys, b_data) -> None:
            if len(a_keys) == 0 and len(b_keys) == 0:
                return
            ca, cb = _canon(a_data, a_keys), _canon(b_data, b_keys)
            if ca.shape != cb.shape or not np.allclose(ca, cb, rtol=self.float_tol, atol=self.float_tol):
                raise MPCProtocolError(f"round {ctx.round}: the step is not local: run machine by machine, "
                                       f"table {name!r} differs from the batched run")

        for name in set(keep) | set(per_keep):
            b = keep.get(name)
            parts = per_keep.get(name, [])
            pk = np.concatenate([t.machine for t in parts]) if parts else np.zeros(0, np.int64)
            pd = np.concatenate([t.data for t in parts]) if parts else np.zeros((0, 1))
            same(name, pk, pd, b.machine if b is not None else np.zeros(0, np.int64),
                 b.data if b is not None else np.zeros((0, 1)))
        for name in set(send) | set(per_send):
            b = send.get(name)
            parts = per_send.get(name, [])
            keys = np.concatenate([np.column_stack([p.src, p.dest]) for p in parts]) if parts else np.zeros((0, 2))
            pd = np.concatenate([p.data for p in parts]) if parts else np.zeros((0, 1))
            bk = np.column_stack([b.src, b.dest]) if b is not None else np.zeros((0, 2))
            bd = b.data if b is not None else np.zeros((0, 1))
            same(name, keys, pd, bk, bd)


def deliver_direct(keep: dict[str, Table], send: dict[str, Message], r: int) -> dict[str, Table]:
    """The simulator's delivery: append each message batch to the table of its name at the destinations."""
    new = dict(keep)
    for name, msg in send.items():
        if len(msg) == 0 and name not in new:
            continue
        t = Table(msg.dest, msg.data)
        if name in new:
            old = new[name]
            if old.width != t.width and len(old) and len(t):
                raise MPCProtocolError(f"round {r}: message {name!r} has {t.width} words per record but the "
                                       f"kept table has {old.width}")
            if len(old) == 0:
                old = Table(old.machine, np.zeros((0, t.width), dtype=t.data.dtype))
            if len(t) == 0:
                t = Table(t.machine, np.zeros((0, old.width), dtype=old.data.dtype))
            t = Table(np.concatenate([old.machine, t.machine]),
                      np.concatenate([old.data, t.data.astype(np.result_type(old.data, t.data))]))
        new[name] = t
    return new
