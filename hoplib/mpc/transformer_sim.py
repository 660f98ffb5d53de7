"""Theorem 3.1 (transformers simulate MPC): an MPC protocol run as a transformer, one layer per round.

Token i holds machine i's memory; local steps are token-wise maps and each round's delivery is one routing
layer of Lemma 3.2, plus one layer that loads the input: R + 1 layers. Each layer is sized from the traffic it
carries, so it is fitted to one input; :func:`input_independent_width` is the width that works for all inputs.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from hoplib.mpc.routing import PIECES, RoutingLayer, lemma_slots, routing_is_exact
from hoplib.mpc.simulator import Message, MPCProtocolError, MPCSimulator, Table


def input_independent_width(num_tokens: int, memory: int, message_words: int) -> int:
    """Width of a routing layer that works for every round of every input: key dimension 16 s^2 ln N + 64
    plus m' = 12 s^4 ln N^2 slots of 4 + 4 beta words, s = ``memory`` (at most s messages per machine)."""
    s = memory
    return int(16 * s**2 * math.log(num_tokens)) + 64 + 1 + lemma_slots(s, num_tokens) * (4 + message_words * PIECES)


class TransformerMPC(MPCSimulator):
    """An :class:`MPCSimulator` whose messages travel through attention, one routing layer per round.
    ``layers`` counts the layers; ``layer_log`` records per layer the messages, the view bound b, the slots
    m', the width and whether delivery was exact (if not, :class:`MPCProtocolError` is raised)."""

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
        exact = routing_is_exact(res, src, dest, msg)
        self.layer_log.append({"layer": self.layers, "messages": len(src), "b": layer.b, "slots": layer.slots,
                               "width": layer.width, "message_words": width, "exact": exact,
                               "input_independent_width": input_independent_width(n_tokens, self.s, width)})
        if not exact:
            raise MPCProtocolError(f"layer {self.layers}: the routing layer lost or invented messages")
        return np.c_[res.dest, res.msg]

    def _send(self, batches: dict[str, Message]) -> dict[str, Table]:
        """Route all batches as one routing of rows [table id, words, data...]; the tables delivered."""
        width = max((b.data.shape[1] for b in batches.values()), default=1)
        src, dest, rows = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros((0, 2 + width), np.int64)]
        for name, b in batches.items():
            if len(b.src) and not np.issubdtype(b.data.dtype, np.integer):
                raise TypeError(f"TransformerMPC routes integer words only; table {name!r} holds {b.data.dtype}")
            body = np.zeros((len(b.src), 2 + width), np.int64)
            body[:, 0] = self._table_ids.setdefault(name, len(self._table_ids))
            body[:, 1], body[:, 2:2 + b.data.shape[1]] = b.data.shape[1], b.data
            src, dest, rows = src + [b.src], dest + [b.dest], rows + [body]
        got = self._route(np.concatenate(src), np.concatenate(dest), np.concatenate(rows), self.num_tokens)
        names = {v: k for k, v in self._table_ids.items()}
        out = {}
        for tid in np.unique(got[:, 1]):
            sel = got[got[:, 1] == tid]
            out[names[int(tid)]] = Table(sel[:, 0], sel[:, 3:3 + int(sel[0, 2])])
        return out

    def load(self, name: str, machine: np.ndarray, data: np.ndarray) -> None:
        """The input layer: input token t (row t of ``data``) sends its record to its machine's token."""
        data = np.asarray(data).reshape(len(data), -1)
        self.num_tokens = max(self.num_tokens, len(data))
        got = self._send({name: Message(np.arange(len(data)), machine, data)}).get(name, Table([], data[:0]))
        super().load(name, got.machine, got.data)

    def _deliver(self, keep: dict[str, Table], send: dict[str, Message]) -> dict[str, Table]:
        got = self._send(send)
        return super()._deliver(keep, {k: Message(np.zeros(len(t)), t.machine, t.data) for k, t in got.items()})
