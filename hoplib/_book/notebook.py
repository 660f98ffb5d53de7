"""What every chapter's second cell calls: :func:`start` checks the parameters cell (``profile``, ``device``,
``seed``, ``out_dir``), resolves the device, seeds every generator and prints one line of provenance;
:meth:`ChapterRun.save` writes results with provenance when ``out_dir`` is set (papermill), never in the build.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import hoplib
from hoplib.device import get_device, seed_everything
from hoplib.results import plain_name, save_results
from hoplib.validate import check_choice


@dataclass
class ChapterRun:
    """The resolved settings of one execution of a chapter (``run["key"]`` reads the profile's settings)."""

    chapter: str
    profile: str
    device: torch.device
    seed: int
    settings: dict[str, Any]
    out_dir: Path | None
    started: float = field(default_factory=time.perf_counter)

    def __getitem__(self, key: str) -> Any:
        return self.settings[key]

    def save(self, name: str, data: Any) -> Path | None:
        """Write ``out_dir/<chapter>/<profile>/<name>.json`` with provenance; nothing if ``out_dir`` is unset."""
        plain_name(name, what="a results name")  # before out_dir: never a path out of it
        if self.out_dir is None:
            return None
        params = {"chapter": self.chapter, "profile": self.profile, "device": str(self.device), "seed": self.seed,
                  **self.settings}
        return save_results(self.out_dir / f"{name}.json", data, params, self.device,
                            time.perf_counter() - self.started)


def start(chapter: str, profile: str, device: str, seed: int, out_dir: str | None,
          profiles: dict[str, dict[str, Any]]) -> ChapterRun:
    """Check a chapter's parameters and return its :class:`ChapterRun`, with the device resolved, every
    generator seeded and the book's figure style set; print one line saying what runs where."""
    from hoplib.plots import use_book_style

    check_choice("profile", profile, tuple(profiles))
    plain_name(chapter, what="chapter")  # joined into out_dir below
    dev = get_device(device)
    seed_everything(seed)
    use_book_style()
    out = Path(out_dir) / chapter / profile if out_dir else None
    print(f"hoplib {hoplib.__version__} | torch {torch.__version__} | {chapter} | profile {profile} "
          f"| {dev.type} | seed {seed}" + (f" | results -> {out}" if out else ""))
    return ChapterRun(chapter, profile, dev, seed, dict(profiles[profile]), out)


def show(obj: Any) -> None:
    """IPython's ``display`` inside a notebook (HTML where ``obj`` has it), ``print`` elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover - plain Python without IPython
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        print(obj)
    else:
        display(obj)


def glue(name: str, value: Any, display: bool = False) -> None:
    """myst-nb's ``glue`` in the book build (prose quotes executed values through ``{glue:text}``, so no number
    is typed by hand). A glued figure must be legible at the page's width and is closed afterwards, so it shows
    once, where ``{glue:figure}`` places it. Outside the book (Colab, Jupyter) values are shown in place."""
    is_figure = hasattr(value, "savefig")
    if os.environ.get("HOPLIB_PLAIN_NOTEBOOK"):  # set by the Colab install cell
        if not isinstance(value, (str, int, float)) and not is_figure:
            show(value)  # a glued table: the book places it with {glue:}; a notebook shows it here
        return  # figures stay open and Jupyter's inline backend shows them; numbers are in the prose
    try:
        from myst_nb import glue as _glue
    except ImportError:  # pragma: no cover - only outside the book's environment
        return
    if is_figure:
        from hoplib.plots import check_legible

        try:
            check_legible(value)
        except ValueError as err:
            raise ValueError(f"figure {name!r}: {err}") from None
    _glue(name, value, display=display)
    if is_figure:
        import matplotlib.pyplot as plt

        plt.close(value)
