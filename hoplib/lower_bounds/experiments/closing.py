"""The table that closes the part of the book on lower bounds (Section 5 of the paper): for each architecture,
its cost per layer, what the paper proves about the depth it needs for hop_k or connectivity, and what this
book's stored runs measured. The measured column is read from the stored ``cpu`` runs of the four chapters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hoplib._book.results import Stored, load_stored
from hoplib.lower_bounds.experiments import depth_needed, error_records, html_table, part_settings, solved_up_to
from hoplib.lower_bounds.experiments import efficient_attention as eff_ex
from hoplib.lower_bounds.experiments import gnn as gnn_ex
from hoplib.lower_bounds.experiments import rnn as rnn_ex
from hoplib.report import ErrorRecord

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


def _attention_measured(records: Sequence[ErrorRecord], settings: Mapping[str, Any], kind: str,
                        threshold: float) -> str:
    extra = {"softmax": "", "performer": f", m'={settings['n_features']}",
             "longformer": f", w={settings['window']}, g={settings['global_every']}"}[kind]
    kmax = max(r.k for r in records)
    where = f"(N={settings['seq_len']}, m={settings['d_model']}{extra}, depths {settings['depths']}, k ≤ {kmax})"
    solved = {d: solved_up_to(records, kind, d, threshold) for d in settings["depths"]}
    best = max(solved.values())
    if best == 0:
        return f"error > {threshold} already at k=1 {where}"
    depth = min(d for d, s in solved.items() if s == best)
    return f"error ≤ {threshold} up to k={best} at depth {depth} {where}"


def _rnn_measured(records: Sequence[ErrorRecord], threshold: float) -> str:
    top = max(r.depth for r in records)
    need = depth_needed([r for r in records if r.family == "gru"], "gru", threshold)
    parts = [f"k={k}: {need[k] if need[k] is not None else f'>{top}'}" for k in sorted(need) if k >= 1]
    return f"GRU, smallest depth with error ≤ {threshold} (depths ≤ {top}): " + ", ".join(parts)


def _cot_measured(rows: Sequence[Mapping[str, Any]]) -> str:
    full = [r["error"] for r in rows if r["chain"] == "full"]
    none = [r["error"] for r in rows if r["chain"] == "none"]
    kmax = max(r["k"] for r in rows)
    return f"full chain: error ≤ {max(full):.3f} up to k={kmax}; no chain: error ≥ {min(none):.3f}"


def _trained(learned: Sequence[Mapping[str, Any]], threshold: float, model: str) -> str:
    parts = []
    for fam in dict.fromkeys(r["family"] for r in learned):
        for d in sorted({r["D"] for r in learned if r["family"] == fam and r["model"] == model}):
            ok = [r["depth"] for r in learned if (r["family"], r["D"], r["model"]) == (fam, d, model)
                  and r["accuracy"] >= threshold]
            parts.append(f"{fam} D={d}: {f'L={min(ok)}' if ok else 'none'}")
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


def closing_rows(*, eff_records: Sequence[ErrorRecord], eff_settings: Mapping[str, Any],
                 rnn_records: Sequence[ErrorRecord], cot_rows: Sequence[Mapping[str, Any]],
                 structure: Mapping[str, Any], learned: Sequence[Mapping[str, Any]],
                 edges: Sequence[Mapping[str, Any]], pairs: Sequence[Mapping[str, Any]] = (),
                 threshold: float = 0.1, gnn_threshold: float = 0.9) -> list[dict[str, str]]:
    """The rows of the closing table, one per architecture (keys :data:`COLUMNS`); ``edges`` and ``pairs``
    are the edge-set transformer's records trained on edge labels and on edge and pair labels
    (:func:`hoplib.lower_bounds.experiments.gnn.edge_sweep`, parts ``edge`` and ``pair``)."""
    measured = {kind: _attention_measured(eff_records, eff_settings, kind, threshold) for kind in eff_ex.KINDS}
    measured["rnn"] = _rnn_measured(rnn_records, threshold)
    measured["cot"] = _cot_measured(cot_rows)
    measured["gnn"] = _gnn_measured(structure, learned, gnn_threshold, "gnn")
    measured["edge-list"] = _gnn_measured(structure, learned, gnn_threshold, "transformer")
    measured["edge-set"] = "edge labels: " + _trained(edges, gnn_threshold, "edge-transformer")
    if pairs:
        measured["edge-set"] += ". Edge and pair labels: " + _trained(pairs, gnn_threshold, "edge-transformer")
    return [dict(zip(COLUMNS, (*THEORY[key], measured[key]), strict=True)) for key in THEORY]


def stored_closing_rows() -> tuple[list[dict[str, str]], list[Stored]]:
    """:func:`closing_rows` from the stored ``cpu`` runs of the four chapters; also returns those runs."""
    files = {"eff": "efficient_attention/cpu/training.json", "rnn": "rnn/cpu/training.json",
             "cot": "chain_of_thought/cpu/errors.json", "structure": "gnn/cpu/depth_vs_diameter.json",
             "learned": "gnn/cpu/learned.json", "edges": "gnn/cpu/edge_sweep.json",
             "pairs": "gnn/cpu/pair_sweep.json"}
    stored = {key: load_stored(name) for key, name in files.items()}
    rows = closing_rows(eff_records=error_records(stored["eff"].data),
                        eff_settings=part_settings(stored["eff"].record["parameters"], "eff"),
                        rnn_records=error_records(rnn_ex.best_lr(stored["rnn"].data)),
                        cot_rows=stored["cot"].data["rows"],
                        structure=stored["structure"].data, learned=stored["learned"].data,
                        edges=stored["edges"].data, pairs=stored["pairs"].data,
                        gnn_threshold=gnn_ex.PROFILES["cpu"]["threshold"])
    return rows, list(stored.values())


def to_html(rows: Sequence[Mapping[str, str]]) -> str:
    """The rows as an HTML table (escaped)."""
    if not rows:
        raise ValueError("rows must be a non-empty list of dicts")
    return html_table(COLUMNS, [[row[c] for c in COLUMNS] for row in rows])


__all__ = ["COLUMNS", "THEORY", "closing_rows", "stored_closing_rows", "to_html"]
