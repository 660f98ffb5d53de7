"""Performer kernel attention (FAVOR+, Corollary 5.3) and Longformer masks (Corollary 5.4) for
:class:`hoplib.models.GPT` (``GPTConfig(attention=PerformerAttention(m'))``). FAVOR+'s positive random features
estimate exp(q . k / sqrt(d)) without bias; causal kernel attention is computed as running sums (the
recurrent state a player posts) or as T x T weights, both stabilised so that exp does not overflow.
Positions are 0-based, so position 0 (the hop-count token) is always global."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from hoplib.models import AttentionSpec, CausalSelfAttention, GPTConfig, SoftmaxAttention, register_attention
from hoplib.tasks import HopTask, find_k

KINDS = ("softmax", "performer", "longformer")
"""The attentions compared in Corollaries 5.3 and 5.4: the paper's softmax and the two efficient ones."""

# --------------------------------------------------------------------------- random features (FAVOR+)


def orthogonal_features(n_features: int, dim: int, *, seed: int | None = None,
                        generator: torch.Generator | None = None,
                        device: str | torch.device | None = None) -> torch.Tensor:
    """FAVOR+'s projection W (n_features x dim): blocks of ``dim`` orthogonal directions (QR of a Gaussian
    matrix, signs fixed so the rotation is uniform), each row scaled to the norm of a Gaussian vector, so rows are
    marginally N(0, I) and the estimate stays unbiased. Drawn on the CPU from ``seed`` or ``generator``."""
    gen = torch.Generator().manual_seed(seed) if seed is not None else generator
    blocks = []
    for _ in range(math.ceil(n_features / dim)):
        g = torch.randn(dim, dim, generator=gen)
        qmat, r = torch.linalg.qr(g)
        qmat = qmat * torch.sign(torch.diagonal(r)).unsqueeze(0)  # sign fix: makes the rotation uniform (Haar)
        blocks.append(qmat.T)  # rows orthonormal
    w = torch.cat(blocks)[:n_features]
    norms = torch.randn(n_features, dim, generator=gen).norm(dim=1, keepdim=True)
    return (w * norms).to(device if device is not None else "cpu")


def log_features(x: torch.Tensor, features: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """W x' - |x'|^2 / 2 with x' = x scale^(1/2) (the log-features; ``scale`` defaults to 1/sqrt(d))."""
    d = x.shape[-1]
    s = (1.0 / math.sqrt(d)) if scale is None else float(scale)
    dt = torch.float64 if x.dtype == torch.float64 else torch.float32
    xs = x.to(dt) * math.sqrt(s)
    return xs @ features.to(dt).T - 0.5 * xs.pow(2).sum(-1, keepdim=True)


def positive_features(x: torch.Tensor, features: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """phi(x') = exp(W x' - |x'|^2 / 2) / sqrt(m'), without stabiliser: E[phi(q') . phi(k')] = exp(q' . k')."""
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
    """Causal FAVOR+ attention weights (..., T, T) in the quadratic form, rows summing to 1."""
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
    """Causal FAVOR+ attention as running sums; returns ``(y, state)`` with state (S, z, M), M the running
    key maximum that stabilises the exponentials. Pass a returned state to continue on the next block."""
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
    """(n, n), True where query i may attend key j: j <= i and (i - j <= window or j = 0 mod global_every)."""
    i = torch.arange(n, device=device).unsqueeze(1)
    j = torch.arange(n, device=device).unsqueeze(0)
    allowed = (i - j) <= window
    if global_every is not None:
        allowed = allowed | (j % global_every == 0)
    return allowed & (j <= i)


def masked_softmax_weights(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + Lambda) with Lambda = 0 where ``mask`` is True and -inf elsewhere."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)


# --------------------------------------------------------------------------- the attentions of a GPT layer


class PerformerSelfAttention(CausalSelfAttention):
    """Causal FAVOR+ attention; the projection ``features`` (m' x d_head, shared by the layer's heads) is a
    buffer, drawn from torch's global generator and saved in the state dict."""

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
    """Softmax attention under :func:`longformer_mask`."""

    def __init__(self, cfg: GPTConfig):
        super().__init__(cfg)
        self.window, self.global_every = cfg.attention.window, cfg.attention.global_every

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        mask = longformer_mask(q.shape[-2], self.window, self.global_every, device=q.device)
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

    def __post_init__(self) -> None:  # no features: every weight 0/0, a NaN model
        if self.n_features < 1:
            raise ValueError(f"n_features must be at least 1, got {self.n_features}")

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
                   global_every: int | None = None) -> AttentionSpec:
    """The attention of ``kind`` (one of :data:`KINDS`) with its settings."""
    used = {"softmax": (), "performer": ("n_features",), "longformer": ("window", "global_every")}[kind]
    given = {"n_features": n_features, "window": window, "global_every": global_every}
    unused = [name for name, value in given.items() if value is not None and name not in used]
    if unused:  # a setting silently ignored would make another model than the one asked for
        raise ValueError(f"{unused} are not settings of {kind!r} attention")
    if kind == "performer":
        return PerformerAttention(n_features)
    if kind == "longformer":
        return LongformerAttention(window, global_every)
    return {"softmax": SoftmaxAttention}[kind]()


def out_of_reach(task: HopTask, window: int, depths: list[int], *, n_samples: int = 100,
                 seed: int = 0) -> dict[tuple[int, int], float]:
    """``{(L, k): share}``: on the test samples of :func:`hoplib.evaluate.per_k_error` (this ``seed``), the
    share of answered positions whose hop_k needs a letter more than L w positions back, out of the reach of
    L Longformer layers of window radius w (global position 0 holds only the hop count)."""
    out = {}
    for k in range(max(task.min_hops, 1), task.max_hops + 1):
        letters, _ = task.draw(n_samples, k, seed + k, "cpu")
        pointer = find_k(letters, k)
        answered = pointer >= 0
        span = torch.arange(letters.shape[-1]) - pointer + 2  # from the last match to i
        keep = answered.sum(dim=1) > 0
        for d in depths:
            far = ((span > d * window + 1) & answered).sum(dim=1).double()
            out[(d, k)] = float((far[keep] / answered.sum(dim=1)[keep]).mean())
    return out
