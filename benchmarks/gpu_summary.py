"""What a run of ``scripts/gpu_session.sh`` measured, as one results file.

Reads the session's work folder (per chapter: ``<chapter>.status``, the executed ``<chapter>.ipynb`` with every
cell's wall time, ``<chapter>.log`` with the training progress bars) and ``env.txt``, and writes per chapter: the
exit status (124: stopped by its time box), the wall time, the cells that ran, the first exception, the slowest
cells and, from the last state of the chapter's largest progress bar, the training steps done of all, the time
they took and the time all of them would take at that rate (``projected_training_s``; a projection, not a
measurement, where the bar had not finished).

    python benchmarks/gpu_summary.py WORK --env OUT/env.txt --out results/benchmarks/gpu_profiles_h200.json \\
        --source-commit SHA --note "four chapters at once on one GPU"
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hoplib.results import save_results  # noqa: E402

BAR = re.compile(r"(\d+)/(\d+) \[(?:(\d+):)?(\d+):(\d+)<")


def last_progress(log: str) -> dict | None:
    """The last state of the log's largest progress bar: steps done, of all, and the seconds taken."""
    best = None
    for line in log.replace("\r", "\n").splitlines():
        m = BAR.search(line)
        if m:
            done, total = int(m[1]), int(m[2])
            seconds = int(m[3] or 0) * 3600 + int(m[4]) * 60 + int(m[5])
            if best is None or total >= best["total"]:
                best = {"done": done, "total": total, "elapsed_s": seconds}
    if best and best["done"]:
        best["projected_training_s"] = round(best["elapsed_s"] * best["total"] / best["done"])
    return best


def chapter_record(work: Path, name: str) -> dict:
    status = work / f"{name}.status"
    rec: dict = {"chapter": name, "started": status.exists() or (work / f"{name}.log").exists()}
    if status.exists():
        m = re.search(r"exit (\d+) wall (\d+) s", status.read_text())
        rec.update(exit=int(m[1]), wall_s=int(m[2]), stopped_by_time_box=m[1] == "124")
    nb = work / f"{name}.ipynb"
    if nb.exists():
        cells = [c for c in json.loads(nb.read_text())["cells"] if "wall_s" in c.get("metadata", {})]
        errors = [o for c in cells for o in c["outputs"] if o["output_type"] == "error"]
        rec["cells_ran"] = len(cells)
        rec["exception"] = f"{errors[0]['ename']}: {errors[0]['evalue']}" if errors else None
        slow = sorted(cells, key=lambda c: -c["metadata"]["wall_s"])[:3]
        rec["slowest_cells"] = [{"wall_s": c["metadata"]["wall_s"],
                                 "first_line": "".join(c["source"]).splitlines()[0][:80]} for c in slow]
    log = work / f"{name}.log"
    if log.exists():
        rec["training_progress"] = last_progress(log.read_text(errors="replace"))
    return rec


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("work", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--env", type=Path, default=None, help="the session's env.txt (GPU, driver, versions)")
    p.add_argument("--chapters", default="training rnn efficient_attention chain_of_thought gnn")
    p.add_argument("--profile", default="gpu")
    p.add_argument("--params", default="", help="the extra chapter parameters the session passed")
    p.add_argument("--concurrent", action="store_true", help="the chapters ran at once on one GPU")
    p.add_argument("--source-commit", default=None)
    p.add_argument("--note", default="")
    p.add_argument("--overwrite", action="store_true")
    a = p.parse_args(argv)
    if a.out.exists() and not a.overwrite:
        p.error(f"{a.out} exists; pass --overwrite to replace it")
    records = [chapter_record(a.work, c) for c in a.chapters.split()]
    env = a.env.read_text().strip().splitlines() if a.env else []
    machine = {}
    if len(env) >= 3:  # nvidia-smi's header and row, then "python torch cuda"
        gpu = [v.strip() for v in env[1].split(",")]
        py, torch_v, cuda = (env[2].split() + ["", "", ""])[:3]
        machine = {"gpu_name": gpu[0], "gpu_driver": gpu[2] if len(gpu) > 2 else "",
                   "torch_version": torch_v, "python_version": py, "cuda_version": cuda}
    params = {"profile": a.profile, "extra_parameters": a.params, "concurrent": a.concurrent,
              "chapters": a.chapters.split(), "note": a.note,
              "command": "bash scripts/gpu_session.sh; python benchmarks/gpu_summary.py"}
    extra = {"machine": env, **machine, "platform": "the GPU machine (summarised elsewhere from its files)",
             **({"source_commit": a.source_commit, "git_commit": a.source_commit} if a.source_commit else {})}
    return save_results(a.out, {"chapters": records}, params, "cuda", None, **extra)


if __name__ == "__main__":
    print(main())
