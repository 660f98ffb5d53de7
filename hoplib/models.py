"""A compact GPT-2-style causal transformer for the hop_k experiments (Section 4.2 and Appendix G).

The authors trained HuggingFace ``GPT2Model``: learned absolute positions, pre-LayerNorm blocks, GELU
("gelu_new", the tanh approximation), LayerNorm eps 1e-5, an MLP of width 4m, causal self-attention. This file
is that model written out in the style of nanoGPT's ``model.py``, with attention through
``torch.nn.functional.scaled_dot_product_attention`` and an option to return every head's attention weights
(for the alignment scores of Appendix G.4).

Sequence-model interface used across hoplib: ``forward(ids: LongTensor (B, T)) -> logits (B, T, C)`` with
``C >= task.vocab_size`` and class index == target token id, so cross-entropy against
:class:`hoplib.tasks.HopTask` targets works directly (position i predicts hop_k at position i: a causal
sequence-to-sequence map, no next-token shift).

Two output heads:

* ``head="linear"`` (default, used by the book's chapter): a linear unembedding ``m -> n_classes`` after the
  final LayerNorm. The number of classes does not depend on the width.
* ``head="layernorm"`` (the authors' setup, paper-spec section 7): no unembedding at all; the final LayerNorm
  output (size m) *is* the vector of logits over m classes, of which only the first ``vocab_size`` ever
  appear as targets. The LayerNorm's gain and bias then act as a per-class scale and bias. This reproduces the
  parameter counts of the paper's Table 3 exactly (see :func:`count_parameters`) and needs ``m >= vocab_size``.

:class:`GPTEnsemble` holds E models of one architecture with stacked parameters and runs them in one
batched forward pass (batched matrix products, one attention call), which is how several small models
share one GPU (see :func:`hoplib.train.fit_ensemble`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from hoplib._book.validate import check_choice, check_int
from hoplib.lower_bounds import efficient_attention as _attn

HEADS = ("linear", "layernorm")
ATTENTIONS = ("softmax", "performer", "longformer")
_ATTENTION_FIELDS = {"attention": "softmax", "n_features": None, "window": None, "global_every": None}


@dataclass(frozen=True)
class GPTConfig:
    """Architecture of :class:`GPT`: depth L, width m, heads H, vocabulary rows, context length, head type.

    ``vocab_size`` is the number of embedding rows (the authors used 30 for 23 used token ids);
    ``n_classes`` is the number of output logits for ``head="linear"`` (default ``vocab_size``); with
    ``head="layernorm"`` it is forced to ``d_model``.

    ``attention`` selects the attention of every layer (Section 5.1, :mod:`hoplib.lower_bounds.efficient_attention`):
    ``"softmax"``
    (default, the paper's transformer), ``"performer"`` (FAVOR+ kernel attention with ``n_features`` = m'
    random features, Corollary 5.3) or ``"longformer"`` (causal sliding window of radius ``window`` = w plus
    global positions j = 0 mod ``global_every`` = g, 0-based, Corollary 5.4; ``global_every=None``: none).
    Settings that the chosen attention does not use must stay None. Configs saved before these fields
    existed load unchanged (defaults), and :meth:`to_dict` leaves them out while they are at their defaults.
    """

    vocab_size: int
    n_positions: int
    depth: int
    d_model: int
    heads: int
    dropout: float = 0.0
    head: str = "linear"
    n_classes: int | None = None
    layer_norm_eps: float = 1e-5
    attention: str = "softmax"
    n_features: int | None = None
    window: int | None = None
    global_every: int | None = None

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, low=1)
        check_int("n_positions", self.n_positions, low=1)
        check_int("depth", self.depth, low=1)
        check_int("d_model", self.d_model, low=1)
        check_int("heads", self.heads, low=1)
        check_choice("head", self.head, HEADS)
        if self.d_model % self.heads:
            raise ValueError(f"d_model must be a multiple of heads = {self.heads}, got {self.d_model}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)):
            raise TypeError(f"dropout must be a float in [0, 1), got {type(self.dropout).__name__}")
        if not 0.0 <= float(self.dropout) < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.n_classes is not None:
            check_int("n_classes", self.n_classes, low=1)
        if self.head == "layernorm":
            if self.n_classes is not None and self.n_classes != self.d_model:
                raise ValueError(f"n_classes must equal d_model = {self.d_model} with head='layernorm', "
                                 f"got {self.n_classes}")
            if self.d_model < self.vocab_size:
                raise ValueError(f"d_model must be >= vocab_size = {self.vocab_size} with head='layernorm' "
                                 f"(the LayerNorm output is the logit vector), got {self.d_model}")
        check_choice("attention", self.attention, ATTENTIONS)
        used = {"softmax": (), "performer": ("n_features",), "longformer": ("window", "global_every")}[self.attention]
        for name in ("n_features", "window", "global_every"):
            if name not in used and getattr(self, name) is not None:
                raise ValueError(f"{name} must be None with attention={self.attention!r} (it is used by "
                                 f"{'performer' if name == 'n_features' else 'longformer'} attention), "
                                 f"got {getattr(self, name)!r}")
        if self.attention == "performer":
            if self.n_features is None:
                raise ValueError("n_features (the number m' of random features, an int >= 1) is required with "
                                 "attention='performer'")
            check_int("n_features", self.n_features, low=1)
        if self.attention == "longformer":
            if self.window is None:
                raise ValueError("window (the radius w, an int >= 0) is required with attention='longformer'")
            check_int("window", self.window, low=0)
            if self.global_every is not None:
                check_int("global_every", self.global_every, low=1)

    @property
    def num_classes(self) -> int:
        """Number of logits per position."""
        if self.head == "layernorm":
            return self.d_model
        return self.n_classes if self.n_classes is not None else self.vocab_size

    def to_dict(self) -> dict:
        """The fields as a dict; the attention fields only when they differ from the softmax defaults."""
        d = asdict(self)
        if all(d[name] == default for name, default in _ATTENTION_FIELDS.items()):
            for name in _ATTENTION_FIELDS:
                del d[name]
        return d


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with one fused QKV projection (GPT-2's ``c_attn``/``c_proj``).

    ``cfg.attention`` picks the attention (:mod:`hoplib.lower_bounds.efficient_attention`): softmax (SDPA, causal),
    Longformer (SDPA
    with the boolean mask of :func:`hoplib.lower_bounds.efficient_attention.longformer_mask`) or Performer (FAVOR+
    weights in the
    quadratic form, from the random projection in the buffer ``features`` (m' x d_head), shared by the heads
    of a layer, drawn at construction from torch's global generator, saved in the state dict; see
    :meth:`redraw_features`).
    """

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout
        self.resid_drop = nn.Dropout(cfg.dropout)
        self.attention = cfg.attention
        self.window, self.global_every = cfg.window, cfg.global_every
        if cfg.attention == "performer":
            self.register_buffer("features", _attn.orthogonal_features(cfg.n_features, cfg.d_model // cfg.heads,
                                                                       generator=torch.default_generator))

    def redraw_features(self, seed: int) -> None:
        """Draw a new FAVOR+ projection (Performer attention only), reproducibly from ``seed``."""
        if self.attention != "performer":
            raise ValueError(f"redraw_features needs attention='performer', this layer has {self.attention!r}")
        self.features.copy_(_attn.orthogonal_features(self.features.shape[0], self.features.shape[1], seed=seed))

    def mask(self, t: int, device: torch.device) -> torch.Tensor:
        """The boolean (T, T) attention mask of this layer (True = may attend): causal, or causal Longformer."""
        if self.attention == "longformer":
            return _attn.longformer_mask(t, self.window, self.global_every, device=device)
        return torch.ones(t, t, dtype=torch.bool, device=device).tril()

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        b, t, m = x.shape
        q, k, v = self.qkv(x).split(m, dim=-1)
        q, k, v = (z.view(b, t, self.heads, m // self.heads).transpose(1, 2) for z in (q, k, v))  # (B, H, T, d)
        att = None
        if self.attention == "performer":  # kernel attention: weights in the quadratic form (rows sum to 1)
            att = _attn.kernel_attention_weights(q, k, self.features)
            y = F.dropout(att, self.dropout, self.training).to(v.dtype) @ v
            if not return_attention:
                att = None
        elif self.attention == "longformer":
            mask = self.mask(t, x.device)
            if return_attention:
                att = _attn.masked_softmax_weights(q, k, mask)
                y = F.dropout(att, self.dropout, self.training) @ v
            else:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                   dropout_p=self.dropout if self.training else 0.0)
        elif return_attention:  # explicit softmax so the weights can be returned (same maths as SDPA)
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            att = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = F.dropout(att, self.dropout, self.training) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(b, t, m)
        return self.resid_drop(self.proj(y)), att


class MLP(nn.Module):
    """Position-wise MLP of width 4m with GELU (tanh approximation, HF's ``gelu_new``)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x), approximate="tanh")))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        a, att = self.attn(self.ln1(x), return_attention)
        x = x + a
        x = x + self.mlp(self.ln2(x))
        return x, att


class GPT(nn.Module):
    """GPT-2-style causal transformer: token + position embeddings, L blocks, final LayerNorm, output head.

    ``forward(ids)`` returns logits (B, T, C); ``forward(ids, return_attention=True)`` returns
    ``(logits, [A_1, ..., A_L])`` with ``A_l`` of shape (B, H, T, T), rows = queries (Appendix G.4).
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = nn.Embedding(config.n_positions, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.depth))
        self.ln_f = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.unembed = nn.Linear(config.d_model, config.num_classes, bias=False) if config.head == "linear" else None
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by 1/sqrt(2L)
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.depth))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    @property
    def num_classes(self) -> int:
        return self.config.num_classes

    def forward(self, ids: torch.Tensor, return_attention: bool = False):
        if ids.dim() != 2:
            raise ValueError(f"ids must have shape (B, T), got {tuple(ids.shape)}")
        t = ids.shape[1]
        if t > self.config.n_positions:
            raise ValueError(f"ids length must be <= n_positions = {self.config.n_positions}, got {t}")
        pos = torch.arange(t, device=ids.device)
        x = self.drop(self.wte(ids) + self.wpe(pos))
        atts = []
        for block in self.blocks:
            x, att = block(x, return_attention)
            atts.append(att)
        x = self.ln_f(x)
        logits = x if self.unembed is None else self.unembed(x)
        return (logits, atts) if return_attention else logits


def gpt_for_task(task, *, depth: int, d_model: int, heads: int, dropout: float = 0.0, head: str = "linear",
                 vocab_size: int | None = None, n_positions: int | None = None, attention: str = "softmax",
                 n_features: int | None = None, window: int | None = None,
                 global_every: int | None = None) -> GPT:
    """A :class:`GPT` sized for a :class:`hoplib.tasks.HopTask` (classes = token ids).

    ``vocab_size`` defaults to ``task.vocab_size`` and ``n_positions`` to ``task.length``; the authors'
    exact tables are ``vocab_size=30, n_positions=100`` (one more position than the 99 used), see
    :func:`authors_gpt`. ``attention``, ``n_features``, ``window`` and ``global_every`` go to
    :class:`GPTConfig` (Performer or Longformer attention, Section 5.1).
    """
    vocab = task.vocab_size if vocab_size is None else check_int("vocab_size", vocab_size, low=task.vocab_size)
    npos = task.length if n_positions is None else check_int("n_positions", n_positions, low=task.length)
    n_classes = None if head == "layernorm" else task.vocab_size
    cfg = GPTConfig(vocab_size=vocab, n_positions=npos, depth=depth, d_model=d_model, heads=heads,
                    dropout=dropout, head=head, n_classes=n_classes, attention=attention,
                    n_features=n_features, window=window, global_every=global_every)
    return GPT(cfg)


def authors_gpt(task, *, depth: int, d_model: int = 128, heads: int = 4) -> GPT:
    """The authors' model (paper-spec section 7): 30 embedding rows, 100 positions, dropout 0.1, LayerNorm head."""
    return gpt_for_task(task, depth=depth, d_model=d_model, heads=heads, dropout=0.1, head="layernorm",
                        vocab_size=max(30, task.vocab_size), n_positions=max(100, task.length))


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (Table 3 of the paper for ``head="layernorm"``, 30 rows, 100 positions)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class GPTEnsemble(nn.Module):
    """E models of one architecture, parameters stacked along a leading axis, run in one batched pass.

    ``forward(ids)`` takes ids of shape (E, B, T) (one batch per model) and returns logits (E, B, T, C). Every
    matrix product is a batched ``baddbmm`` over the E models and attention runs once on (E*B, H, T, d), so
    E small models cost about as many kernel launches as one: this is how several small models share a GPU.
    Because AdamW acts elementwise and the models share no parameters, training the ensemble on the sum of the
    models' losses is the same computation as training each model alone (up to float rounding).
    Dropout draws independent masks per model.
    """

    def __init__(self, models: list[GPT]):
        super().__init__()
        if not isinstance(models, (list, tuple)) or not models:
            raise ValueError("models must be a non-empty list of GPT models")
        for i, mdl in enumerate(models):
            if not isinstance(mdl, GPT):
                raise TypeError(f"models[{i}] must be a GPT, got {type(mdl).__name__}")
            if mdl.config != models[0].config:
                raise ValueError(f"models[{i}] has config {mdl.config}, expected {models[0].config} (all equal)")
        if models[0].config.attention != "softmax":
            raise ValueError(f"GPTEnsemble supports attention='softmax' only, got {models[0].config.attention!r}; "
                             "train Performer or Longformer models one at a time with hoplib.train.fit")
        self.config = models[0].config
        self.n_models = len(models)
        states = [m.state_dict() for m in models]
        self._names = list(states[0])
        # nn.ParameterDict keys may not contain '.', so store under mangled names.
        self.stacked = nn.ParameterDict({n.replace(".", "__"): nn.Parameter(torch.stack([s[n] for s in states]))
                                         for n in self._names})

    def p(self, name: str) -> torch.Tensor:
        """The stacked parameter (E, ...) named as in :class:`GPT`'s state_dict, e.g. ``'blocks.0.ln1.weight'``."""
        return self.stacked[name.replace(".", "__")]

    @staticmethod
    def _linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        e, *mid, n_in = x.shape
        flat = x.reshape(e, -1, n_in)
        wt = w.transpose(1, 2)
        out = flat @ wt if b is None else torch.baddbmm(b.unsqueeze(1), flat, wt)
        return out.reshape(e, *mid, w.shape[1])

    def _ln(self, x: torch.Tensor, name: str) -> torch.Tensor:
        w, b = self.p(name + ".weight"), self.p(name + ".bias")
        x = F.layer_norm(x, (x.shape[-1],), eps=self.config.layer_norm_eps)
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
        return x * w.view(shape) + b.view(shape)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.dim() != 3 or ids.shape[0] != self.n_models:
            raise ValueError(f"ids must have shape (E={self.n_models}, B, T), got {tuple(ids.shape)}")
        cfg = self.config
        e, b, t = ids.shape
        if t > cfg.n_positions:
            raise ValueError(f"ids length must be <= n_positions = {cfg.n_positions}, got {t}")
        m, h, drop = cfg.d_model, cfg.heads, (cfg.dropout if self.training else 0.0)
        rows = torch.arange(e, device=ids.device).view(e, 1, 1)
        x = self.p("wte.weight")[rows, ids] + self.p("wpe.weight")[:, :t].unsqueeze(1)  # (E, B, T, m)
        x = F.dropout(x, drop, self.training)
        for i in range(cfg.depth):
            pre = f"blocks.{i}."
            y = self._ln(x, pre + "ln1")
            qkv = self._linear(y, self.p(pre + "attn.qkv.weight"), self.p(pre + "attn.qkv.bias"))
            q, k, v = (z.reshape(e * b, t, h, m // h).transpose(1, 2) for z in qkv.split(m, dim=-1))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=drop)
            a = a.transpose(1, 2).reshape(e, b, t, m)
            a = self._linear(a, self.p(pre + "attn.proj.weight"), self.p(pre + "attn.proj.bias"))
            x = x + F.dropout(a, drop, self.training)
            y = self._ln(x, pre + "ln2")
            y = F.gelu(self._linear(y, self.p(pre + "mlp.fc.weight"), self.p(pre + "mlp.fc.bias")), approximate="tanh")
            y = self._linear(y, self.p(pre + "mlp.proj.weight"), self.p(pre + "mlp.proj.bias"))
            x = x + F.dropout(y, drop, self.training)
        x = self._ln(x, "ln_f")
        if cfg.head == "layernorm":
            return x
        return self._linear(x, self.p("unembed.weight"), None)

    def unstack(self) -> list[GPT]:
        """The E models as separate :class:`GPT` modules (copies of the current weights, on the same device)."""
        out = []
        device = self.p(self._names[0]).device
        for j in range(self.n_models):
            mdl = GPT(self.config).to(device)
            mdl.load_state_dict({n: self.p(n)[j].detach().clone() for n in self._names})
            out.append(mdl)
        return out
