"""Run a chapter's Colab notebook in plain Python, cell by cell, and time every cell.

For a machine that has torch but no Jupyter (a bare GPU server): the notebook's code cells run in one
namespace, in order, as a kernel would run them, with the parameters given here placed after the cell tagged
``parameters`` (as papermill places them). Every cell's printed output, its figures (PNG) and its wall time go
into the executed notebook, which is rewritten after each cell, so a run stopped by a time limit keeps what it
did; a failing cell ends the run with its traceback in the notebook and exit status 1. Where IPython is
missing, ``display`` prints (the chapters that import IPython themselves
need it installed). With Jupyter present, ``python scripts/notebooks.py run`` is the tool to use.

    python benchmarks/run_plain.py chapters/training.ipynb --out runs/training.ipynb \\
        -p profile gpu -p device cuda -p out_dir runs
"""

from __future__ import annotations

import argparse
import ast
import base64
import contextlib
import io
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hoplib.results import atomic_write_text  # noqa: E402


class Tee(io.TextIOBase):
    """Write to a stream and keep a copy."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.stream.write(text)
        self.stream.flush()
        return self.copy.write(text)


def display_stand_in() -> Any:
    """A kernel's builtin ``display``: IPython's (which prints outside a kernel), else ``print``."""
    try:
        from IPython.display import display
    except ImportError:
        def display(*objs: Any, **_: Any) -> None:
            for obj in objs:
                print(obj)
    return display


def figures_png() -> list[dict]:
    """The open matplotlib figures as display_data outputs; then close them."""
    import matplotlib.pyplot as plt

    outputs = []
    for num in plt.get_fignums():
        buf = io.BytesIO()
        plt.figure(num).savefig(buf, format="png", dpi=80)
        outputs.append({"output_type": "display_data", "metadata": {},
                        "data": {"image/png": base64.b64encode(buf.getvalue()).decode()}})
    plt.close("all")
    return outputs


def parse_value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a plain string, as papermill's -p takes it


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("notebook", type=Path)
    p.add_argument("--out", type=Path, required=True, help="the executed notebook (.ipynb)")
    p.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    args = p.parse_args(argv)
    if args.out.resolve() == args.notebook.resolve():
        p.error("--out must differ from the notebook")
    nb = json.loads(args.notebook.read_text())
    params = {name: parse_value(value) for name, value in args.p}
    os.environ.setdefault("MPLBACKEND", "Agg")
    args.out = args.out.resolve()
    os.chdir(args.notebook.resolve().parent)  # the chapter reads ../results as on Colab
    cells, namespace, status = [], {"__name__": "__main__", "display": display_stand_in()}, 0
    injected = "\n".join(f"{k} = {v!r}" for k, v in params.items())
    for cell in nb["cells"]:
        cells.append(cell)
        if cell["cell_type"] != "code":
            continue
        if "parameters" in cell.get("metadata", {}).get("tags", []) and params:
            cells.append({"cell_type": "code", "execution_count": None, "source": injected,
                          "metadata": {"tags": ["injected-parameters"]}, "outputs": []})
    nb["cells"] = cells
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        out, err = Tee(sys.stdout), Tee(sys.stderr)
        start = time.perf_counter()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                exec(compile(source, f"<cell {i}>", "exec"), namespace)
            error = None
        except Exception as exc:  # the failing cell's traceback goes into the notebook
            error = {"output_type": "error", "ename": type(exc).__name__, "evalue": str(exc),
                     "traceback": traceback.format_exc().splitlines()}
        seconds = time.perf_counter() - start
        cell["outputs"] = [{"output_type": "stream", "name": name, "text": tee.copy.getvalue()}
                           for name, tee in (("stdout", out), ("stderr", err)) if tee.copy.getvalue()]
        cell["outputs"] += figures_png() + ([error] if error else [])
        cell["metadata"]["wall_s"] = round(seconds, 3)
        print(f"[cell {i}: {seconds:.1f} s] {source.splitlines()[0][:70] if source else ''}",
              file=sys.stderr, flush=True)
        atomic_write_text(args.out, json.dumps(nb, indent=1))  # a stopped run keeps its cells
        if error:
            print(f"cell {i} failed: {error['ename']}: {error['evalue']}", file=sys.stderr)
            status = 1
            break
    return status


if __name__ == "__main__":
    sys.exit(main())
