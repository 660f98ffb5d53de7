"""The table that closes the part of the book on lower bounds (Section 5 of the paper): for each architecture,
its cost per layer, what the paper proves about the depth it needs for hop_k or connectivity, and what this
book's stored runs measured. The measured column is read from the stored ``cpu`` runs of the four chapters; for
the depth against k of softmax, Performer, Longformer and recurrent models, from the matched runs that share the
training chapter's ``medium`` task and recipe."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hoplib._book.results import Stored, load_stored
from hoplib.lower_bounds.experiments import THRESHOLD, error_records, html_table, reach_table, reference_groups
from hoplib.lower_bounds.experiments import efficient_attention as eff_ex
from hoplib.lower_bounds.experiments import gnn as gnn_ex
from hoplib.lower_bounds.experiments import rnn as rnn_ex

COLUMNS = ("architecture", "cost per layer", "depth needed (theory)", "measured (stored cpu runs)")

THEORY = {
    "softmax": ("softmax attention (GPT-2-style transformer)", "O(N² m)",
                "⌈log₂ k⌉ + 2 layers suffice (Thm 4.2); Ω(log k) needed if Conjecture 2.4 holds and "
                "mH = O(k^{1−ε}) (Cor 4.3)"),
    "performer": ("kernel attention (Performer, m' random features)", "O(N m m')",
                  "L ≥ k unless m m' H p = Ω(N/k⁶) (Cor 5.3)"),
    "longformer": ("Longformer mask (window w, global every g)", "O((w + N/g) N m)",
                   "L ≥ k unless (w + N/(gk)) m H p = Ω(N/k⁶) (Cor 5.4)"),
    "rnn": ("multi-layer RNN (GRU, LSTM, Mamba-style), width m", "O(N m²)",
            "L ≥ k unless m = Ω(N/k⁶) (Cor 5.2), and L·m = Ω(N/k⁶) at every depth; k layers suffice "
            "(hand-built)"),
    "cot": ("1-layer transformer + chain of thought", "O(N² m), then O(N m) per generated token",
            "N_CoT ≥ k unless mHp = Ω(N/k⁶) (Cor 5.6); 2k − 1 pointer tokens suffice (hand-built, width O(N))"),
    "gnn": ("message-passing GNN (width m, on the graph's edges)", "O(|E| m²)",
            "connectivity: L ≥ D on the book's instances (locality); L√m = Ω̃(N^{1/4}) on a worst-case graph "
            "(Thm 5.1)"),
    "edge-list": ("transformer on the serialised edge list", "O(|E|² m)",
                  "connectivity: O(log D) layers at m = O(N^ε) (Cor 3.3, from an O(log D)-round MPC algorithm); "
                  "Ω(log D) if Conjecture 2.4 holds and mH = O(D^{1−ε}) (Cor 3.5)"),
    "edge-set": ("transformer on the edge set (one unmasked token per edge, trained to label components)",
                 "O(|E|² m)", "as the edge list: O(log D) layers (Cor 3.3); Ω(log D) under Conjecture 2.4 (Cor 3.5)"),
}


def reach_measured(reach: Mapping[str, Mapping[int, int]], where: str, threshold: float = THRESHOLD) -> str:
    """One cell of the measured column from :func:`hoplib.lower_bounds.experiments.reach_table` rows (one or
    more labelled groups): the largest K solved at each depth, e.g. ``"largest K with error ≤ 0.1 at every
    k ≤ K, by depth: GRU: L = 2, 3, 4: 1, 3, 6 (where)"``."""
    if not reach:
        raise ValueError("reach must hold at least one group")
    parts = []
    for label, row in reach.items():
        depths = sorted(row)
        parts.append(f"{label}: L = {', '.join(map(str, depths))}: {', '.join(str(row[d]) for d in depths)}")
    return f"largest K with error ≤ {threshold} at every k ≤ K, by depth: " + "; ".join(parts) + f" ({where})"


def _cot_measured(rows: Sequence[Mapping[str, Any]]) -> str:
    full = [r["error"] for r in rows if r["chain"] == "full"]
    none = [r["error"] for r in rows if r["chain"] == "none"]
    kmax = max(r["k"] for r in rows)
    return f"full chain: error ≤ {max(full):.3f} up to k={kmax}; no chain: error ≥ {min(none):.3f}"


def _trained(learned: Sequence[Mapping[str, Any]], threshold: float, model: str) -> str:
    parts = []
    for fam in dict.fromkeys(r["family"] for r in learned):
        for d in sorted({r["D"] for r in learned if r["family"] == fam and r["model"] == model}):
            tried = [r for r in learned if (r["family"], r["D"], r["model"]) == (fam, d, model)]
            ok = [r["depth"] for r in tried if r["accuracy"] >= threshold]
            deepest = max(r["depth"] for r in tried)
            parts.append(f"{fam} D={d}: {f'L={min(ok)}' if ok else f'none up to L={deepest}'}")
    return f"trained, smallest depth with accuracy ≥ {threshold}: " + "; ".join(parts)


def _gnn_measured(structure: Mapping[str, Any], learned: Sequence[Mapping[str, Any]], threshold: float,
                  model: str) -> str:
    trained = _trained(learned, threshold, model)
    if model == "gnn":
        return f"exact GNN: smallest depth = D for D ≤ {max(r['D'] for r in structure['exact'])}; {trained}"
    dmax = max(r["D"] for r in structure["doubling"])
    mpc = max(structure["mpc"], key=lambda r: (r["D"], r["iterations"]))
    return (f"doubling: ⌈log₂ D⌉ squarings up to D = {dmax}; the book's MPC protocol (hook and jump): "
            f"{mpc['iterations']} iterations at D = {mpc['D']}; {trained}")


def closing_rows(*, reach: Mapping[str, Mapping[str, Mapping[int, int]]], where: str,
                 cot_rows: Sequence[Mapping[str, Any]], structure: Mapping[str, Any],
                 learned: Sequence[Mapping[str, Any]], edges: Sequence[Mapping[str, Any]],
                 pairs: Sequence[Mapping[str, Any]] = (), gnn_threshold: float = 0.9) -> list[dict[str, str]]:
    """The rows of the closing table, one per architecture (keys :data:`COLUMNS`). ``reach`` holds, for
    ``"softmax"``, ``"performer"``, ``"longformer"`` and ``"rnn"``, the reach table of that architecture's
    models on one task (``where`` says which); ``edges`` and ``pairs`` are the edge-set transformer's records
    trained on edge labels and on edge and pair labels (:func:`hoplib.lower_bounds.experiments.gnn.edge_sweep`,
    parts ``edge`` and ``pair``)."""
    missing = [key for key in (*eff_ex.KINDS, "rnn") if key not in reach]
    if missing:
        raise ValueError(f"reach lacks {missing}")
    measured = {key: reach_measured(reach[key], where) for key in (*eff_ex.KINDS, "rnn")}
    measured["cot"] = _cot_measured(cot_rows)
    measured["gnn"] = _gnn_measured(structure, learned, gnn_threshold, "gnn")
    measured["edge-list"] = _gnn_measured(structure, learned, gnn_threshold, "transformer")
    measured["edge-set"] = "edge labels: " + _trained(edges, gnn_threshold, "edge-transformer")
    if pairs:
        measured["edge-set"] += ". Edge and pair labels: " + _trained(pairs, gnn_threshold, "edge-transformer")
    return [dict(zip(COLUMNS, (*THEORY[key], measured[key]), strict=True)) for key in THEORY]


def stored_reach() -> tuple[dict[str, dict[str, dict[int, int]]], str, list[Any]]:
    """The reach tables of the matched runs, all on the training chapter's ``medium`` task and recipe: its
    softmax transformers (best of the seeds at each depth), the efficient-attention chapter's Performer and
    Longformer models and the RNN chapter's GRUs and LSTMs; with the task in words and the stored runs."""
    eff_run, rnn_run = load_stored("efficient_attention/cpu/matched.json"), load_stored("rnn/cpu/matched.json")
    settings = eff_ex.PROFILES["cpu"]["matched"]
    tf_groups, medium = reference_groups(settings["grid"])
    tf = reach_table(tf_groups)
    best = {d: max(row[d] for row in tf.values()) for d in next(iter(tf.values()))}
    reach = {"softmax": {f"best of {len(tf)} seeds": best}}
    eff_recs, rnn_recs = error_records(eff_run.data), error_records(rnn_run.data)
    labels = {"performer": f"m' = {settings['n_features']}",
              "longformer": f"w = {settings['window']}, global position 0 only"}
    for kind, label in labels.items():
        reach[kind] = reach_table({label: [r for r in eff_recs if r.family == kind]})
    reach["rnn"] = reach_table({kind.upper(): [r for r in rnn_recs if r.family == kind]
                                for kind in rnn_ex.PROFILES["cpu"]["matched"]["kinds"]})
    where = (f"N = {settings['seq_len']}, k ≤ {settings['max_hops']}, 4 letters, width {settings['widths'][0]}, "
             f"the training chapter's {settings['grid']} recipe")
    return reach, where, [medium, eff_run, rnn_run]


def stored_closing_rows() -> tuple[list[dict[str, str]], list[Any]]:
    """:func:`closing_rows` from the stored ``cpu`` runs of the four chapters and the training chapter's
    ``medium`` sweep; also returns those runs (each with a ``provenance_html()``)."""
    files = {"cot": "chain_of_thought/cpu/errors.json", "structure": "gnn/cpu/depth_vs_diameter.json",
             "learned": "gnn/cpu/learned.json", "edges": "gnn/cpu/edge_sweep.json",
             "pairs": "gnn/cpu/pair_sweep.json"}
    stored = {key: load_stored(name) for key, name in files.items()}
    reach, where, runs = stored_reach()
    rows = closing_rows(reach=reach, where=where, cot_rows=stored["cot"].data["rows"],
                        structure=stored["structure"].data, learned=stored["learned"].data,
                        edges=stored["edges"].data, pairs=stored["pairs"].data,
                        gnn_threshold=gnn_ex.PROFILES["cpu"]["threshold"])
    return rows, [*runs, *stored.values()]


def sources_html(sources: Sequence[Any]) -> str:
    """One collapsed provenance block per stored run behind the table (from :func:`stored_closing_rows`),
    each naming its file or folder."""
    if not sources:
        raise ValueError("sources must be a non-empty list of stored runs")
    return "".join(s.provenance_html(f"Provenance of results/{s.name}") if isinstance(s, Stored)
                   else s.provenance_html() for s in sources)


def to_html(rows: Sequence[Mapping[str, str]]) -> str:
    """The rows as an HTML table (escaped)."""
    if not rows:
        raise ValueError("rows must be a non-empty list of dicts")
    return html_table(COLUMNS, [[row[c] for c in COLUMNS] for row in rows])


__all__ = ["COLUMNS", "THEORY", "closing_rows", "reach_measured", "sources_html", "stored_closing_rows", "stored_reach",
           "to_html"]
