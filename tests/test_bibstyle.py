"""The bibliography page's labels match the author-year citations (_ext/hoplib_bibstyle.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pybtex = pytest.importorskip("pybtex")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "_ext"))
import hoplib_bibstyle  # noqa: E402
from pybtex.database import parse_string  # noqa: E402

BIB = """
@article{a, author = {Sanford, Clayton and Hsu, Daniel and Telgarsky, Matus}, title = {T}, year = {2024}}
@article{b, author = {Loukas, Andreas}, title = {W}, year = {2020}}
@article{c, author = {Coy, Sam and Czumaj, Artur}, title = {D}, year = {2022}}
@article{d, author = {Coy, Sam and Czumaj, Artur}, title = {E}, year = {2022}}
"""


def test_labels_are_author_year_and_unique():
    entries = list(parse_string(BIB, "bibtex").entries.values())
    labels = list(hoplib_bibstyle.AuthorYearLabelStyle().format_labels(entries))
    assert labels == ["Sanford et al., 2024", "Loukas, 2020", "Coy and Czumaj, 2022a", "Coy and Czumaj, 2022b"]


def test_the_book_uses_the_style_for_citations_and_the_list():
    config = (Path(__file__).resolve().parent.parent / "_config.yml").read_text()
    assert "bibtex_reference_style: author_year" in config and "bibtex_default_style: hoplib_author_year" in config
