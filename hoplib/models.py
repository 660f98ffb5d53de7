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

Attention is pluggable: :class:`GPTConfig` holds an :class:`AttentionSpec`, whose ``build`` makes each layer's
:class:`CausalSelfAttention` (softmax, the default, :class:`SoftmaxAttention`) or a subclass of it that replaces
its ``attend`` step. The core knows only softmax attention; the Performer and Longformer attentions of the
paper's Corollaries 5.3 and 5.4 live in :mod:`hoplib.lower_bounds.efficient_attention` and register themselves by name.

:class:`GPTEnsemble` holds E models of one architecture with stacked parameters and runs them in one
batched forward pass (batched matrix products, one attention call), which is how several small models
share one GPU (see :func:`hoplib.train.fit_ensemble`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch
import torch.nn as nn
import torch.nn.functional as F

from hoplib._book.validate import check_choice, check_int

HEADS = ("linear", "layernorm")


# --------------------------------------------------------------------------- pluggable attention
ATTENTIONS: dict[str, type[AttentionSpec]] = {}
"""The attentions :class:`GPTConfig` knows by name (filled by :func:`register_attention`)."""


@dataclass(frozen=True)
class AttentionSpec:
    """The attention of every layer of a :class:`GPT`, as :class:`GPTConfig` stores it.

    A frozen, comparable description (the settings of one kind of attention); :meth:`build` makes one
    layer's module, a :class:`CausalSelfAttention` or a subclass that overrides its ``attend`` step. The
    paper's transformer uses :class:`SoftmaxAttention`; the efficient attentions of Corollaries 5.3 and 5.4 (Performer,
    Corollary 5.3; Longformer, Corollary 5.4) are plugged in from :mod:`hoplib.lower_bounds.efficient_attention`.
    Subclasses set the class attribute ``name`` and are registered with :func:`register_attention`, so that
    configs written by :meth:`GPTConfig.to_dict` load back.
    """

    name: ClassVar[str] = ""

    def build(self, config: GPTConfig) -> CausalSelfAttention:
        """One layer's attention module for ``config``."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """``{"name": ..., **settings}``, the form :class:`GPTConfig` accepts back."""
        return {"name": self.name, **asdict(self)}


def register_attention(spec: type[AttentionSpec]) -> type[AttentionSpec]:
    """Class decorator: make an :class:`AttentionSpec` subclass known to :class:`GPTConfig` by its ``name``."""
    if not (isinstance(spec, type) and issubclass(spec, AttentionSpec)):
        raise TypeError(f"spec must be a subclass of AttentionSpec, got {spec!r}")
    if not isinstance(spec.name, str) or not spec.name:
        raise ValueError(f"{spec.__name__}.name must be a non-empty string, got {spec.name!r}")
    old = ATTENTIONS.get(spec.name)
    if old is not None and (old.__module__, old.__qualname__) != (spec.__module__, spec.__qualname__):
        raise ValueError(f"attention name {spec.name!r} is already registered by {old.__module__}.{old.__qualname__}")
    ATTENTIONS[spec.name] = spec
    return spec


@register_attention
@dataclass(frozen=True)
class SoftmaxAttention(AttentionSpec):
    """Causal softmax attention, softmax(q k^T / sqrt(d)) v: the transformer of the paper (the default)."""

    name: ClassVar[str] = "softmax"

    def build(self, config: GPTConfig) -> CausalSelfAttention:
        return CausalSelfAttention(config)


def _resolve_attention(value: object) -> AttentionSpec:
    """An :class:`AttentionSpec` from a spec, a registered name, or a dict written by :meth:`AttentionSpec.to_dict`."""
    if isinstance(value, AttentionSpec):
        return value
    if isinstance(value, str):
        name, settings = value, {}
    elif isinstance(value, dict) and isinstance(value.get("name"), str):
        name, settings = value["name"], {key: v for key, v in value.items() if key != "name"}
    else:
        raise TypeError(f"attention must be an AttentionSpec (e.g. SoftmaxAttention()), a registered name or a "
                        f"dict with a 'name', got {type(value).__name__}")
    if name not in ATTENTIONS:
        raise ValueError(f"attention must be one of the registered attentions {sorted(ATTENTIONS)}, got {name!r} "
                         "(Performer and Longformer register when hoplib.lower_bounds.efficient_attention is "
                         "imported)")
    try:
        return ATTENTIONS[name](**settings)
    except TypeError as exc:
        raise TypeError(f"attention {name!r} needs its settings: pass an instance of "
                        f"{ATTENTIONS[name].__module__}.{ATTENTIONS[name].__name__} ({exc})") from exc


def _check_float(name: str, value: object, *, low: float, high: float | None = None,
                 low_open: bool = False) -> float:
    """A finite real number in [low, high) (or (low, high) with ``low_open``); TypeError/ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    v = float(value)
    bad_low = v <= low if low_open else v < low
    if not math.isfinite(v) or bad_low or (high is not None and v >= high):
        interval = f"{'(' if low_open else '['}{low}, {high if high is not None else 'inf'})"
        raise ValueError(f"{name} must be a finite number in {interval}, got {value!r}")
    return v


@dataclass(frozen=True)
class GPTConfig:
    """Architecture of :class:`GPT`: depth L, width m, heads H, vocabulary rows, context length, head type.

    ``vocab_size`` is the number of embedding rows (the authors used 30 for 23 used token ids);
    ``n_classes`` is the number of output logits for ``head="linear"`` (default ``vocab_size``); with
    ``head="layernorm"`` it is forced to ``d_model``. ``dropout`` is in [0, 1), ``layer_norm_eps`` > 0.

    ``attention`` is the attention of every layer, an :class:`AttentionSpec`: :class:`SoftmaxAttention`
    (default, the paper's transformer), or one plugged in from elsewhere, e.g. the Performer and Longformer
    attentions of :mod:`hoplib.lower_bounds.efficient_attention` (Cor. 5.3, 5.4). A registered name (``"softmax"``)
    or a dict written by :meth:`to_dict` is turned into its spec. Configs saved before attention was
    configurable load unchanged, and :meth:`to_dict` leaves ``attention`` out while it is softmax.
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
    attention: AttentionSpec = SoftmaxAttention()

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, low=1)
        check_int("n_positions", self.n_positions, low=1)
        check_int("depth", self.depth, low=1)
        check_int("d_model", self.d_model, low=1)
        check_int("heads", self.heads, low=1)
        check_choice("head", self.head, HEADS)
        if self.d_model % self.heads:
            raise ValueError(f"d_model must be a multiple of heads = {self.heads}, got {self.d_model}")
        _check_float("dropout", self.dropout, low=0.0, high=1.0)
        _check_float("layer_norm_eps", self.layer_norm_eps, low=0.0, low_open=True)
        if self.n_classes is not None:
            check_int("n_classes", self.n_classes, low=1)
        if self.head == "layernorm":
            if self.n_classes is not None and self.n_classes != self.d_model:
                raise ValueError(f"n_classes must equal d_model = {self.d_model} with head='layernorm', "
                                 f"got {self.n_classes}")
            if self.d_model < self.vocab_size:
                raise ValueError(f"d_model must be >= vocab_size = {self.vocab_size} with head='layernorm' "
                                 f"(the LayerNorm output is the logit vector), got {self.d_model}")
        object.__setattr__(self, "attention", _resolve_attention(self.attention))

    @property
    def num_classes(self) -> int:
        """Number of logits per position."""
        if self.head == "layernorm":
            return self.d_model
        return self.n_classes if self.n_classes is not None else self.vocab_size

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict; ``attention`` (as :meth:`AttentionSpec.to_dict`) only when not softmax."""
        d = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "attention"}
        if self.attention != SoftmaxAttention():
            d["attention"] = self.attention.to_dict()
        return d


class CausalSelfAttention(nn.Module):
    """Multi-head causal softmax self-attention with one fused QKV projection (GPT-2's ``c_attn``/``c_proj``).

    ``forward`` is :meth:`qkv_heads`, then :meth:`attend` (here softmax through SDPA, causal), then
    :meth:`project`. Another attention (an :class:`AttentionSpec`'s module) subclasses this class and overrides
    :meth:`attend` only, so every attention has the same parameters under the same names.
    """

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout
        self.resid_drop = nn.Dropout(cfg.dropout)

    def qkv_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values of ``x`` (B, T, m), each split into heads: (B, H, T, m / H)."""
        b, t, m = x.shape
        q, k, v = self.qkv(x).split(m, dim=-1)
        return tuple(z.view(b, t, self.heads, m // self.heads).transpose(1, 2) for z in (q, k, v))  # type: ignore

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Mix the values: ``(y (B, H, T, d), weights (B, H, T, T) or None)``; weights only if ``need_weights``."""
        if not need_weights:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=self.dropout if self.training else 0.0)
            return y, None
        t = q.shape[-2]  # explicit softmax so the weights can be returned (same maths as SDPA)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        att = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return F.dropout(att, self.dropout, self.training) @ v, att

    def project(self, y: torch.Tensor) -> torch.Tensor:
        """Merge the heads of ``y`` (B, H, T, d) and apply the output projection (and residual dropout)."""
        b, h, t, d = y.shape
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(b, t, h * d)))

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        y, att = self.attend(*self.qkv_heads(x), need_weights=return_attention)
        return self.project(y), att


def check_ids(ids: torch.Tensor, vocab_size: int) -> None:
    """Raise a clear error unless ``ids`` is an integer tensor of token ids in [0, vocab_size).

    An embedding given an id outside its table fails with "index out of range in self" on the CPU and with a
    device-side assert on CUDA; this check (one device sync) names the problem instead. Skipped while
    ``torch.compile`` traces the model.
    """
    if ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"ids must be an integer (int64 or int32) tensor of token ids, got dtype {ids.dtype}")
    if ids.numel() == 0 or torch.compiler.is_compiling():
        return
    lo, hi = (int(v) for v in torch.aminmax(ids))
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"ids must be token ids in [0, {vocab_size - 1}] (vocab_size = {vocab_size}), "
                         f"got values in [{lo}, {hi}]")


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
        self.attn = cfg.attention.build(cfg)
        if not isinstance(self.attn, CausalSelfAttention):
            raise TypeError(f"{type(cfg.attention).__name__}.build must return a CausalSelfAttention, "
                            f"got {type(self.attn).__name__}")
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
        check_ids(ids, self.config.vocab_size)
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
                 vocab_size: int | None = None, n_positions: int | None = None,
                 attention: AttentionSpec | str = "softmax") -> GPT:
    """A :class:`GPT` sized for a :class:`hoplib.tasks.HopTask` (classes = token ids).

    ``vocab_size`` defaults to ``task.vocab_size`` and ``n_positions`` to ``task.length``; the authors'
    exact tables are ``vocab_size=30, n_positions=100`` (one more position than the 99 used), see
    :func:`authors_gpt`. ``attention`` goes to :class:`GPTConfig` (e.g. the Performer or Longformer attention
    of :mod:`hoplib.lower_bounds.efficient_attention`, Corollaries 5.3 and 5.4).
    """
    vocab = task.vocab_size if vocab_size is None else check_int("vocab_size", vocab_size, low=task.vocab_size)
    npos = task.length if n_positions is None else check_int("n_positions", n_positions, low=task.length)
    n_classes = None if head == "layernorm" else task.vocab_size
    cfg = GPTConfig(vocab_size=vocab, n_positions=npos, depth=depth, d_model=d_model, heads=heads,
                    dropout=dropout, head=head, n_classes=n_classes, attention=attention)
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
        if not isinstance(models[0].config.attention, SoftmaxAttention):
            raise ValueError(f"GPTEnsemble supports softmax attention only, got {models[0].config.attention!r}; "
                             "train models with other attentions one at a time with hoplib.train.fit")
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
        check_ids(ids, cfg.vocab_size)
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
