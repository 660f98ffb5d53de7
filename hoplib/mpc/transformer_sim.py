"""Theorem 3.1 (transformers simulate MPC): an MPC protocol run as a transformer, one layer per round.

Token i holds machine i's memory; a round's local step is a token-wise map (the theorem allows any) and its
delivery one routing layer of Lemma 3.2 (:class:`hoplib.mpc.routing.RoutingLayer`). Loading the input is one
more layer (input token t sends its word to its machine), so an R-round protocol takes R + 1 layers. Each
layer's delivery is checked against the simulator's direct delivery.

Each layer sizes its slots and key dimension from the traffic it carries, so the transformer is fitted to
one input, *not* one transformer valid for all inputs; :func:`input_independent_width` is the width that
would be (Lemma 3.2 with Fact B.2's worst case).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from hoplib.mpc.routing import PIECES, RoutingLayer, lemma_slots
from hoplib.mpc.simulator import Message, MPCProtocolError, MPCSimulator, Table, deliver_direct


def input_independent_width(num_tokens: int, memory: int, message_words: int) -> int:
    """Width of a routing layer that works for every round of every input: key dimension 16 s^2 ln N + 64
    plus m' = 12 s^4 ln N^2 slots of 4 + 4 beta words, s = ``memory`` (at most s messages per machine)."""
    s = memory
    return int(16 * s**2 * math.log(num_tokens)) + 64 + 1 + lemma_slots(s, num_tokens) * (4 + message_words * PIECES)


class TransformerMPC(MPCSimulator):
    """An :class:`MPCSimulator` whose messages travel through attention, one routing layer per round.

    ``layers`` counts the layers (1 to load the input, then 1 per round); ``layer_log`` records per layer the
    messages routed, the view bound b, the slots m', the width and whether delivery was exact (if not,
    :class:`MPCProtocolError` is raised)."""

    def __init__(self, num_machines: int, memory: int, *, audit: bool = False, device: str | torch.device = "cpu",
                 seed: int = 0, num_tokens: int | None = None):
        super().__init__(num_machines, memory, audit=audit)
        self.device, self.seed = device, seed
        self.num_tokens = max(num_machines, num_tokens or 0)
        self.layers = 0
        self.layer_log: list[dict] = []
        self._table_ids: dict[str, int] = {}

    def _route(self, src: np.ndarray, dest: np.ndarray, msg: np.ndarray, n_tokens: int) -> np.ndarray:
        """Route rows through one attention layer; returns the delivered rows [dest, msg...]."""
        self.layers += 1
        if len(src) == 0:
            self.layer_log.append({"layer": self.layers, "messages": 0, "exact": True})
            return np.zeros((0, 1 + msg.shape[1]), np.int64)
        sends, recvs = np.bincount(src, minlength=n_tokens), np.bincount(dest, minlength=n_tokens)
        pairs = np.unique(np.column_stack([dest, src]), axis=0)
        view = np.zeros(n_tokens, np.int64)  # packets a destination can see: all rows of its senders
        np.add.at(view, pairs[:, 0], sends[pairs[:, 1]])
        fan_out = int(np.bincount(pairs[:, 1], minlength=n_tokens).max())  # most destinations of one source
        s_route, width = int(max(sends.max(), recvs.max())), msg.shape[1]
        layer = RoutingLayer(n_tokens, s_route, width, max_view=int(view.max()), seed=self.seed + self.layers,
                             key_dim=int(16 * fan_out**2 * math.log(n_tokens)) + 64, device=self.device)
        res = layer.forward(src, dest, msg)
        sent, got = np.c_[dest, src, msg], np.c_[res.dest, res.src, res.msg]
        exact = sent.shape == got.shape and np.array_equal(sent[np.lexsort(sent.T[::-1])],
                                                           got[np.lexsort(got.T[::-1])])
        self.layer_log.append({"layer": self.layers, "messages": len(src), "s": s_route, "b": layer.b,
                               "slots": layer.slots, "width": layer.width, "key_dim": layer.d,
                               "message_words": width, "lemma_slots_for_s": lemma_slots(s_route, n_tokens),
                               "exact": bool(exact),
                               "input_independent_width": input_independent_width(n_tokens, self.s, width),
                               "max_offtarget_score": res.max_offtarget_score})
        if not exact:
            raise MPCProtocolError(f"layer {self.layers}: the routing layer lost or invented messages")
        return np.c_[res.dest, res.msg][np.lexsort((got[:, 1], got[:, 0]))]

    def _encode(self, batches: dict[str, Message]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All batches as one routing: rows [table id, words, data...] of a common width."""
        width = max((b.data.shape[1] for b in batches.values()), default=1)
        src, dest, msg = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros((0, 2 + width), np.int64)]
        for name, b in batches.items():
            if not np.issubdtype(b.data.dtype, np.integer) and len(b):
                raise TypeError(f"TransformerMPC routes integer words only; table {name!r} holds {b.data.dtype}")
            body = np.zeros((len(b), 2 + width), np.int64)
            body[:, 0] = self._table_ids.setdefault(name, len(self._table_ids))
            body[:, 1], body[:, 2:2 + b.data.shape[1]] = b.data.shape[1], b.data
            src.append(b.src)
            dest.append(b.dest)
            msg.append(body)
        return np.concatenate(src), np.concatenate(dest), np.concatenate(msg)

    def _decode(self, rows: np.ndarray) -> dict[str, Table]:
        names = {v: k for k, v in self._table_ids.items()}
        out = {}
        for tid in np.unique(rows[:, 1]):
            sel = rows[rows[:, 1] == tid]
            out[names[int(tid)]] = Table(sel[:, 0], sel[:, 3:3 + int(sel[0, 2])])
        return out

    def load(self, name: str, machine: np.ndarray, data: np.ndarray) -> None:
        """The input layer: input token t (row t of ``data``) sends its record to its machine's token."""
        data = np.asarray(data).reshape(len(data), -1)
        self.num_tokens = max(self.num_tokens, len(data))
        batch = Message(np.arange(len(data)), machine, data)
        routed = self._decode(self._route(*self._encode({name: batch}), self.num_tokens))
        got = routed.get(name, Table(np.zeros(0, np.int64), np.zeros((0, data.shape[1]), np.int64)))
        super().load(name, got.machine, got.data)

    def _deliver(self, keep: dict[str, Table], send: dict[str, Message], r: int) -> dict[str, Table]:
        routed = self._decode(self._route(*self._encode(send), self.num_tokens))
        msgs = {k: Message(np.zeros(len(v), np.int64), v.machine, v.data) for k, v in routed.items()}
        for k, v in send.items():  # empty batches still create their (empty) table, as in direct delivery
            msgs.setdefault(k, Message(np.zeros(0), np.zeros(0), np.zeros((0, v.data.shape[1]), np.int64)))
        return deliver_direct(keep, msgs, r)


def hop_as_transformer(x, k: int, memory: int, *, device: str | torch.device = "cpu",
                       seed: int = 0) -> tuple[np.ndarray, TransformerMPC]:
    """:func:`hoplib.mpc.protocols.hop_protocol` run as a transformer (Theorem 3.1): the answer and the
    :class:`TransformerMPC`, whose ``layers`` is ``stats.rounds + 1``."""
    from hoplib.mpc.protocols import hop_protocol

    made: list[TransformerMPC] = []

    def machines(q: int, s: int, audit: bool = False) -> TransformerMPC:
        made.append(TransformerMPC(q, s, audit=audit, device=device, seed=seed, num_tokens=len(x)))
        return made[0]

    answer, _ = hop_protocol(x, k, memory, seed=seed, simulator=machines)
    return answer, made[0]
