"""The measurements of the chapter on chain of thought (Definition 5.5 and Corollary 5.6 of the paper): the
one-layer blackboard reduction run on a real GPT, the hand-built one-layer transformer that follows the full
pointer chain, and one-layer GPTs trained with no chain, half a chain and the full chain."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from hoplib.lower_bounds import cot

TRAIN_KEYS = ("seq_len", "alphabet_size", "max_hops", "d_model", "heads", "steps", "batch_size", "lr",
              "warmup_steps", "n_eval")
_BUILD_KEYS = ("build_seq_len", "build_max_hops", "build_samples", "coldness")

PROFILES: dict[str, dict[str, Any]] = {
    "quick": {"seq_len": 12, "alphabet_size": 4, "max_hops": 3, "d_model": 64, "heads": 4, "steps": 600,
              "batch_size": 64, "lr": 0.003, "warmup_steps": 50, "n_eval": 200, "build_seq_len": 40,
              "build_max_hops": 8, "build_samples": 200, "coldness": [0.5, 1.0, 2.0, 4.0, 8.0, 30.0]},
    "cpu": {"seq_len": 20, "alphabet_size": 4, "max_hops": 4, "d_model": 64, "heads": 4, "steps": 2500,
            "batch_size": 64, "lr": 0.003, "warmup_steps": 50, "n_eval": 500, "build_seq_len": 60,
            "build_max_hops": 12, "build_samples": 200, "coldness": [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]},
    "paper": {"seq_len": 100, "alphabet_size": 4, "max_hops": 8, "d_model": 128, "heads": 4, "steps": 20000,
              "batch_size": 64, "lr": 0.003, "warmup_steps": 500, "n_eval": 1000, "build_seq_len": 100,
              "build_max_hops": 16, "build_samples": 1000, "coldness": [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]},
}


def _need(settings: Mapping[str, Any], keys: Sequence[str]) -> None:
    missing = [key for key in keys if key not in settings]
    if missing:
        raise ValueError(f"settings lack {missing}")


def protocol_check(settings: Mapping[str, Any], *, seed: int = 0,
                   device: str | torch.device = "cpu") -> dict[str, Any]:
    """Run greedy decoding of a freshly initialised one-layer GPT on one full-chain prompt with k =
    ``max_hops`` both directly and as the blackboard protocol of Corollary 5.6 with k players
    (:func:`hoplib.lower_bounds.cot.simulate_cot_protocol`); report whether the tokens agree and the bits
    posted against :func:`~hoplib.lower_bounds.cot.cot_protocol_bits`."""
    _need(settings, ("seq_len", "alphabet_size", "max_hops", "d_model", "heads"))
    k = settings["max_hops"]
    task = cot.CotTask(seq_len=settings["seq_len"], alphabet_size=settings["alphabet_size"], max_hops=k,
                       chain="full")
    torch.manual_seed(seed)
    model = cot.cot_model(task, d_model=settings["d_model"], heads=settings["heads"]).to(device)
    batch = task.sample(1, k=k, seed=seed, device=device)
    n_new = cot.chain_length(k, "full") + 1
    tokens, _, bits = cot.simulate_cot_protocol(model, batch.prompt[0], n_new, k)
    direct = cot.greedy_decode(model, batch.prompt, n_new)[0].tolist()
    formula = cot.cot_protocol_bits(n_new, k, settings["d_model"], settings["heads"], task.vocab_size)
    return {"players": k, "rounds": n_new, "tokens_equal": tokens == direct, "bits": bits, "formula": formula}


def chain_lengths(ks: Sequence[int]) -> list[dict[str, Any]]:
    """For each chain format: N_CoT at every k of ``ks`` and the most dependent lookups one token needs."""
    return [{"chain": chain, **{f"k={k}": cot.chain_length(k, chain) for k in ks},
             "max lookups/token": max(max(cot.lookups_per_token(k, chain)) for k in ks)} for chain in cot.CHAINS]


def construction(settings: Mapping[str, Any], *, device: str | torch.device = "cpu") -> tuple[Any, Any]:
    """The hand-built :class:`~hoplib.lower_bounds.cot.CotConstruction` for the full chain on prompts of
    ``build_seq_len`` tokens, k = 1..``build_max_hops``, at the coldest softmax of ``coldness``; and its task."""
    _need(settings, _BUILD_KEYS)
    task = cot.CotTask(seq_len=settings["build_seq_len"], alphabet_size=4, max_hops=settings["build_max_hops"],
                       min_hops=1, chain="full")
    return cot.CotConstruction(task, coldness=float(max(settings["coldness"]))).to(device), task


def construction_errors(settings: Mapping[str, Any], *, seed: int = 0,
                        device: str | torch.device = "cpu") -> dict[str, float]:
    """Greedy decoding with :func:`construction` on ``build_samples`` inputs per k: the worst answer error
    over k and the smallest share of exactly written chains."""
    model, task = construction(settings, device=device)
    errs = cot.cot_errors(model, task, n_samples=settings["build_samples"], seed=seed, device=device)
    return {"worst_error": max(r["error"] for r in errs.values()),
            "min_chain_exact": min(r["chain_exact"] for r in errs.values())}


def coldness_sweep(settings: Mapping[str, Any], *, seed: int = 0,
                   device: str | torch.device = "cpu") -> dict[float, float]:
    """The construction's error on hop_k at k = ``build_max_hops`` for each softmax coldness of ``coldness``
    (Lemma A.2: a warm softmax blurs the lookups)."""
    model, task = construction(settings, device=device)
    k = settings["build_max_hops"]
    out = {}
    for c in settings["coldness"]:
        model.coldness = float(c)
        errs = cot.cot_errors(model, task, ks=[k], n_samples=settings["build_samples"], seed=seed, device=device)
        out[float(c)] = errs[k]["error"]
    return out


def experiment(settings: Mapping[str, Any], *, seed: int = 0, device: str | torch.device = "auto",
               progress: bool = False) -> list[dict[str, Any]]:
    """:func:`hoplib.lower_bounds.cot.run_cot_experiment` (one one-layer GPT per chain format) with the
    training settings of a profile."""
    _need(settings, TRAIN_KEYS)
    return cot.run_cot_experiment(**{key: settings[key] for key in TRAIN_KEYS}, seed=seed, device=device,
                                  progress=progress)


def errors_by_chain(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[int, float]]:
    """``{chain: {k: error}}`` from :func:`experiment` rows."""
    out: dict[str, dict[int, float]] = {}
    for r in rows:
        out.setdefault(r["chain"], {})[int(r["k"])] = float(r["error"])
    missing = [c for c in cot.CHAINS if c not in out]
    if missing:
        raise ValueError(f"rows lack the chain formats {missing}")
    return out


def plot_errors(rows: Sequence[Mapping[str, Any]], title: str = ""):
    """:func:`hoplib.lower_bounds.cot.plot_cot_errors` in a figure of its own, with a title; returns it."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    cot.plot_cot_errors(list(rows), ax=ax)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


__all__ = ["PROFILES", "TRAIN_KEYS", "chain_lengths", "coldness_sweep", "construction", "construction_errors",
           "errors_by_chain", "experiment", "plot_errors", "protocol_check"]
