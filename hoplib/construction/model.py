"""The hand-built model of Theorem 4.2 (one softmax head and one ReLU MLP per layer, weights from
:mod:`~hoplib.construction.layers`), its builders, and Lemma A.2 in practice. Position 0 holds a start token
(the paper's X_0, i.e. ⊥), the letters 1..N."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

import hoplib.construction.layers as layers
from hoplib.construction.blocks import MLP
from hoplib.construction.layers import Spec, hop_program
from hoplib.construction.layout import angles, hop_layout
from hoplib.report import depth_ceil
from hoplib.tasks import NO_ANSWER, HopTask, hop


def lemma_a2_inverse_temperature(seq_len: int, dtype: torch.dtype = torch.float32) -> float:
    """Lemma A.2 for score margin 1: c = ln M + (p + 1) ln 2, with M = seq_len + 1 positions and p mantissa
    bits (24 for float32, 53 for float64); then the weight off the argmax is below 2^-(p+1)."""
    p = round(-math.log2(torch.finfo(dtype).eps)) + 1
    return math.log(seq_len + 1) + (p + 1) * math.log(2)


SCORE_SPAN_TOL = 1 / 8  # eps * score span above this is not exact: first wrong positions measured from 0.6
OVERFLOW_MARGIN = 2.0**10  # c * score span stays this far below the dtype's largest value (scores stay finite)


def score_span(spec: Spec) -> float:
    """The largest attention score in units of the smallest margin the heads need (1 after normalisation):
    1/δ for lookUp (3/δ with the multi-task broadcast), Λ + M for lastOccurrence, where Λ ~ M |Σ|² / 2π²."""
    return max((3 if spec.multi else 1) / spec.delta, spec.lam + spec.circle)


def max_inverse_temperature(spec: Spec, dtype: torch.dtype) -> float:
    """The largest inverse temperature c whose scores stay finite in ``dtype``: c * :func:`score_span` times
    :data:`OVERFLOW_MARGIN` at most the largest float. Above it a score overflows to inf and softmax gives NaN
    (``hop_transformer(2, 64, 8)`` in float32 at c = 1e37 answers most positions wrong)."""
    return torch.finfo(dtype).max / (score_span(spec) * OVERFLOW_MARGIN)


def exact_dtype(spec: Spec, dtype: torch.dtype | None, seq_len: int) -> torch.dtype:
    """``dtype``, or float32 (else float64) for None, if it resolves the margins: eps * :func:`score_span` <=
    1/8; else a ValueError, since rounding would silently move attention to a neighbouring key."""
    span, sizes = score_span(spec), f"seq_len={seq_len}, alphabet_size={spec.alphabet_size}"
    ok = [dt for dt in (torch.float32, torch.float64) if torch.finfo(dt).eps * span <= SCORE_SPAN_TOL]
    if dtype is None and ok or dtype in ok:
        return dtype or ok[0]
    fix = f"use dtype={ok[0]} (or None)" if ok else "no float dtype is exact, use smaller sizes"
    raise ValueError(f"{dtype or 'float64'} is not exact at {sizes} (scores span {span:.3g} margins): {fix}")


@dataclass
class Trace:
    """``residuals[ℓ]`` (B, T, d) after layer ℓ (0: embedding), ``attentions[ℓ-1]`` (B, T, T) of layer ℓ."""

    residuals: list[torch.Tensor]
    attentions: list[torch.Tensor]
    logits: torch.Tensor


class HopTransformer(nn.Module):
    """The first ``n_layers`` layers of ``spec`` (see :func:`hop_transformer`, :func:`multi_hop_transformer`);
    ``subspaces`` names the slices of the residual stream, ``head_names`` what each layer's head does."""

    def __init__(self, spec: Spec, n_layers: int, dtype: torch.dtype, inverse_temperature: float, seq_len: int):
        super().__init__()
        lay = hop_layout(spec.n_layers - 2, spec.multi)
        self.subspaces, self.d_model, self.n_layers = dict(lay.slices), lay.width, n_layers
        blocks = [layers.previous_letter_layer(spec, lay, dtype), layers.induction_layer(spec, lay, dtype)]
        blocks += [layers.doubling_layer(spec, lay, ell, dtype) for ell in range(3, spec.n_layers + 1)]
        self.heads = nn.ModuleList([h for h, _ in blocks[:n_layers]])
        self.mlps = nn.ModuleList([m if m is not None else nn.Identity() for _, m in blocks[:n_layers]])
        self.head_names = [h.name for h in self.heads]
        weights = layers.embedding(spec, lay) + layers.readout(spec, lay)
        for name, t in zip(("tok_emb", "pos_emb", "unembed", "unembed_bias"), weights, strict=True):
            self.register_buffer(name, t.to(dtype))
        self.circle, self.alphabet_size, self.dtype, self.seq_len = spec.circle, spec.alphabet_size, dtype, seq_len
        self.multi, self.k, self.max_hops = spec.multi, None if spec.multi else spec.max_k, spec.max_k
        self.max_inverse_temperature, self._span = max_inverse_temperature(spec, dtype), score_span(spec)
        self.inverse_temperature = inverse_temperature

    @property
    def inverse_temperature(self) -> float:  # the softmax coldness c
        return self._inverse_temperature

    @inverse_temperature.setter
    def inverse_temperature(self, c: float) -> None:
        # NaN, zero, a negative or infinite c makes softmax undefined or uniform: silent nonsense
        if not 0 < c < math.inf:
            raise ValueError(f"inverse_temperature must be a real number in (0, inf), got {c!r}")
        if c > self.max_inverse_temperature:  # the scores would overflow to inf: softmax gives NaN
            raise ValueError(f"inverse_temperature {c:g} overflows {self.dtype}: the scores span {self._span:.3g} "
                             f"margins, so c must be at most {self.max_inverse_temperature:.3g}")
        self._inverse_temperature = float(c)

    @property
    def task(self) -> HopTask:  # the HopTask whose layout the multi-task model reads
        return HopTask(seq_len=self.seq_len, alphabet_size=self.alphabet_size, max_hops=self.max_hops)

    def _tokens(self, x: torch.Tensor) -> torch.Tensor:
        """Token ids, start token first; ids out of range would silently read as ⊥ or a k-token: they raise."""
        def check(t: torch.Tensor, lo: int, hi: int, what: str) -> None:
            if t.numel() and not (lo <= int(t.min()) and int(t.max()) <= hi):
                raise ValueError(f"{what} in [{lo}, {hi}]")

        if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:  # 0.7 would be read as letter 0
            raise ValueError(f"x must hold integer letter ids, got dtype {x.dtype}")

        if self.multi:
            check(x[:, 0], 0, self.max_hops, "x[:, 0] must be k-tokens")
            check(x[:, 1:], self.task.vocab.first_letter, self.task.vocab.no_answer - 1, "x[:, 1:] must be letter ids")
            return x.long()
        check(x, 0, self.alphabet_size - 1, "x must hold letters")
        if x.shape[1] > self.seq_len:
            raise ValueError(f"x has {x.shape[1]} letters, more than seq_len={self.seq_len}")
        return torch.cat([torch.full_like(x[:, :1], self.alphabet_size), x], dim=1).long()

    def _run(self, x: torch.Tensor, keep: bool) -> Trace:
        toks = self._tokens(x)
        h = self.tok_emb[toks] + self.pos_emb[: toks.shape[1]]
        residuals, attentions = [h], []
        with torch.autocast(device_type=x.device.type, enabled=False):  # never bf16: precision is the point
            for head, mlp in zip(self.heads, self.mlps, strict=True):
                out, attn = head(h, self.inverse_temperature, keep)
                h = h + out
                h = h + mlp(h) if isinstance(mlp, MLP) else h
                if keep:
                    residuals.append(h)
                    attentions.append(attn)
            logits = h @ self.unembed + self.unembed_bias
        return Trace(residuals if keep else [], attentions if keep else [], logits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scores (B, N, alphabet_size + 1) for letters ``x`` (B, N), class ``alphabet_size`` = ⊥; for the
        multi-task model, logits (B, T, vocab size) for HopTask inputs, class index = target token id."""
        logits = self._run(x, keep=False).logits
        return logits if self.multi else logits[:, 1:]

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """argmax of :meth:`forward`, with ⊥ as -1 (comparable with :func:`hoplib.tasks.hop`)."""
        pred = self.forward(x).argmax(-1)
        return pred if self.multi else torch.where(pred == self.alphabet_size, NO_ANSWER, pred)

    @torch.no_grad()
    def trace(self, x: torch.Tensor) -> Trace:
        """Run ``x`` keeping every layer's residual stream and attention weights (start position included)."""
        return self._run(x, keep=True)

    def read(self, resid: torch.Tensor, name: str) -> torch.Tensor:
        """The named subspace of a residual stream tensor (..., d_model)."""
        return resid[..., self.subspaces[name]]

    def decode(self, resid: torch.Tensor) -> dict[str, torch.Tensor]:
        """Pointers to the nearest position (letter index, -1 = ⊥; multi-task: HopTask column), letters to the
        nearest letter (-1 = ⊥-flag or a null vector), from a residual stream (..., d_model)."""
        keys = angles(self.circle, torch.arange(self.circle, device=resid.device)).to(resid.dtype)
        letters = angles(self.alphabet_size, torch.arange(self.alphabet_size, device=resid.device))
        out = {}
        for name in ("pos", "ptr", "acc"):
            out[name] = (self.read(resid, name) @ keys.T).argmax(-1) - (0 if self.multi else 1)
        for name in ("letter", "prev_letter", "ptr_letter", "acc_letter"):
            vec = self.read(resid, name)
            null = vec[..., :2].norm(dim=-1) < 0.25
            if vec.shape[-1] == 3:
                null = null | (vec[..., 2] > 0.5)
            out[name] = torch.where(null, NO_ANSWER, (vec[..., :2] @ letters.to(vec.dtype).T).argmax(-1))
        return out


def _hop_spec(k: int, seq_len: int, alphabet_size: int) -> Spec:
    return Spec(n_layers=max(depth_ceil(k), 2), programs={k: hop_program(k)}, circle=seq_len + 1,
                alphabet_size=alphabet_size, answer_from_ptr=(k == 1))


def hop_transformer(k: int, seq_len: int, alphabet_size: int, dtype: torch.dtype | None = None,
                    inverse_temperature: float | None = None) -> HopTransformer:
    """Theorem 4.2 (corrected depth): ⌈log₂ k⌉ + 2 layers of one head, one width for all k, N and alphabets;
    ``model(x)`` scores letters ``x`` (B, N <= seq_len), argmax hop(x, k) (class ``alphabet_size`` = ⊥).
    ``dtype`` None: float32 where it is exact, else float64 (:func:`exact_dtype`)."""
    spec = _hop_spec(k, seq_len, alphabet_size)
    dtype = exact_dtype(spec, dtype, seq_len)
    c = lemma_a2_inverse_temperature(seq_len, dtype) if inverse_temperature is None else inverse_temperature
    return HopTransformer(spec, depth_ceil(k), dtype, c, seq_len)  # hop_0: no layers, read the letter


def multi_hop_transformer(max_hops: int = 16, seq_len: int = 100, alphabet_size: int = 4,
                          dtype: torch.dtype | None = None,
                          inverse_temperature: float | None = None) -> HopTransformer:
    """The multi-task model of the paper's experiments, by hand: it reads k from the k-token of
    :class:`hoplib.tasks.HopTask` inputs, and its logits are indexed by target token id, so the evaluation code
    of trained models scores it unchanged. Depth max(3, ⌈log₂ max_hops⌉ + 2)."""
    n_layers = max(3, depth_ceil(max_hops))
    programs = {kk: hop_program(kk, n_layers) for kk in range(max_hops + 1)}
    spec = Spec(n_layers=n_layers, programs=programs, circle=seq_len - 1, alphabet_size=alphabet_size,
                multi=True)
    dtype = exact_dtype(spec, dtype, seq_len)
    c = lemma_a2_inverse_temperature(seq_len - 1, dtype) if inverse_temperature is None else inverse_temperature
    return HopTransformer(spec, n_layers, dtype, c, seq_len)


@torch.no_grad()
def count_errors(model: HopTransformer, x: torch.Tensor, batch_size: int = 1000) -> int:
    """Positions where a :func:`hop_transformer` model disagrees with :func:`hoplib.tasks.hop` on ``x``."""
    return sum(int((model.predict(xb) != hop(xb, model.k)).sum()) for xb in x.split(batch_size))


def min_exact_inverse_temperature(model: HopTransformer, x: torch.Tensor,
                                  lo=0.05, hi=1e4, rel_tol=0.02,
                                  batch_size=256) -> float:
    """The smallest inverse temperature (to ``rel_tol``) at which ``model`` is
    exact on letters ``x``, by bisection on a log scale; ``math.inf`` if none
    up to ``hi``."""
    old = model.inverse_temperature

    def exact(c: float) -> bool:
        model.inverse_temperature = c
        return count_errors(model, x, batch_size) == 0

    try:
        if not exact(hi):
            return math.inf
        if exact(lo):
            return lo
        while hi / lo > 1 + rel_tol:
            mid = math.sqrt(lo * hi)
            lo, hi = (lo, mid) if exact(mid) else (mid, hi)
        return hi
    finally:
        model.inverse_temperature = old


def precision_study(ns: list[int], dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64),
                    k: int = 4, alphabet_size: int = 4, total_letters: int = 20_000, seed: int = 0,
                    device: str | torch.device = "cpu", hi: float = 1e3, rel_tol: float = 0.03) -> list[dict]:
    """Per N and dtype: the smallest exact c on ``total_letters // N`` no-repeat sequences, and Lemma A.2's."""
    out = []
    for n in ns:
        gen = torch.Generator(device=device).manual_seed(seed + n)
        x = HopTask(seq_len=n + 2, alphabet_size=alphabet_size).letters(max(1, total_letters // n), gen,
                                                                        torch.device(device))
        for dt in dtypes:
            model = HopTransformer(_hop_spec(k, n, alphabet_size), depth_ceil(k), dt,  # float32 past its limit too
                                   lemma_a2_inverse_temperature(n, dt), n).to(device)
            c_min = min_exact_inverse_temperature(model, x, hi=hi, rel_tol=rel_tol, batch_size=64)
            out.append({"n": n, "dtype": str(dt).replace("torch.", ""), "k": k, "n_sequences": int(x.shape[0]),
                        "c_min": c_min if math.isfinite(c_min) else None,
                        "c_lemma_a2": lemma_a2_inverse_temperature(n, dt),
                        "errors_at_lemma_a2": count_errors(model, x, batch_size=64), "ln_n": math.log(n + 1)})
    return out
