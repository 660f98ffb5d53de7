"""Multi-layer RNNs in the paper's form (Section 5) with states that encode to bits exactly: the trained GRU, LSTM
and Mamba-style layers. The chapter ``rnn.md`` builds the hand-built RNNs on these pieces and runs them as
Corollary 5.2's protocol."""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

State = tuple[torch.Tensor, ...]


# --------------------------------------------------------------------------- bit encodings
def uint_to_bits(values: torch.Tensor, width: int) -> torch.Tensor:
    """Non-negative integers (B, ...) -> bits (B, numel * width), least significant bit first."""
    if int(values.min()) < 0 or int(values.max()) >= 2**width:  # would wrap around silently
        raise ValueError(f"values must be in [0, {2**width - 1}] to fit in width = {width} bits")
    shifts = torch.arange(width, device=values.device)
    return ((values.long().unsqueeze(-1) >> shifts) & 1).bool().reshape(values.shape[0], -1)


def bits_to_uint(bits: torch.Tensor, width: int) -> torch.Tensor:
    """Inverse of :func:`uint_to_bits`: bits (B, n * width) -> LongTensor (B, n)."""
    shifts = torch.arange(width, device=bits.device)
    return (bits.long().reshape(bits.shape[0], -1, width) << shifts).sum(-1)


# --------------------------------------------------------------------------- the paper's RNN model
class RecurrentLayer(nn.Module):
    """One layer g_l: ``forward(z, state=None) -> (z_out, final_state)`` on z (B, T, ...). The state, tensors
    described by :meth:`state_spec`, is written as bits (B, state_bits()) by :meth:`encode_state` and read back
    exactly by :meth:`decode_state`: what the reduction posts."""

    def state_spec(self) -> list[tuple[tuple[int, ...], int | None]]:
        """Per state tensor: its shape per sequence and the bits of an unsigned entry (None: a float32)."""
        raise NotImplementedError

    def state_bits(self) -> int:
        return sum(math.prod(shape) * (width or 32) for shape, width in self.state_spec())

    def encode_state(self, state: State) -> torch.Tensor:
        parts = []
        for t, (_, width) in zip(state, self.state_spec(), strict=True):
            if width is None:
                t, width = t.float().contiguous().view(torch.int32).long() % 2**32, 32
            parts.append(uint_to_bits(t, width))
        return torch.cat(parts, dim=1)

    def decode_state(self, bits: torch.Tensor) -> State:
        out, at = [], 0
        for shape, width in self.state_spec():
            n = math.prod(shape) * (width or 32)
            u = bits_to_uint(bits[:, at:at + n], width or 32).reshape(bits.shape[0], *shape)
            if width is None:
                u = torch.where(u >= 2**31, u - 2**32, u).to(torch.int32).view(torch.float32)
            out.append(u)
            at += n
        return tuple(out)


class _MLP(nn.Module):
    def __init__(self, d_model: int, ratio: int):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, ratio * d_model)
        self.proj = nn.Linear(ratio * d_model, d_model)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z + self.proj(F.gelu(self.fc(self.norm(z))))


class TorchRNNLayer(RecurrentLayer):
    """Pre-norm residual block z + RNN(LN(z)) around ``cell`` (``torch.nn.GRU`` or ``torch.nn.LSTM``), then an
    optional residual MLP; state h (GRU) or (h, c) (LSTM), ``state_width`` float32s each (default d_model; a
    narrower state is projected back to d_model)."""

    def __init__(self, d_model: int, mlp_ratio: int = 4, cell: type[nn.RNNBase] = nn.GRU,
                 state_width: int | None = None):
        super().__init__()
        self.d_model, self.width, self.lstm = d_model, state_width or d_model, cell is nn.LSTM
        self.norm = nn.LayerNorm(d_model)
        self.rnn = cell(d_model, self.width, batch_first=True)
        self.up = nn.Linear(self.width, d_model) if self.width != d_model else nn.Identity()
        self.mlp = _MLP(d_model, mlp_ratio) if mlp_ratio else nn.Identity()

    def state_spec(self) -> list[tuple[tuple[int, ...], int | None]]:
        return [((self.width,), None)] * (2 if self.lstm else 1)

    def forward(self, z: torch.Tensor, state: State | None = None) -> tuple[torch.Tensor, State]:
        h0 = None if state is None else tuple(t.unsqueeze(0).float().contiguous() for t in state)
        with torch.autocast(device_type=z.device.type, enabled=False):  # the recurrence in float32
            out, h = self.rnn(self.norm(z).float(), h0 if self.lstm or h0 is None else h0[0])
        return self.mlp(z + self.up(out)), tuple(t[0] for t in (h if self.lstm else (h,)))


class MambaLayer(RecurrentLayer):
    """A Mamba-style selective state-space block in pure torch, with Mamba-2's scalar decay per head: per head,
    S_t = exp(a_t) S_{t-1} + dt_t v_t B_t^T and y_t = S_t C_t + D v_t, after a causal depthwise convolution,
    gated by SiLU(g). Its state (the convolution's last inputs and S) carries over between blocks exactly."""

    def __init__(self, d_model: int, mlp_ratio: int = 4, d_state: int = 16, expand: int = 2, n_heads: int = 4,
                 d_conv: int = 4, d_inner: int | None = None):
        super().__init__()
        self.d_model, self.d_state, self.d_inner = d_model, d_state, d_inner or expand * d_model
        self.n_heads, self.d_conv = n_heads, d_conv
        if self.d_inner % n_heads:
            raise ValueError(f"n_heads must divide expand * d_model = {self.d_inner}, got {n_heads}")
        self.conv_dim = self.d_inner + 2 * d_state
        self.norm = nn.LayerNorm(d_model)
        self.in_proj = nn.Linear(d_model, 2 * self.d_inner + 2 * d_state + n_heads, bias=False)
        self.conv = nn.Conv1d(self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim)
        dt = torch.exp(torch.rand(n_heads) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^{-1}(dt)
        self.A_log = nn.Parameter(torch.log(torch.empty(n_heads).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(n_heads))
        self.out_norm = nn.RMSNorm(self.d_inner, eps=1e-5)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)
        self.mlp = _MLP(d_model, mlp_ratio) if mlp_ratio else nn.Identity()

    def state_spec(self) -> list[tuple[tuple[int, ...], int | None]]:
        p = self.d_inner // self.n_heads
        return [((self.conv_dim, self.d_conv - 1), None), ((self.n_heads, p, self.d_state), None)]

    def forward(self, z: torch.Tensor, state: State | None = None) -> tuple[torch.Tensor, State]:
        b, t, _ = z.shape
        hn, p, s = self.n_heads, self.d_inner // self.n_heads, self.d_state
        u = self.in_proj(self.norm(z))
        g, xbc, dt = torch.split(u, [self.d_inner, self.conv_dim, hn], dim=-1)
        xbc = xbc.transpose(1, 2)  # (B, conv_dim, T)
        if state is None:
            state = (xbc.new_zeros(b, self.conv_dim, self.d_conv - 1), z.new_zeros(b, hn, p, s))
        padded = torch.cat([state[0].to(xbc.dtype), xbc], dim=2)
        conv_state = padded[:, :, -(self.d_conv - 1):]
        xbc = F.silu(F.conv1d(padded, self.conv.weight, self.conv.bias, groups=self.conv_dim)).transpose(1, 2)
        v, bmat, cmat = torch.split(xbc, [self.d_inner, s, s], dim=-1)
        v = v.float().reshape(b, t, hn, p).transpose(1, 2)  # (B, H, T, P)
        bmat, cmat = bmat.float(), cmat.float()
        step = F.softplus(dt.float() + self.dt_bias).transpose(1, 2)  # (B, H, T)
        a = step * -torch.exp(self.A_log.float())[None, :, None]  # (B, H, T), <= 0
        cum = torch.cumsum(a, dim=-1)
        diff = cum[..., :, None] - cum[..., None, :]  # (B, H, T, T): sum of a over (s, t]
        causal = torch.ones(t, t, dtype=torch.bool, device=z.device).tril()
        decay = torch.exp(diff.masked_fill(~causal, float("-inf")))
        scores = decay * (cmat @ bmat.transpose(1, 2))[:, None]  # (B, H, T, T)
        vx = v * step[..., None]
        y = scores @ vx  # (B, H, T, P)
        last = torch.exp(cum[..., -1:, None] - cum[..., :, None])  # (B, H, T, 1) decay from s to the end
        s0 = state[1].float()  # the state carried in: its decayed contributions
        y = y + torch.exp(cum)[..., None] * torch.einsum("bhps,bts->bhtp", s0, cmat)
        s_final = torch.einsum("bhtp,bts->bhps", vx * last, bmat) + torch.exp(cum[..., -1])[..., None, None] * s0
        y = y + self.D.float()[None, :, None, None] * v
        y = y.transpose(1, 2).reshape(b, t, self.d_inner).to(z.dtype)
        out = self.out_proj(self.out_norm(y * F.silu(g)))
        return self.mlp(z + out), (conv_state, s_final)


class RecurrentStack(nn.Module):
    """The paper's multi-layer RNN: token-wise ``embed``, recurrent ``layers``,
    token-wise ``readout``; ``forward(ids (B, T)) -> logits (B, T, C)``."""

    def __init__(self, embed: nn.Module, layers: list[RecurrentLayer],
                 readout: nn.Module):
        super().__init__()
        self.embed = embed
        self.layers = nn.ModuleList(layers)
        self.readout = readout

    @property
    def n_layers(self) -> int:
        """Depth L: the number of layers (rounds of the protocol)."""
        return len(self.layers)

    def state_bits(self) -> list[int]:
        """Bits of each layer's state (the message size of the protocol)."""
        return [layer.state_bits() for layer in self.layers]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        z = self.embed(ids)
        for layer in self.layers:
            z, _ = layer(z)
        return self.readout(z)


KINDS = ("gru", "lstm", "mamba")


def recurrent_model(kind: str, vocab_size: int, *, d_model: int = 64, n_layers: int = 2, n_classes: int | None = None,
                    mlp_ratio: int = 4, **layer_kwargs: int) -> RecurrentStack:
    """Embedding, ``n_layers`` residual blocks of ``kind`` ("gru", "lstm" or "mamba"), LayerNorm and a linear
    head to ``n_classes`` (default ``vocab_size``) logits; ``layer_kwargs`` go to each layer (``state_width`` of
    a GRU or LSTM layer; ``d_state``, ``d_inner``, ``d_conv``, ``n_heads`` of a :class:`MambaLayer`)."""
    layer = {"gru": partial(TorchRNNLayer, cell=nn.GRU), "lstm": partial(TorchRNNLayer, cell=nn.LSTM),
             "mamba": MambaLayer}[kind]
    layers = [layer(d_model, mlp_ratio, **layer_kwargs) for _ in range(n_layers)]
    readout = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, n_classes or vocab_size))
    return RecurrentStack(nn.Embedding(vocab_size, d_model), layers, readout)
