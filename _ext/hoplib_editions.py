"""The book's two editions (issue 29). The student edition (the default) leaves every exercise solution and lab
answer key out of the pages; the instructor edition shows them open, not in a dropdown.

The edition is the Sphinx config value ``hoplib_edition``, set by the environment variable ``HOPLIB_EDITION``
(``student`` or ``instructor``) because ``jupyter-book build`` passes no ``-D`` options:
``scripts/build_instructor.sh`` sets it. The instructor edition reads the student build's execution cache
(``_build/.jupyter_cache`` beside the book) unless ``execute.cache`` names another, so it does not execute the
chapters again.

Solutions are removed by a transform that runs after sphinx-exercise merges each gated solution
(``solution-start`` ... ``solution-end``, which holds the solution's code cells) into one node. sphinx-exercise's
own ``hide_solutions`` (1.2.1) cannot be used: it drops the ``solution-start`` marker only, so the gated
solution's text and code stay on the page and the HTML writer fails on the orphan ``solution-end`` node
(``NotImplementedError: ... unknown node type: solution_end_node``). The solution cells still execute in both
editions (the build checks every solution); only what the page shows differs.
"""

from __future__ import annotations

import os
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ConfigError
from sphinx.transforms import SphinxTransform
from sphinx_exercise.nodes import solution_node

EDITIONS = ("student", "instructor")


class ApplyEdition(SphinxTransform):
    """Student edition: remove every solution node. Instructor edition: show each one open."""

    default_priority = 20  # after sphinx-exercise's MergeGatedSolutions (10)

    def apply(self) -> None:
        for node in list(self.document.findall(solution_node)):
            if self.config.hoplib_edition == "student":
                node.parent.remove(node)
            else:
                node["classes"] = [c for c in node["classes"] if c != "dropdown"]


def choose_edition(app: Sphinx, config: Config) -> None:
    """Read ``HOPLIB_EDITION``; a misspelt edition would silently build the student one, so it is an error."""
    config.hoplib_edition = os.environ.get("HOPLIB_EDITION", config.hoplib_edition)
    if config.hoplib_edition not in EDITIONS:
        raise ConfigError(f"HOPLIB_EDITION must be one of {', '.join(EDITIONS)}, got {config.hoplib_edition!r}")
    if config.hoplib_edition == "instructor" and "nb_execution_cache_path" in config \
            and not config.nb_execution_cache_path:  # myst-nb is loaded and no cache is named
        config.nb_execution_cache_path = str(Path(app.srcdir, "_build", ".jupyter_cache"))


def setup(app: Sphinx) -> dict[str, object]:
    app.add_config_value("hoplib_edition", "student", "env", [str])
    app.connect("config-inited", choose_edition, priority=400)  # before myst-nb reads the cache path
    app.add_transform(ApplyEdition)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
