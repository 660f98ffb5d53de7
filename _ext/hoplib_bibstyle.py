"""A pybtex style for the bibliography page whose labels match the book's author-year citations.

The book cites author-year ("Sanford et al., 2024", sphinxcontrib-bibtex's ``author_year`` reference style);
pybtex's ``plain`` style would label the list [1], [2], ... This style keeps ``plain``'s formatting and
sorting (author, year, title) and labels each entry "Surname, year", "Surname and Other, year" or
"Surname et al., year", with a, b, ... appended where two entries would share a label.
"""

from __future__ import annotations

from collections import Counter

import pybtex.plugin
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle


def _surname(person) -> str:
    return " ".join(person.prelast_names + person.last_names).replace("{", "").replace("}", "")


def author_year_label(entry) -> str:
    """"Surname, year", "A and B, year" or "A et al., year" (editors when there are no authors)."""
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    year = entry.fields.get("year", "n.d.")
    if not people:
        return f"{entry.fields.get('title', entry.key)[:20]}, {year}"
    if len(people) == 1:
        names = _surname(people[0])
    elif len(people) == 2:
        names = f"{_surname(people[0])} and {_surname(people[1])}"
    else:
        names = f"{_surname(people[0])} et al."
    return f"{names}, {year}"


class AuthorYearLabelStyle(BaseLabelStyle):
    """Author-year labels, made unique with a, b, ... suffixes."""

    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [author_year_label(e) for e in entries]
        counts, seen = Counter(labels), Counter()
        for label in labels:
            if counts[label] > 1:
                seen[label] += 1
                yield f"{label}{'abcdefghijklmnopqrstuvwxyz'[seen[label] - 1]}"
            else:
                yield label


class AuthorYearStyle(PlainStyle):
    """pybtex's ``plain`` with author-year labels."""

    default_label_style = "hoplib_author_year"


pybtex.plugin.register_plugin("pybtex.style.labels", "hoplib_author_year", AuthorYearLabelStyle)
pybtex.plugin.register_plugin("pybtex.style.formatting", "hoplib_author_year", AuthorYearStyle)


def setup(app):  # noqa: ANN001, ANN201 - Sphinx extension entry point
    return {"parallel_read_safe": True, "parallel_write_safe": True}
