"""Performer kernel attention (FAVOR+, Corollary 5.3) and Longformer masks (Corollary 5.4) for
:class:`hoplib.models.GPT` (``GPTConfig(attention=PerformerAttention(m'))``). Causal kernel attention is computed
here as T x T weights, stabilised so that exp does not overflow; its running sums (the state a player posts),
the positive features and masked softmax are cells of chapters/efficient_attention.md (tagged attention-code).
Positions are 0-based, so position 0 (the hop-count token) is always global."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from hoplib.models import ATTENTIONS, AttentionSpec, CausalSelfAttention, GPTConfig, register_attention

KINDS = ("softmax", "performer", "longformer")
"""The attentions compared in Corollaries 5.3 and 5.4: the paper's softmax and the two efficient ones."""


# --------------------------------------------------------------------------- random features (FAVOR+)
def orthogonal_features(n_features: int, dim: int, *, seed: int | None = None) -> torch.Tensor:
    """FAVOR+'s projection W (n_features x dim): blocks of ``dim`` orthogonal directions, rows scaled to Gaussian
    norms (marginally N(0, I), so the estimate is unbiased); on the CPU from ``seed`` (None: the global RNG)."""
    gen = None if seed is None else torch.Generator().manual_seed(seed)
    blocks = []
    for _ in range(math.ceil(n_features / dim)):
        qmat, r = torch.linalg.qr(torch.randn(dim, dim, generator=gen))
        blocks.append((qmat * torch.sign(torch.diagonal(r)).unsqueeze(0)).T)  # sign fix: a uniform rotation
    norms = torch.randn(n_features, dim, generator=gen).norm(dim=1, keepdim=True)
    return torch.cat(blocks)[:n_features] * norms


def log_features(x: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """W x' - |x'|^2 / 2 with x' = x d^(-1/4), the log of FAVOR+'s positive features of x (..., d)."""
    dt = torch.float64 if x.dtype == torch.float64 else torch.float32
    xs = x.to(dt) * math.sqrt(1.0 / math.sqrt(x.shape[-1]))
    return xs @ features.to(dt).T - 0.5 * xs.pow(2).sum(-1, keepdim=True)


def stable_features(q: torch.Tensor, k: torch.Tensor, features: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Features of q over their per-query max (a constant that cancels), of k over their max c (returned)."""
    lq, lk = log_features(q, features), log_features(k, features)
    c = lk.amax(-1)
    return (lq - lq.amax(-1, keepdim=True)).exp(), (lk - c.unsqueeze(-1)).exp(), c


def kernel_attention_weights(q: torch.Tensor, k: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """Causal FAVOR+ attention weights (..., T, T) in the quadratic form, rows summing to 1."""
    with torch.autocast(device_type=q.device.type, enabled=False):
        fq, fk, c = stable_features(q, k, features)
        t = q.shape[-2]
        causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        big_m = torch.cummax(c, dim=-1).values  # running max over keys j <= i
        shift = (c.unsqueeze(-2) - big_m.unsqueeze(-1)).masked_fill(~causal, float("-inf"))  # (..., T_q, T_k)
        raw = (fq @ fk.transpose(-2, -1)) * shift.exp()
        return raw / raw.sum(-1, keepdim=True)


def elu_attention_weights(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Causal kernel attention weights (..., T, T) with the deterministic map phi(x) = elu(x) + 1 of linear
    attention (m' = d, no random features, the kernel computed exactly), rows summing to 1."""
    with torch.autocast(device_type=q.device.type, enabled=False):
        fq, fk = F.elu(q.float()) + 1, F.elu(k.float()) + 1
        causal = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool, device=q.device).tril()
        raw = (fq @ fk.transpose(-2, -1)).masked_fill(~causal, 0.0)
        return raw / raw.sum(-1, keepdim=True)


# --------------------------------------------------------------------------- Longformer masks
def longformer_mask(n: int, window: int, global_every: int | None = None,
                    device: str | torch.device | None = None) -> torch.Tensor:
    """(n, n), True where query i may attend key j: j <= i and (i - j <= window or j = 0 mod global_every)."""
    i, j = torch.arange(n, device=device).unsqueeze(1), torch.arange(n, device=device)
    glob = (j % global_every == 0) if global_every is not None else torch.zeros_like(j, dtype=torch.bool)
    return (j <= i) & (((i - j) <= window) | glob)


# --------------------------------------------------------------------------- the attentions of a GPT layer
class PerformerSelfAttention(CausalSelfAttention):
    """Causal FAVOR+ attention; its projection ``features`` (m' x d_head, shared by the heads) is a buffer
    (None for the deterministic map "elu", :func:`elu_attention_weights`)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__(cfg)
        m, d_head = cfg.attention.n_features, cfg.d_model // cfg.heads
        if cfg.attention.feature_map == "elu" and m != d_head:
            raise ValueError(f"the elu map has m' = d_head = {d_head} features, not {m}")
        self.register_buffer("features", orthogonal_features(m, d_head) if cfg.attention.feature_map == "favor"
                             else None)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        att = (elu_attention_weights(q, k) if self.features is None
               else kernel_attention_weights(q, k, self.features))
        y = F.dropout(att, self.dropout, self.training).to(v.dtype) @ v
        return y, (att if need_weights else None)


class LongformerSelfAttention(CausalSelfAttention):
    """Softmax attention under :func:`longformer_mask`."""

    def __init__(self, cfg: GPTConfig):
        super().__init__(cfg)
        self.window, self.global_every = cfg.attention.window, cfg.attention.global_every

    def key_mask(self, t: int, device: torch.device) -> torch.Tensor:
        return longformer_mask(t, self.window, self.global_every, device=device)


@register_attention
@dataclass(frozen=True)
class PerformerAttention(AttentionSpec):
    """Kernel attention with ``n_features`` = m' features (Corollary 5.3): FAVOR+'s random ones, or with
    ``feature_map="elu"`` the deterministic elu(x) + 1 (then m' must be the head width)."""

    n_features: int
    feature_map: str = "favor"
    name: ClassVar[str] = "performer"

    def __post_init__(self) -> None:  # no features: every weight 0/0, a NaN model
        if self.n_features < 1 or self.feature_map not in ("favor", "elu"):
            raise ValueError(f"need n_features >= 1 and feature_map 'favor' or 'elu', got "
                             f"{self.n_features}, {self.feature_map!r}")

    def build(self, config: GPTConfig) -> PerformerSelfAttention:
        return PerformerSelfAttention(config)


@register_attention
@dataclass(frozen=True)
class LongformerAttention(AttentionSpec):
    """Causal window of radius w plus the global positions j = 0 mod g (None: none), Corollary 5.4."""

    window: int
    global_every: int | None = None
    name: ClassVar[str] = "longformer"

    def __post_init__(self) -> None:  # a negative window leaves rows without keys: NaN
        if self.window < 0 or (self.global_every is not None and self.global_every < 1):
            raise ValueError(f"need window >= 0 and global_every >= 1 or None, got window = "
                             f"{self.window}, global_every = {self.global_every}")

    def build(self, config: GPTConfig) -> LongformerSelfAttention:
        return LongformerSelfAttention(config)


def attention_spec(kind: str, *, n_features: int | None = None, window: int | None = None,
                   global_every: int | None = None, feature_map: str | None = None) -> AttentionSpec:
    """The attention of ``kind`` (one of :data:`KINDS`) with its settings."""
    spec = ATTENTIONS[kind]
    fields = {f.name for f in dataclasses.fields(spec)}
    given = {"n_features": n_features, "window": window, "global_every": global_every, "feature_map": feature_map}
    unused = [name for name, value in given.items() if value is not None and name not in fields]
    if unused:  # a setting silently ignored would make another model than the one asked for
        raise ValueError(f"{unused} are not settings of {kind!r} attention")
    return spec(**{name: value for name, value in given.items() if name in fields and value is not None})
