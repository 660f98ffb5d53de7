"""An MPC simulator that enforces the model (Section 2 of the paper): q machines with s words each.

Memory is a set of named tables of records (a record is a few words; a word is an int64, or a float64 for
Theorem 3.4's tables). A round's local step is written once for all machines: ``step(ctx, mem)`` returns
``(keep, send)``, the tables every machine keeps and the messages it sends (delivered into the table of the
same name at the destination). A machine that holds, sends or receives more than s words raises
:class:`MPCLimitError`. ``audit=True`` reruns each step machine by machine and checks that the union equals
the batched result, so that a vectorised step cannot read another machine's memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


class MPCLimitError(Exception):
    """A machine held, sent or received more than s words in one round."""

    def __init__(self, kind: str, round: int, machine: int, limit: int, amount: int):
        self.kind, self.round, self.machine, self.limit, self.amount = kind, round, machine, limit, amount
        verb = {"memory": "holds", "send": "sends", "receive": "receives"}[kind]
        super().__init__(f"round {round}: machine {machine} {verb} {amount} words, over the {kind} limit of "
                         f"{limit} words")


class MPCProtocolError(Exception):
    """A protocol broke the model in another way: a bad address, or a step that is not local."""


class MPCNotConvergedError(RuntimeError):
    """An iterative protocol hit its iteration limit; ``labels`` and ``stats`` hold the unfinished run."""

    def __init__(self, message: str, labels: np.ndarray, stats: MPCStats):
        super().__init__(message)
        self.labels, self.stats = labels, stats


def _rows(data, n: int) -> np.ndarray:
    """``data`` as n records of w words, (n, w); a 1-D array is one word per record."""
    d = np.asarray(data)
    d = d.reshape(-1, 1) if d.ndim == 1 else d
    if d.ndim != 2 or len(d) != n:
        raise ValueError(f"data must have shape ({n}, w), got {d.shape}")
    return d


@dataclass
class Table:
    """Records held by machines: ``machine`` (n,) and ``data`` (n, w), w words per record."""

    machine: np.ndarray
    data: np.ndarray

    def __post_init__(self) -> None:
        self.machine = np.asarray(self.machine, dtype=np.int64).reshape(-1)
        self.data = _rows(self.data, len(self.machine))

    @property
    def width(self) -> int:
        return self.data.shape[1]

    def __len__(self) -> int:
        return len(self.machine)

    def select(self, mask: np.ndarray) -> Table:
        return Table(self.machine[mask], self.data[mask])


@dataclass
class Message:
    """Addressed messages: ``src`` and ``dest`` (n,) machine ids and ``data`` (n, w)."""

    src: np.ndarray
    dest: np.ndarray
    data: np.ndarray

    def __post_init__(self) -> None:
        self.src = np.asarray(self.src, dtype=np.int64).reshape(-1)
        self.dest = np.asarray(self.dest, dtype=np.int64).reshape(-1)
        self.data = _rows(self.data, len(self.src))
        if len(self.dest) != len(self.src):
            raise ValueError(f"{len(self.src)} sources but {len(self.dest)} destinations")

    def __len__(self) -> int:
        return len(self.src)


@dataclass
class RoundContext:
    """What every machine knows: the round (1-based), q, s, and ``active``, the machines this call computes
    for (all of them in a batched call, one in an audit call)."""

    round: int
    num_machines: int
    memory: int
    active: np.ndarray


@dataclass
class MPCStats:
    """Rounds, the largest memory of any machine, words moved per round, rounds per phase."""

    num_machines: int
    memory: int
    rounds: int = 0
    max_memory: int = 0
    words_per_round: list[int] = field(default_factory=list)
    max_sent_per_round: list[int] = field(default_factory=list)
    max_received_per_round: list[int] = field(default_factory=list)
    phases: dict[str, int] = field(default_factory=dict)
    converged: bool | None = None  # iterative protocols: did the output settle before the limit?

    @property
    def total_words(self) -> int:
        return int(sum(self.words_per_round))

    def as_dict(self) -> dict:
        return {"num_machines": self.num_machines, "memory": self.memory, "rounds": self.rounds,
                "max_memory": self.max_memory, "total_words": self.total_words,
                "max_words_per_round": max(self.words_per_round, default=0), "phases": dict(self.phases),
                "converged": self.converged}


Step = Callable[[RoundContext, dict[str, Table]], tuple[dict[str, Table], dict[str, Message]]]


def words_per_machine(batches, q: int) -> np.ndarray:
    """Words per machine of batches ``(machine ids, words per record)``."""
    total = np.zeros(q, dtype=np.int64)
    for ids, width in batches:
        total += np.bincount(ids, minlength=q)[:q] * width
    return total


class MPCSimulator:
    """q machines with s words of memory each, run round by round (Section 2; Andoni et al. 2018).

    ``audit=True`` reruns every step machine by machine to check locality (slow: for tests);
    ``float_tol`` is that comparison's tolerance for float tables.
    """

    def __init__(self, num_machines: int, memory: int, *, audit: bool = False, float_tol: float = 1e-9):
        self.q, self.s, self.audit, self.float_tol = num_machines, memory, audit, float_tol
        self.mem: dict[str, Table] = {}
        self.stats = MPCStats(self.q, self.s)
        self._phase: str | None = None
        self._pending: list[Callable[[RoundContext, dict[str, Table]], dict[str, Table]]] = []

    def load(self, name: str, machine: np.ndarray, data: np.ndarray) -> None:
        """Place input records before round 1."""
        t = Table(machine, data)
        self._check_addresses(t.machine, "load")
        if name in self.mem:
            old = self.mem[name]
            t = Table(np.concatenate([old.machine, t.machine]), np.concatenate([old.data, t.data]))
        self.mem[name] = t
        held = self._check_limit("memory", [(t.machine, t.width) for t in self.mem.values()], 0)
        self.stats.max_memory = max(self.stats.max_memory, int(held.max()))

    def table(self, name: str) -> Table:
        """The table ``name`` as it is now (empty if absent)."""
        return self.mem.get(name, Table(np.zeros(0, np.int64), np.zeros((0, 1), np.int64)))

    def phase(self, name: str | None) -> None:
        """Label the following rounds (for the per-phase round counts in the stats)."""
        self._phase = name

    def defer(self, local: Callable[[RoundContext, dict[str, Table]], dict[str, Table]]) -> None:
        """Queue a purely local computation ``mem -> mem``; it runs at the start of the next round's step."""
        self._pending.append(local)

    def finish(self) -> None:
        """Run queued local computations in one last round with no messages (counted as a round)."""
        if self._pending:
            self.round(lambda ctx, mem: (mem, {}))

    def _check_addresses(self, ids: np.ndarray, what: str) -> None:
        bad = ids[(ids < 0) | (ids >= self.q)]
        if len(bad):
            raise MPCProtocolError(f"round {self.stats.rounds + 1}: {what} names machine {bad[0]}, but "
                                   f"machines are 0..{self.q - 1}")

    def _check_limit(self, kind: str, batches, r: int) -> np.ndarray:
        words = words_per_machine(batches, self.q)
        m = int(words.argmax())
        if words[m] > self.s:
            raise MPCLimitError(kind, r, m, self.s, int(words[m]))
        return words

    def round(self, step: Step) -> None:
        """One round: the local step on every machine, then all messages delivered at once."""
        step = self._with_pending(step)
        r = self.stats.rounds + 1
        keep, send = step(RoundContext(r, self.q, self.s, np.arange(self.q)), dict(self.mem))
        keep = {k: v for k, v in keep.items() if v is not None}
        for name, t in keep.items():
            self._check_addresses(t.machine, f"kept table {name!r}")
        for name, msg in send.items():
            self._check_addresses(np.r_[msg.src, msg.dest], f"message {name!r}")
        if self.audit:
            self._audit(step, r, keep, send)
        sent = self._check_limit("send", [(m.src, m.data.shape[1]) for m in send.values()], r)
        recv = self._check_limit("receive", [(m.dest, m.data.shape[1]) for m in send.values()], r)
        new = self._deliver(keep, send, r)
        held = self._check_limit("memory", [(t.machine, t.width) for t in new.values()], r)
        self.mem = new
        st = self.stats
        st.rounds, st.max_memory = r, max(st.max_memory, int(held.max()))
        st.words_per_round.append(int(sent.sum()))
        st.max_sent_per_round.append(int(sent.max()))
        st.max_received_per_round.append(int(recv.max()))
        if self._phase is not None:
            st.phases[self._phase] = st.phases.get(self._phase, 0) + 1

    def _with_pending(self, step: Step) -> Step:
        pending, self._pending = self._pending, []
        if not pending:
            return step

        def with_local(ctx: RoundContext, mem: dict[str, Table]):
            for fn in pending:
                mem = fn(ctx, mem)
            return step(ctx, mem)

        return with_local

    def _deliver(self, keep: dict[str, Table], send: dict[str, Message], r: int) -> dict[str, Table]:
        return deliver_direct(keep, send, r)

    def _audit(self, step: Step, r: int, keep: dict[str, Table], send: dict[str, Message]) -> None:
        """Rerun ``step`` on each machine's memory alone; the union must equal the batched result."""
        kept: dict[str, list] = {}
        sent: dict[str, list] = {}
        for m in range(self.q):
            local = {k: t.select(t.machine == m) for k, t in self.mem.items()}
            k_m, s_m = step(RoundContext(r, self.q, self.s, np.array([m])), local)
            for name, t in k_m.items():
                if t is not None and np.any(t.machine != m):
                    raise MPCProtocolError(f"round {r}: machine {m}'s local step put records of table "
                                           f"{name!r} on another machine without a message")
                if t is not None:
                    kept.setdefault(name, []).append((t.machine[:, None], t.data))
            for name, msg in s_m.items():
                if np.any(msg.src != m):
                    raise MPCProtocolError(f"round {r}: machine {m} sent messages {name!r} in another "
                                           f"machine's name")
                sent.setdefault(name, []).append((np.c_[msg.src, msg.dest], msg.data))
        batched = {("keep", k): [(t.machine[:, None], t.data)] for k, t in keep.items()}
        batched.update({("send", k): [(np.c_[m.src, m.dest], m.data)] for k, m in send.items()})
        alone = {("keep", k): v for k, v in kept.items()} | {("send", k): v for k, v in sent.items()}
        for key in set(batched) | set(alone):
            a, b = _canon(alone.get(key, [])), _canon(batched.get(key, []))
            if a.shape != b.shape or not np.allclose(a, b, rtol=self.float_tol, atol=self.float_tol):
                raise MPCProtocolError(f"round {r}: the step is not local: run machine by machine, table "
                                       f"{key[1]!r} differs from the batched run")


def _canon(parts: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The rows ``[keys | data]`` of all parts in lexicographic order (a multiset of records)."""
    rows = [np.c_[k.astype(np.float64), d.astype(np.float64)] for k, d in parts if len(k)]
    if not rows:
        return np.zeros((0, 0))
    m = np.concatenate(rows)
    return m[np.lexsort(m.T[::-1])]


def deliver_direct(keep: dict[str, Table], send: dict[str, Message], r: int) -> dict[str, Table]:
    """The simulator's delivery: append each message batch to the table of its name at the destinations."""
    new = dict(keep)
    for name, msg in send.items():
        t, old = Table(msg.dest, msg.data), new.get(name)
        if old is not None and len(old) and len(t) and old.width != t.width:
            raise MPCProtocolError(f"round {r}: message {name!r} has {t.width} words per record but the kept "
                                   f"table has {old.width}")
        if old is not None and len(old):
            t = Table(np.r_[old.machine, t.machine], np.concatenate([old.data, t.data])) if len(t) else old
        if len(t) or name in new:
            new[name] = t
    return new
