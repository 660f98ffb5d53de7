"""The "open in Colab" button only where there is a notebook to open.

sphinx-book-theme puts a launch button on every page written as a notebook (a MyST Markdown page with a
kernelspec: the chapters, and also the landing page, the teaching page and the appendix). Where a generated
``.ipynb`` lies beside the page's source (``chapters/<name>.ipynb``, ``scripts/notebooks.py sync``) the button
opens it; elsewhere it hands Colab the ``.md`` source, which Colab cannot open. This extension runs after the
theme has made the page's buttons and takes the Colab button away where no notebook exists (and the launch menu
with it when nothing is left in it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

LAUNCH_GROUP = "launch-buttons"  # sphinx-book-theme's label of the launch menu


def colab_notebook(srcdir: str | Path, pagename: str) -> Path | None:
    """The notebook a page's Colab button opens: ``<pagename>.ipynb`` beside its source, or ``None``."""
    path = Path(srcdir, f"{pagename}.ipynb")
    return path if path.is_file() else None


def without_colab(buttons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The header buttons with the Colab launch button taken out, and the launch menu if it is then empty."""
    out = []
    for button in buttons:
        if button.get("label") == LAUNCH_GROUP:
            rest = [b for b in button.get("buttons", []) if "colab" not in str(b.get("url", "")).lower()]
            if not rest:
                continue
            button = {**button, "buttons": rest}
        out.append(button)
    return out


def drop_colab_without_notebook(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
                                doctree: object) -> None:
    """``html-page-context``: keep the Colab button only on pages whose notebook exists."""
    if "header_buttons" in context and colab_notebook(app.srcdir, pagename) is None:
        context["header_buttons"] = without_colab(context["header_buttons"])


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("html-page-context", drop_colab_without_notebook, priority=600)  # after the theme's (501)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
