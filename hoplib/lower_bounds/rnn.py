"""Multi-layer recurrent models in the paper's form (Section 5, Corollary 5.2), trained and hand-built.

The paper's RNN model: layer l maps its input sequence Z^{l-1} to Z^l through a state, (Z^l_i, H^l_i) =
g_l(Z^{l-1}_i, H^l_{i-1}) with H^l_0 = 0, Z^0 = X and output Y = Z^L. Every model here is a
:class:`RecurrentStack`: a token-wise ``embed``, a list of :class:`RecurrentLayer` (each one g_l, with a
state that can be written as bits and read back exactly) and a token-wise ``readout``. Token-wise maps
(embeddings, residual connections, norms, MLPs) can be folded into g_l, so these are all RNNs of the
paper's kind, and :func:`simulate_rnn_protocol` runs any of them as a blackboard protocol (Corollary 5.2's
reduction, on the engine of :mod:`hoplib.lower_bounds.communication`).

Trained models (``forward(ids: (B, T)) -> logits (B, T, C)``, the interface of :mod:`hoplib.train`):

* :class:`GRULayer`, :class:`LSTMLayer`: ``torch.nn.GRU`` / ``torch.nn.LSTM`` cells in pre-norm residual
  blocks with an optional token-wise MLP.
* :class:`MambaLayer`: a compact pure-torch selective state-space layer in the style of Mamba (Gu & Dao
  2023), using Mamba-2's scalar-decay-per-head form (Dao & Gu 2024) so that a whole block is one masked
  matrix product on CPU or GPU: input-dependent step dt_t, decay exp(dt_t A), input and output maps B_t, C_t,
  a causal depthwise convolution and a SiLU gate. Its state (the convolution's last inputs and the SSM
  state) is passed between blocks exactly.
* :func:`recurrent_model` builds a stack of any of the three kinds.

Hand-built exact upper bounds (integer states, counted in bits):

* :func:`hop_rnn`: depth k (``n_layers == k``) computes hop_k, state O(|Sigma| log |Sigma|) bits per layer.
  Layer l keeps, for every symbol s, the previous layer's output just after the last occurrence of s, so it
  outputs hop_l from hop_{l-1}: hop_l(x)_i = hop_{l-1}(x)_{find(i)}.
* :func:`prefix_rnn`: depth 1, stores the whole prefix (about N log |Sigma| bits) and outputs hop_k of it.

Both output ``alphabet_size + 1`` classes: class a < alphabet_size is letter a, class ``alphabet_size`` is
"no answer" (the paper's ⊥, ``-1`` in :func:`hoplib.tasks.hop`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from hoplib._book.validate import check_choice, check_int, check_int_array
from hoplib.lower_bounds.communication import (
    Blackboard,
    Player,
    block_bounds,
    class_bits,
    int_to_bits,
    run_protocol,
    sequence_ids,
)
from hoplib.models import gpt_for_task
from hoplib.tasks import NO_ANSWER, HopTask, hop

State = tuple[torch.Tensor, ...]

_INT_VIEW = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


# --------------------------------------------------------------------------- bit encodings
def uint_to_bits(values: torch.Tensor, width: int) -> torch.Tensor:
    """Non-negative integers (B, n) -> bits (B, n * width), least significant bit first."""
    width = check_int("width", width, low=1, high=62)
    if int(values.min()) < 0 or int(values.max()) >= 2**width:
        raise ValueError(f"values must be in [0, {2**width - 1}] to fit in width = {width} bits")
    shifts = torch.arange(width, device=values.device)
    return ((values.long().unsqueeze(-1) >> shifts) & 1).bool().reshape(values.shape[0], -1)


def bits_to_uint(bits: torch.Tensor, width: int) -> torch.Tensor:
    """Inverse of :func:`uint_to_bits`: bits (B, n * width) -> LongTensor (B, n)."""
    width = check_int("width", width, low=1, high=62)
    if bits.shape[-1] % width:
        raise ValueError(f"bits must have a multiple of width = {width} columns, got {bits.shape[-1]}")
    shifts = torch.arange(width, device=bits.device)
    b = bits.long().reshape(bits.shape[0], -1, width)
    return (b << shifts).sum(-1)


def float_to_bits(t: torch.Tensor) -> torch.Tensor:
    """The exact IEEE bits of a float32/float16/bfloat16 tensor (B, ...) as a bool tensor (B, numel * width)."""
    if t.dtype not in _INT_VIEW:
        raise TypeError(f"t must be float32, float16 or bfloat16, got {t.dtype}")
    ints = t.contiguous().view(_INT_VIEW[t.dtype]).reshape(t.shape[0], -1).long()
    width = torch.finfo(t.dtype).bits
    ints = ints % (2**width)  # two's complement as an unsigned integer
    return uint_to_bits(ints, width)


def bits_to_float(bits: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Inverse of :func:`float_to_bits` for a state of per-sequence ``shape`` and ``dtype``."""
    if dtype not in _INT_VIEW:
        raise TypeError(f"dtype must be float32, float16 or bfloat16, got {dtype}")
    width = torch.finfo(dtype).bits
    u = bits_to_uint(bits, width)
    signed = torch.where(u >= 2 ** (width - 1), u - 2**width, u)
    return signed.to(_INT_VIEW[dtype]).view(dtype).reshape((bits.shape[0], *shape))


# --------------------------------------------------------------------------- the paper's RNN model
class RecurrentLayer(nn.Module):
    """One layer g_l of the paper's RNN model: ``forward(z, state=None) -> (z_out, final_state)``.

    ``z`` is (B, T, ...) and ``state`` the state after the previous position (None: the initial state
    H_0). Subclasses say how many bits a state takes (``state_bits``) and encode/decode it exactly, which is
    what the communication reduction posts on the blackboard.
    """

    def state_bits(self) -> int:
        """Bits of one sequence's state."""
        raise NotImplementedError

    def n_state_tensors(self) -> int:
        """How many tensors make up the state tuple."""
        raise NotImplementedError

    def encode_state(self, state: State) -> torch.Tensor:
        """State -> bool tensor (B, state_bits())."""
        raise NotImplementedError

    def decode_state(self, bits: torch.Tensor) -> State:
        """Inverse of :meth:`encode_state`."""
        raise NotImplementedError


class FloatStateLayer(RecurrentLayer):
    """A layer whose state is a tuple of float tensors; each entry costs its IEEE width in bits."""

    def state_shapes(self) -> list[tuple[int, ...]]:
        """Per-sequence shapes of the state tensors."""
        raise NotImplementedError

    def _dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def n_state_tensors(self) -> int:
        return len(self.state_shapes())

    def state_bits(self) -> int:
        width = torch.finfo(self._dtype()).bits
        return sum(math.prod(s) for s in self.state_shapes()) * width

    def encode_state(self, state: State) -> torch.Tensor:
        return torch.cat([float_to_bits(s.to(self._dtype())) for s in state], dim=1)

    def decode_state(self, bits: torch.Tensor) -> State:
        width = torch.finfo(self._dtype()).bits
        out, at = [], 0
        for shape in self.state_shapes():
            n = math.prod(shape) * width
            out.append(bits_to_float(bits[:, at:at + n], shape, self._dtype()))
            at += n
        if at != bits.shape[1]:
            raise ValueError(f"bits must have {at} columns, got {bits.shape[1]}")
        return tuple(out)


class _MLP(nn.Module):
    def __init__(self, d_model: int, ratio: int):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, ratio * d_model)
        self.proj = nn.Linear(ratio * d_model, d_model)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z + self.proj(F.gelu(self.fc(self.norm(z))))


def _no_autocast(z: torch.Tensor) -> torch.autocast:
    return torch.autocast(device_type=z.device.type, enabled=False)


class GRULayer(FloatStateLayer):
    """Pre-norm residual GRU block, z + GRU(LN(z)), then an optional residual MLP; state h (d_model floats)."""

    def __init__(self, d_model: int, mlp_ratio: int = 4):
        super().__init__()
        self.d_model = check_int("d_model", d_model, low=1)
        self.norm = nn.LayerNorm(d_model)
        self.rnn = nn.GRU(d_model, d_model, batch_first=True)
        self.mlp = _MLP(d_model, mlp_ratio) if check_int("mlp_ratio", mlp_ratio, low=0) else nn.Identity()

    def state_shapes(self) -> list[tuple[int, ...]]:
        return [(self.d_model,)]

    def forward(self, z: torch.Tensor, state: State | None = None) -> tuple[torch.Tensor, State]:
        h0 = None if state is None else state[0].unsqueeze(0).float().contiguous()
        with _no_autocast(z):  # the recurrence runs in float32 even under bf16 autocast (CUDA)
            out, h = self.rnn(self.norm(z).float(), h0)
        return self.mlp(z + out), (h[0],)


class LSTMLayer(FloatStateLayer):
    """Pre-norm residual LSTM block with an optional residual MLP; state (h, c), 2 * d_model floats."""

    def __init__(self, d_model: int, mlp_ratio: int = 4):
        super().__init__()
        self.d_model = check_int("d_model", d_model, low=1)
        self.norm = nn.LayerNorm(d_model)
        self.rnn = nn.LSTM(d_model, d_model, batch_first=True)
        self.mlp = _MLP(d_model, mlp_ratio) if check_int("mlp_ratio", mlp_ratio, low=0) else nn.Identity()

    def state_shapes(self) -> list[tuple[int, ...]]:
        return [(self.d_model,), (self.d_model,)]

    def forward(self, z: torch.Tensor, state: State | None = None) -> tuple[torch.Tensor, State]:
        hc = None if state is None else tuple(s.unsqueeze(0).float().contiguous() for s in state)
        with _no_autocast(z):  # the recurrence runs in float32 even under bf16 autocast (CUDA)
            out, (h, c) = self.rnn(self.norm(z).float(), hc)
        return self.mlp(z + out), (h[0], c[0])


class _RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class MambaLayer(FloatStateLayer):
    """A Mamba-style selective SSM block (pure torch; Mamba-2's scalar decay per head), pre-norm residual.

    With u = in_proj(LN(z)) split into a gate g, inputs v, maps B, C and steps dt: v, B, C go through a causal
    depthwise convolution (kernel ``d_conv``) and SiLU; per head h, with a_t = softplus(dt_t + bias) * A_h
    (A_h < 0), the state S_t = exp(a_t) S_{t-1} + softplus(..)_t v_t B_t^T (P x d_state) and y_t = S_t C_t +
    D_h v_t. The output out_proj(RMSNorm(y * SiLU(g))) is added to z, then an optional residual MLP.
    The state is the convolution's last ``d_conv - 1`` inputs and S: the recurrence is exact across blocks.
    """

    def __init__(self, d_model: int, mlp_ratio: int = 4, d_state: int = 16, expand: int = 2, n_heads: int = 4,
                 d_conv: int = 4):
        super().__init__()
        self.d_model = check_int("d_model", d_model, low=1)
        self.d_state = check_int("d_state", d_state, low=1)
        self.d_inner = check_int("expand", expand, low=1) * d_model
        self.n_heads = check_int("n_heads", n_heads, low=1, high=self.d_inner)
        if self.d_inner % n_heads:
            raise ValueError(f"n_heads must divide expand * d_model = {self.d_inner}, got {n_heads}")
        self.d_conv = check_int("d_conv", d_conv, low=2)
        self.conv_dim = self.d_inner + 2 * d_state
        self.norm = nn.LayerNorm(d_model)
        self.in_proj = nn.Linear(d_model, 2 * self.d_inner + 2 * d_state + n_heads, bias=False)
        self.conv = nn.Conv1d(self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim)
        dt = torch.exp(torch.rand(n_heads) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^{-1}(dt)
        self.A_log = nn.Parameter(torch.log(torch.empty(n_heads).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(n_heads))
        self.out_norm = _RMSNorm(self.d_inner)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)
        self.mlp = _MLP(d_model, mlp_ratio) if check_int("mlp_ratio", mlp_ratio, low=0) else nn.Identity()

    def state_shapes(self) -> list[tuple[int, ...]]:
        p = self.d_inner // self.n_heads
        return [(self.conv_dim, self.d_conv - 1), (self.n_heads, p, self.d_state)]

    def forward(self, z: torch.Tensor, state: State | None = None) -> tuple[torch.Tensor, State]:
        b, t, _ = z.shape
        hn, p, s = self.n_heads, self.d_inner // self.n_heads, self.d_state
        u = self.in_proj(self.norm(z))
        g, xbc, dt = torch.split(u, [self.d_inner, self.conv_dim, hn], dim=-1)
        xbc = xbc.transpose(1, 2)  # (B, conv_dim, T)
        if state is None:
            conv0 = xbc.new_zeros(b, self.conv_dim, self.d_conv - 1)
            s0 = None
        else:
            conv0, s0 = state[0].to(xbc.dtype), state[1]
        padded = torch.cat([conv0, xbc], dim=2)
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
        s_final = torch.einsum("bhtp,bts->bhps", vx * last, bmat)
        if s0 is not None:
            s0 = s0.float()
            y = y + torch.exp(cum)[..., None] * torch.einsum("bhps,bts->bhtp", s0, cmat)
            s_final = s_final + torch.exp(cum[..., -1])[..., None, None] * s0
        y = y + self.D.float()[None, :, None, None] * v
        y = y.transpose(1, 2).reshape(b, t, self.d_inner).to(z.dtype)
        out = self.out_proj(self.out_norm(y * F.silu(g)))
        return self.mlp(z + out), (conv_state, s_final)


class RecurrentStack(nn.Module):
    """The paper's multi-layer RNN: token-wise ``embed``, recurrent ``layers``, token-wise ``readout``.

    ``forward(ids (B, T)) -> logits (B, T, C)``, the interface :mod:`hoplib.train` trains.
    """

    def __init__(self, embed: nn.Module, layers: list[RecurrentLayer], readout: nn.Module):
        super().__init__()
        if not all(isinstance(layer, RecurrentLayer) for layer in layers):
            raise TypeError("layers must all be hoplib.lower_bounds.rnn.RecurrentLayer instances")
        self.embed = embed
        self.layers = nn.ModuleList(layers)
        self.readout = readout

    @property
    def n_layers(self) -> int:
        """Depth L: the number of recurrent layers (rounds of the reduction's protocol)."""
        return len(self.layers)

    def state_bits(self) -> list[int]:
        """Bits of each layer's state (the message size of the reduction's protocol, per layer)."""
        return [layer.state_bits() for layer in self.layers]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        z = self.embed(ids)
        for layer in self.layers:
            z, _ = layer(z)
        return self.readout(z)


class _Readout(nn.Module):
    def __init__(self, d_model: int, n_classes: int):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(z))


KINDS = ("gru", "lstm", "mamba")


def recurrent_model(kind: str, vocab_size: int, *, d_model: int = 64, n_layers: int = 2, n_classes: int | None = None,
                    mlp_ratio: int = 4, **layer_kwargs: int) -> RecurrentStack:
    """A trainable multi-layer recurrent model: ``kind`` in ("gru", "lstm", "mamba").

    Embedding (``vocab_size`` ids, width ``d_model``), ``n_layers`` residual recurrent blocks, final LayerNorm
    and a linear head to ``n_classes`` logits (default ``vocab_size``: class index = target token id, as
    :mod:`hoplib.train` expects). ``layer_kwargs`` go to :class:`MambaLayer` (``d_state``, ``expand``, ...).
    """
    check_choice("kind", kind, KINDS)
    vocab_size = check_int("vocab_size", vocab_size, low=1)
    d_model = check_int("d_model", d_model, low=1)
    n_layers = check_int("n_layers", n_layers, low=1)
    n_classes = vocab_size if n_classes is None else check_int("n_classes", n_classes, low=1)
    if kind == "gru":
        if layer_kwargs:
            raise TypeError(f"layer_kwargs are only for kind='mamba', got {sorted(layer_kwargs)}")
        layers: list[RecurrentLayer] = [GRULayer(d_model, mlp_ratio) for _ in range(n_layers)]
    elif kind == "lstm":
        if layer_kwargs:
            raise TypeError(f"layer_kwargs are only for kind='mamba', got {sorted(layer_kwargs)}")
        layers = [LSTMLayer(d_model, mlp_ratio) for _ in range(n_layers)]
    else:
        layers = [MambaLayer(d_model, mlp_ratio, **layer_kwargs) for _ in range(n_layers)]
    return RecurrentStack(nn.Embedding(vocab_size, d_model), layers, _Readout(d_model, n_classes))


# --------------------------------------------------------------------------- hand-built exact RNNs
def _width(values: int) -> int:
    """Bits for an integer in [0, values)."""
    return max(1, math.ceil(math.log2(values)))


class _LetterEmbed(nn.Module):
    """Token-wise: id x -> the pair (x, x), i.e. (symbol, hop_0 output), as a LongTensor (B, T, 2)."""

    def __init__(self, alphabet_size: int):
        super().__init__()
        self.alphabet_size = alphabet_size

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        check_int_array("ids", ids)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.alphabet_size):
            raise ValueError(f"ids must be letters in [0, {self.alphabet_size - 1}]")
        return torch.stack([ids.long(), ids.long()], dim=-1)


class _OneHotReadout(nn.Module):
    """Token-wise: (symbol, y) -> one-hot logits of y over alphabet_size + 1 classes (the last is ⊥)."""

    def __init__(self, alphabet_size: int):
        super().__init__()
        self.n_classes = alphabet_size + 1

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return F.one_hot(z[..., 1], self.n_classes).float()


class HopLayer(RecurrentLayer):
    """One layer of :func:`hop_rnn`: from (x_i, hop_{l-1}(x)_i) to (x_i, hop_l(x)_i), exactly.

    State: ``memory[s]``, the previous layer's output just after the last occurrence of symbol s (the value
    ``alphabet_size`` = none/⊥), and ``prev``, the previous symbol (``alphabet_size`` = none). Step i first
    files the incoming y_i under ``prev`` (position i is just after prev's occurrence), then outputs
    ``memory[x_i]``: that is hop_{l-1} at find(i), i.e. hop_l at i (Definition 4.1, repeats included).
    State size: (alphabet_size + 1) * ceil(log2(alphabet_size + 1)) bits.
    """

    def __init__(self, alphabet_size: int):
        super().__init__()
        self.alphabet_size = check_int("alphabet_size", alphabet_size, low=1)

    def state_bits(self) -> int:
        return (self.alphabet_size + 1) * _width(self.alphabet_size + 1)

    def n_state_tensors(self) -> int:
        return 2

    def initial_state(self, batch: int, device: torch.device) -> State:
        a = self.alphabet_size
        return (torch.full((batch, a), a, dtype=torch.long, device=device),
                torch.full((batch,), a, dtype=torch.long, device=device))

    def step(self, memory: torch.Tensor, prev: torch.Tensor, x: torch.Tensor, y: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One application of g_l: (memory, prev, x_i, y_i) -> (memory', prev', output)."""
        a = self.alphabet_size
        # File y under prev (a scratch column a absorbs "no previous symbol").
        ext = torch.cat([memory, memory.new_full((memory.shape[0], 1), a)], dim=1)
        ext = ext.scatter(1, prev.unsqueeze(1), y.unsqueeze(1))
        memory = ext[:, :a]
        out = memory.gather(1, x.unsqueeze(1)).squeeze(1)
        return memory, x, out

    def forward(self, z: torch.Tensor, state: State | None = None) -> tuple[torch.Tensor, State]:
        memory, prev = self.initial_state(z.shape[0], z.device) if state is None else state
        outs = []
        for i in range(z.shape[1]):
            memory, prev, out = self.step(memory, prev, z[:, i, 0], z[:, i, 1])
            outs.append(out)
        y = torch.stack(outs, dim=1) if outs else z[..., 1]
        return torch.stack([z[..., 0], y], dim=-1), (memory, prev)

    def encode_state(self, state: State) -> torch.Tensor:
        memory, prev = state
        return uint_to_bits(torch.cat([memory, prev.unsqueeze(1)], dim=1), _width(self.alphabet_size + 1))

    def decode_state(self, bits: torch.Tensor) -> State:
        vals = bits_to_uint(bits, _width(self.alphabet_size + 1))
        if vals.shape[1] != self.alphabet_size + 1:
            raise ValueError(f"bits must have {self.state_bits()} columns, got {bits.shape[1]}")
        return vals[:, :-1].contiguous(), vals[:, -1].contiguous()


def hop_rnn(k: int, alphabet_size: int) -> RecurrentStack:
    """A hand-built depth-k RNN (``n_layers == k``) whose argmax output is hop_k, on any input.

    Input: letter ids in [0, alphabet_size), shape (B, T). Output: logits (B, T, alphabet_size + 1), one-hot
    at hop_k(x)_i, class ``alphabet_size`` meaning ⊥. Layer l holds (alphabet_size + 1) symbols of
    ceil(log2(alphabet_size + 1)) bits: width O(|Sigma| log |Sigma|), independent of N. The upper bound that
    Corollary 5.2 matches from below in the regime L < k.
    """
    k = check_int("k", k, low=1)
    a = check_int("alphabet_size", alphabet_size, low=1)
    return RecurrentStack(_LetterEmbed(a), [HopLayer(a) for _ in range(k)], _OneHotReadout(a))


class PrefixLayer(RecurrentLayer):
    """The single layer of :func:`prefix_rnn`: stores the prefix and outputs hop_k of it at each position.

    State: ``buffer`` of ``max_len`` symbols (``alphabet_size`` = empty), filled left to right:
    max_len * ceil(log2(alphabet_size + 1)) bits.
    """

    def __init__(self, k: int, alphabet_size: int, max_len: int):
        super().__init__()
        self.k = check_int("k", k, low=0)
        self.alphabet_size = check_int("alphabet_size", alphabet_size, low=1)
        self.max_len = check_int("max_len", max_len, low=1)

    def state_bits(self) -> int:
        return self.max_len * _width(self.alphabet_size + 1)

    def n_state_tensors(self) -> int:
        return 1

    def forward(self, z: torch.Tensor, state: State | None = None) -> tuple[torch.Tensor, State]:
        b, t = z.shape[0], z.shape[1]
        a = self.alphabet_size
        if state is None:
            buffer = torch.full((b, self.max_len), a, dtype=torch.long, device=z.device)
        else:
            buffer = state[0].clone()
        n0 = int((buffer[0] != a).sum())
        if n0 + t > self.max_len:
            raise ValueError(f"sequence length {n0 + t} exceeds max_len = {self.max_len}")
        outs = []
        for i in range(t):
            buffer[:, n0 + i] = z[:, i, 0]
            h = hop(buffer[:, :n0 + i + 1], self.k)[:, -1]
            outs.append(torch.where(h == NO_ANSWER, torch.full_like(h, a), h))
        y = torch.stack(outs, dim=1) if outs else z[..., 1]
        return torch.stack([z[..., 0], y], dim=-1), (buffer,)

    def encode_state(self, state: State) -> torch.Tensor:
        return uint_to_bits(state[0], _width(self.alphabet_size + 1))

    def decode_state(self, bits: torch.Tensor) -> State:
        vals = bits_to_uint(bits, _width(self.alphabet_size + 1))
        if vals.shape[1] != self.max_len:
            raise ValueError(f"bits must have {self.state_bits()} columns, got {bits.shape[1]}")
        return (vals,)


def prefix_rnn(k: int, alphabet_size: int, max_len: int) -> RecurrentStack:
    """A hand-built depth-1 RNN computing hop_k by storing the whole prefix (width about N log |Sigma| bits).

    Same input/output convention as :func:`hop_rnn`; sequences up to ``max_len`` long. The other side of
    Corollary 5.2: one layer suffices when the width is of order N.
    """
    k = check_int("k", k, low=0)
    a = check_int("alphabet_size", alphabet_size, low=1)
    return RecurrentStack(_LetterEmbed(a), [PrefixLayer(k, a, max_len)], _OneHotReadout(a))


def hop_classes(x: torch.Tensor, k: int, alphabet_size: int) -> torch.Tensor:
    """hop_k(x) in the hand-built models' class convention: letters as they are, ⊥ as ``alphabet_size``."""
    a = check_int("alphabet_size", alphabet_size, low=1)
    h = hop(x, k)
    return torch.where(h == NO_ANSWER, torch.full_like(h, a), h)


class CollapsedLayer(RecurrentLayer):
    """Several recurrent layers run as ONE layer: at each position, layer 1, then layer 2, ... on that token.

    The state is the concatenation of the layers' states, so a depth-L RNN of width m is a depth-1 RNN of
    width L * m. This is why Corollary 5.2 reads "L >= k *or* m = Omega(N / k^6)": depth can always be traded
    for width, and the bound says how much width a shallow model must pay.
    """

    def __init__(self, layers: list[RecurrentLayer]):
        super().__init__()
        if not layers or not all(isinstance(layer, RecurrentLayer) for layer in layers):
            raise TypeError("layers must be a non-empty list of hoplib.lower_bounds.rnn.RecurrentLayer")
        self.inner = nn.ModuleList(layers)

    def state_bits(self) -> int:
        return sum(layer.state_bits() for layer in self.inner)

    def n_state_tensors(self) -> int:
        return sum(layer.n_state_tensors() for layer in self.inner)

    def forward(self, z: torch.Tensor, state: State | None = None) -> tuple[torch.Tensor, State]:
        states: list[State | None] = [None] * len(self.inner) if state is None else list(self._split(state))
        outs = []
        for i in range(z.shape[1]):
            zi = z[:, i:i + 1]
            for j, layer in enumerate(self.inner):
                zi, states[j] = layer(zi, states[j])
            outs.append(zi)
        if not outs:
            raise ValueError("z must have at least one position")
        return torch.cat(outs, dim=1), tuple(t for s in states for t in s)  # type: ignore[union-attr]

    def _split(self, state: State) -> list[State]:
        out, at = [], 0
        for n in (layer.n_state_tensors() for layer in self.inner):
            out.append(tuple(state[at:at + n]))
            at += n
        return out

    def encode_state(self, state: State) -> torch.Tensor:
        return torch.cat([layer.encode_state(s) for layer, s in zip(self.inner, self._split(state), strict=True)],
                         dim=1)

    def decode_state(self, bits: torch.Tensor) -> State:
        parts, at = [], 0
        for layer in self.inner:
            n = layer.state_bits()
            parts.extend(layer.decode_state(bits[:, at:at + n]))
            at += n
        return tuple(parts)


def collapse(model: RecurrentStack) -> RecurrentStack:
    """The same function as ``model`` computed by a depth-1 RNN whose state holds every layer's state."""
    if not isinstance(model, RecurrentStack):
        raise TypeError(f"model must be a RecurrentStack, got {type(model).__name__}")
    return RecurrentStack(model.embed, [CollapsedLayer(list(model.layers))], model.readout)


# --------------------------------------------------------------------------- Corollary 5.2's reduction
def _rnn_player(model: RecurrentStack, block: torch.Tensor, j: int, num_players: int,
                result: dict[str, torch.Tensor]) -> Player:
    """P_j's strategy: in round l, continue layer l on its block from P_{j+1}'s posted state, post its own."""
    local = {"z": model.embed(block.unsqueeze(0))}  # P_j's private memory: its block's activations

    def play(r: int, board: Blackboard) -> object:
        if r > model.n_layers:
            return None
        layer = model.layers[r - 1]
        state = None
        if j < num_players:  # P_p starts from the initial state
            bits = torch.tensor(board.last_message(j + 1, r), dtype=torch.bool, device=block.device)
            state = layer.decode_state(bits.unsqueeze(0))
        local["z"], state = layer(local["z"], state)
        if j > 1:
            return layer.encode_state(state)[0]
        if r < model.n_layers:
            return None
        logits = result["output"] = model.readout(local["z"])[0, -1]
        return int_to_bits(int(logits.argmax()), class_bits(logits.shape[-1]))
    return play


@torch.no_grad()
def simulate_rnn_protocol(model: RecurrentStack, x: np.ndarray | torch.Tensor, num_players: int,
                          blackboard: Blackboard | None = None) -> tuple[torch.Tensor, int]:
    """Run a multi-layer recurrent model as the blackboard protocol of Corollary 5.2's proof.

    ``model`` is a :class:`RecurrentStack` (token-wise ``embed``, recurrent ``layers``, token-wise ``readout``);
    ``x`` a 1-D sequence of ids. The sequence is cut into ``num_players`` contiguous blocks
    (:func:`hoplib.lower_bounds.communication.block_bounds`), P_p holding the leftmost and P_1 the rightmost.
    Each player embeds its block. In round l = 1..L, P_p, ..., P_1 in turn read the previous player's final
    layer-l state from the blackboard (the initial state for P_p), run layer l on their block's layer-(l-1)
    outputs, and P_p, ..., P_2 post their final layer-l state as bits (``layer.encode_state``). In round L, P_1
    applies the readout at its last position and posts the argmax class (ceil(log2 C) bits) as the output.

    Returns ``(output, bits)``: P_1's output vector Y_N (the logits at the last position, which equal
    ``model(x)[-1]``) and the exact number of bits posted. Pass a
    :class:`~hoplib.lower_bounds.communication.Blackboard` to keep the transcript.
    """
    if not isinstance(model, RecurrentStack):
        raise TypeError(f"model must be a hoplib.lower_bounds.rnn.RecurrentStack, got {type(model).__name__}")
    if model.n_layers == 0:
        raise ValueError("model must have at least one recurrent layer")
    params = list(model.parameters()) + list(model.buffers())
    xt = sequence_ids(x, params[0].device if params else "cpu")
    num_players = check_int("num_players", num_players, low=1, high=len(xt))
    result: dict[str, torch.Tensor] = {}
    players = [_rnn_player(model, xt[lo:hi], j, num_players, result)
               for j, (lo, hi) in sorted(block_bounds(len(xt), num_players).items())]
    board = run_protocol(players, model.n_layers, blackboard=blackboard)
    return result["output"], board.total_bits


# --------------------------------------------------------------------------- depth sweep (the chapter's experiment)
ARCHITECTURES = (*KINDS, "transformer")


def _build(task: HopTask, heads: int) -> Callable[[dict[str, Any]], tuple[nn.Module, dict[str, Any]]]:
    def build(point: dict[str, Any]) -> tuple[nn.Module, dict[str, Any]]:
        if point["kind"] == "transformer":
            return gpt_for_task(task, depth=point["depth"], d_model=point["d_model"], heads=heads), {"state_bits": 0}
        model = recurrent_model(point["kind"], task.vocab_size, d_model=point["d_model"], n_layers=point["depth"])
        return model, {"state_bits": model.state_bits()[0]}
    return build


def depth_sweep(task: HopTask, *, kinds: tuple[str, ...] = ARCHITECTURES, depths: tuple[int, ...] = (1, 2),
                widths: tuple[int, ...] = (32,), steps: int = 100, batch_size: int = 32, lr: float = 1e-3,
                warmup_steps: int = 10, heads: int = 4, n_samples: int = 100, seed: int = 0,
                device: str | torch.device = "auto", progress: bool = True,
                on_model: Callable[[list[dict[str, object]]], None] | None = None) -> list[dict[str, object]]:
    """Train one model per (kind, width, depth) on multi-task hop_k and measure its error for every k.

    ``kinds`` from ``ARCHITECTURES``: the recurrent kinds of :func:`recurrent_model` and ``"transformer"``
    (:func:`hoplib.models.gpt_for_task`, ``heads`` heads). Training is :func:`hoplib.train.fit` with
    ``TrainConfig(steps, batch_size, lr, warmup_steps, seed=seed)`` (AdamW, linear warmup and decay, fresh
    samples every step), evaluation :func:`hoplib.evaluate.per_k_error` (paper metric, ``n_samples`` per k),
    through :func:`hoplib.lower_bounds.sweep.run_sweep`. Returns tidy records ``{"kind", "d_model", "depth",
    "state_bits", "params", "k", "error", "final_loss", "train_time_s"}`` (``state_bits`` is 0 for transformers).
    ``on_model``, if given, is called with the records so far after each model.
    """
    from hoplib.lower_bounds.sweep import run_sweep
    from hoplib.train import TrainConfig

    if not isinstance(task, HopTask):
        raise TypeError(f"task must be a HopTask, got {type(task).__name__}")
    for kind in kinds:
        check_choice("kinds[i]", kind, ARCHITECTURES)
    depths = tuple(check_int("depths[i]", d, low=1) for d in depths)
    widths = tuple(check_int("widths[i]", w, low=1) for w in widths)
    config = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup_steps=warmup_steps, seed=seed)
    grid = [{"kind": kind, "d_model": w, "depth": d} for kind in kinds for w in widths for d in depths]
    return run_sweep(task, grid, _build(task, check_int("heads", heads, low=1)), config, n_samples=n_samples,
                     device=device, progress=progress, on_model=on_model)
