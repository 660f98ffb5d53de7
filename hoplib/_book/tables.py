"""Tables for the book's pages: text when printed, an HTML table when displayed in a notebook."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any


class Table(str):
    """A table that prints as fixed-width text and renders as an HTML table in a notebook (``display``)."""

    header: list[str]
    body: list[list[str]]
    caption: str

    def __new__(cls, header: Sequence[str], body: Sequence[Sequence[str]], caption: str = "") -> Table:
        widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(header)]
        lines = [caption] if caption else []
        lines += ["  ".join(c.rjust(w) for c, w in zip(header, widths, strict=True))]
        lines += ["  ".join(v.rjust(w) for v, w in zip(b, widths, strict=True)) for b in body]
        out = super().__new__(cls, "\n".join(lines))
        out.header, out.body, out.caption = list(header), [list(b) for b in body], caption
        return out

    def _repr_html_(self) -> str:
        return html_table(self.header, self.body, self.caption)

    def __repr__(self) -> str:
        """The fixed-width text itself (the ``text/plain`` of a notebook output, e.g. in the PDF), not a quoted
        string with ``\\n`` escapes."""
        return str.__str__(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython's text/plain goes through here
        printer.text(str.__str__(self))


def html_table(header: Sequence[str], body: Sequence[Sequence[Any]], caption: str = "") -> str:
    """An escaped HTML table, with an optional caption; every cell carries its own padding, so columns stay
    apart wherever the table is shown (the book's theme, Jupyter, Colab)."""
    pad = ' style="padding: 0.2em 0.7em"'
    head = "".join(f"<th{pad}>{html.escape(str(c))}</th>" for c in header)
    rows = "".join("<tr>" + "".join(f"<td{pad}>{html.escape(str(v))}</td>" for v in b) + "</tr>" for b in body)
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f'<table class="hoplib-table">{cap}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


__all__ = ["Table", "html_table"]
