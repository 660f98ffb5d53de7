"""The authors' HuggingFace ``GPT2Model`` (Section 4.2, Appendix G) written nanoGPT style: learned positions,
pre-LayerNorm blocks, GELU (tanh), MLP width 4m. ``forward(ids (B, T)) -> logits (B, T, C)``, class index ==
target token id. Attention is pluggable (:class:`AttentionSpec`); :class:`GPTEnsemble` batches E models.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar

import torch
import torch.nn as nn
import torch.nn.functional as F

from hoplib.validate import check_choice, check_int

# --------------------------------------------------------------------------- pluggable attention
ATTENTIONS: dict[str, type[AttentionSpec]] = {}
"""The attentions :class:`GPTConfig` knows by name (filled by :func:`register_attention`)."""


@dataclass(frozen=True)
class AttentionSpec:
    """The attention of every layer, as :class:`GPTConfig` stores it; :meth:`build` makes one layer's module.
    Subclasses set ``name`` and are registered with :func:`register_attention` (e.g. the Performer and
    Longformer of Cor. 5.3, 5.4 in :mod:`hoplib.lower_bounds.efficient_attention`)."""

    name: ClassVar[str] = ""

    def build(self, config: GPTConfig) -> CausalSelfAttention:
        """One layer's attention module for ``config``."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """``{"name": ..., **settings}``, the form :class:`GPTConfig` accepts back."""
        return {"name": self.name, **asdict(self)}


def register_attention(spec: type[AttentionSpec]) -> type[AttentionSpec]:
    """Class decorator: make an :class:`AttentionSpec` subclass known to :class:`GPTConfig` by its ``name``."""
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


def _resolve_attention(value: AttentionSpec | str | dict) -> AttentionSpec:
    """An :class:`AttentionSpec` from a spec, a registered name, or a dict written by :meth:`AttentionSpec.to_dict`."""
    if isinstance(value, AttentionSpec):
        return value
    settings = dict(value) if isinstance(value, dict) else {"name": value}
    name = settings.pop("name", None)
    if name not in ATTENTIONS:
        raise ValueError(f"attention must be an AttentionSpec or one of the registered names {sorted(ATTENTIONS)}, "
                         f"got {value!r} (Performer and Longformer register when "
                         "hoplib.lower_bounds.efficient_attention is imported)")
    return ATTENTIONS[name](**settings)


@dataclass(frozen=True)
class GPTConfig:
    """Architecture of :class:`GPT`. ``head="linear"`` (the book's) unembeds to ``n_classes`` (default
    ``vocab_size``, the embedding rows) after the final LayerNorm; ``"layernorm"`` (the authors') uses that
    LayerNorm's output as the m logits (the paper's Table 3). ``attention``: a spec, a registered name or its
    :meth:`to_dict`, left out of :meth:`to_dict` while softmax so that older configs load unchanged."""

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
        for name in ("vocab_size", "n_positions", "depth", "d_model", "heads"):
            check_int(name, getattr(self, name), low=1)
        check_choice("head", self.head, ("linear", "layernorm"))
        if self.d_model % self.heads:
            raise ValueError(f"d_model must be a multiple of heads = {self.heads}, got {self.d_model}")
        if not 0 <= self.dropout < 1:  # NaN fails too
            raise ValueError(f"dropout must be a number in [0, 1), got {self.dropout!r}")
        if not 0 < self.layer_norm_eps < math.inf:
            raise ValueError(f"layer_norm_eps must be a finite number > 0, got {self.layer_norm_eps!r}")
        if self.head == "layernorm" and not self.vocab_size <= self.d_model == (self.n_classes or self.d_model):
            raise ValueError(f"with head='layernorm' the LayerNorm output is the logit vector: d_model must be >= "
                             f"vocab_size = {self.vocab_size} and n_classes unset or d_model, got {self}")
        object.__setattr__(self, "attention", _resolve_attention(self.attention))

    @property
    def num_classes(self) -> int:
        """Number of logits per position."""
        return self.d_model if self.head == "layernorm" else self.n_classes or self.vocab_size

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict; ``attention`` (as :meth:`AttentionSpec.to_dict`) only when not softmax."""
        d = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "attention"}
        if self.attention != SoftmaxAttention():
            d["attention"] = self.attention.to_dict()
        return d


class CausalSelfAttention(nn.Module):
    """Multi-head causal softmax self-attention with one fused QKV projection (GPT-2's ``c_attn``/``c_proj``):
    :meth:`qkv_heads`, :meth:`attend`, :meth:`project`. Other attentions override :meth:`attend` only, so
    every attention has the same parameters under the same names."""

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

    causal = True  # without a key_mask: the causal mask, or (False) none

    def key_mask(self, t: int, device: torch.device) -> torch.Tensor | None:
        """(T, T), True where query i may see key j; None: the mask ``causal`` says."""
        return None

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Mix the values: ``(y (B, H, T, d), weights (B, H, T, T) or None)``; weights only if ``need_weights``."""
        t, mask = q.shape[-2], self.key_mask(q.shape[-2], q.device)
        if not need_weights:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal and mask is None,
                                               dropout_p=self.dropout if self.training else 0.0)
            return y, None
        if mask is None and self.causal:  # explicit softmax so the weights can be returned (same maths as SDPA)
            mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        att = (scores if mask is None else scores.masked_fill(~mask, float("-inf"))).softmax(dim=-1)
        return F.dropout(att, self.dropout, self.training) @ v, att

    def project(self, y: torch.Tensor) -> torch.Tensor:
        """Merge the heads of ``y`` (B, H, T, d) and apply the output projection (and residual dropout)."""
        b, h, t, d = y.shape
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(b, t, h * d)))

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        y, att = self.attend(*self.qkv_heads(x), need_weights=return_attention)
        return self.project(y), att


def check_ids(ids: torch.Tensor, vocab_size: int, n_positions: int) -> None:
    """Raise a clear error unless ``ids`` (..., T) holds token ids in [0, vocab_size) and T <= n_positions
    (the ensemble's indexing would wrap negative ids silently; CUDA would only assert). One device sync."""
    if ids.shape[-1] > n_positions:
        raise ValueError(f"ids length must be <= n_positions = {n_positions}, got {ids.shape[-1]}")
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
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        a, att = self.attn(self.ln1(x), return_attention)
        x = x + a
        return x + self.mlp(self.ln2(x)), att


class GPT(nn.Module):
    """GPT-2-style causal transformer: token + position embeddings, L blocks, final LayerNorm, output head.
    ``forward(ids)`` returns logits (B, T, C); with ``return_attention=True`` ``(logits, [A_1, ..., A_L])``,
    ``A_l`` of shape (B, H, T, T), rows = queries (Appendix G.4)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
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
    def _init_weights(module: nn.Module) -> None:  # GPT-2's; module by module, children first
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    @property
    def num_classes(self) -> int:
        return self.config.num_classes

    def forward(self, ids: torch.Tensor, return_attention: bool = False):
        check_ids(ids, self.config.vocab_size, self.config.n_positions)
        return self.forward_unchecked(ids, return_attention)

    def forward_unchecked(self, ids: torch.Tensor, return_attention: bool = False):
        """``forward`` without its check of ``ids`` (a device sync): for data checked once (hoplib.train)."""
        x = self.drop(self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device)))
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
    """A :class:`GPT` sized for a :class:`hoplib.tasks.HopTask` (classes = token ids); ``vocab_size`` and
    ``n_positions`` default to ``task.vocab_size`` and ``task.length`` (the authors': 30 and 100)."""
    cfg = GPTConfig(vocab_size=vocab_size or task.vocab_size, n_positions=n_positions or task.length,
                    depth=depth, d_model=d_model, heads=heads, dropout=dropout, head=head,
                    n_classes=None if head == "layernorm" else task.vocab_size, attention=attention)
    return GPT(cfg)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (Table 3 of the paper for ``head="layernorm"``, 30 rows, 100 positions)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class GPTEnsemble(nn.Module):
    """E softmax GPTs of one config up to depth, deepest first, parameters stacked along a leading axis (layer i
    holds the models deeper than i): ``forward(ids (E, B, T))`` gives logits (E, B, T, C) with batched matrix
    products and one attention call per layer, so E small models share a GPU. The models share no parameters and
    AdamW is elementwise, so training on the sum of their losses equals training each alone (up to float
    rounding). Dropout draws independent masks per model."""

    def __init__(self, models: list[GPT]):
        super().__init__()
        self.depths = [mdl.config.depth for mdl in models]
        for i, mdl in enumerate(models):
            if mdl.config != replace(models[0].config, depth=mdl.config.depth):
                raise ValueError(f"models[{i}] has config {mdl.config}, expected {models[0].config} (equal up to "
                                 "depth)")
            if i and self.depths[i] > self.depths[i - 1]:
                raise ValueError(f"models[{i}] is deeper than models[{i - 1}]: order the models deepest first")
        if not isinstance(models[0].config.attention, SoftmaxAttention):
            raise ValueError(f"GPTEnsemble supports softmax attention only, got {models[0].config.attention!r}; "
                             "train models with other attentions one at a time with hoplib.train.fit")
        self.config, self.n_models = models[0].config, len(models)
        states = [m.state_dict() for m in models]
        # nn.ParameterDict keys may not contain '.', so store under mangled names.
        self.stacked = nn.ParameterDict({n.replace(".", "__"): nn.Parameter(torch.stack([s[n] for s in states
                                                                                          if n in s]))
                                         for n in states[0]})

    def p(self, name: str) -> torch.Tensor:
        """The stacked parameter (E, ...) named as in :class:`GPT`'s state_dict, e.g. ``'blocks.0.ln1.weight'``."""
        return self.stacked[name.replace(".", "__")]

    def _linear(self, x: torch.Tensor, name: str, bias: bool = True) -> torch.Tensor:
        w, (e, *mid, n_in) = self.p(name + ".weight").transpose(1, 2), x.shape
        flat = x.reshape(e, -1, n_in)
        out = torch.baddbmm(self.p(name + ".bias").unsqueeze(1), flat, w) if bias else flat @ w
        return out.reshape(e, *mid, w.shape[2])

    def _ln(self, x: torch.Tensor, name: str) -> torch.Tensor:
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
        x = F.layer_norm(x, (x.shape[-1],), eps=self.config.layer_norm_eps)
        return x * self.p(name + ".weight").view(shape) + self.p(name + ".bias").view(shape)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.dim() != 3 or ids.shape[0] != self.n_models:  # (1, B, T) would broadcast silently
            raise ValueError(f"ids must have shape (E={self.n_models}, B, T), got {tuple(ids.shape)}")
        check_ids(ids, self.config.vocab_size, self.config.n_positions)
        return self.forward_unchecked(ids)

    def forward_unchecked(self, ids: torch.Tensor) -> torch.Tensor:
        """``forward`` without its checks of ``ids`` (a device sync): for data checked once (hoplib.train)."""
        cfg, (e, _, t) = self.config, ids.shape
        rows = torch.arange(e, device=ids.device).view(e, 1, 1)
        x = self.p("wte.weight")[rows, ids] + self.p("wpe.weight")[:, :t].unsqueeze(1)  # (E, B, T, m)
        x = F.dropout(x, cfg.dropout, self.training)
        for i in range(cfg.depth):
            n = sum(d > i for d in self.depths)  # the first n models have a layer i
            x = self._block(x, i) if n == e else torch.cat([self._block(x[:n], i), x[n:]])
        x = self._ln(x, "ln_f")
        return x if cfg.head == "layernorm" else self._linear(x, "unembed", bias=False)

    def _block(self, x: torch.Tensor, i: int) -> torch.Tensor:
        (e, b, t, m), h, pre = x.shape, self.config.heads, f"blocks.{i}."
        drop = self.config.dropout if self.training else 0.0
        qkv = self._linear(self._ln(x, pre + "ln1"), pre + "attn.qkv")
        q, k, v = (z.reshape(e * b, t, h, m // h).transpose(1, 2) for z in qkv.split(m, dim=-1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=drop)
        a = self._linear(a.transpose(1, 2).reshape(e, b, t, m), pre + "attn.proj")
        x = x + F.dropout(a, drop, self.training)
        y = F.gelu(self._linear(self._ln(x, pre + "ln2"), pre + "mlp.fc"), approximate="tanh")
        return x + F.dropout(self._linear(y, pre + "mlp.proj"), drop, self.training)

    def unstack(self) -> list[GPT]:
        """The E models as separate :class:`GPT` modules (copies of the current weights, on the same device)."""
        out = []
        for j, depth in enumerate(self.depths):
            out.append(GPT(replace(self.config, depth=depth)).to(self.p("wte.weight").device))
            out[-1].load_state_dict({n: self.p(n)[j].detach().clone() for n in out[-1].state_dict()})
        return out
