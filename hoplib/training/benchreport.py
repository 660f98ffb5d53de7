"""Summaries of the stored GPU training benchmark (Section 4.2 / Appendix G's grid at speed), for the chapter.

The file is written by ``benchmarks/bench_gpu.py`` (steps per second on the paper grid, share of the bf16 peak,
projected wall time of the grid) through :func:`hoplib._book.provenance.save_results`. Every summary names the
commit and date it was measured at.
"""

from __future__ import annotations

from typing import Any


def _check_record(record: Any) -> dict[str, Any]:
    if not isinstance(record, dict) or not {"data", "provenance", "parameters"} <= set(record):
        raise ValueError("record must be a results file read by hoplib._book.provenance.load_results "
                         "(keys 'data', 'provenance', 'parameters')")
    return record


def _origin(record: dict[str, Any]) -> str:
    prov = record["provenance"]
    commit = prov.get("source_commit") or prov.get("git_commit") or "unknown"
    return f"git {commit[:8]}, {str(prov.get('created_utc', '?'))[:10]}"


def gpu_summary(record: dict[str, Any]) -> list[str]:
    """Lines: the GPU and its peaks, one line per measurement (steps/s per model, model-steps/s, share of the
    peaks), the grid's projected wall time per strategy, and what was skipped."""
    record = _check_record(record)
    d = record["data"]
    gpu, peak = d["gpu"], d["peak"]
    sheet = f"{peak['datasheet']:.0f} TFLOP/s" if peak.get("datasheet") else "not in the table"
    lines = [f"{gpu.get('name', gpu.get('device', '?'))}: bf16 peak measured {peak['measured']:.1f} TFLOP/s, "
             f"datasheet {sheet} | {_origin(record)}" + ("" if d.get("complete") else " (incomplete run)")]
    for m in d["measurements"]:
        share = f"{m['fraction_of_measured_peak']:.1%} of measured peak"
        if m.get("fraction_of_datasheet_peak") is not None:
            share += f", {m['fraction_of_datasheet_peak']:.1%} of datasheet"
        procs = f" x {m['processes']} processes" if m.get("processes", 1) > 1 else ""
        lines.append(f"  {m['kind']:>12} L{m['depth']} m{m['d_model']} E={m['E']}{procs}: "
                     f"{m['steps_per_s']:.1f} steps/s per model, {m['model_steps_per_s']:.1f} model-steps/s, "
                     f"{m['tflops']:.2f} TFLOP/s ({share})")
    for name, v in d["projection"].items():
        if isinstance(v, dict) and "hours" in v:
            lines.append(f"  projected {name}: " + (f"{v['hours']:.2f} h" if v["hours"] is not None
                                                    else v.get("note", "not measured")))
    if d.get("skipped"):
        lines.append(f"  skipped or failed: {len(d['skipped'])} ({'; '.join(d['skipped'][:3])}"
                     + (", ..." if len(d["skipped"]) > 3 else "") + ")")
    return lines
