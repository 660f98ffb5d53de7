"""CPU training throughput: hoplib's GPT + on-device HopTask data vs HuggingFace GPT2Model + a Python generator.

The authors' configuration (paper-spec section 7): L = 6, m = 128, H = 4, batch 32, 99 tokens, their head
(final LayerNorm output used as logits over m classes), dropout 0.1 at every dropout site on both sides,
cross-entropy over all positions, AdamW (lr 1e-4, weight decay 0.01) with a linear warmup schedule, float32,
the same torch thread count (one process). The baseline builds every sample in Python, one at a time
(letters with no immediate repeats from ``random``, hop_k by the literal definition
``hoplib.tasks.hop_reference``), and collates each batch with ``torch.tensor``, as a per-sample
``Dataset``/``DataLoader`` pipeline does; it trains ``transformers.GPT2Model`` with torch's AdamW.

Our side is ``hoplib.train.fit`` with one of three implementations (``--impl``):

* ``fused`` (default): ``fit(..., fused=True)``, the kernels of :mod:`hoplib.fast` (fused dropout with a
  counter-based hash RNG, fused GELU, causal attention kernels with the softmax and its dropout fused in; the
  linear layers' matrix products unchanged) and AdamW's fused implementation. Same maths; the dropout masks
  come from another random stream.
* ``eager``: ``fit(...)`` with the model's own forward (SDPA) and torch's default AdamW.
* ``compiled``: ``fit(..., compile=True)``, ``torch.compile`` of the model (inductor, CPU).

Steps per second are measured after a warm-up call (3 steps, which pays the one-off costs: kernel build or
load for ``fused``, compilation for ``compiled``, allocations and lazy imports for all), for both sides, in
short alternating blocks (pairs of ours and theirs, in alternating order; by default 3 rounds of 20 pairs of
3 steps each). On a virtual machine the speed of the same code drifts over tens of seconds (the host's load,
not ours: it shows in process CPU time too; the stored ``hf_blocks`` show by how much), so short paired blocks
see the same conditions.
Reported: ``ratio`` (the headline: steps per second over all timed blocks, ours over theirs, i.e. their total
time over ours for the same number of steps), the same for each round (``round_ratios``: how much one run of
``--blocks`` pairs can vary), ``median_pair_ratio`` and the range of the per-pair ratios, the ratio of median
block speeds (``ratio_of_medians``), and the same in process CPU time (``ratio_cpu_time``; with one thread
this is the compute time, without the time slices other processes take). The one-off cost is reported
separately: ``warmup_s`` (the first 3-step call) and, for ``fused``, the time to compile the C kernels into an
empty cache folder.

Before timing, the script checks that our implementation computes the same losses as the eager model: with
dropout 0 (deterministic) both train a copy of the same initial model for a few steps on the same batches and
the largest loss difference is recorded (``equivalence``). Run with ``OMP_NUM_THREADS=1`` for a single-core
figure. Writes ``results/training/bench_train_<attn>[_<impl>][_ours-dropout<p>].json`` with provenance.

    OMP_NUM_THREADS=1 python benchmarks/bench_train.py                 # fused, the headline figure
    OMP_NUM_THREADS=1 python benchmarks/bench_train.py --impl eager    # the plain model
    OMP_NUM_THREADS=1 python benchmarks/bench_train.py --impl compiled # torch.compile (needs a C++ compiler)
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from hoplib._book.provenance import save_results
from hoplib.models import count_parameters, gpt_for_task
from hoplib.tasks import HopTask, hop_reference
from hoplib.train import fit

OUT_DIR = Path(__file__).resolve().parents[1] / "results" / "training"
WARMUP_STEPS = 3
EQUIV_STEPS = 5


def python_samples(task: HopTask, rng: random.Random):
    """An endless per-sample generator in plain Python (the authors' style of data pipeline)."""
    v = task.vocab
    n = task.seq_len - 2
    while True:
        k = rng.randint(0, task.max_hops)
        letters = [rng.randrange(task.alphabet_size)]
        for _ in range(n - 1):
            letters.append((letters[-1] + rng.randrange(1, task.alphabet_size)) % task.alphabet_size)
        ans = hop_reference(letters, k)
        inputs = [k] + [v.first_letter + c for c in letters]
        targets = [v.blank] + [v.no_answer if a < 0 else v.first_letter + a for a in ans]
        yield inputs, targets


def hf_steps_per_s(steps: int, task: HopTask, attn: str, state: dict) -> tuple[float, float]:
    from transformers import GPT2Config, GPT2Model

    if "model" not in state:
        torch.manual_seed(0)
        cfg = GPT2Config(vocab_size=30, n_positions=100, n_embd=128, n_layer=6, n_head=4,
                         attn_implementation=attn)  # resid/embd/attn dropout: GPT2Config's default 0.1
        model = GPT2Model(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 1000))
        state.update(model=model, opt=opt, sched=sched, gen=python_samples(task, random.Random(0)))
        state["params"] = sum(p.numel() for p in model.parameters())
        state["dropout"] = {"resid": cfg.resid_pdrop, "embd": cfg.embd_pdrop, "attn": cfg.attn_pdrop}
    model, opt, sched, gen = state["model"], state["opt"], state["sched"], state["gen"]
    model.train()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        batch = [next(gen) for _ in range(32)]
        x = torch.tensor([b[0] for b in batch])
        y = torch.tensor([b[1] for b in batch])
        logits = model(input_ids=x).last_hidden_state
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    return steps / (time.perf_counter() - t0), steps / (time.process_time() - c0)


def our_model(task: HopTask, dropout: float):
    """The authors' model (``hoplib.models.authors_gpt``: 30 rows, 100 positions, LayerNorm head), any dropout."""
    return gpt_for_task(task, depth=6, d_model=128, heads=4, dropout=dropout, head="layernorm",
                        vocab_size=max(30, task.vocab_size), n_positions=max(100, task.length))


def impl_kwargs(impl: str) -> dict:
    return {"compile": impl == "compiled", "fused": impl == "fused"}


def ours_steps_per_s(steps: int, task: HopTask, state: dict, impl: str, dropout: float) -> tuple[float, float]:
    if "model" not in state:
        torch.manual_seed(0)
        state["model"] = our_model(task, dropout)
        state["seed"] = 0
    t0, c0 = time.perf_counter(), time.process_time()
    hist = fit(state["model"], task, steps=steps, batch_size=32, lr=1e-4, warmup_steps=1000, seed=state["seed"],
               device="cpu", progress=False, **impl_kwargs(impl))
    if impl == "fused" and not hist["fused"]:
        raise RuntimeError("the fused kernels did not run (see hoplib.fast.status())")
    state["seed"] += 1
    return steps / (time.perf_counter() - t0), steps / (time.process_time() - c0)


def equivalence(task: HopTask, impl: str) -> dict:
    """Losses of ``impl`` against the eager model over a few steps, dropout 0, same initial weights and data."""
    torch.manual_seed(1)
    init = our_model(task, 0.0).state_dict()
    losses = {}
    for name in ("eager", impl):
        model = our_model(task, 0.0)
        model.load_state_dict(init)
        hist = fit(model, task, steps=EQUIV_STEPS, batch_size=32, lr=1e-3, warmup_steps=0, seed=0, device="cpu",
                   progress=False, **impl_kwargs(name))
        losses[name] = hist["loss"]
    diff = max(abs(a - b) for a, b in zip(losses["eager"], losses[impl], strict=True))
    return {"dropout": 0.0, "steps": EQUIV_STEPS, "lr": 1e-3, "eager_losses": losses["eager"],
            f"{impl}_losses": losses[impl], "max_abs_loss_difference": diff, "tolerance": 1e-4,
            "equal_within_tolerance": diff <= 1e-4}


def kernel_build_time() -> dict:
    """Compile hoplib.fast's kernels into an empty cache folder and time it (the one-off cost of ``fused``)."""
    from hoplib import fast

    with tempfile.TemporaryDirectory() as tmp:
        old = os.environ.get("HOPLIB_CACHE")
        os.environ["HOPLIB_CACHE"] = tmp
        fast._STATE.update(tried=False, lib=None, error=None)
        try:
            st = fast.status()
        finally:
            if old is None:
                del os.environ["HOPLIB_CACHE"]
            else:
                os.environ["HOPLIB_CACHE"] = old
    if not st["available"]:
        raise RuntimeError(f"hoplib.fast kernels unavailable: {st['error']}")
    return {"kernel_compile_s": st["load_time_s"]}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser()
    p.add_argument("--blocks", type=int, default=20, help="pairs of timed blocks (ours, theirs) per round")
    p.add_argument("--rounds", type=int, default=3, help="rounds of --blocks pairs; each gets its own ratio")
    p.add_argument("--steps", type=int, default=3, help="training steps per block and side")
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="HF GPT2Model attention")
    p.add_argument("--impl", default="fused", choices=["fused", "eager", "compiled"], help="our implementation")
    p.add_argument("--ours-dropout", type=float, default=0.1,
                   help="dropout of our model (0.1 = the authors' and HF's default; 0 is NOT a like-for-like run)")
    a = p.parse_args(argv)
    import transformers

    task = HopTask()  # N = 100: 99 tokens, k in 0..16, alphabet 4
    one_off = kernel_build_time() if a.impl == "fused" else {}
    equiv = equivalence(task, a.impl) if a.impl != "eager" else None
    if equiv is not None:
        print(f"equivalence with eager (dropout 0, {EQUIV_STEPS} steps): max |loss difference| "
              f"{equiv['max_abs_loss_difference']:.2e}", flush=True)
        if not equiv["equal_within_tolerance"]:
            raise RuntimeError(f"{a.impl} does not reproduce the eager losses: {equiv}")
    ours, theirs = {}, {}
    load = [os.getloadavg()[0] if hasattr(os, "getloadavg") else None]
    t0 = time.perf_counter()
    ours_steps_per_s(WARMUP_STEPS, task, ours, a.impl, a.ours_dropout)
    one_off["ours_warmup_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    hf_steps_per_s(WARMUP_STEPS, task, a.attn, theirs)
    one_off["hf_warmup_s"] = time.perf_counter() - t0
    o, h, oc, hc = [], [], [], []
    for i in range(a.blocks * a.rounds):  # pair i: ours then theirs for even i, theirs then ours for odd i
        for side in ("ours", "hf") if i % 2 == 0 else ("hf", "ours"):
            if side == "ours":
                wall, cpu = ours_steps_per_s(a.steps, task, ours, a.impl, a.ours_dropout)
                o.append(wall)
                oc.append(cpu)
            else:
                wall, cpu = hf_steps_per_s(a.steps, task, a.attn, theirs)
                h.append(wall)
                hc.append(cpu)
        print(f"block: ours {o[-1]:.3f} steps/s (CPU time {oc[-1]:.3f}), HF {h[-1]:.3f} steps/s (CPU time "
              f"{hc[-1]:.3f}), ratio {o[-1] / h[-1]:.2f} (CPU time {oc[-1] / hc[-1]:.2f})", flush=True)
    load.append(os.getloadavg()[0] if hasattr(os, "getloadavg") else None)
    mo, mh = statistics.median(o), statistics.median(h)
    moc, mhc = statistics.median(oc), statistics.median(hc)
    pairs = [x / y for x, y in zip(o, h, strict=True)]
    pairs_cpu = [x / y for x, y in zip(oc, hc, strict=True)]
    total = sum(1 / y for y in h) / sum(1 / x for x in o)  # their time / our time, equal steps per block
    total_cpu = sum(1 / y for y in hc) / sum(1 / x for x in oc)
    rounds = [sum(1 / y for y in h[r:r + a.blocks]) / sum(1 / x for x in o[r:r + a.blocks])
              for r in range(0, len(o), a.blocks)]
    one_off["ours_one_off_s"] = max(0.0, one_off["ours_warmup_s"] - WARMUP_STEPS / mo)
    one_off["hf_one_off_s"] = max(0.0, one_off["hf_warmup_s"] - WARMUP_STEPS / mh)
    res = {"ratio": total, "round_ratios": rounds, "median_pair_ratio": statistics.median(pairs),
           "pair_ratio_range": [min(pairs), max(pairs)],
           "ratio_of_medians": mo / mh, "ours_steps_per_s": len(o) / sum(1 / x for x in o),
           "hf_steps_per_s": len(h) / sum(1 / y for y in h), "block_ratios": pairs, "ours_blocks": o, "hf_blocks": h,
           "ratio_cpu_time": total_cpu, "median_pair_ratio_cpu_time": statistics.median(pairs_cpu),
           "ours_steps_per_cpu_s": moc, "hf_steps_per_cpu_s": mhc, "block_ratios_cpu_time": pairs_cpu,
           "ours_blocks_cpu_time": oc, "hf_blocks_cpu_time": hc, "load_average_1min_before_after": load,
           "one_off": one_off, "equivalence": equiv,
           "ours_parameters": count_parameters(ours["model"]), "hf_parameters": theirs["params"],
           "hf_dropout": theirs["dropout"], "ours_dropout": a.ours_dropout,
           "transformers_version": transformers.__version__, "torch_threads": torch.get_num_threads()}
    tag = f" ({a.impl})" + (f" (dropout {a.ours_dropout})" if a.ours_dropout != 0.1 else "")
    print(f"ours{tag} {res['ours_steps_per_s']:.3f} steps/s vs HF GPT2Model ({a.attn}) + Python generator "
          f"{res['hf_steps_per_s']:.3f} steps/s: ratio {total:.2f}x (rounds: {', '.join(f'{r:.2f}' for r in rounds)}; "
          f"pairs: median {res['median_pair_ratio']:.2f}, "
          f"range {min(pairs):.2f}-{max(pairs):.2f}); per CPU second {total_cpu:.2f}x "
          f"(threads={res['torch_threads']}, transformers {transformers.__version__}); "
          f"one-off: {', '.join(f'{k} {v:.2f}' for k, v in one_off.items())}")
    suffix = ("" if a.impl == "eager" else f"_{a.impl}") + \
        (f"_ours-dropout{a.ours_dropout}" if a.ours_dropout != 0.1 else "")
    name = f"bench_train_{a.attn}{suffix}.json"
    params = {"config": "L=6, m=128, H=4, batch 32, 99 tokens, LN head, AdamW lr 1e-4 wd 0.01, float32; "
                        "HF dropout 0.1 (resid, embd, attn)",
              "blocks": a.blocks, "rounds": a.rounds, "steps_per_block": a.steps, "hf_attn": a.attn,
              "ours_impl": a.impl,
              "ours_dropout": a.ours_dropout, "warmup_steps_before_timing": WARMUP_STEPS,
              "timing": "steps/s after a warm-up call on both sides, short alternating blocks; ratio = their total "
                        "time / our total time for equal steps; also per-pair ratios, ratio of median block "
                        "speeds, and process CPU time (insensitive to time slices lost to other processes)",
              "command": " ".join(["python benchmarks/bench_train.py", *(sys.argv[1:] if argv is None else argv)])}
    save_results(OUT_DIR / name, res, parameters=params, device="cpu")
    return res


if __name__ == "__main__":
    main()
