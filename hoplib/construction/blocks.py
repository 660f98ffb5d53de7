"""The blocks of the hand-built model (a causal softmax :class:`Head`, a ReLU :class:`MLP`) and builders that
write their weights by subspace name: "score the query's ``ptr`` against the key's ``pos``", "copy the key's
``letter`` into ``ptr_letter``", "replace ``acc`` by ``fetch.acc`` where the gate ``gates.acc4`` is 1"."""

from __future__ import annotations

import torch
from torch import nn

from hoplib.construction.layout import Layout

BLOCK_ELEMS = 2**24  # attention is computed in query blocks of at most this many scores
GATE_BOUND = 4.0  # gated products g*v in the MLPs are exact for |v| <= this bound
F64 = torch.float64


class Head(nn.Module):
    """One causal softmax attention head, softmax(c q k^T) v added to the residual stream: ``wq``, ``wk`` give
    margin-normalised scores; ``wv`` and ``wo`` factor the value map, ``wo`` selecting the written coordinates."""

    def __init__(self, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, name: str):
        super().__init__()
        self.name = name
        used = wv.abs().sum(0) > 0
        self.register_buffer("wq", wq)
        self.register_buffer("wk", wk)
        self.register_buffer("wv", wv[:, used].contiguous())
        self.register_buffer("wo", torch.eye(wv.shape[1], dtype=wv.dtype)[used].contiguous())

    def forward(self, x: torch.Tensor, c: float, keep: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Causal softmax attention in blocks of query rows (memory O(block * T), the same math)."""
        q, k, v = x @ (self.wq * c), x @ self.wk, x @ self.wv
        t = x.shape[-2]
        block = max(1, min(t, BLOCK_ELEMS // max(1, x.shape[0] * t)))
        outs, attns = [], []
        for a in range(0, t, block):
            b = min(t, a + block)
            scores = q[:, a:b] @ k[:, :b].transpose(-1, -2)
            mask = torch.arange(b, device=x.device)[None, :] > torch.arange(a, b, device=x.device)[:, None]
            attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
            outs.append(attn @ v[:, :b])
            if keep:
                attns.append(nn.functional.pad(attn, (0, t - b)))
        out = torch.cat(outs, dim=1) @ self.wo
        return out, (torch.cat(attns, dim=1) if keep else None)


class MLP(nn.Module):
    """A token-wise ReLU MLP, x -> relu(x W1 + b1) W2, added to the residual stream."""

    def __init__(self, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor):
        super().__init__()
        for name, t in (("w1", w1), ("b1", b1), ("w2", w2)):
            self.register_buffer(name, t)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.w1 + self.b1) @ self.w2


class HeadWeights:
    """The query, key and value maps of one head, written by naming subspaces (built in float64)."""

    def __init__(self, layout: Layout, n_scores: int):
        self.layout = layout
        d = layout.width
        self.wq = torch.zeros(d, n_scores, dtype=F64)
        self.wk = torch.zeros(d, n_scores, dtype=F64)
        self.wv = torch.zeros(d, d, dtype=F64)
        self._next = 0

    def score(self, query: str, key: str, scale: float = 1.0) -> None:
        """Add ``scale`` * <query's ``query`` subspace, key's ``key`` subspace>
        to every score."""
        q, k, n = self.layout[query], self.layout[key], self.layout.size(query)
        assert self.layout.size(key) == n, f"{query!r}, {key!r}: sizes differ"
        cols = slice(self._next, self._next + n)
        self._next += n
        self.wq[q, cols] = torch.eye(n, dtype=F64) * scale
        self.wk[k, cols] = torch.eye(n, dtype=F64)

    def copy(self, src: str, dst: str) -> None:
        """The head writes the attended key's ``src`` subspace into the query's ``dst`` subspace."""
        assert self.layout.size(src) == self.layout.size(dst), f"cannot copy {src!r} into {dst!r}"
        self.wv[self.layout[src], self.layout[dst]] += torch.eye(self.layout.size(src), dtype=F64)

    def build(self, dtype: torch.dtype, name: str) -> Head:
        return Head(self.wq.to(dtype), self.wk.to(dtype), self.wv.to(dtype), name)


class MLPWeights:
    """ReLU units of one MLP, written by naming subspaces: exact linear moves ReLU(v) - ReLU(-v), and gated
    moves g*v = ReLU(v + B g - B) - ReLU(-v + B g - B), exact for a gate g in {0, 1} and |v| <= B."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.rows: list[tuple[torch.Tensor, float, torch.Tensor]] = []

    def _vec(self, entries: dict[int, float]) -> torch.Tensor:
        w = torch.zeros(self.layout.width, dtype=F64)
        w[list(entries)] = torch.tensor(list(entries.values()), dtype=F64)
        return w

    def _move(self, src: dict[int, float], dst: int, gate: int | None) -> None:
        """Add (gate *) sum(coef * x[i] for i, coef in src) to x[dst]."""
        w, out, b = self._vec(src), self._vec({dst: 1.0}), 0.0 if gate is None else -GATE_BOUND
        wp, wn = w.clone(), -w
        if gate is not None:
            wp[gate] += GATE_BOUND
            wn[gate] += GATE_BOUND
        self.rows += [(wp, b, out), (wn, b, -out)]

    def replace(self, dst: str, src: str, gate: str | None = None) -> None:
        """Set subspace ``dst`` to ``src`` (add src - dst), or only where the one-wide ``gate`` is 1."""
        lay = self.layout
        assert lay.size(src) == lay.size(dst), f"cannot replace {dst!r} by {src!r}: sizes differ"
        g = None if gate is None else lay.coord(gate)
        s, t = lay[src].start, lay[dst].start
        for i in range(lay.size(dst)):
            self._move({s + i: 1.0, t + i: -1.0}, t + i, g)

    def clear(self, name: str) -> None:
        """Set subspace ``name`` to 0."""
        for i in range(self.layout[name].start, self.layout[name].stop):
            self._move({i: -1.0}, i, None)

    def snap_to_bits(self, name: str) -> None:
        """Replace each coordinate g of ``name`` by relu(8g - 1) - relu(8g - 2): 0 stays 0, 1/2 and 1 become 1."""
        for g in range(self.layout[name].start, self.layout[name].stop):
            w, out = self._vec({g: 8.0}), self._vec({g: 1.0})
            self.rows += [(w, -1.0, out), (w, -2.0, -out), (w / 8, 0.0, -out)]

    def build(self, dtype: torch.dtype) -> MLP:
        w1 = torch.stack([r[0] for r in self.rows], dim=1)
        b1 = torch.tensor([r[1] for r in self.rows], dtype=F64)
        w2 = torch.stack([r[2] for r in self.rows], dim=0)
        return MLP(w1.to(dtype), b1.to(dtype), w2.to(dtype))
