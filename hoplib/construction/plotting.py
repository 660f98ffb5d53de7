"""Inspecting the hand-built model of Theorem 4.2: decoded residual streams and attention heatmaps.

:func:`describe_residuals` decodes what each named subspace holds at one position after every layer (pointers
as positions, letters as letters); :func:`plot_attention` draws every layer's attention with the positions
find^j points at, which is what each lookUp (Lemma D.1) or lastOccurrence (Lemma D.2) head is built to
attend to.
"""

from __future__ import annotations

import torch

from hoplib._book.validate import check_int
from hoplib.construction.model import HopTransformer, check_single_k
from hoplib.tasks import find_k

__all__ = ["describe_residuals", "plot_attention"]


def describe_residuals(model: HopTransformer, x: torch.Tensor, position: int) -> list[dict[str, object]]:
    """What the named subspaces hold at one ``position`` of a 1-D letter sequence ``x``, after each layer.

    One dict per layer 0 (embedding) .. n_layers, with decoded pointers (letter index, -1 = ⊥/start) and
    letters ('a', 'b', ..., '~' for ⊥; '' while a slot is still empty). For hop_transformer models only.
    """
    check_single_k(model)
    if not isinstance(x, torch.Tensor) or x.ndim != 1:
        raise TypeError("x must be a 1-D LongTensor of letters")
    position = check_int("position", position, low=0, high=x.shape[0] - 1)
    tr = model.trace(x[None])
    rows = []
    for ell, resid in enumerate(tr.residuals):
        r = resid[0, position + 1]
        dec = model.decode(r)
        row: dict[str, object] = {"layer": ell}
        for name in ("prev_letter", "ptr", "ptr_letter", "acc", "acc_letter"):
            empty = float(model.read(r, name).abs().sum()) < 1e-3
            v = int(dec[name])
            if name.endswith("letter"):
                row[name] = "" if empty else ("~" if v < 0 else chr(ord("a") + v))
            else:
                row[name] = "" if empty else v
        rows.append(row)
    return rows


def plot_attention(model: HopTransformer, x: torch.Tensor, axes=None):  # noqa: ANN001, ANN201
    """Heatmaps of every layer's attention on a 1-D letter sequence ``x`` (start token included, row/column
    0), with red dots where find^j puts its mass: j = 'prev' for layer 1, 2^(ℓ-3) for layer ℓ >= 3 and 1 for
    layer 2 (what each lookUp or lastOccurrence is built to attend to). Returns the axes."""
    import matplotlib.pyplot as plt

    check_single_k(model)
    tr = model.trace(x[None])
    n_l = model.n_layers
    if axes is None:  # three panels a row keeps the labels legible at the page's width
        rows, cols = -(-n_l // 3), min(3, n_l)
        _, grid = plt.subplots(rows, cols, figsize=(2.8 * cols, 2.9 * rows), squeeze=False)
        for extra in grid.flat[n_l:]:
            extra.set_visible(False)
        axes = list(grid.flat[:n_l])
    n = x.shape[0]
    for ell, (ax, att) in enumerate(zip(axes, tr.attentions, strict=False), start=1):
        ax.imshow(att[0].double().cpu().numpy(), cmap="Blues", vmin=0, vmax=1)
        if ell == 1:
            target, label = torch.arange(-1, n - 1), "t-1"
        else:
            j = 1 if ell == 2 else 2 ** (ell - 3)
            target, label = find_k(x.cpu(), j), f"find^{j}"
        ax.scatter((target + 1).numpy(), range(1, n + 1), s=6, c="red", marker=".")
        ax.set_title(f"layer {ell}: {label}")
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
    return axes
