"""Re-run the reliability probes of issue 13: each misuse a careless or hostile user might try, classified.

    python scripts/probe_reliability.py          # prints one line per probe and the counts

Every probe runs in a temporary folder and ends in one of: ``clear error`` (a ValueError/TypeError or a CLI exit
status 2 with one line, before any work), ``correct`` (a right answer or a refusal that keeps the data),
``silent wrong`` (a plausible but wrong result), ``unhelpful crash`` (any other exception, or a traceback from
a command line) or ``data loss`` (a stored result or notebook gone or replaced). The last three must be zero.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
TRAIN = [sys.executable, str(ROOT / "scripts" / "run_training.py"), "--depth", "1", "--d-model", "16",
         "--heads", "2", "--seq-len", "8",
         "--max-hops", "1", "--steps", "4", "--warmup-steps", "1", "--checkpoint-every", "2", "--no-progress",
         "--eval-samples", "4", "--device", "cpu"]


def _cli(argv: list[str], cwd: Path) -> tuple[int, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env, timeout=600)
    return proc.returncode, proc.stderr.strip()


def _clear_cli(rc: int, err: str) -> str:
    if rc == 2 and len(err.splitlines()) == 1:
        return "clear error"
    return "unhelpful crash" if "Traceback" in err else f"unexpected rc {rc}"


def _raises_clear(fn) -> str:
    try:
        fn()
    except (ValueError, TypeError) as exc:
        return "clear error" if str(exc) else "unhelpful crash"
    except Exception:  # noqa: BLE001 - the classification is the point
        return "unhelpful crash"
    return "silent wrong"


def probes_training(tmp: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    stored = ROOT / "results" / "training" / "small" / "L2_m16_H1_ninf_s0"
    copy = tmp / "copy"
    shutil.copytree(stored, copy)
    before = (copy / "results.json").read_bytes()
    rc, err = _cli([*TRAIN, "--out", str(copy)], tmp)
    kept = (copy / "results.json").read_bytes() == before
    out["train into a stored run's folder"] = ("data loss" if not kept else _clear_cli(rc, err))
    rc, err = _cli([*TRAIN, "--lr", "1e30", "--warmup-steps", "0", "--out", str(tmp / "div")], tmp)
    rec = json.loads((tmp / "div" / "results.json").read_text()) if (tmp / "div" / "results.json").exists() else {}
    out["diverging run"] = ("correct" if rc == 1 and rec.get("diverged") and not rec.get("complete")
                            else "silent wrong")
    (tmp / "afile").write_text("x")
    out["--out is a file"] = _clear_cli(*_cli([*TRAIN, "--out", str(tmp / "afile")], tmp))
    out["--eval-samples 0"] = _clear_cli(*_cli([*TRAIN, "--eval-samples", "0", "--out", str(tmp / "e")], tmp))
    out["--eval-seed -1"] = _clear_cli(*_cli([*TRAIN, "--eval-seed", "-1", "--out", str(tmp / "e2")], tmp))
    rc, err = _cli([sys.executable, str(ROOT / "scripts" / "run_training.py"), "--grid", "quick",
                    "--out", str(tmp / "s"),
                    "--shard", "2/1"], tmp)
    out["sweep --shard 2/1"] = _clear_cli(rc, err)
    return out


def probes_checkpoint(tmp: Path) -> dict[str, str]:
    from hoplib import train

    run = tmp / "ck"
    subprocess.run([*TRAIN, "--out", str(run)], check=True, capture_output=True, env={**os.environ,
                                                                                     "OMP_NUM_THREADS": "1"})
    ck = run / "checkpoint.pt"
    data = bytearray(ck.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 64] = bytes(b ^ 0xFF for b in data[mid:mid + 64])
    ck.write_bytes(bytes(data))
    return {"64 flipped bytes in a checkpoint": _raises_clear(lambda: train.load_checkpoint(ck))}


def probes_library() -> dict[str, str]:
    from hoplib import evaluate, models, tasks
    from hoplib.construction import hop_transformer
    from hoplib.mpc import protocols

    task = tasks.HopTask(seq_len=12, alphabet_size=4, max_hops=2)
    small = models.gpt_for_task(task, depth=1, d_model=8, heads=1)
    few_classes = models.GPT(models.GPTConfig(vocab_size=task.vocab_size, n_positions=task.length, depth=1,
                                              d_model=8, heads=1, n_classes=3))
    few_rows = models.GPT(models.GPTConfig(vocab_size=3, n_positions=task.length, depth=1, d_model=8, heads=1,
                                           n_classes=task.vocab_size))
    model = hop_transformer(2, 12, 4)
    out = {
        "per_k_error, too few classes": _raises_clear(lambda: evaluate.per_k_error(few_classes, task, device="cpu")),
        "per_k_error, too few embedding rows": _raises_clear(lambda: evaluate.per_k_error(few_rows, task,
                                                                                          device="cpu")),
        "GPT, ids outside the vocabulary": _raises_clear(lambda: small(torch.tensor([[0, 99]]))),
        "hop on -1": _raises_clear(lambda: tasks.hop(np.array([1, -1, 1]), 1)),
        "hop on uint64 2**64-1": _raises_clear(lambda: tasks.hop(np.array([1, 2**64 - 1], dtype=np.uint64), 1)),
        "decode([5.7])": _raises_clear(lambda: task.decode([5.7])),
        "letters_to_str out of range": _raises_clear(lambda: tasks.letters_to_str([0, 99])),
        "hop on a masked array": _raises_clear(lambda: tasks.hop(np.ma.masked_array([1, 2, 1], [0, 1, 0]), 1)),
        "GPTConfig(layer_norm_eps=-1)": _raises_clear(lambda: models.GPTConfig(1, 1, 1, 1, 1, layer_norm_eps=-1)),
        "GPTConfig(layer_norm_eps=NaN)": _raises_clear(lambda: models.GPTConfig(1, 1, 1, 1, 1,
                                                                                layer_norm_eps=math.nan)),
    }
    empty = tasks.hop(np.array([], dtype=np.int64), 1)
    out["hop on an empty sequence"] = "correct" if len(empty) == 0 else "silent wrong"
    for bad in (math.nan, 0.0, -1.0):
        def set_temperature(value=bad):
            model.inverse_temperature = value
        out[f"inverse_temperature = {bad}"] = _raises_clear(set_temperature)
    edges = np.array([[i, (i + 1) % 64] for i in range(64)])
    out["connectivity cut short"] = _raises_clear_or(lambda: protocols.connected_components_protocol(
        edges, 64, 256, max_iterations=1), "MPCNotConvergedError")
    for n in (500, 2000, 4096):
        mem = protocols.hop_min_memory(n)
        ok = all(_runs(lambda s=s, n=n, mem=mem: protocols.hop_protocol(
            np.random.default_rng(s).integers(0, 4, n), 4, mem, seed=s)) for s in range(5))
        out[f"hop_protocol at N = {n}, its stated minimum memory {mem}"] = "correct" if ok else "silent wrong"
        out[f"hop_protocol at N = {n}, memory below the minimum"] = _raises_clear(
            lambda n=n, mem=mem: protocols.hop_protocol(np.zeros(n, dtype=np.int64), 4, mem - 1))
    return out


def _runs(fn) -> bool:
    try:
        fn()
    except Exception:  # noqa: BLE001
        return False
    return True


def _raises_clear_or(fn, name: str) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        return "clear error" if type(exc).__name__ == name or isinstance(exc, (ValueError, TypeError)) else \
            "unhelpful crash"
    return "silent wrong"


def probes_notebooks(tmp: Path) -> dict[str, str]:
    out = {}
    runner = [sys.executable, str(ROOT / "scripts" / "notebooks.py"), "run", "hop_task", "--out", str(tmp / "nb")]
    good = tmp / "nb" / "hop_task"
    good.mkdir(parents=True)
    (good / "quick").mkdir()
    marker = good / "quick" / "hop_task.ipynb"
    marker.write_text("{}")
    rc, err = _cli([*runner, "-p", "seed", "-1"], ROOT)
    out["papermill run with seed -1"] = "data loss" if not marker.exists() else _clear_cli(rc, err)
    rc, err = _cli([*runner, "-p", "seeed", "3"], ROOT)
    out["papermill run with an unknown parameter"] = _clear_cli(rc, err)
    return out


def main() -> int:
    results: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        results |= probes_library()
        results |= probes_training(tmp)
        results |= probes_checkpoint(tmp)
        results |= probes_notebooks(tmp)
    for name, verdict in results.items():
        print(f"{verdict:16s} {name}")
    counts = Counter(results.values())
    print(", ".join(f"{v}: {counts[v]}" for v in ("clear error", "correct", "silent wrong", "unhelpful crash",
                                                  "data loss")) + f" ({len(results)} probes)")
    bad = counts["silent wrong"] + counts["unhelpful crash"] + counts["data loss"] + sum(
        n for v, n in counts.items() if v.startswith("unexpected"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
