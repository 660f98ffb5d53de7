"""GPU training throughput on the paper's grid (Section 4.2, Appendix G): steps/s, TFLOP/s, share of bf16 peak.

For every architecture of ``hoplib.grids.grid("paper")`` (L = 2..6, (m, H) in {(128, 4), (256, 8)}, N = 100,
batch 32, the authors' LayerNorm head, dropout 0.1; models built by ``RunConfig.init_model`` as the sweep
builds them) it times real training steps of ``hoplib.train.fit`` (one model; bf16 autocast and, on CUDA,
AdamW's fused kernel happen inside) and of ``hoplib.train.fit_ensemble`` (E stacked models), after a warm-up
call, from the training loop's own clock (which ends on a host copy of the losses, i.e. after the GPU has
finished). Fresh samples every step (the costlier data regime). Then, as the budget allows: E models side by
side in P processes (each its own ``fit_ensemble``, timed together after a file barrier) and
``fit(compile=True)``. ``scripts/run_training.py --ensemble`` trains a group of one model (m = 256 in the paper grid)
with ``fit``, so such groups are projected at ``fit``'s speed.

Per measurement: steps/s per model, model-steps/s (= E x steps/s, summed over processes), TFLOP/s from
:func:`train_flops_per_step` (matrix products only) and that as a fraction of the GPU's dense bf16
peak, both the datasheet's (``DATASHEET_BF16_TFLOPS``) and one measured here with a large bf16 matrix product.
Then the paper grid's projected wall time (its runs x their steps / measured throughput): one run at a time
(``hoplib.grids`` without ``--ensemble``), one ensemble per architecture (``--ensemble``), and those ensembles
in P processes at once (e.g. P tasks of an ``--ensemble --slurm`` array sharing a GPU; assumes every architecture
slows down as much as the one measured).

The results file is rewritten (atomically, with provenance) after every measurement, so a run stopped by a
time limit keeps what it measured (``"complete": false``).

    python benchmarks/bench_gpu.py --device cuda --budget-s 300   # writes results/training/bench_gpu_cuda.json
    OMP_NUM_THREADS=1 python benchmarks/bench_gpu.py --tiny --device cpu --out /tmp/b.json   # smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from hoplib import grids
from hoplib.device import get_device
from hoplib.grids import Grid
from hoplib.models import count_parameters
from hoplib.results import save_results
from hoplib.train import RunConfig, fit, fit_ensemble

ROOT = Path(__file__).resolve().parents[1]
# Dense (no 2:4 sparsity) bf16 tensor-core peaks in TFLOP/s from NVIDIA's datasheets (which quote sparse
# figures, twice these): H100/H200 SXM 1979/2, H100 PCIe 1513/2, H100/H200 NVL 1671/2 (nvidia.com/h100, /h200),
# A100 624/2, A10 250/2, L4 242/2 (~121), L40 362/2, L40S 733/2; T4 (65) and V100 SXM2 (125) have no bf16: fp16.
DATASHEET_BF16_TFLOPS = {"H200 NVL": 835.0, "H200": 989.4, "H100 NVL": 835.0, "H100 PCIe": 756.0, "H100": 989.4,
                         "A100": 312.0, "A10": 125.0, "L40S": 362.0, "L40": 181.0, "L4": 121.0, "T4": 65.0,
                         "V100": 125.0}
TINY_GRID = Grid(depths=(1, 2), widths=((16, 2), (32, 4)), n_trains=(64, None), exclude=((32, 64),),
                 settings=dict(seq_len=12, max_hops=3, steps=1000, batch_size=8, head="layernorm", dropout=0.1))


# --------------------------------------------------------------------------- FLOP count
# The standard count (Kaplan et al. 2020; Chinchilla, Appendix F; PaLM, Appendix B): an (a x b) by (b x c)
# product costs 2abc FLOPs, so a forward pass over D = B * T tokens costs 2 * N_mm * D + L * 2 * 2 * B * T^2 * m,
# where N_mm counts the weights in matrix products (12 m^2 per layer: QKV 3m^2, attention output m^2, MLP 8m^2;
# plus the linear unembedding m * C) and the second term is Q K^T and A V over the full T x T square (as SDPA's
# kernels and torch.utils.flop_counter count it). Backward costs twice the forward: a step is 3 x forward.
# Left out: biases, LayerNorm, GELU, softmax, dropout, embeddings, the loss and the optimiser (a few percent).
def matmul_parameters(config) -> int:
    """N_mm: weights of ``config``'s model (a GPTConfig, or a GPT / GPTEnsemble) that enter matrix products."""
    config = _config(config)
    unembed = config.d_model * config.num_classes if config.head == "linear" else 0
    return config.depth * 12 * config.d_model**2 + unembed


def forward_flops(config, batch_size: int, seq_len: int) -> int:
    """Matrix-product FLOPs of one forward pass over ``batch_size`` sequences of ``seq_len`` tokens."""
    config = _config(config)
    attention = config.depth * 4 * batch_size * seq_len**2 * config.d_model
    return 2 * matmul_parameters(config) * batch_size * seq_len + attention


def train_flops_per_step(config, batch_size: int, seq_len: int) -> int:
    """Matrix-product FLOPs of one training step (forward + backward = 3 x forward) of one model."""
    return 3 * forward_flops(config, batch_size, seq_len)


def _config(config):
    from hoplib.models import GPTConfig

    config = config if isinstance(config, GPTConfig) else config.config
    if config.attention.name not in ("softmax", "longformer"):  # Performer's kernel attention is not counted
        raise ValueError(f"only softmax and Longformer attention are counted, got {config.attention.name!r}")
    return config


def datasheet_peak(name: str) -> tuple[str | None, float | None]:
    """(table entry, dense bf16 TFLOP/s) of the longest entry of ``DATASHEET_BF16_TFLOPS`` in ``name``."""
    for key in sorted(DATASHEET_BF16_TFLOPS, key=len, reverse=True):
        if key in name:
            return key, DATASHEET_BF16_TFLOPS[key]
    return None, None


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def matmul_tflops(dev: torch.device, n: int, repeats: int) -> dict:
    """Measured rate of an n x n x n product (bf16 on CUDA, float32 on CPU), 3 warm-ups then ``repeats`` timed."""
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    a, b = (torch.randn(n, n, device=dev, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(repeats):
        a @ b
    sync(dev)
    sec = time.perf_counter() - t0
    return {"n": n, "dtype": str(dtype).removeprefix("torch."), "repeats": repeats, "seconds": sec,
            "tflops": 2 * n**3 * repeats / sec / 1e12}


def run_configs(c0: RunConfig, e: int) -> list[RunConfig]:
    """E run configurations of c0's architecture: seeds 0..E-1, fresh samples every step."""
    return [c0.replace(seed=j, n_train=None) for j in range(e)]


def time_training(c0: RunConfig, e: int, dev: torch.device, warmup: int, steps: int | None, target_s: float,
                  kind: str = "ensemble") -> dict:
    """Train c0's architecture: ``fit`` (kind "fit", "fit_compiled"; E = 1) or ``fit_ensemble``.
    A warm-up call of ``warmup`` steps, then a timed call of ``steps`` (None: enough for about ``target_s``)."""
    task = c0.task
    configs = run_configs(c0, e)
    models = [c.init_model(dev) for c in configs]

    def train(n: int) -> float:
        nonlocal models
        sync(dev)
        trains = [dataclasses.replace(c.train, steps=n) for c in configs]
        if kind == "ensemble":
            models, hists = fit_ensemble(models, task, trains, device=dev, progress=False)
            return hists[0]["wall_time_s"]
        return fit(models[0], task, trains[0], device=dev, progress=False,
                   compile=kind == "fit_compiled")["wall_time_s"]

    t0 = time.perf_counter()
    warm = train(warmup)  # one-off costs: lazy initialisation, cuBLAS handles, compilation
    probe = train(warmup) if steps is None else None  # a warm call, to size the timed one
    if probe is not None:
        steps = max(5, min(20_000, int(target_s * warmup / probe)))
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    sec = train(steps)
    return {"kind": kind, "E": e, "processes": 1, "warmup_steps": warmup, "warmup_s": warm, "probe_s": probe,
            "steps": steps, "seconds": sec, "steps_per_s": steps / sec, "cost_s": time.perf_counter() - t0,
            "peak_memory_gib": torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else None}


def worker(spec: dict) -> None:
    """One of P processes: warm up, wait at the file barrier for the others, then time (prints one JSON line)."""
    dev = get_device(spec["device"])
    torch.set_num_threads(spec["threads"])  # as many as the parent process uses
    c0 = RunConfig.from_dict(spec["config"])
    kind = "ensemble" if spec["E"] > 1 else "fit"
    time_training(c0, spec["E"], dev, spec["warmup"], 2, 0.0, kind)  # pays the one-offs before the barrier
    Path(spec["barrier"], f"ready{spec['rank']}").touch()
    t0 = time.perf_counter()
    while len(list(Path(spec["barrier"]).glob("ready*"))) < spec["P"]:
        if time.perf_counter() - t0 > 120:
            raise RuntimeError("barrier: the other processes did not arrive within 120 s")
        time.sleep(0.005)
    print("RESULT " + json.dumps(time_training(c0, spec["E"], dev, 1, spec["steps"], 0.0, kind)), flush=True)


def time_processes(c0: RunConfig, e: int, p: int, dev: torch.device, warmup: int, steps: int, timeout: float) -> dict:
    """P processes, each training an ensemble of E models of c0's architecture at the same time."""
    with tempfile.TemporaryDirectory() as barrier:
        spec = {"config": c0.to_dict(), "E": e, "device": dev.type, "warmup": warmup, "steps": steps,
                "barrier": barrier, "P": p, "threads": torch.get_num_threads()}
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(dict(spec, rank=r))],
                                  stdout=subprocess.PIPE, text=True) for r in range(p)]
        try:
            outs = [pr.communicate(timeout=timeout)[0] for pr in procs]
        finally:
            for pr in procs:  # only after a timeout are any left
                if pr.poll() is None:
                    pr.kill()
                    pr.wait()
    if any(pr.returncode for pr in procs):
        raise RuntimeError(f"a worker failed (return codes {[pr.returncode for pr in procs]})")
    res = [json.loads(line[7:]) for out in outs for line in out.splitlines() if line.startswith("RESULT ")]
    rates = [r["steps_per_s"] for r in res]
    return {"kind": "processes", "E": e, "processes": p, "steps": steps, "per_process_steps_per_s": rates,
            "steps_per_s": sum(rates) / p, "model_steps_per_s": e * sum(rates)}


def annotate(m: dict, c0: RunConfig, peaks: dict) -> dict:
    """Add architecture, model-steps/s, FLOPs and TFLOP/s, and the fractions of the two peaks."""
    model = c0.replace(seed=0).init_model("cpu")
    m.update(depth=c0.depth, d_model=c0.d_model, heads=c0.heads, parameters=count_parameters(model))
    m.setdefault("model_steps_per_s", m["E"] * m["steps_per_s"])
    m["flops_per_model_step"] = train_flops_per_step(model.config, c0.train.batch_size, c0.task.length)
    m["tflops"] = m["flops_per_model_step"] * m["model_steps_per_s"] / 1e12
    for which in ("datasheet", "measured"):
        m[f"fraction_of_{which}_peak"] = m["tflops"] / peaks[which] if peaks[which] else None
    return m


def arch(c: RunConfig | dict) -> tuple[int, int, int]:
    """(depth, d_model, heads) of a run configuration or of a measurement."""
    if isinstance(c, dict):
        return c["depth"], c["d_model"], c["heads"]
    return c.depth, c.d_model, c.heads


def projection(grid: Grid, meas: list[dict]) -> dict:
    """Projected wall time of ``grid``: runs x steps / measured steps per second, for each strategy."""
    configs = grid.configs()
    groups: dict[tuple, list[dict]] = {}
    for c in configs:
        groups.setdefault(arch(c), []).append(c)
    rate = {(m["kind"], arch(m), m["E"], m["processes"]): m["steps_per_s"] for m in meas}
    out = {"runs": len(configs), "steps_per_run": sorted({c.train.steps for c in configs}),
           "groups": {f"L{a[0]}_m{a[1]}_H{a[2]}": len(g) for a, g in groups.items()}}

    def total(times: list[float | None]) -> dict:
        if any(t is None for t in times):
            return {"seconds": None, "hours": None, "note": "some architectures were not measured"}
        return {"seconds": sum(times), "hours": sum(times) / 3600}

    for kind in ("fit", "fit_compiled"):  # the sweep without --ensemble (--compile: last)
        if kind == "fit" or all((kind, a, 1, 1) in rate for a in groups):
            out["one_at_a_time" + kind[3:]] = total([c.train.steps / rate[k] if (k := (kind, arch(c), 1, 1))
                                                     in rate else None for c in configs])
    # A group of one model is trained by fit (hoplib.grids routes it to train_run).
    group_s = {a: (g[0].train.steps / rate[k] if (k := ("ensemble" if len(g) > 1 else "fit", a, len(g), 1)) in rate
                   else None) for a, g in groups.items()}
    out["ensemble_per_architecture"] = total(list(group_s.values()))
    for m in (m for m in meas if m["kind"] == "processes" and None not in group_s.values()):
        single = rate.get(("ensemble" if m["E"] > 1 else "fit", arch(m), m["E"], 1))
        if not single:
            continue
        slow = m["steps_per_s"] / single  # each of P processes runs at this fraction of its speed alone
        shards = [sum(list(group_s.values())[i::m["processes"]]) / slow for i in range(m["processes"])]
        out[f"ensemble_{m['processes']}_processes"] = {
            "seconds": max(shards), "hours": max(shards) / 3600, "per_process_speed_factor": slow,
            "measured_on": f"L{m['depth']}_m{m['d_model']}_H{m['heads']} E={m['E']}"}
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--out", default=None, help="results file (default results/training/bench_gpu_<device>.json; "
                                               "with --tiny a file in the temporary folder)")
    p.add_argument("--tiny", action="store_true", help="tiny grid and few steps: a CPU smoke run")
    p.add_argument("--budget-s", type=float, default=300.0, help="wall-clock budget; measurements that would "
                                                                  "overrun it are skipped (and listed)")
    p.add_argument("--ensembles", default=None, help="ensemble sizes E > 1 besides the grid's (default 3,8)")
    p.add_argument("--processes", default=None, help="processes side by side, comma-separated (default 2,4)")
    p.add_argument("--compile", default="auto", choices=["auto", "on", "off"], help="time fit(compile=True) "
                                                                                    "(auto: on CUDA only)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p


def gpu_info(dev: torch.device) -> dict:
    """Device, torch and CUDA versions, and on CUDA the GPU's name, memory, capability and SM count."""
    info = {"device": dev.type, "torch": torch.__version__, "cuda": torch.version.cuda}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        info.update(name=props.name, memory_gib=props.total_memory / 2**30, capability=f"{props.major}.{props.minor}",
                    multiprocessors=props.multi_processor_count, cudnn=torch.backends.cudnn.version())
    return info


def make_plan(grid: Grid, sizes: list[int], n_procs: list[int], compiled: bool) -> tuple[list, dict]:
    """The measurements (kind, architecture, E, P) in order, and one configuration per architecture."""
    c_of: dict[tuple, RunConfig] = {}  # one config per architecture, in grid order
    for c in grid.configs():
        c_of.setdefault(arch(c), c)
    group = {a_: sum(arch(c) == a_ for c in grid.configs()) for a_ in c_of}
    plan = [("fit", a_, 1, 1) for a_ in c_of]
    # E = 1 is fit's measurement (the sweep trains a group of one with fit).
    plan += [("ensemble", a_, group[a_], 1) for a_ in c_of if group[a_] > 1]
    plan += [("ensemble", a_, e, 1) for e in sizes for a_ in c_of if e != group[a_] and e > 1]
    authors = max(c_of, key=lambda a_: (a_[1] == min(w for w, _ in grid.widths), a_[0]))  # deepest, narrowest
    plan += [("processes", authors, group[authors], q) for q in n_procs]
    if compiled:
        plan += [("fit_compiled", authors, 1, 1)] + [("fit_compiled", a_, 1, 1) for a_ in c_of if a_ != authors]
        for name in ("recompile_limit", "cache_size_limit"):  # one compiled model per architecture
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
    return plan, c_of


def report(m: dict, label: str, elapsed: float) -> None:
    frac = f"{m['fraction_of_measured_peak']:.2%} of measured peak"
    if m["fraction_of_datasheet_peak"] is not None:
        frac += f", {m['fraction_of_datasheet_peak']:.2%} of datasheet"
    print(f"[{elapsed:6.1f}s] {label}: {m['steps_per_s']:.1f} steps/s per model, "
          f"{m['model_steps_per_s']:.1f} model-steps/s, {m['tflops']:.3f} TFLOP/s ({frac})", flush=True)


def main(argv: list[str] | None = None) -> dict | None:
    a = parser().parse_args(argv)
    if a.worker is not None:
        return worker(json.loads(a.worker))
    t_start = time.perf_counter()
    dev = get_device(a.device)
    grid = TINY_GRID if a.tiny else grids.grid("paper")
    sizes = [int(v) for v in (a.ensembles or ("2" if a.tiny else "3,8")).split(",")]
    n_procs = [int(v) for v in (a.processes or ("2" if a.tiny else "2,4")).split(",")]
    warmup, target_s = (2, 0.2) if a.tiny else (20, 1.5)
    out = Path(a.out) if a.out else (Path(tempfile.gettempdir()) / f"bench_gpu_tiny_{dev.type}.json" if a.tiny
                                     else ROOT / "results" / "training" / f"bench_gpu_{dev.type}.json")
    info = gpu_info(dev)
    entry, sheet = datasheet_peak(info.get("name", ""))
    mm = matmul_tflops(dev, 256 if a.tiny or dev.type == "cpu" else 8192, 5 if a.tiny else 50)
    peaks = {"datasheet": sheet, "datasheet_entry": entry, "measured": mm["tflops"], "matmul": mm}
    print(f"{info}\npeak: datasheet {sheet} ({entry}), measured {mm['tflops']:.1f} TFLOP/s ({mm['dtype']} "
          f"{mm['n']}^3)", flush=True)
    plan, c_of = make_plan(grid, sizes, n_procs, a.compile == "on" or (a.compile == "auto" and dev.type == "cuda"))
    meas, skipped, cost = [], [], {}
    params = {"grid": "tiny" if a.tiny else "paper", "ensemble_sizes": sizes, "processes": n_procs,
              "warmup_steps": warmup, "target_timed_s": target_s, "data": "fresh samples every step",
              "command": " ".join(["python benchmarks/bench_gpu.py", *(sys.argv[1:] if argv is None else argv)])}

    def save(final: bool) -> dict:  # after every measurement, so a run killed by a time limit keeps its numbers
        wall = time.perf_counter() - t_start
        data = {"gpu": info, "peak": peaks, "measurements": meas, "projection": projection(grid, meas),
                "skipped": skipped, "budget_s": a.budget_s, "elapsed_s": wall, "complete": final}
        save_results(out, data, parameters=params, device=dev, wall_time_s=wall,
                     **({f"gpu_{k}": v for k, v in info.items()} if dev.type == "cuda" else {}),
                     **({"source_commit": src} if (src := os.environ.get("HOPLIB_SOURCE_COMMIT")) else {}))
        return data

    for kind, a_, e, q in plan:
        label = f"{kind} L{a_[0]} m{a_[1]} H{a_[2]} E={e}" + (f" P={q}" if q > 1 else "")
        need = cost.get(kind, 60.0 if kind in ("processes", "fit_compiled") and not a.tiny else 0.0)
        left = a.budget_s - (time.perf_counter() - t_start)
        if need > left:
            skipped.append(label)
            print(f"skipped {label}: needs about {need:.0f} s, {left:.0f} s of the budget left", flush=True)
            continue
        t0 = time.perf_counter()
        try:
            if kind == "processes":
                single = next(m for m in meas if (m["kind"], arch(m), m["E"]) == ("ensemble", a_, e))
                m = time_processes(c_of[a_], e, q, dev, warmup, single["steps"], max(60.0, left))
            else:
                m = time_training(c_of[a_], e, dev, warmup, None, target_s, kind)
        except Exception as exc:  # a benchmark reports a failure (out of memory, a compiler error) and goes on
            skipped.append(f"{label} (failed: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})")
            print(f"FAILED {skipped[-1]}", flush=True)
            continue
        cost[kind] = time.perf_counter() - t0
        meas.append(annotate(m, c_of[a_], peaks))
        report(m, label, time.perf_counter() - t_start)
        save(False)
    data = save(True)
    for k, v in data["projection"].items():
        if isinstance(v, dict) and "hours" in v:
            print(f"projected {k}: " + (f"{v['hours']:.2f} h" if v["hours"] is not None else v["note"]), flush=True)
    print(f"wrote {out} ({len(meas)} measurements, {len(skipped)} skipped or failed)", flush=True)
    return data


if __name__ == "__main__":
    main()
