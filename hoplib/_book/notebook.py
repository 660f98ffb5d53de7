"""What every chapter's second cell calls: check the parameters cell, pick the device, seed, save results.

A chapter's ``parameters`` cell holds ``profile``, ``device``, ``seed`` and ``out_dir``; the next cell calls
:func:`start` with the chapter's profile table, which validates them, resolves the device in one place
(:func:`hoplib._book.device.get_device`), seeds every generator and prints one line of provenance. Results go
through :meth:`ChapterRun.save`, which writes a JSON file with provenance when ``out_dir`` is set (the
papermill runner sets it) and writes nothing during the book build.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import hoplib
from hoplib._book.device import get_device, seed_everything
from hoplib._book.provenance import save_results
from hoplib._book.validate import check_choice


@dataclass
class ChapterRun:
    """The resolved settings of one execution of a chapter."""

    chapter: str
    profile: str
    device: torch.device
    seed: int
    settings: dict[str, Any]
    out_dir: Path | None
    started: float = field(default_factory=time.perf_counter)

    def __getitem__(self, key: str) -> Any:
        return self.settings[key]

    @property
    def parameters(self) -> dict[str, Any]:
        return {"chapter": self.chapter, "profile": self.profile, "device": str(self.device),
                "seed": self.seed, **self.settings}

    def save(self, name: str, data: Any) -> Path | None:
        """Write ``out_dir/<chapter>/<profile>/<name>.json`` with provenance; nothing if ``out_dir`` is unset."""
        if self.out_dir is None:
            return None
        path = self.out_dir / f"{name}.json"
        return save_results(path, data, self.parameters, self.device, time.perf_counter() - self.started)


def start(chapter: str, profile: str, device: str, seed: int, out_dir: str | None,
          profiles: dict[str, dict[str, Any]]) -> ChapterRun:
    """Check a chapter's parameters and return its :class:`ChapterRun`: the device resolved in one place,
    every generator seeded, the book's figure style set, and one printed line saying what runs where. (The
    time each profile takes is in the stored-runs appendix.)"""
    check_choice("profile", profile, tuple(profiles))
    dev = get_device(device)
    seed_everything(seed)
    from hoplib.plots import use_book_style  # the book's one figure style (fonts, SVG output)

    use_book_style()
    out = Path(out_dir) / chapter / profile if out_dir else None
    run = ChapterRun(chapter, profile, dev, seed, dict(profiles[profile]), out)
    print(f"hoplib {hoplib.__version__} | torch {torch.__version__} | {chapter} | profile {profile} "
          f"| {dev.type} | seed {seed}" + (f" | results -> {out}" if out else ""))
    return run


def show(obj: Any) -> None:
    """IPython's ``display`` inside a notebook (HTML where ``obj`` has it), ``print`` elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover - plain Python without IPython
        print(obj)
        return
    if get_ipython() is None:
        print(obj)
    else:
        display(obj)


def _check_figure(name: str, fig: Any) -> None:
    """Every figure the book shows must be legible at the page's width (:func:`hoplib.plots.check_legible`).
    With ``$HOPLIB_FIGURE_REPORT`` set to a file, append ``name, smallest text px, width`` to it instead."""
    from hoplib.plots import check_legible, text_sizes_px

    report = os.environ.get("HOPLIB_FIGURE_REPORT")
    if not report:
        try:
            check_legible(fig)
        except ValueError as err:
            raise ValueError(f"figure {name!r}: {err}") from None
        return
    sizes = text_sizes_px(fig)
    smallest = sizes[0] if sizes else (float("inf"), "")
    with open(report, "a", encoding="utf-8") as fh:
        fh.write(f"{name}\t{smallest[0]:.1f}\t{smallest[1][:30]!r}\t{fig.get_figwidth():.1f}\n")


def glue(name: str, value: Any, display: bool = False) -> None:
    """myst-nb's ``glue`` when it is installed (the book build), else nothing (Colab, plain Jupyter).

    Prose quotes executed values through ``{glue:text}`` roles, so no number is ever typed by hand. A glued
    matplotlib figure is closed afterwards, so it appears once, where ``{glue:figure}`` places it (outside the
    book, e.g. on Colab, the figure is left open and Jupyter's inline backend shows it in place).
    """
    if os.environ.get("HOPLIB_PLAIN_NOTEBOOK"):  # set by the Colab install cell: show values in place
        if not isinstance(value, (str, int, float)) and not hasattr(value, "savefig"):
            show(value)  # a glued table: the book places it with {glue:}; a notebook shows it here
        return  # figures stay open and Jupyter's inline backend shows them; numbers are in the prose
    try:
        from myst_nb import glue as _glue
    except ImportError:  # pragma: no cover - only outside the book's environment
        return
    if hasattr(value, "savefig"):
        _check_figure(name, value)
    _glue(name, value, display=display)
    if hasattr(value, "savefig"):
        import matplotlib.pyplot as plt

        plt.close(value)
