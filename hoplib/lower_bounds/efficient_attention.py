"""Efficient attention: Performer's kernel attention (FAVOR+) and Longformer-style masks (Corollaries 5.3, 5.4).

The paper's Corollaries 5.3 and 5.4 say that two popular ways of making attention cheaper lose the
logarithmic-depth solution of hop_k. This module implements both, compactly, and plugs them into
:class:`hoplib.models.GPT` through its attention interface: ``GPTConfig(attention=PerformerAttention(m'))`` or
``GPTConfig(attention=LongformerAttention(w, g))`` (:class:`hoplib.models.AttentionSpec`; each layer is then a
:class:`PerformerSelfAttention` or :class:`LongformerSelfAttention`, a :class:`hoplib.models.CausalSelfAttention`
whose ``attend`` step is replaced, so parameters and their names are those of the softmax model).

**Kernel attention (Corollary 5.3; Choromanski et al. 2021).** softmax(QK^T) is replaced by Q'(X) K'(X)^T
with token-wise feature maps Q', K': R^d -> R^{m'}. FAVOR+ chooses positive random features

    phi(x) = exp(W x - |x|^2 / 2) / sqrt(m'),   W in R^{m' x d} with orthogonal Gaussian rows,

so that E[phi(q) . phi(k)] = exp(q . k) exactly (an unbiased estimate of the softmax kernel). To match
softmax(q k^T / sqrt(d)), q and k are each multiplied by d^{-1/4} first. Causal kernel attention

    y_i = phi(q_i) . S_i / phi(q_i) . z_i,   S_i = sum_{j<=i} phi(k_j) v_j^T (m' x d),   z_i = sum_{j<=i} phi(k_j)

is computed two ways that agree: :func:`kernel_attention_prefix` runs the prefix sums left to right (linear
time; the running state (S, z) is what a player posts in the reduction of :mod:`hoplib.lower_bounds.efficient`), and
:func:`kernel_attention_weights` builds the T x T matrix of normalised weights (quadratic; it returns the
attention map and is what the model uses in training, where T <= 100).

*Stabiliser.* exp can overflow, so both forms subtract maxima that cancel after normalisation: for a query,
the max over its m' log-features (a per-row constant); for keys, the running max M_i = max_{j<=i} c_j of the
keys' largest log-features c_j (also a per-row constant, and causal: it only uses keys j <= i). The prefix
form keeps M in its state and rescales S and z when M grows, as in an online softmax. (For inputs so large
that a query's and a key's largest features sit on different random directions, the product of the two
stabilised exponentials can still underflow; at the scales of trained models it does not.)

**Longformer masks (Corollary 5.4; Beltagy et al. 2020).** Lambda^{w,g}_{ij} = 0 (attend) iff |i - j| <= w
or j = 0 (mod g), intersected with causality j <= i. Positions are **0-based** here, as everywhere in hoplib:
position 0, which in the hop_k experiments holds the hop-count token and plays the paper's start-token role,
is always global. The diagonal |i - i| = 0 <= w is always allowed, so every row has at least one key.
``global_every=None`` means no global tokens (a pure causal sliding window).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from hoplib._book.validate import check_choice, check_int
from hoplib.models import GPT, AttentionSpec, CausalSelfAttention, GPTConfig, SoftmaxAttention, register_attention

KINDS = ("softmax", "performer", "longformer")
"""The attentions compared in Corollaries 5.3 and 5.4: the paper's softmax and the two efficient ones."""

# --------------------------------------------------------------------------- random features (FAVOR+)


def orthogonal_features(n_features: int, dim: int, *, seed: int | None = None,
                        generator: torch.Generator | None = None,
                        device: str | torch.device | None = None) -> torch.Tensor:
    """Random projection W (n_features x dim) of FAVOR+: orthogonal Gaussian rows (Choromanski et al. 2021).

    Rows come in blocks of ``dim`` mutually orthogonal directions (QR of a Gaussian matrix); each row is then
    scaled to the norm of an independent Gaussian vector in R^dim, so every row is marginally N(0, I) and the
    positive-feature estimate stays unbiased while orthogonality lowers its variance. ``seed`` (or a
    ``generator``) makes the draw reproducible; drawn on the CPU and moved to ``device``.
    """
    n_features = check_int("n_features", n_features, low=1)
    dim = check_int("dim", dim, low=1)
    if seed is not None and generator is not None:
        raise ValueError("give at most one of seed and generator")
    gen = generator
    if seed is not None:
        gen = torch.Generator().manual_seed(check_int("seed", seed, low=0, high=2**63 - 1))
    blocks = []
    for _ in range(math.ceil(n_features / dim)):
        g = torch.randn(dim, dim, generator=gen)
        qmat, r = torch.linalg.qr(g)
        qmat = qmat * torch.sign(torch.diagonal(r)).unsqueeze(0)  # sign fix: makes the rotation uniform (Haar)
        blocks.append(qmat.T)  # rows orthonormal
    w = torch.cat(blocks)[:n_features]
    norms = torch.randn(n_features, dim, generator=gen).norm(dim=1, keepdim=True)
    return (w * norms).to(device if device is not None else "cpu")


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None, features: torch.Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v), ("features", features)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if q.dim() < 2 or q.shape != k.shape:
        raise ValueError(f"q and k must have equal shapes (..., T, d), got {tuple(q.shape)} and {tuple(k.shape)}")
    if v is not None and (v.shape[:-1] != k.shape[:-1]):
        raise ValueError(f"v must have shape (..., T, d_v) matching k {tuple(k.shape)}, got {tuple(v.shape)}")
    if features.dim() != 2 or features.shape[1] != q.shape[-1]:
        raise ValueError(f"features must have shape (n_features, d = {q.shape[-1]}), got {tuple(features.shape)}")


def log_features(x: torch.Tensor, features: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """log phi(x * scale^(1/2)) + log sqrt(m'), i.e. W x' - |x'|^2 / 2 with x' = x * scale^(1/2).

    ``scale`` defaults to 1/sqrt(d), so that phi(q') . phi(k') estimates exp(q . k / sqrt(d)), the softmax
    kernel of scaled dot-product attention. Shape (..., T, m'). Computed in float32 (float64 for float64 x).
    """
    d = x.shape[-1]
    s = (1.0 / math.sqrt(d)) if scale is None else float(scale)
    dt = torch.float64 if x.dtype == torch.float64 else torch.float32
    xs = x.to(dt) * math.sqrt(s)
    return xs @ features.to(dt).T - 0.5 * xs.pow(2).sum(-1, keepdim=True)


def positive_features(x: torch.Tensor, features: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """The FAVOR+ features phi(x') = exp(W x' - |x'|^2/2) / sqrt(m') without any stabiliser (shape (..., T, m')).

    E_W[phi(q') . phi(k')] = exp(q' . k'), the unbiased estimate of the softmax kernel (Lemma 1 of
    Choromanski et al. 2021). Use the attention functions below for attention: they stabilise.
    """
    return log_features(x, features, scale).exp() / math.sqrt(features.shape[0])


def _query_features(q: torch.Tensor, features: torch.Tensor, scale: float | None) -> torch.Tensor:
    lq = log_features(q, features, scale)
    return (lq - lq.amax(-1, keepdim=True)).exp()  # per-query constant: cancels after normalisation


def _key_features(k: torch.Tensor, features: torch.Tensor, scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    lk = log_features(k, features, scale)
    c = lk.amax(-1)  # (..., T)
    return (lk - c.unsqueeze(-1)).exp(), c


def _no_autocast(device: torch.device):
    return torch.autocast(device_type=device.type, enabled=False)


def kernel_attention_weights(q: torch.Tensor, k: torch.Tensor, features: torch.Tensor,
                             scale: float | None = None) -> torch.Tensor:
    """Causal FAVOR+ attention weights A (..., T, T) in the quadratic (masked) form; rows sum to 1.

    A_ij = phi(q_i) . phi(k_j) / sum_{l<=i} phi(q_i) . phi(k_l) for j <= i, 0 for j > i, with the
    stabilisers of the module docstring (they cancel in the ratio). ``q``, ``k``: (..., T, d); ``features``:
    (m', d) from :func:`orthogonal_features`. ``A @ v`` equals :func:`kernel_attention_prefix` (Corollary 5.3's
    kernel attention).
    """
    _check_qkv(q, k, None, features)
    with _no_autocast(q.device):
        fq = _query_features(q, features, scale)
        fk, c = _key_features(k, features, scale)
        t = q.shape[-2]
        causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        big_m = torch.cummax(c, dim=-1).values  # running max over keys j <= i
        shift = (c.unsqueeze(-2) - big_m.unsqueeze(-1)).masked_fill(~causal, float("-inf"))  # (..., T_q, T_k)
        raw = (fq @ fk.transpose(-2, -1)) * shift.exp()
        return raw / raw.sum(-1, keepdim=True)


def kernel_attention_prefix(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, features: torch.Tensor,
                            scale: float | None = None,
                            state: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                            ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Causal FAVOR+ attention in the prefix-sum (recurrent, linear-time) form; returns ``(y, state)``.

    Position by position: S <- S * exp(M_old - M) + exp(c_i - M) phi~(k_i) v_i^T, z likewise, y_i =
    phi~(q_i) . S / phi~(q_i) . z. The state ``(S, z, M)`` has shapes (..., m', d_v), (..., m'), (...): the
    running sums of Corollary 5.3's proof (stabilised by the running key maximum M, which is part of the
    state). Pass the state returned for a prefix to continue on the next block: this is how the players of
    :func:`hoplib.lower_bounds.efficient.simulate_kernel_protocol` split the sequence. Equals
    ``kernel_attention_weights(q, k, features) @ v`` up to float rounding.
    """
    _check_qkv(q, k, v, features)
    with _no_autocast(q.device):
        fq = _query_features(q, features, scale)
        fk, c = _key_features(k, features, scale)
        vf = v.float()
        batch = q.shape[:-2]
        m_feat, dv = features.shape[0], v.shape[-1]
        if state is None:
            s = torch.zeros(*batch, m_feat, dv, device=q.device)
            z = torch.zeros(*batch, m_feat, device=q.device)
            big_m = torch.full(batch, float("-inf"), device=q.device)
        else:
            s, z, big_m = (t.float() for t in state)
            if s.shape != (*batch, m_feat, dv) or z.shape != (*batch, m_feat) or big_m.shape != batch:
                raise ValueError(f"state must have shapes {(*batch, m_feat, dv)}, {(*batch, m_feat)}, {batch}; "
                                 f"got {tuple(s.shape)}, {tuple(z.shape)}, {tuple(big_m.shape)}")
        out = []
        for i in range(q.shape[-2]):
            new_m = torch.maximum(big_m, c[..., i])
            decay = (big_m - new_m).exp()  # 0 at the start (exp(-inf)); the sums are 0 there anyway
            gain = (c[..., i] - new_m).exp()
            fki = fk[..., i, :] * gain.unsqueeze(-1)
            s = s * decay[..., None, None] + fki.unsqueeze(-1) * vf[..., i, :].unsqueeze(-2)
            z = z * decay.unsqueeze(-1) + fki
            big_m = new_m
            fqi = fq[..., i, :]
            num = (fqi.unsqueeze(-2) @ s).squeeze(-2)
            den = (fqi * z).sum(-1, keepdim=True)
            out.append(num / den)
        return torch.stack(out, dim=-2), (s, z, big_m)


# --------------------------------------------------------------------------- Longformer masks


def longformer_mask(n: int, window: int, global_every: int | None = None,
                    device: str | torch.device | None = None) -> torch.Tensor:
    """The causal Longformer mask (n x n, True = may attend) of Corollary 5.4, 0-based positions.

    Query i may attend key j iff j <= i and (i - j <= ``window`` or j = 0 mod ``global_every``). Position 0 is
    global (0-based indexing; it holds the hop-count token in the experiments). ``global_every=None``: no
    global tokens. Every row allows at least its own position.
    """
    n = check_int("n", n, low=1)
    window = check_int("window", window, low=0)
    i = torch.arange(n, device=device).unsqueeze(1)
    j = torch.arange(n, device=device).unsqueeze(0)
    allowed = (i - j) <= window
    if global_every is not None:
        global_every = check_int("global_every", global_every, low=1)
        allowed = allowed | (j % global_every == 0)
    return allowed & (j <= i)


def masked_softmax_weights(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + Lambda) with Lambda = 0 where ``mask`` is True and -inf elsewhere."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)


# --------------------------------------------------------------------------- the attentions of a GPT layer


class PerformerSelfAttention(CausalSelfAttention):
    """A GPT layer with causal FAVOR+ kernel attention (Corollary 5.3): weights in the quadratic form
    (:func:`kernel_attention_weights`, rows sum to 1) from the random projection in the buffer ``features``
    (m' x d_head), shared by the heads of a layer, drawn at construction from torch's global generator and
    saved in the state dict (see :meth:`redraw_features`)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__(cfg)
        self.register_buffer("features", orthogonal_features(cfg.attention.n_features, cfg.d_model // cfg.heads,
                                                             generator=torch.default_generator))

    def redraw_features(self, seed: int) -> None:
        """Draw a new FAVOR+ projection, reproducibly from ``seed``."""
        self.features.copy_(orthogonal_features(self.features.shape[0], self.features.shape[1], seed=seed))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        att = kernel_attention_weights(q, k, self.features)
        y = F.dropout(att, self.dropout, self.training).to(v.dtype) @ v
        return y, (att if need_weights else None)


class LongformerSelfAttention(CausalSelfAttention):
    """A GPT layer with the causal Longformer mask of Corollary 5.4 (:func:`longformer_mask`): SDPA with the
    boolean mask, or the explicit masked softmax when the weights are asked for."""

    def __init__(self, cfg: GPTConfig):
        super().__init__(cfg)
        self.window, self.global_every = cfg.attention.window, cfg.attention.global_every

    def mask(self, t: int, device: torch.device) -> torch.Tensor:
        """The boolean (T, T) attention mask of this layer (True = may attend)."""
        return longformer_mask(t, self.window, self.global_every, device=device)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        mask = self.mask(q.shape[-2], q.device)
        if need_weights:
            att = masked_softmax_weights(q, k, mask)
            return F.dropout(att, self.dropout, self.training) @ v, att
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        return y, None


@register_attention
@dataclass(frozen=True)
class PerformerAttention(AttentionSpec):
    """FAVOR+ kernel attention with ``n_features`` = m' random features (Corollary 5.3)."""

    n_features: int
    name: ClassVar[str] = "performer"

    def __post_init__(self) -> None:
        check_int("n_features", self.n_features, low=1)

    def build(self, config: GPTConfig) -> PerformerSelfAttention:
        return PerformerSelfAttention(config)


@register_attention
@dataclass(frozen=True)
class LongformerAttention(AttentionSpec):
    """Causal sliding window of radius ``window`` = w plus the global positions j = 0 mod ``global_every`` = g
    (0-based; None: no global positions), Corollary 5.4."""

    window: int
    global_every: int | None = None
    name: ClassVar[str] = "longformer"

    def __post_init__(self) -> None:
        check_int("window", self.window, low=0)
        if self.global_every is not None:
            check_int("global_every", self.global_every, low=1)

    def build(self, config: GPTConfig) -> LongformerSelfAttention:
        return LongformerSelfAttention(config)


def attention_spec(kind: str, *, n_features: int | None = None, window: int | None = None,
                   global_every: int | None = None) -> AttentionSpec:
    """The attention of ``kind`` (one of :data:`KINDS`) with its settings; settings it does not use must be None.

    ``n_features`` is required for ``"performer"``, ``window`` for ``"longformer"`` (``global_every`` optional).
    """
    check_choice("kind", kind, KINDS)
    used = {"softmax": (), "performer": ("n_features",), "longformer": ("window", "global_every")}[kind]
    for name, value in (("n_features", n_features), ("window", window), ("global_every", global_every)):
        if name not in used and value is not None:
            owner = "performer" if name == "n_features" else "longformer"
            raise ValueError(f"{name} must be None with attention {kind!r} (it is used by {owner} attention), "
                             f"got {value!r}")
    if kind == "performer":
        if n_features is None:
            raise ValueError("n_features (the number m' of random features, an int >= 1) is required with "
                             "attention 'performer'")
        return PerformerAttention(n_features)
    if kind == "longformer":
        if window is None:
            raise ValueError("window (the radius w, an int >= 0) is required with attention 'longformer'")
        return LongformerAttention(window, global_every)
    return SoftmaxAttention()


def redraw_features(model: GPT, seed: int) -> None:
    """Draw new FAVOR+ projections for every layer of a Performer ``model`` (layer l from ``seed + l``)."""
    if not isinstance(model, GPT) or not isinstance(model.config.attention, PerformerAttention):
        raise ValueError(f"model must be a GPT with Performer attention, got "
                         f"{getattr(getattr(model, 'config', None), 'attention', type(model).__name__)!r}")
    seed = check_int("seed", seed, low=0, high=2**63 - 1 - model.config.depth)
    for layer, block in enumerate(model.blocks):
        block.attn.redraw_features(seed + layer)
