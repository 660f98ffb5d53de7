"""The notebook test can fail: nbval, with the book's sanitize file, passes a notebook run afresh that prints what
its stored outputs show (wall times, addresses and figures aside) and fails it when one printed number changed."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _nbval import SANITIZE, failed_cells, run_nbval  # noqa: E402

DEMO = [
    'share = 3 / 7\nprint(f"share of targets without an answer: {share:.4f}")',
    'import time\n\nt0 = time.perf_counter()\nsum(range(10_000))\n'
    'print(f"drew 10,000 numbers in {time.perf_counter() - t0 + 0.01:.3f} s")',
    "class Task:\n    pass\n\n\nTask()  # its repr carries a memory address",
    '%matplotlib inline\n%config InlineBackend.figure_formats = ["svg"]\nimport matplotlib.pyplot as plt\n\n'
    'fig, ax = plt.subplots(figsize=(4, 3))\n_ = ax.plot([1, 2, 3])',
]


@pytest.fixture
def built(tmp_path) -> Path:
    """A demo notebook with the outputs of one execution (as the book build stores them)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in DEMO])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    path = tmp_path / "demo.ipynb"
    nbformat.write(nb, path)
    return path


def test_nbval_passes_an_unchanged_notebook_and_fails_one_whose_printed_number_changed(built):
    printed = nbformat.read(built, as_version=4).cells[0].outputs[0]["text"]
    assert printed == "share of targets without an answer: 0.4286\n"
    assert SANITIZE.is_file()
    same = run_nbval(built, timeout=300)
    assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-2000:]
    assert f"{len(DEMO)} passed" in same.stdout, "every cell compared, wall time, address and SVG sanitized"

    nb = nbformat.read(built, as_version=4)
    nb.cells[0].outputs[0]["text"] = printed.replace("0.4286", "0.4287")
    nbformat.write(nb, built)
    changed = run_nbval(built, timeout=300)
    assert changed.returncode != 0
    assert [line.split(" - ")[0] for line in failed_cells(changed.stdout)] == ["FAILED demo.ipynb::Cell 0"]
    assert "0.4287" in changed.stdout and "0.4286" in changed.stdout, "the report shows both numbers"
