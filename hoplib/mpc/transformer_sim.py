"""Theorem 3.1 (transformers simulate MPC): an MPC protocol run as a transformer, one layer per round.

Token i holds machine i's memory. A round's local step is a token-wise map (the theorem allows arbitrary
token-wise functions, folded into the next layer's Q/K/V maps), and a round's delivery is one routing
attention layer of Lemma 3.2 (:class:`hoplib.mpc.routing.RoutingLayer`). Loading the input is one more
routing layer (input token t sends its word to its machine's token), so an R-round protocol takes R + 1
layers, as in the theorem. Each layer's delivery is compared with the simulator's direct delivery.

Width: each layer sizes its slot matrix and its key dimension from the traffic it carries (b = the most
packets one destination can see, and the most destinations one source writes to), so the transformer built here
is fitted to one input: it is *not* one transformer valid for all inputs. The theorem's width is the worst case
over all routings (b = s^2, m' = 12 b^2 ln N^2, key dimension 16 s^2 ln N), which the layer log reports beside
it (:func:`input_independent_width`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from hoplib._book.validate import check_int
from hoplib.mpc.routing import PIECES, RoutingLayer, lemma_slots
from hoplib.mpc.simulator import Message, MPCProtocolError, MPCSimulator, Table, deliver_direct


def input_independent_width(num_tokens: int, memory: int, message_words: int) -> int:
    """Width of one routing layer that works for *every* round of every input (Lemma 3.2 with Fact B.2):
    key dimension 16 s^2 ln N + 64, plus m' = 12 s^4 ln N^2 slots of (4 + 4 beta) words, s = ``memory``
    (a machine sends and receives at most s words, so at most s messages). This is the width a single
    transformer valid for all inputs needs; :class:`TransformerMPC` fits its layers to one input instead."""
    n = check_int("num_tokens", num_tokens, low=2)
    s = check_int("memory", memory, low=1)
    beta = check_int("message_words", message_words, low=1)
    return int(16 * s**2 * math.log(n)) + 64 + 1 + lemma_slots(s, n) * (4 + beta * PIECES)


class TransformerMPC(MPCSimulator):
    """An :class:`MPCSimulator` whose messages travel through attention: one routing layer per round.

    ``layers`` counts attention layers (1 for loading the input, plus 1 per round); ``layer_log`` records,
    per layer, the messages routed, the view bound b, the slots m', the width m and whether the routed
    messages equal the direct delivery (a mismatch raises :class:`MPCProtocolError`).
    """

    def __init__(self, num_machines: int, memory: int, *, audit: bool = False, device: str | torch.device = "cpu",
                 seed: int = 0, num_tokens: int | None = None):
        super().__init__(num_machines, memory, audit=audit)
        self.device = device
        self.seed = seed
        self.num_tokens = max(num_machines, num_tokens or 0)
        self.layers = 0
        self.layer_log: list[dict] = []
        self._table_ids: dict[str, int] = {}

    # ------------------------------------------------------------------ encoding
    def _tid(self, name: str) -> int:
        return self._table_ids.setdefault(name, len(self._table_ids))

    def _route(self, src: np.ndarray, dest: np.ndarray, msg: np.ndarray, n_tokens: int) -> np.ndarray:
        """Route rows through one attention layer; returns the delivered (dest, msg) rows."""
        self.layers += 1
        if len(src) == 0:
            self.layer_log.append({"layer": self.layers, "messages": 0, "exact": True})
            return np.zeros((0, 1 + msg.shape[1]), np.int64)
        sends = np.bincount(src, minlength=n_tokens)
        recvs = np.bincount(dest, minlength=n_tokens)
        s_route = int(max(sends.max(), recvs.max()))
        view = np.zeros(n_tokens, np.int64)  # packets a destination can see: all rows of its senders
        pairs = np.unique(np.column_stack([dest, src]), axis=0)
        np.add.at(view, pairs[:, 0], sends[pairs[:, 1]])
        b = int(view.max())
        fan_out = int(np.bincount(pairs[:, 1], minlength=n_tokens).max())  # most destinations of one source
        layer = RoutingLayer(n_tokens, s_route, msg.shape[1], max_view=b, seed=self.seed + self.layers,
                             key_dim=int(16 * fan_out**2 * math.log(n_tokens)) + 64, device=self.device)
        res = layer.forward(src, dest, msg)
        sent = np.column_stack([dest, src, msg])
        got = np.column_stack([res.dest, res.src, res.msg])
        exact = sent.shape == got.shape and np.array_equal(sent[np.lexsort(sent.T[::-1])],
                                                           got[np.lexsort(got.T[::-1])])
        self.layer_log.append({"layer": self.layers, "messages": int(len(src)), "s": s_route, "b": b,
                               "slots": layer.slots, "width": layer.width, "key_dim": layer.d,
                               "message_words": msg.shape[1],
                               "lemma_slots_for_s": lemma_slots(s_route, n_tokens), "exact": bool(exact),
                               "input_independent_width": input_independent_width(n_tokens, self.s, msg.shape[1]),
                               "max_offtarget_score": res.max_offtarget_score})
        if not exact:
            raise MPCProtocolError(f"layer {self.layers}: the routing layer lost or invented messages")
        order = np.lexsort((got[:, 1], got[:, 0]))
        return np.column_stack([res.dest, res.msg])[order]

    def _encode(self, batches: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]):
        width = max((d.shape[1] for _, _, d in batches.values()), default=1)
        src, dest, msg = [], [], []
        for name, (s, t, d) in batches.items():
            if len(s) == 0:
                continue
            if not np.issubdtype(d.dtype, np.integer):
                raise TypeError(f"TransformerMPC routes integer words only; table {name!r} holds {d.dtype}")
            body = np.zeros((len(s), 2 + width), np.int64)
            body[:, 0], body[:, 1] = self._tid(name), d.shape[1]
            body[:, 2:2 + d.shape[1]] = d
            src.append(s)
            dest.append(t)
            msg.append(body)
        if not src:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 2 + width), np.int64)
        return np.concatenate(src), np.concatenate(dest), np.concatenate(msg)

    def _decode(self, rows: np.ndarray) -> dict[str, Table]:
        names = {v: k for k, v in self._table_ids.items()}
        out = {}
        for tid in np.unique(rows[:, 1]) if len(rows) else []:
            sel = rows[rows[:, 1] == tid]
            w = int(sel[0, 2])
            out[names[int(tid)]] = Table(sel[:, 0], sel[:, 3:3 + w])
        return out

    # ------------------------------------------------------------------ the two kinds of layer
    def load(self, name: str, machine: np.ndarray, data: np.ndarray) -> None:
        """The input layer: input token t (row t of ``data``) sends its record to its machine's token."""
        data = np.asarray(data)
        data = data.reshape(len(data), -1)
        machine = np.asarray(machine, np.int64)
        self.num_tokens = max(self.num_tokens, len(data))
        src = np.arange(len(data), dtype=np.int64)
        s, t, m = self._encode({name: (src, machine, data)})
        routed = self._decode(self._route(s, t, m, self.num_tokens))
        got = routed.get(name, Table(np.zeros(0, np.int64), np.zeros((0, data.shape[1]), np.int64)))
        super().load(name, got.machine, got.data)

    def _deliver(self, keep: dict[str, Table], send: dict[str, Message], r: int) -> dict[str, Table]:
        s, t, m = self._encode({k: (v.src, v.dest, v.data) for k, v in send.items()})
        routed = self._decode(self._route(s, t, m, self.num_tokens))
        msgs = {k: Message(np.zeros(len(v), np.int64), v.machine, v.data) for k, v in routed.items()}
        for k, v in send.items():  # empty batches still create their (empty) table, as in direct delivery
            if k not in msgs:
                msgs[k] = Message(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, v.data.shape[1]),
                                                                                        np.int64))
        return deliver_direct(keep, msgs, r)


def hop_as_transformer(x, k: int, memory: int, *, device: str | torch.device = "cpu",
                       seed: int = 0) -> tuple[np.ndarray, TransformerMPC]:
    """Run :func:`hoplib.mpc.protocols.hop_protocol` as a transformer (Theorem 3.1). Returns the answer and
    the :class:`TransformerMPC`, whose ``layers`` equals ``stats.rounds + 1``."""
    from hoplib.mpc.protocols import hop_protocol

    holder: dict[str, TransformerMPC] = {}

    def factory(q: int, s: int, audit: bool = False) -> TransformerMPC:
        holder["sim"] = TransformerMPC(q, s, audit=audit, device=device, seed=seed, num_tokens=len(x))
        return holder["sim"]

    answer, _ = hop_protocol(x, k, memory, seed=seed, simulator=factory)
    return answer, holder["sim"]
