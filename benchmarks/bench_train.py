"""CPU training throughput: hoplib's GPT + on-device HopTask data vs HuggingFace GPT2Model + a Python generator.

The authors' configuration (paper-spec section 7): L = 6, m = 128, H = 4, batch 32, 99 tokens, their head
(final LayerNorm output used as logits over m classes), dropout 0.1, AdamW (lr 1e-4, weight decay 0.01) with
a linear warmup/decay schedule. The baseline builds every sample in Python, one at a time (letters with no
immediate repeats from ``random``, hop_k by the literal definition ``hoplib.tasks.hop_reference``), and
collates each batch with ``torch.tensor``, as a per-sample ``Dataset``/``DataLoader`` pipeline does.

Both sides are timed in alternating blocks (ours, theirs, ours, ...) so that load from other processes hits
both alike; the reported figure is the ratio of median steps per second. Run with ``OMP_NUM_THREADS=1`` for
a single-core figure. Writes ``results/training/bench_train_<attn>[_compiled].json`` with provenance.

    python benchmarks/bench_train.py [--blocks 4] [--steps 20] [--attn sdpa|eager]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from hoplib.models import authors_gpt, count_parameters
from hoplib.provenance import save_results
from hoplib.tasks import HopTask, hop_reference
from hoplib.train import fit

OUT_DIR = Path(__file__).resolve().parents[1] / "results" / "training"


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


def hf_steps_per_s(steps: int, task: HopTask, attn: str, state: dict) -> float:
    from transformers import GPT2Config, GPT2Model

    if "model" not in state:
        torch.manual_seed(0)
        cfg = GPT2Config(vocab_size=30, n_positions=100, n_embd=128, n_layer=6, n_head=4,
                         attn_implementation=attn)
        model = GPT2Model(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 1000))
        state.update(model=model, opt=opt, sched=sched, gen=python_samples(task, random.Random(0)))
        state["params"] = sum(p.numel() for p in model.parameters())
    model, opt, sched, gen = state["model"], state["opt"], state["sched"], state["gen"]
    model.train()
    t0 = time.perf_counter()
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
    return steps / (time.perf_counter() - t0)


def ours_steps_per_s(steps: int, task: HopTask, state: dict, compile: bool = False, dropout: float = 0.1) -> float:
    if "model" not in state:
        torch.manual_seed(0)
        state["model"] = authors_gpt(task, depth=6, d_model=128, heads=4)
        if dropout != 0.1:  # same weights and head, other dropout rate (0 lets SDPA use its fused CPU kernel)
            for mod in state["model"].modules():
                if isinstance(mod, torch.nn.Dropout):
                    mod.p = dropout
                if hasattr(mod, "dropout") and isinstance(mod.dropout, float):
                    mod.dropout = dropout
        state["seed"] = 0
    t0 = time.perf_counter()
    fit(state["model"], task, steps=steps, batch_size=32, lr=1e-4, warmup_steps=1000, seed=state["seed"],
        device="cpu", progress=False, compile=compile)
    state["seed"] += 1
    return steps / (time.perf_counter() - t0)


def main() -> dict:
    p = argparse.ArgumentParser()
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    p.add_argument("--compile", action="store_true", help="torch.compile our model (needs a C++ compiler)")
    p.add_argument("--ours-dropout", type=float, default=0.1,
                   help="dropout of our model (0.1 = the authors' and HF's default; 0 = the book's default)")
    a = p.parse_args()
    import transformers

    task = HopTask()  # N = 100: 99 tokens, k in 0..16, alphabet 4
    ours, theirs = {}, {}
    ours_steps_per_s(3, task, ours, a.compile, a.ours_dropout)  # warm-up both (allocations, lazy imports)
    hf_steps_per_s(3, task, a.attn, theirs)
    o, h = [], []
    for _ in range(a.blocks):
        o.append(ours_steps_per_s(a.steps, task, ours, a.compile, a.ours_dropout))
        h.append(hf_steps_per_s(a.steps, task, a.attn, theirs))
        print(f"block: ours {o[-1]:.2f} steps/s, HF {h[-1]:.2f} steps/s", flush=True)
    res = {"ours_steps_per_s": statistics.median(o), "hf_steps_per_s": statistics.median(h),
           "ratio": statistics.median(o) / statistics.median(h), "ours_blocks": o, "hf_blocks": h,
           "ours_parameters": count_parameters(ours["model"]), "hf_parameters": theirs["params"],
           "transformers_version": transformers.__version__, "torch_threads": torch.get_num_threads()}
    tag = (" (compiled)" if a.compile else "") + (f" (dropout {a.ours_dropout})" if a.ours_dropout != 0.1 else "")
    print(f"ours{tag} {res['ours_steps_per_s']:.2f} steps/s vs HF GPT2Model ({a.attn}) + Python generator "
          f"{res['hf_steps_per_s']:.2f} steps/s: ratio {res['ratio']:.2f}x "
          f"(threads={res['torch_threads']}, transformers {transformers.__version__})")
    suffix = ("_compiled" if a.compile else "") + (f"_ours-dropout{a.ours_dropout}" if a.ours_dropout != 0.1 else "")
    name = f"bench_train_{a.attn}{suffix}.json"
    params = {"config": "L=6, m=128, H=4, batch 32, 99 tokens, LN head; HF dropout 0.1", "blocks": a.blocks,
              "steps_per_block": a.steps, "hf_attn": a.attn, "ours_compiled": a.compile,
              "ours_dropout": a.ours_dropout}
    save_results(OUT_DIR / name, res, parameters=params, device="cpu")
    return res


if __name__ == "__main__":
    main()
