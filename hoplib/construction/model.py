"""The hand-built model of Theorem 4.2: :class:`HopTransformer` and the functions that build it.

Sanford, Hsu & Telgarsky (arXiv v1), Theorem 4.2 with Lemmas D.1 (lookUp), D.2 (lastOccurrence) and A.2
(softmax as hardmax), in the corrected form of ``paper-spec.md`` section 4. Every weight is set by hand (see
:mod:`~hoplib.construction.layers`). The model is an ordinary causally masked transformer: a token embedding
plus a positional embedding, then per layer one softmax attention head (query, key and value maps, the value
written straight back into the residual stream) followed by a token-wise ReLU MLP, both added residually, and
a linear unembedding. Attention is real softmax at a finite inverse temperature ``c`` (tracr's
``softmax_coldness``; Lemma A.2, :mod:`~hoplib.construction.temperature`).

Positions. Internally the model prepends a *start token* at position 0 (the paper's X_0); the letters sit at
positions 1..N. A pointer is a position ``s`` stored as the unit vector ``e(s)`` (Lemma D.1); pointer 0 is the
start token, i.e. ⊥, which is absorbing because the start token points to itself.

Depth. Layer 1 copies the previous letter (lookUp at t-1); layer 2 is the induction head (lastOccurrence,
Lemma D.2 with the wrap-around fixed); it stores the pointer P = find¹ and leaves the accumulator A =
identity. Each later layer is one lookUp at P: P <- P∘P and, following :func:`hop_program`, A <- A∘P, P∘P or
A. This gives L = ⌈log₂ k⌉ + 2 layers, the paper's ⌊log₂ k⌋ + 2 only when k is a power of two (see
:mod:`hoplib.construction.pointer_programs` for why one lookUp per layer cannot do better).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from hoplib._book.validate import check_int
from hoplib.construction.blocks import MLP, Head
from hoplib.construction.depth import depth_ceil, hop_program
from hoplib.construction.layers import Spec, build_parts
from hoplib.construction.layout import Layout, angles
from hoplib.construction.temperature import check_dtype, check_inverse_temperature, lemma_a2_inverse_temperature
from hoplib.tasks import NO_ANSWER, HopTask, hop

__all__ = ["HopTransformer", "Trace", "check_single_k", "count_errors", "hop_transformer", "multi_hop_transformer"]


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
    coldness c; changeable, but only to a finite number > 0: anything else raises), ``head_names`` (what each
    layer's head does), ``heads`` and ``mlps`` (each layer's blocks, with their weights as buffers).
    """

    def __init__(self, *, layout: Layout, tok_emb: torch.Tensor, pos_emb: torch.Tensor, heads: list[Head],
                 mlps: list[MLP | None], unembed: torch.Tensor, unembed_bias: torch.Tensor, circle: int,
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

    @property
    def inverse_temperature(self) -> float:
        """The softmax coldness c that multiplies every head's margin-normalised scores (Lemma A.2)."""
        return self._inverse_temperature

    @inverse_temperature.setter
    def inverse_temperature(self, c: float) -> None:
        # NaN, zero or a negative c would make every head average (or worse) and the model predict nonsense
        self._inverse_temperature = check_inverse_temperature(c)

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
        keys = angles(m, torch.arange(m, device=vec.device)).to(vec.dtype)
        pos = (vec @ keys.T).argmax(-1)
        if self.multi:
            return pos
        return pos - 1

    def decode_letter(self, vec: torch.Tensor) -> torch.Tensor:
        """Nearest letter to letter vectors (..., 3) or (..., 2); -1 for ⊥ (⊥-flag > 1/2 or a null vector)."""
        a = self.alphabet_size
        letters = angles(a, torch.arange(a, device=vec.device)).to(vec.dtype)
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
    dtype = check_dtype(dtype)
    c = check_inverse_temperature(inverse_temperature, allow_none=True)
    n_layers = depth_ceil(k)
    spec = Spec(n_layers=max(n_layers, 2), programs={k: hop_program(k)}, circle=seq_len + 1,
                alphabet_size=alphabet_size, answer_from_ptr=(k == 1))
    parts = build_parts(spec, dtype)
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
    dtype = check_dtype(dtype)
    c = check_inverse_temperature(inverse_temperature, allow_none=True)
    n_layers = max(3, depth_ceil(max_hops))
    programs = {kk: hop_program(kk, n_layers) for kk in range(max_hops + 1)}
    t_max = seq_len - 1
    spec = Spec(n_layers=n_layers, programs=programs, circle=t_max, alphabet_size=alphabet_size, multi=True)
    return HopTransformer(**build_parts(spec, dtype), inverse_temperature=c if c is not None
                          else lemma_a2_inverse_temperature(t_max, dtype), dtype=dtype, multi=True, k=None,
                          max_hops=max_hops, seq_len=seq_len)


def check_single_k(model: object) -> HopTransformer:
    """``model`` if it is a single-k HopTransformer (from :func:`hop_transformer`), else a TypeError."""
    if not isinstance(model, HopTransformer) or model.multi:
        raise TypeError("model must be a single-k HopTransformer from hop_transformer()")
    return model


@torch.no_grad()
def count_errors(model: HopTransformer, x: torch.Tensor, k: int | None = None, batch_size: int = 1000) -> int:
    """Number of positions where ``model`` disagrees with :func:`hoplib.tasks.hop` on letters ``x`` (B, N).

    For a hop_transformer ``k`` defaults to ``model.k``. Runs in batches of ``batch_size`` rows.
    """
    check_single_k(model)
    k = model.k if k is None else check_int("k", k, low=0)
    batch_size = check_int("batch_size", batch_size, low=1)
    model._check_input(x)
    wrong = 0
    for i in range(0, x.shape[0], batch_size):
        xb = x[i:i + batch_size]
        wrong += int((model.predict(xb) != hop(xb, k)).sum())
    return wrong
