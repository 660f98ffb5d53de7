"""Lemma A.2 in practice: the smallest inverse temperature at which the hand-built model stays exact.

Sanford, Hsu & Telgarsky (arXiv v1), Lemma A.2 replaces hardmax by softmax at an inverse temperature of about
ln N + p ln 2 for p bits of precision. :func:`min_exact_inverse_temperature` finds, by bisection on a log
scale, the smallest c at which a model of :func:`~hoplib.construction.model.hop_transformer` makes no error
on given data; :func:`precision_study` does so for several N in float32 and float64 (the chapter's precision
section and ``python -m hoplib.construction precision``).
"""

from __future__ import annotations

import math

import torch

from hoplib._book.validate import check_int
from hoplib.construction.model import HopTransformer, check_single_k, count_errors, hop_transformer
from hoplib.construction.temperature import check_dtype, lemma_a2_inverse_temperature
from hoplib.tasks import HopTask

__all__ = ["min_exact_inverse_temperature", "precision_study"]


def min_exact_inverse_temperature(model: HopTransformer, x: torch.Tensor, lo: float = 0.05, hi: float = 1e4,
                                  rel_tol: float = 0.02, batch_size: int = 256) -> float:
    """Smallest inverse temperature (to ``rel_tol``) at which ``model`` makes no error on letters ``x``.

    Bisection on a log scale between ``lo`` and ``hi``, assuming exactness is monotone in c (checked at
    both ends). Returns ``math.inf`` if the model is not exact even at ``hi`` (finite precision broke it).
    Restores the model's inverse temperature afterwards.
    """
    check_single_k(model)
    lo, hi = float(lo), float(hi)
    if not 0 < lo < hi:
        raise ValueError(f"need 0 < lo < hi, got lo={lo}, hi={hi}")
    if not 0 < rel_tol < 1:
        raise ValueError(f"rel_tol must be in (0, 1), got {rel_tol}")
    old = model.inverse_temperature

    def exact(c: float) -> bool:
        model.inverse_temperature = c
        return count_errors(model, x, batch_size=batch_size) == 0

    try:
        if not exact(hi):
            return math.inf
        if exact(lo):
            return lo
        while hi / lo > 1 + rel_tol:
            mid = math.sqrt(lo * hi)
            if exact(mid):
                hi = mid
            else:
                lo = mid
        return hi
    finally:
        model.inverse_temperature = old


def precision_study(ns: list[int], dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64), k: int = 4,
                    alphabet_size: int = 4, total_letters: int = 20_000, seed: int = 0,
                    device: str | torch.device = "cpu", hi: float = 1e3, rel_tol: float = 0.03,
                    progress: bool = True) -> list[dict]:
    """Lemma A.2 in practice: for each N and dtype, the smallest inverse temperature keeping hop_transformer
    (k, N) exact on no-repeat data, beside the lemma's value. ``total_letters`` // N sequences per N (at
    least 1). A ``c_min`` of ``inf`` means no inverse temperature up to ``hi`` is exact: finite precision broke
    the construction. Runs on ``device`` (default CPU; data generated there).
    """
    from hoplib._book.device import get_device

    if not isinstance(ns, (list, tuple)) or not ns:
        raise TypeError("ns must be a non-empty list of sequence lengths")
    ns = [check_int("n", n, low=2) for n in ns]
    for dt in dtypes:
        check_dtype(dt)
    dev = get_device(device)
    out = []
    loop = ns
    if progress:  # imported only when wanted: tqdm.auto warns on stderr in kernels without ipywidgets
        from tqdm.auto import tqdm

        loop = tqdm(ns, desc="precision study")
    for n in loop:
        gen = torch.Generator(device=dev).manual_seed(seed + n)
        x = HopTask(seq_len=n + 2, alphabet_size=alphabet_size).letters(max(1, total_letters // n), gen, dev)
        for dt in dtypes:
            model = hop_transformer(k, n, alphabet_size, dtype=dt).to(dev)
            c_lemma = lemma_a2_inverse_temperature(n, dt)
            errors_at_lemma = count_errors(model, x, batch_size=64)
            c_min = min_exact_inverse_temperature(model, x, hi=hi, rel_tol=rel_tol, batch_size=64)
            out.append({"n": n, "dtype": str(dt).replace("torch.", ""), "k": k, "n_sequences": int(x.shape[0]),
                        "c_min": c_min if math.isfinite(c_min) else None, "c_lemma_a2": c_lemma,
                        "errors_at_lemma_a2": errors_at_lemma, "ln_n": math.log(n + 1),
                        "lookup_margin_raw": 1 - math.cos(2 * math.pi / (n + 1))})
    return out
