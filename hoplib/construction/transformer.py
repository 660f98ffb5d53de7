"""Theorem 4.2 compiled into real transformer weights: a log-depth, one-head-per-layer model for hop_k.

Sanford, Hsu & Telgarsky (arXiv v1), Theorem 4.2 with Lemmas D.1 (lookUp), D.2 (lastOccurrence) and A.2
(softmax as hardmax), in the corrected form of ``paper-spec.md`` section 4.

Every weight below is set by hand. The model is an ordinary causally masked transformer: a token embedding
plus a positional embedding, then per layer one softmax attention head (query, key and value maps, the value
written straight back into the residual stream) followed by a token-wise ReLU MLP, both added residually, and
a linear unembedding. Attention is real softmax at a finite inverse temperature ``c`` (the knob that tracr
calls ``softmax_coldness``): every head's raw scores are scaled so that the best key beats every other key by
a margin of exactly 1, and ``c`` multiplies all of them (Lemma A.2: ``c >~ ln N + p ln 2`` makes softmax equal
hardmax to ``p`` bits).

Positions. Internally the model prepends a *start token* at position 0 (the paper's X_0); the letters sit at
positions 1..N. A pointer is a position ``s`` stored as the unit vector ``e(s) = (cos 2πs/M, sin 2πs/M)``, so
that a lookUp query is linear in the stored pointer (Lemma D.1); pointer 0 is the start token, i.e. ⊥, which
is absorbing because the start token points to itself. A letter ``a`` is stored as ``(cos 2πa/|Σ|, sin
2πa/|Σ|, 0)`` and ⊥ as ``(0, 0, 1)``, so the width does not grow with the alphabet either.

Depth. Layer 1 copies the previous letter (lookUp at t-1); layer 2 is the induction head (lastOccurrence of
the current letter among previous letters, Lemma D.2 with the wrap-around fixed by a "symbol match + recency"
score); it stores the pointer P = find¹ and leaves the accumulator A = identity. Each later layer is one lookUp
at P: P <- P∘P (doubling) and, depending on the binary expansion of k, A <- A∘P or A <- P∘P or A kept. This
gives L = ⌈log₂ k⌉ + 2 layers, which is the paper's ⌊log₂ k⌋ + 2 only when k is a power of two (see
:mod:`hoplib.construction.pointer_programs` for why one lookUp per layer cannot do better).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
from torch import nn

from hoplib._book.validate import check_int
from hoplib.tasks import NO_ANSWER, HopTask, hop

__all__ = [
    "ACC",
    "KEEP",
    "PTR",
    "SUBSPACE_DOC",
    "HopTransformer",
    "Trace",
    "count_errors",
    "depth_ceil",
    "depth_floor",
    "describe_residuals",
    "hop_program",
    "hop_transformer",
    "lemma_a2_inverse_temperature",
    "lemma_d2_v1_find",
    "min_exact_inverse_temperature",
    "multi_hop_transformer",
    "plot_attention",
    "precision_study",
    "program_hops",
]

KEEP, ACC, PTR = "keep", "acc", "ptr"
"""Operations of layers 3, 4, ...: keep A, set A <- A∘P (fetch A at P), or set A <- P∘P (fetch P at P)."""

_DTYPES = (torch.float32, torch.float64)
_BLOCK_ELEMS = 2**24  # attention is computed in query blocks of at most this many scores
_GATE_BOUND = 4.0  # gated products g*v in the MLPs are exact for |v| <= this bound


# --------------------------------------------------------------------------- depth formulas and programs
def depth_floor(k: int) -> int:
    """The depth stated by Theorem 4.2: ⌊log₂ k⌋ + 2 for k >= 1 (0 for k = 0, where hop_0 is the identity)."""
    k = check_int("k", k, low=0)
    return 0 if k == 0 else k.bit_length() + 1


def depth_ceil(k: int) -> int:
    """The depth this construction uses: ⌈log₂ k⌉ + 2 for k >= 1 (0 for k = 0)."""
    k = check_int("k", k, low=0)
    return 0 if k == 0 else (k - 1).bit_length() + 2


def hop_program(k: int, n_layers: int | None = None) -> list[str]:
    """The pointer program for hop_k: the operation (KEEP, ACC or PTR) of each layer 3, 4, ..., n_layers.

    After layer 2 the pointer P holds 1 hop and the accumulator A holds 0 hops. Layer ℓ >= 3 looks up at P:
    P doubles (to 2^(ℓ-2) hops) and A becomes A + 2^(ℓ-3) hops (ACC), 2^(ℓ-2) hops (PTR), or stays (KEEP).
    The answer is the letter at A after the last layer. ``n_layers`` defaults to :func:`depth_ceil` (k); a
    larger value pads the program with KEEPs at the start (the multi-task model uses one depth for all k).
    Returns [] for k = 0 (the identity) and for k = 1 with n_layers = 2 (then the answer is read from P).
    """
    k = check_int("k", k, low=0)
    need = depth_ceil(k)
    if n_layers is None:
        n_layers = need
    n_layers = check_int("n_layers", n_layers, low=need)
    if k == 0:
        return [KEEP] * max(0, n_layers - 2)
    if n_layers == 2:  # k == 1: the answer is P itself
        return []
    n_ops = n_layers - 2
    if k == 1 << n_ops:  # the one count that needs the last layer's P∘P
        return [KEEP] * (n_ops - 1) + [PTR]
    # k < 2^n_ops: binary expansion, layer 3 + b contributes 2^b hops when bit b of k is set
    return [ACC if (k >> b) & 1 else KEEP for b in range(n_ops)]


def program_hops(program: list[str]) -> int:
    """Symbolically run a program of :func:`hop_program` and return the hop count of its answer."""
    if not isinstance(program, list):
        raise TypeError(f"program must be a list of 'keep'/'acc'/'ptr', got {type(program).__name__}")
    if not program:
        raise ValueError("program must be non-empty (an empty program means k = 0 or 1: see hop_program)")
    p, a = 1, 0
    for op in program:
        if op not in (KEEP, ACC, PTR):
            raise ValueError(f"program entries must be 'keep', 'acc' or 'ptr', got {op!r}")
        a = a + p if op == ACC else (2 * p if op == PTR else a)
        p = 2 * p
    return a


def lemma_a2_inverse_temperature(seq_len: int, dtype: torch.dtype = torch.float32) -> float:
    """Lemma A.2's inverse temperature for score margin 1: c = ln M + (p + 1) ln 2.

    ``M = seq_len + 1`` positions (with the start token), ``p`` the dtype's mantissa bits (24 for float32,
    53 for float64). Then the softmax weight off the argmax is at most (M - 1) e^{-c} < 2^{-(p+1)}, so softmax
    rounds to hardmax (Lemma A.2 with margin ξ = 1 after our per-head normalisation).
    """
    seq_len = check_int("seq_len", seq_len, low=1)
    _check_dtype(dtype)
    p = round(-math.log2(torch.finfo(dtype).eps)) + 1
    return math.log(seq_len + 1) + (p + 1) * math.log(2)


def _check_dtype(dtype: object) -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype (torch.float32 or torch.float64), got {type(dtype).__name__}")
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    return dtype


def _check_temperature(c: object) -> float | None:
    if c is None:
        return None
    if isinstance(c, bool) or not isinstance(c, numbers.Real):
        raise TypeError(f"inverse_temperature must be a positive real number or None, got {type(c).__name__}")
    if not (math.isfinite(float(c)) and float(c) > 0):
        raise ValueError(f"inverse_temperature must be in (0, inf), got {c}")
    return float(c)


# --------------------------------------------------------------------------- residual layout
class _Layout:
    """Named residual-stream subspaces, allotted in order."""

    def __init__(self) -> None:
        self.slices: dict[str, slice] = {}
        self.width = 0

    def add(self, name: str, size: int) -> slice:
        s = slice(self.width, self.width + size)
        self.slices[name] = s
        self.width += size
        return s

    def __getitem__(self, name: str) -> slice:
        return self.slices[name]


SUBSPACE_DOC = {
    "one": "the constant 1 (a bias coordinate)",
    "is_start": "1 at the start token (position 0), else 0",
    "pos": "e(t): this position as a unit vector at angle 2πt/M (a key for every lookUp)",
    "pos_prev": "e(t-1): the query of layer 1's lookUp",
    "bcast": "multi-task only: 1 - cos(2π(t-1)/M), lets layer 1 also attend to position 0 (the k-token)",
    "recency": "the lastOccurrence key's recency term: t, or Λ - 1 at the start token",
    "letter": "this letter as (cos 2πa/|Σ|, sin 2πa/|Σ|, ⊥-flag)",
    "prev_letter": "written by layer 1: the previous letter (cos, sin)",
    "ptr": "P(t) as e(P(t)): find^(2^(ℓ-2))(t) after layer ℓ >= 2 (0 = start token = ⊥)",
    "ptr_letter": "the letter at P(t) (or ⊥)",
    "acc": "A(t) as e(A(t)): the accumulator pointer, identity before layer 3",
    "acc_letter": "the letter at A(t) (or ⊥): the answer after the last layer",
    "fetch": "scratch: what the lookUp at P fetched (P, P-letter, A, A-letter); cleared by the MLP",
    "kprog": "multi-task only: the k-token's program (per layer, one ACC gate and one PTR gate)",
    "gates": "multi-task only: the program broadcast from position 0 by layer 1",
}


def _angles(m: int, idx: torch.Tensor) -> torch.Tensor:
    th = 2 * math.pi * idx.double() / m
    return torch.stack([torch.cos(th), torch.sin(th)], dim=-1)


# --------------------------------------------------------------------------- modules
class _Head(nn.Module):
    """One causal softmax attention head; the value map writes straight into the residual stream."""

    def __init__(self, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, name: str):
        super().__init__()
        self.name = name
        used = wv.abs().sum(0) > 0  # W_V (d x d) factored as W_V' W_O with W_O selecting the written coordinates
        self.register_buffer("wq", wq)
        self.register_buffer("wk", wk)
        self.register_buffer("wv", wv[:, used].contiguous())
        self.register_buffer("wo", torch.eye(wv.shape[1], dtype=wv.dtype)[used].contiguous())

    def forward(self, x: torch.Tensor, c: float, keep: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Causal softmax(c q k^T) v, computed in blocks of query rows (memory O(block * T), exact same math)."""
        q, k, v = x @ (self.wq * c), x @ self.wk, x @ self.wv
        t = x.shape[-2]
        block = max(1, min(t, _BLOCK_ELEMS // max(1, x.shape[0] * t)))
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


class _MLP(nn.Module):
    """A token-wise ReLU MLP, x -> relu(x W1 + b1) W2, added to the residual stream."""

    def __init__(self, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor):
        super().__init__()
        self.register_buffer("w1", w1)
        self.register_buffer("b1", b1)
        self.register_buffer("w2", w2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.w1 + self.b1) @ self.w2


class _MLPBuilder:
    """Collects ReLU units: linear moves are ReLU(v) - ReLU(-v); gated moves g*v use a bounded trick."""

    def __init__(self, d: int):
        self.d = d
        self.rows: list[tuple[torch.Tensor, float, torch.Tensor]] = []

    def _unit(self, w_in: torch.Tensor, bias: float, w_out: torch.Tensor) -> None:
        self.rows.append((w_in, bias, w_out))

    def add_linear(self, src: list[tuple[int, float]], dst: int, gate: int | None = None) -> None:
        """Add (gate *) sum(coef * x[src]) to x[dst]; without a gate the move is exact and linear."""
        w = torch.zeros(self.d, dtype=torch.float64)
        for i, coef in src:
            w[i] += coef
        out = torch.zeros(self.d, dtype=torch.float64)
        out[dst] = 1.0
        if gate is None:
            self._unit(w, 0.0, out)
            self._unit(-w, 0.0, -out)
        else:  # g*v = relu(v + B g - B) - relu(-v + B g - B), exact for g in {0, 1} and |v| <= B
            wp, wn = w.clone(), -w
            wp[gate] += _GATE_BOUND
            wn[gate] += _GATE_BOUND
            self._unit(wp, -_GATE_BOUND, out)
            self._unit(wn, -_GATE_BOUND, -out)

    def add_raw(self, w_in: torch.Tensor, bias: float, w_out: torch.Tensor) -> None:
        self._unit(w_in, bias, w_out)

    def build(self, dtype: torch.dtype) -> _MLP | None:
        if not self.rows:
            return None
        w1 = torch.stack([r[0] for r in self.rows], dim=1)
        b1 = torch.tensor([r[1] for r in self.rows], dtype=torch.float64)
        w2 = torch.stack([r[2] for r in self.rows], dim=0)
        return _MLP(w1.to(dtype), b1.to(dtype), w2.to(dtype))


@dataclass
class Trace:
    """Everything a forward pass computed, for inspection (like tracr's ``model.apply``).

    ``residuals[ℓ]`` is the residual stream (B, T, d) after layer ℓ (``residuals[0]`` is the embedding);
    ``attentions[ℓ-1]`` the softmax weights (B, T, T) of layer ℓ's head (rows = queries); ``logits`` the
    output (B, T, C). Position 0 is the start token (hop_transformer) or the k-token (multi_hop_transformer).
    """

    residuals: list[torch.Tensor]
    attentions: list[torch.Tensor]
    logits: torch.Tensor


class HopTransformer(nn.Module):
    """A hand-built causal softmax transformer computing hop_k (Theorem 4.2); build it with
    :func:`hop_transformer` or :func:`multi_hop_transformer`.

    Attributes: ``n_layers`` (depth, one head per layer), ``d_model`` (residual width), ``subspaces`` (name ->
    slice of the residual stream, described in ``SUBSPACE_DOC``), ``inverse_temperature`` (the softmax
    coldness c; changeable), ``head_names`` (what each layer's head does).
    """

    def __init__(self, *, layout: _Layout, tok_emb: torch.Tensor, pos_emb: torch.Tensor, heads: list[_Head],
                 mlps: list[_MLP | None], unembed: torch.Tensor, unembed_bias: torch.Tensor, circle: int,
                 alphabet_size: int, inverse_temperature: float, dtype: torch.dtype, multi: bool,
                 k: int | None, max_hops: int | None, seq_len: int):
        super().__init__()
        self.layout = layout
        self.subspaces = dict(layout.slices)
        self.d_model = layout.width
        self.n_layers = len(heads)
        self.heads_per_layer = 1
        self.heads = nn.ModuleList(heads)
        self.mlps = nn.ModuleList([m if m is not None else nn.Identity() for m in mlps])
        self._has_mlp = [m is not None for m in mlps]
        self.register_buffer("tok_emb", tok_emb)
        self.register_buffer("pos_emb", pos_emb)
        self.register_buffer("unembed", unembed)
        self.register_buffer("unembed_bias", unembed_bias)
        self.circle = circle
        self.alphabet_size = alphabet_size
        self.inverse_temperature = inverse_temperature
        self.dtype = dtype
        self.multi = multi
        self.k = k
        self.max_hops = max_hops
        self.seq_len = seq_len
        self.head_names = [h.name for h in heads]

    # ----------------------------------------------------------------- input checks
    def _check_input(self, x: object) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.LongTensor of shape (B, N), got {type(x).__name__}")
        if x.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise TypeError(f"x must hold integers (a LongTensor), got dtype {x.dtype}")
        if x.ndim != 2:
            raise ValueError(f"x must have shape (B, N), got shape {tuple(x.shape)}")
        n = x.shape[1]
        if self.multi:
            task = self.task
            if not 2 <= n <= task.length:
                raise ValueError(f"x must have N in [2, {task.length}] columns (k-token + letters), got {n}")
            v = task.vocab
            if x.numel() and (int(x[:, 0].min()) < 0 or int(x[:, 0].max()) > self.max_hops):
                raise ValueError(f"x[:, 0] must be k-tokens in [0, {self.max_hops}]")
            rest = x[:, 1:]
            if rest.numel() and (int(rest.min()) < v.first_letter or int(rest.max()) >= v.no_answer):
                raise ValueError(f"x[:, 1:] must be letter ids in [{v.first_letter}, {v.no_answer - 1}]")
        else:
            if not 1 <= n <= self.seq_len:
                raise ValueError(f"x must have N in [1, seq_len={self.seq_len}] columns, got {n}")
            if x.numel() and (int(x.min()) < 0 or int(x.max()) >= self.alphabet_size):
                raise ValueError(f"x must hold letters in [0, {self.alphabet_size - 1}], "
                                 f"got values in [{int(x.min())}, {int(x.max())}]")
        return x.long()

    @property
    def task(self) -> HopTask:
        """The HopTask whose layout and vocabulary the multi-task model reads (multi-task models only)."""
        if not self.multi:
            raise AttributeError("task is defined for multi_hop_transformer models only")
        return HopTask(seq_len=self.seq_len, alphabet_size=self.alphabet_size, max_hops=self.max_hops)

    # ----------------------------------------------------------------- forward
    def _tokens(self, x: torch.Tensor) -> torch.Tensor:
        if self.multi:
            return x
        start = torch.full_like(x[:, :1], self.alphabet_size)
        return torch.cat([start, x], dim=1)

    def _run(self, x: torch.Tensor, keep: bool) -> Trace:
        x = self._check_input(x)
        toks = self._tokens(x)
        t = toks.shape[1]
        with torch.autocast(device_type=x.device.type, enabled=False):  # never bf16: precision is the point
            return self._layers(toks, t, keep)

    def _layers(self, toks: torch.Tensor, t: int, keep: bool) -> Trace:
        h = self.tok_emb[toks] + self.pos_emb[:t]
        residuals, attentions = ([h], []) if keep else ([], [])
        c = self.inverse_temperature
        for head, mlp, has in zip(self.heads, self.mlps, self._has_mlp, strict=True):
            out, attn = head(h, c, keep)
            h = h + out
            if has:
                h = h + mlp(h)
            if keep:
                residuals.append(h)
                attentions.append(attn)
        logits = h @ self.unembed + self.unembed_bias
        return Trace(residuals, attentions, logits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scores (B, N, alphabet_size + 1) for letters ``x`` (B, N); for the multi-task model, logits
        (B, T, vocab size) for HopTask inputs (B, T), class index = target token id."""
        logits = self._run(x, keep=False).logits
        return logits if self.multi else logits[:, 1:]

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """argmax of :meth:`forward`; for hop_transformer with ``alphabet_size`` mapped to -1 (⊥), so the
        result is directly comparable with :func:`hoplib.tasks.hop`."""
        pred = self.forward(x).argmax(-1)
        if self.multi:
            return pred
        return torch.where(pred == self.alphabet_size, torch.full_like(pred, NO_ANSWER), pred)

    @torch.no_grad()
    def trace(self, x: torch.Tensor) -> Trace:
        """Run ``x`` keeping every layer's residual stream and attention weights (start position included)."""
        return self._run(x, keep=True)

    # ----------------------------------------------------------------- reading the residual stream
    def read(self, resid: torch.Tensor, name: str) -> torch.Tensor:
        """The named subspace of a residual stream tensor (..., d_model)."""
        if name not in self.subspaces:
            raise ValueError(f"name must be one of {sorted(self.subspaces)}, got {name!r}")
        return resid[..., self.subspaces[name]]

    def decode_pointer(self, vec: torch.Tensor) -> torch.Tensor:
        """Nearest position to pointer vectors (..., 2), reported like hoplib.tasks: letter index t - 1 for
        internal position t, -1 for the start token (⊥). For the multi-task model: the HopTask column."""
        m = self.circle
        keys = _angles(m, torch.arange(m, device=vec.device)).to(vec.dtype)
        pos = (vec @ keys.T).argmax(-1)
        if self.multi:
            return pos
        return pos - 1

    def decode_letter(self, vec: torch.Tensor) -> torch.Tensor:
        """Nearest letter to letter vectors (..., 3) or (..., 2); -1 for ⊥ (⊥-flag > 1/2 or a null vector)."""
        a = self.alphabet_size
        letters = _angles(a, torch.arange(a, device=vec.device)).to(vec.dtype)
        best = (vec[..., :2] @ letters.T).argmax(-1)
        null = vec[..., :2].norm(dim=-1) < 0.25
        if vec.shape[-1] == 3:
            null = null | (vec[..., 2] > 0.5)
        return torch.where(null, torch.full_like(best, NO_ANSWER), best)

    def decode(self, resid: torch.Tensor) -> dict[str, torch.Tensor]:
        """Decode the residual stream (..., d_model): pointers to positions and letter slots to letters."""
        out = {}
        for name in ("pos", "ptr", "acc"):
            out[name] = self.decode_pointer(self.read(resid, name))
        for name in ("letter", "prev_letter", "ptr_letter", "acc_letter"):
            out[name] = self.decode_letter(self.read(resid, name))
        return out

    def extra_repr(self) -> str:
        what = f"max_hops={self.max_hops}" if self.multi else f"k={self.k}"
        return (f"{what}, seq_len={self.seq_len}, alphabet_size={self.alphabet_size}, n_layers={self.n_layers}, "
                f"d_model={self.d_model}, inverse_temperature={self.inverse_temperature:.3g}, dtype={self.dtype}")


# --------------------------------------------------------------------------- the builder
def _build(*, n_layers: int, programs: dict[int, list[str]], answer_from_ptr: bool, circle: int,
           alphabet_size: int, dtype: torch.dtype, multi: bool) -> dict:
    """Hand-set every weight. ``programs`` maps k -> ops of layers 3..n_layers (one entry if not multi)."""
    lay = _Layout()
    for name, size in [("one", 1), ("is_start", 1), ("pos", 2), ("pos_prev", 2), ("recency", 1), ("letter", 3),
                       ("prev_letter", 2), ("ptr", 2), ("ptr_letter", 3), ("acc", 2), ("acc_letter", 3),
                       ("fetch", 10)]:
        lay.add(name, size)
    n_ops = max(0, n_layers - 2)
    if multi:
        lay.add("bcast", 1)
        lay.add("kprog", 2 * n_ops)
        lay.add("gates", 2 * n_ops)
    d = lay.width
    f64 = torch.float64
    m = circle
    sig = alphabet_size
    delta = 1 - math.cos(2 * math.pi / m)  # lookUp margin before normalisation (Lemma D.1)
    gap_sig = 1 - math.cos(2 * math.pi / sig) if sig > 1 else 1.0
    lam = max((m + 2) / gap_sig, 3.0)  # symbol-match weight of lastOccurrence (Lemma D.2, fixed)
    first_slot = lambda name: lay[name].start  # noqa: E731

    # ---- embeddings
    n_tok = max(programs) + sig + 3 if multi else sig + 1
    tok = torch.zeros(n_tok, d, dtype=f64)
    start_ids = list(range(max(programs) + 1)) if multi else [sig]
    letter_id = (lambda a: max(programs) + 1 + a) if multi else (lambda a: a)
    la = _angles(sig, torch.arange(sig))
    for a in range(sig):
        for name in ("letter", "acc_letter"):
            tok[letter_id(a), lay[name]] = torch.tensor([la[a, 0], la[a, 1], 0.0], dtype=f64)
    for sid in start_ids:
        tok[sid, first_slot("is_start")] = 1.0
        for name in ("letter", "acc_letter"):
            tok[sid, lay[name].start + 2] = 1.0  # ⊥
    if multi:
        for kk, prog in programs.items():
            for j, op in enumerate(prog):
                tok[kk, first_slot("kprog") + 2 * j] = float(op == ACC)
                tok[kk, first_slot("kprog") + 2 * j + 1] = float(op == PTR)
    pos = torch.zeros(m, d, dtype=f64)
    idx = torch.arange(m)
    e = _angles(m, idx)
    e_prev = _angles(m, (idx - 1).clamp(min=0))
    pos[:, first_slot("one")] = 1.0
    pos[:, lay["pos"]] = e
    pos[:, lay["acc"]] = e
    pos[:, lay["pos_prev"]] = e_prev
    pos[:, first_slot("recency")] = idx.double()
    pos[0, first_slot("recency")] = lam - 1  # the start token's constant score, between mismatch and match
    if multi:
        pos[:, first_slot("bcast")] = 1 - e_prev[:, 0]

    heads: list[_Head] = []
    mlps: list[_MLP | None] = []

    def mat(rows: int, cols: int) -> torch.Tensor:
        return torch.zeros(rows, cols, dtype=f64)

    # ---- layer 1: lookUp at t-1 copies the previous letter (Lemma D.1); multi-task also attends to the
    # k-token at position 0 with an equal score and so broadcasts its program (each gets weight 1/2).
    wq, wk, wv = mat(d, 3), mat(d, 3), mat(d, d)
    wq[lay["pos_prev"], 0:2] = torch.eye(2, dtype=f64) / delta
    wk[lay["pos"], 0:2] = torch.eye(2, dtype=f64)
    for i in range(2):
        wv[lay["letter"].start + i, lay["prev_letter"].start + i] = 1.0
    if multi:
        wq[first_slot("bcast"), 2] = 1 / delta
        wk[first_slot("is_start"), 2] = 1.0
        for i in range(2 * n_ops):
            wv[first_slot("kprog") + i, first_slot("gates") + i] = 1.0
    heads.append(_Head(wq.to(dtype), wk.to(dtype), wv.to(dtype), "lookUp(t-1): previous letter"
                       + (" + broadcast k" if multi else "")))
    if multi and n_ops:
        mb = _MLPBuilder(d)  # gates arrive as 0, 1/2 or 1; snap them to 0/1: relu(8g-1) - relu(8g-2) - g
        for i in range(2 * n_ops):
            g = first_slot("gates") + i
            w = torch.zeros(d, dtype=f64)
            w[g] = 8.0
            out = torch.zeros(d, dtype=f64)
            out[g] = 1.0
            mb.add_raw(w, -1.0, out)
            mb.add_raw(w, -2.0, -out)
            mb.add_raw(w / 8, 0.0, -out)
        mlps.append(mb.build(dtype))
    else:
        mlps.append(None)

    # ---- layer 2: lastOccurrence = the induction head (Lemma D.2 with the wrap-around fixed):
    # score(s) = Λ [prev_letter(s) == letter(t)] + s, start token Λ - 1; value (e(s), letter(s)) -> P.
    pl_scale = 2.0 if multi else 1.0  # the multi-task prev_letter carries weight 1/2
    wq, wk, wv = mat(d, 3), mat(d, 3), mat(d, d)
    for i in range(2):
        wq[lay["letter"].start + i, i] = lam * pl_scale
        wk[lay["prev_letter"].start + i, i] = 1.0
    wq[first_slot("one"), 2] = 1.0
    wk[first_slot("recency"), 2] = 1.0
    for i in range(2):
        wv[lay["pos"].start + i, lay["ptr"].start + i] = 1.0
    for i in range(3):
        wv[lay["letter"].start + i, lay["ptr_letter"].start + i] = 1.0
    heads.append(_Head(wq.to(dtype), wk.to(dtype), wv.to(dtype), "lastOccurrence: P = find^1"))
    mlps.append(None)

    # ---- layers 3..L: lookUp at P (Lemma D.1), fetch (P, P-letter, A, A-letter) there; the MLP writes
    # P <- fetched P (doubling) and A <- fetched A (ACC) / fetched P (PTR) / A (KEEP), then clears the scratch.
    regs = ["ptr", "ptr_letter", "acc", "acc_letter"]
    fstart = first_slot("fetch")
    foff = {}
    off = 0
    for r in regs:
        foff[r] = fstart + off
        off += lay[r].stop - lay[r].start
    single_prog = None if multi else next(iter(programs.values()))
    for j in range(n_ops):
        ell = j + 3
        wq, wk, wv = mat(d, 2), mat(d, 2), mat(d, d)
        wq[lay["ptr"], :] = torch.eye(2, dtype=f64) / delta
        wk[lay["pos"], :] = torch.eye(2, dtype=f64)
        for r in regs:
            for i in range(lay[r].stop - lay[r].start):
                wv[lay[r].start + i, foff[r] + i] = 1.0
        heads.append(_Head(wq.to(dtype), wk.to(dtype), wv.to(dtype), f"lookUp(P): P = find^{2 ** (ell - 2)}"))
        mb = _MLPBuilder(d)
        for src, dst in (("ptr", "ptr"), ("ptr_letter", "ptr_letter")):
            for i in range(lay[dst].stop - lay[dst].start):
                mb.add_linear([(foff[src] + i, 1.0), (lay[dst].start + i, -1.0)], lay[dst].start + i)
        for op, src_reg in ((ACC, ("acc", "acc_letter")), (PTR, ("ptr", "ptr_letter"))):
            if multi:
                gate = first_slot("gates") + 2 * j + (0 if op == ACC else 1)
            elif single_prog[j] == op:
                gate = None
            else:
                continue
            for src, dst in zip(src_reg, ("acc", "acc_letter"), strict=True):
                for i in range(lay[dst].stop - lay[dst].start):
                    mb.add_linear([(foff[src] + i, 1.0), (lay[dst].start + i, -1.0)], lay[dst].start + i, gate)
        for i in range(10):
            mb.add_linear([(fstart + i, -1.0)], fstart + i)
        mlps.append(mb.build(dtype))

    heads, mlps = heads[:n_layers], mlps[:n_layers]

    # ---- unembedding: letter a scores u_a . answer_letter (1 for the right letter, <= cos(2π/|Σ|) else);
    # ⊥ scores 2*flag - 1/2; multi-task: blank 4*is_start - 1, k-tokens -10.
    ans = lay["ptr_letter"] if answer_from_ptr else lay["acc_letter"]
    if multi:
        v = HopTask(seq_len=3, alphabet_size=sig, max_hops=max(programs)).vocab
        n_cls, l0, null_id = v.size, v.first_letter, v.no_answer
    else:
        n_cls, l0, null_id = sig + 1, 0, sig
    un = mat(d, n_cls)
    ub = torch.zeros(n_cls, dtype=f64)
    for a in range(sig):
        un[ans.start, l0 + a] = la[a, 0]
        un[ans.start + 1, l0 + a] = la[a, 1]
    un[ans.start + 2, null_id] = 2.0
    ub[null_id] = -0.5
    if multi:
        un[first_slot("is_start"), v.blank] = 4.0
        ub[v.blank] = -1.0
        ub[: v.first_letter] = -10.0
    return dict(layout=lay, tok_emb=tok.to(dtype), pos_emb=pos.to(dtype), heads=heads, mlps=mlps,
                unembed=un.to(dtype), unembed_bias=ub.to(dtype), circle=m, alphabet_size=sig)


def hop_transformer(k: int, seq_len: int, alphabet_size: int, dtype: torch.dtype = torch.float32,
                    inverse_temperature: float | None = None) -> HopTransformer:
    """Theorem 4.2 (corrected depth): a causal softmax transformer with one head per layer computing hop_k.

    ``model(x)`` for letters ``x`` (B, N), N <= ``seq_len``, returns scores (B, N, alphabet_size + 1) whose
    argmax is hop(x, k), class ``alphabet_size`` meaning ⊥. Depth ``n_layers`` = ⌈log₂ k⌉ + 2 (0 for k = 0),
    width ``d_model`` = 32 for every k, N and alphabet. ``inverse_temperature`` defaults to
    :func:`lemma_a2_inverse_temperature` (seq_len, dtype); it can be changed later on ``model``.
    """
    k = check_int("k", k, low=0)
    seq_len = check_int("seq_len", seq_len, low=1)
    alphabet_size = check_int("alphabet_size", alphabet_size, low=1)
    dtype = _check_dtype(dtype)
    c = _check_temperature(inverse_temperature)
    n_layers = depth_ceil(k)
    prog = hop_program(k)
    parts = _build(n_layers=max(n_layers, 2), programs={k: prog}, answer_from_ptr=(k == 1), circle=seq_len + 1,
                   alphabet_size=alphabet_size, dtype=dtype, multi=False)
    if n_layers == 0:  # hop_0 is the identity: no layers, read the letter
        parts["heads"], parts["mlps"] = [], []
    return HopTransformer(**parts, inverse_temperature=c if c is not None else lemma_a2_inverse_temperature(
        seq_len, dtype), dtype=dtype, multi=False, k=k, max_hops=None, seq_len=seq_len)


def multi_hop_transformer(max_hops: int = 16, seq_len: int = 100, alphabet_size: int = 4,
                          dtype: torch.dtype = torch.float32,
                          inverse_temperature: float | None = None) -> HopTransformer:
    """The multi-task model of the paper's experiments, built by hand: it reads k from the k-token.

    Input: :class:`hoplib.tasks.HopTask` (seq_len, alphabet_size, max_hops) inputs (B, T), T <= seq_len - 1:
    position 0 the k-token (id k, 0 <= k <= max_hops), then letter ids. Output: logits (B, T, vocab size),
    class index = target token id (blank at position 0, letter ids or the ⊥ id after), so the evaluation code
    of trained models scores it unchanged. Depth max(3, ⌈log₂ max_hops⌉ + 2), one head per layer: layer 1
    also broadcasts the k-token's program (its head attends equally to t-1 and to position 0), and the MLPs
    gate each layer's update on that program. Width 33 + 4 (depth - 2).
    """
    max_hops = check_int("max_hops", max_hops, low=1)
    seq_len = check_int("seq_len", seq_len, low=3)
    alphabet_size = check_int("alphabet_size", alphabet_size, low=2)
    dtype = _check_dtype(dtype)
    c = _check_temperature(inverse_temperature)
    n_layers = max(3, depth_ceil(max_hops))
    programs = {kk: hop_program(kk, n_layers) for kk in range(max_hops + 1)}
    t_max = seq_len - 1
    parts = _build(n_layers=n_layers, programs=programs, answer_from_ptr=False, circle=t_max,
                   alphabet_size=alphabet_size, dtype=dtype, multi=True)
    return HopTransformer(**parts, inverse_temperature=c if c is not None else lemma_a2_inverse_temperature(
        t_max, dtype), dtype=dtype, multi=True, k=None, max_hops=max_hops, seq_len=seq_len)


# --------------------------------------------------------------------------- checks and the precision study
@torch.no_grad()
def count_errors(model: HopTransformer, x: torch.Tensor, k: int | None = None, batch_size: int = 1000) -> int:
    """Number of positions where ``model`` disagrees with :func:`hoplib.tasks.hop` on letters ``x`` (B, N).

    For a hop_transformer ``k`` defaults to ``model.k``. Runs in batches of ``batch_size`` rows.
    """
    if not isinstance(model, HopTransformer) or model.multi:
        raise TypeError("model must be a single-k HopTransformer from hop_transformer()")
    k = model.k if k is None else check_int("k", k, low=0)
    batch_size = check_int("batch_size", batch_size, low=1)
    model._check_input(x)
    wrong = 0
    for i in range(0, x.shape[0], batch_size):
        xb = x[i:i + batch_size]
        wrong += int((model.predict(xb) != hop(xb, k)).sum())
    return wrong


def min_exact_inverse_temperature(model: HopTransformer, x: torch.Tensor, lo: float = 0.05, hi: float = 1e4,
                                  rel_tol: float = 0.02, batch_size: int = 256) -> float:
    """Smallest inverse temperature (to ``rel_tol``) at which ``model`` makes no error on letters ``x``.

    Bisection on a log scale between ``lo`` and ``hi``, assuming exactness is monotone in c (checked at
    both ends). Returns ``math.inf`` if the model is not exact even at ``hi`` (finite precision broke it).
    Restores the model's inverse temperature afterwards.
    """
    if not isinstance(model, HopTransformer) or model.multi:
        raise TypeError("model must be a single-k HopTransformer from hop_transformer()")
    lo, hi = float(lo), float(hi)
    if not 0 < lo < hi:
        raise ValueError(f"need 0 < lo < hi, got lo={lo}, hi={hi}")
    if not 0 < rel_tol < 1:
        raise ValueError(f"rel_tol must be in (0, 1), got {rel_tol}")
    old = model.inverse_temperature

    def exact(c: float) -> bool:
        model.inverse_temperature = c
        return count_errors(model, x, batch_size=batch_size) == 0

    try:
        if not exact(hi):
            return math.inf
        if exact(lo):
            return lo
        while hi / lo > 1 + rel_tol:
            mid = math.sqrt(lo * hi)
            if exact(mid):
                hi = mid
            else:
                lo = mid
        return hi
    finally:
        model.inverse_temperature = old


def lemma_d2_v1_find(x: torch.Tensor) -> torch.Tensor:
    """find¹ as Lemma D.2's embedding is written in arXiv v1, with hardmax: the wrap-around bug, executable.

    Query at (1-based) position i: angle 2π(N·x_i + i)/(N|Σ|); key at j: angle 2π(N·x_{j-1} + j)/(N|Σ|);
    score cos(query - key); the start token scores cos(2π(N - 1/2)/(N|Σ|)); the causal mask keeps j <= i.
    Returns the argmax position in hoplib's 0-based convention (-1 = start token), for letters ``x`` (B, N)
    over ``x.max() + 1`` letters. Compare with :func:`hoplib.tasks.find`: they differ wherever a key whose
    symbol is one larger (cyclically) sits e positions back and N - e is smaller than the distance d to the
    true match (circular offset -(N - e) against +d), or than N - 1/2 when there is no match (the start
    token's offset): the circle of length N|Σ| wraps from one symbol's block into the next.
    """
    if not isinstance(x, torch.Tensor) or x.dtype != torch.int64 or x.ndim != 2:
        raise TypeError("x must be a LongTensor of letters with shape (B, N)")
    b, n = x.shape
    sig = int(x.max()) + 1
    circ = n * sig
    pos = torch.arange(1, n + 1, dtype=torch.float64, device=x.device)  # 1-based positions
    q_ang = 2 * math.pi * (n * x.double() + pos) / circ  # (B, N)
    prev = torch.cat([torch.full_like(x[:, :1], -1), x[:, :-1]], dim=1)  # X_{j-1}; -1 before the first letter
    k_ang = 2 * math.pi * (n * prev.double() + pos) / circ
    scores = torch.cos(q_ang[:, :, None] - k_ang[:, None, :])  # (B, i, j)
    scores = scores.masked_fill((prev < 0)[:, None, :], -2.0)  # j = 1 has no X_0 letter: never a match
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
    start = torch.full((b, n, 1), math.cos(2 * math.pi * (n - 0.5) / circ), dtype=torch.float64, device=x.device)
    best = torch.cat([start, scores], dim=2).argmax(-1)  # 0 = start token, j = 1-based key position
    return torch.where(best == 0, torch.full_like(best, NO_ANSWER), best - 1)


def describe_residuals(model: HopTransformer, x: torch.Tensor, position: int) -> list[dict[str, object]]:
    """What the named subspaces hold at one ``position`` of a 1-D letter sequence ``x``, after each layer.

    One dict per layer 0 (embedding) .. n_layers, with decoded pointers (letter index, -1 = ⊥/start) and
    letters ('a', 'b', ..., '~' for ⊥; '' while a slot is still empty). For hop_transformer models only.
    """
    if not isinstance(model, HopTransformer) or model.multi:
        raise TypeError("model must be a single-k HopTransformer from hop_transformer()")
    if not isinstance(x, torch.Tensor) or x.ndim != 1:
        raise TypeError("x must be a 1-D LongTensor of letters")
    position = check_int("position", position, low=0, high=x.shape[0] - 1)
    tr = model.trace(x[None])
    rows = []
    for ell, resid in enumerate(tr.residuals):
        r = resid[0, position + 1]
        dec = model.decode(r)
        row: dict[str, object] = {"layer": ell}
        for name in ("prev_letter", "ptr", "ptr_letter", "acc", "acc_letter"):
            empty = float(model.read(r, name).abs().sum()) < 1e-3
            v = int(dec[name])
            if name.endswith("letter"):
                row[name] = "" if empty else ("~" if v < 0 else chr(ord("a") + v))
            else:
                row[name] = "" if empty else v
        rows.append(row)
    return rows


def plot_attention(model: HopTransformer, x: torch.Tensor, axes=None):  # noqa: ANN001, ANN201
    """Heatmaps of every layer's attention on a 1-D letter sequence ``x`` (start token included, row/column
    0), with red dots where find^j puts its mass: j = 'prev' for layer 1, 2^(ℓ-3) for layer ℓ >= 3 and 1 for
    layer 2 (what each lookUp or lastOccurrence is built to attend to). Returns the axes."""
    import matplotlib.pyplot as plt

    from hoplib.tasks import find_k

    if not isinstance(model, HopTransformer) or model.multi:
        raise TypeError("model must be a single-k HopTransformer from hop_transformer()")
    tr = model.trace(x[None])
    n_l = model.n_layers
    if axes is None:
        _, axes = plt.subplots(1, n_l, figsize=(2.6 * n_l, 2.8), squeeze=False)
        axes = axes[0]
    n = x.shape[0]
    for ell, (ax, att) in enumerate(zip(axes, tr.attentions, strict=False), start=1):
        ax.imshow(att[0].double().cpu().numpy(), cmap="Blues", vmin=0, vmax=1)
        if ell == 1:
            target, label = torch.arange(-1, n - 1), "t-1"
        else:
            j = 1 if ell == 2 else 2 ** (ell - 3)
            target, label = find_k(x.cpu(), j), f"find^{j}"
        ax.scatter((target + 1).numpy(), range(1, n + 1), s=6, c="red", marker=".")
        ax.set_title(f"layer {ell}: {label}", fontsize=9)
        ax.set_xlabel("key position", fontsize=8)
        ax.tick_params(labelsize=6)
    axes[0].set_ylabel("query position", fontsize=8)
    return axes


def precision_study(ns: list[int], dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64), k: int = 4,
                    alphabet_size: int = 4, total_letters: int = 20_000, seed: int = 0,
                    device: str | torch.device = "cpu", hi: float = 1e3, rel_tol: float = 0.03,
                    progress: bool = True) -> list[dict]:
    """Lemma A.2 in practice: for each N and dtype, the smallest inverse temperature keeping hop_transformer
    (k, N) exact on no-repeat data, beside the lemma's value. ``total_letters`` // N sequences per N (at
    least 1). A ``c_min`` of ``inf`` means no inverse temperature up to ``hi`` is exact: finite precision broke
    the construction. Runs on ``device`` (default CPU; data generated there).
    """
    from hoplib._book.device import get_device

    if not isinstance(ns, (list, tuple)) or not ns:
        raise TypeError("ns must be a non-empty list of sequence lengths")
    ns = [check_int("n", n, low=2) for n in ns]
    for dt in dtypes:
        _check_dtype(dt)
    dev = get_device(device)
    out = []
    loop = ns
    if progress:  # imported only when wanted: tqdm.auto warns on stderr in kernels without ipywidgets
        from tqdm.auto import tqdm

        loop = tqdm(ns, desc="precision study")
    for n in loop:
        gen = torch.Generator(device=dev).manual_seed(seed + n)
        x = HopTask(seq_len=n + 2, alphabet_size=alphabet_size).letters(max(1, total_letters // n), gen, dev)
        for dt in dtypes:
            model = hop_transformer(k, n, alphabet_size, dtype=dt).to(dev)
            c_lemma = lemma_a2_inverse_temperature(n, dt)
            errors_at_lemma = count_errors(model, x, batch_size=64)
            c_min = min_exact_inverse_temperature(model, x, hi=hi, rel_tol=rel_tol, batch_size=64)
            out.append({"n": n, "dtype": str(dt).replace("torch.", ""), "k": k, "n_sequences": int(x.shape[0]),
                        "c_min": c_min if math.isfinite(c_min) else None, "c_lemma_a2": c_lemma,
                        "errors_at_lemma_a2": errors_at_lemma, "ln_n": math.log(n + 1),
                        "lookup_margin_raw": 1 - math.cos(2 * math.pi / (n + 1))})
    return out


def _main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m hoplib.construction precision|search --out FILE`` writes a results file."""
    import argparse
    import time

    from hoplib._book.provenance import save_results

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["precision", "search"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--ns", default="32,64,128,256,512,1024,2048,4096")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--max-layers", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--total-letters", type=int, default=4096)
    args = parser.parse_args(argv)
    t0 = time.time()
    if args.what == "precision":
        ns = [int(v) for v in args.ns.split(",")]
        params = {"ns": ns, "k": args.k, "alphabet_size": 4, "total_letters": args.total_letters, "seed": 0,
                  "hi": 300.0, "rel_tol": 0.05}
        data = []
        for n in ns:  # save after every N, so an interrupted run keeps what it measured
            data += precision_study([n], k=args.k, device=args.device, total_letters=args.total_letters,
                                    hi=300.0, rel_tol=0.05, progress=False)
            save_results(args.out, data, params, args.device, time.time() - t0)
        return
    else:
        from hoplib.construction.pointer_programs import search_programs

        res = search_programs(args.max_layers, ks=range(1, 9), n_seq=24, n=20)
        data = {"found": {str(d): sorted(v) for d, v in res.found.items()},
                "n_programs": {str(d): v for d, v in res.n_programs.items()},
                "n_states": {str(d): v for d, v in res.n_states.items()},
                "witnesses": {f"L={d},k={kk}": w for (d, kk), w in res.witnesses.items()}}
        params = {"max_layers": args.max_layers, "ks": list(range(1, 9)), "n_seq": 24, "n": 20,
                  "alphabet_size": 4, "max_shift": 3, "seed": 0}
        dev = "cpu"
    save_results(args.out, data, params, dev, time.time() - t0)


if __name__ == "__main__":
    _main()
