"""An MPC simulator that enforces the model (Section 2 of the paper): q machines with s words each.

Memory is a set of named tables of records. A round's local step is written once for all machines:
``step(ctx, mem)`` returns ``(keep, send)``, the kept tables and the messages (delivered into the table of the
same name). Holding, sending or receiving more than s words raises :class:`MPCLimitError`; ``audit=True``
reruns each step machine by machine, so that a vectorised step cannot read another machine's memory.
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


@dataclass
class RoundContext:
    """The round (1-based), q, s, and ``active``: the machines this call computes for (one in an audit)."""

    round: int
    num_machines: int
    memory: int
    active: np.ndarray


@dataclass
class MPCStats:
    """Rounds, the largest memory of any machine, words sent per round, rounds per phase."""

    num_machines: int
    memory: int
    rounds: int = 0
    max_memory: int = 0
    words_per_round: list[int] = field(default_factory=list)
    phases: dict[str, int] = field(default_factory=dict)
    converged: bool | None = None  # iterative protocols: did the output settle before the limit?

    @property
    def total_words(self) -> int:
        return int(sum(self.words_per_round))


Step = Callable[[RoundContext, dict[str, Table]], tuple[dict[str, Table], dict[str, Message]]]
Local = Callable[[RoundContext, dict[str, Table]], dict[str, Table]]


class MPCSimulator:
    """q machines with s words of memory each, run round by round (Section 2; Andoni et al. 2018).
    ``audit=True`` reruns every step machine by machine to check locality, to ``float_tol`` for floats."""

    def __init__(self, num_machines: int, memory: int, *, audit: bool = False, float_tol: float = 1e-9):
        self.q, self.s, self.audit, self.float_tol = num_machines, memory, audit, float_tol
        self.mem: dict[str, Table] = {}
        self.stats = MPCStats(self.q, self.s)
        self._phase: str | None = None
        self._pending: list[Local] = []

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
        return self.mem.get(name, Table([], np.zeros((0, 1), np.int64)))

    def phase(self, name: str | None) -> None:
        """Label the following rounds (for the per-phase round counts in the stats)."""
        self._phase = name

    def defer(self, local: Local) -> None:
        """Queue a local computation ``mem -> mem``; it runs at the start of the next round's step."""
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
        words = np.zeros(self.q, np.int64)
        for ids, width in batches:
            words += np.bincount(ids, minlength=self.q) * width
        m = int(words.argmax())
        if words[m] > self.s:
            raise MPCLimitError(kind, r, m, self.s, int(words[m]))
        return words

    def round(self, step: Step) -> None:
        """One round: the queued local computations and the step on every
        machine, then all messages delivered at once."""
        pending, self._pending = self._pending, []

        def local_step(ctx: RoundContext, mem: dict[str, Table]):
            for local in pending:
                mem = local(ctx, mem)
            return step(ctx, mem)

        r = self.stats.rounds + 1
        ctx = RoundContext(r, self.q, self.s, np.arange(self.q))
        keep, send = local_step(ctx, dict(self.mem))
        for name, t in keep.items():
            self._check_addresses(t.machine, f"kept table {name!r}")
        for name, msg in send.items():
            self._check_addresses(np.r_[msg.src, msg.dest], f"message {name!r}")
        if self.audit:
            self._audit(local_step, r, keep, send)
        out = [(m.src, m.data.shape[1]) for m in send.values()]
        sent = self._check_limit("send", out, r)
        into = [(m.dest, m.data.shape[1]) for m in send.values()]
        self._check_limit("receive", into, r)
        new = self._deliver(keep, send)
        held = [(t.machine, t.width) for t in new.values()]
        held = self._check_limit("memory", held, r)
        self.mem = new
        st = self.stats
        st.rounds, st.max_memory = r, max(st.max_memory, int(held.max()))
        st.words_per_round.append(int(sent.sum()))
        if self._phase is not None:
            st.phases[self._phase] = st.phases.get(self._phase, 0) + 1

    def _deliver(self, keep: dict[str, Table], send: dict[str, Message]) -> dict[str, Table]:
        """Append each message batch to the table of its name at the destinations."""
        new = dict(keep)
        for name, msg in send.items():
            t, old = Table(msg.dest, msg.data), new.get(name)
            if old is not None and len(old):
                t = Table(np.r_[old.machine, t.machine], np.concatenate([old.data, t.data])) if len(t) else old
            if len(t) or name in new:
                new[name] = t
        return new

    def _audit(self, step: Step, r: int, keep: dict[str, Table], send: dict[str, Message]) -> None:
        """Rerun ``step`` on each machine's memory alone; the union must equal the batched result."""
        alone: dict[tuple[str, str], list] = {}
        for m in range(self.q):
            local = {k: Table(t.machine[t.machine == m], t.data[t.machine == m]) for k, t in self.mem.items()}
            k_m, s_m = step(RoundContext(r, self.q, self.s, np.array([m])), local)
            for name, t in k_m.items():
                if np.any(t.machine != m):
                    raise MPCProtocolError(f"round {r}: machine {m}'s local step put records of table "
                                           f"{name!r} on another machine without a message")
                alone.setdefault(("keep", name), []).append((t.machine[:, None], t.data))
            for name, msg in s_m.items():
                if np.any(msg.src != m):
                    raise MPCProtocolError(f"round {r}: machine {m} sent messages {name!r} in another "
                                           f"machine's name")
                alone.setdefault(("send", name), []).append((np.c_[msg.src, msg.dest], msg.data))
        batched = {("keep", k): [(t.machine[:, None], t.data)] for k, t in keep.items()}
        batched.update({("send", k): [(np.c_[m.src, m.dest], m.data)] for k, m in send.items()})
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
