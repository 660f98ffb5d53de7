"""Run the reliability probes: each misuse a careless or hostile user might try, classified.

    python scripts/probe_reliability.py          # prints one line per probe and the counts
    python scripts/probe_reliability.py --fast   # only the probes of the outside prober's classes (under a minute)

Every probe runs in a temporary folder and ends in one of: ``clear error`` (a ValueError/TypeError or a CLI exit
status 2 with one line, before any work), ``correct`` (a right answer or a refusal that keeps the data),
``silent wrong`` (a plausible but wrong result), ``unhelpful crash`` (any other exception, or a traceback from
a command line, or work started before a fault was reported), ``data loss`` (a stored result or notebook gone
or replaced) or ``path escape`` (a file written outside the output folder). The last four must be zero.

The output faults are real: a full disk is a cap on file size (``RLIMIT_FSIZE``; Python ignores
SIGXFSZ, so a write past it fails with EFBIG), a read-only folder is chmod 555 (as root, run without the
capabilities that ignore it: ``setpriv`` drops CAP_DAC_OVERRIDE), a disk that fills mid-run is a cap just under
the size the command's files reach.

The probes of :func:`probes_outside` follow the classes an outside prober found: a parameter that becomes a path
out of ``--out``, two processes on one lock, stale partial files, NaN and hand edits read as data, construction
inputs it is not exact on, command-line faults (``--checkpoint-every 0``, ``--slurm`` without Slurm, workers
that outlive a killed sweep) and tracebacks where one line would do. They call the commands' ``main`` in this
process (one torch import), so ``tests/test_probe_reliability.py`` runs them with the tests.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import math
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
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
                    "--out", str(tmp / "s"), "--partition", "gpu"], tmp)
    out["grid --partition without --slurm"] = _clear_cli(rc, err)
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
    escape = [sys.executable, str(ROOT / "scripts" / "notebooks.py"), "run", "../chapters/hop_task", "--out",
              str(tmp / "w" / "runs")]
    rc, err = _cli(escape, ROOT)
    outside = [tmp / "w" / "chapters", ROOT / "chapters" / "hop_task"]
    out["papermill run of a chapter path ../chapters/x"] = ("path escape" if any(p.exists() for p in outside)
                                                            else _clear_cli(rc, err))
    return out


# --------------------------------------------------------------------------- output faults
SCRIPTS = ROOT / "scripts"
READ_ONLY = (["setpriv", "--inh-caps=-dac_override,-dac_read_search",
              "--bounding-set=-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else [])
"""A read-only folder is chmod 555; root ignores modes, so as root the command runs without the capabilities
that let it (setpriv drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH)."""

FOLDER_COMMANDS = {  # --out is a folder (a results root, a run folder, a notebook folder)
    "run_training (one run)": TRAIN[1:],
    "run_training --grid quick": [str(SCRIPTS / "run_training.py"), "--grid", "quick", "--no-progress"],
    "run_rnn": [str(SCRIPTS / "run_rnn.py"), "--part", "training"],
    "run_efficient_attention": [str(SCRIPTS / "run_efficient_attention.py"), "--part", "matched"],
    "run_gnn": [str(SCRIPTS / "run_gnn.py"), "--profile", "quick", "--part", "edge"],
    "evaluate_released": [str(SCRIPTS / "evaluate_released.py"), "--cache-dir", "{tmp}/no-cache"],
    "notebooks run": [str(SCRIPTS / "notebooks.py"), "run", "hop_task"],
}
FILE_COMMANDS = {  # --out is a results file
    "run_mpc": [str(SCRIPTS / "run_mpc.py"), "layer-regime", "--ns", "64", "--deltas", "0.9"],
    "run_construction": [str(SCRIPTS / "run_construction.py"), "precision", "--ns", "16", "--total-letters", "64"],
    "score_runs": [str(SCRIPTS / "score_runs.py"), str(ROOT / "results" / "training" / "small")],
}


def _limits(fsize: int | None):
    """A ``preexec_fn`` that caps the size of every file the command writes (Python ignores SIGXFSZ, so a write
    past the cap fails with EFBIG: a disk that is full, or fills)."""
    if fsize is None:
        return None

    def cap() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return cap


def _run(argv: list[str], *, fsize: int | None = None, read_only: bool = False,
         timeout: int = 300) -> tuple[int | None, str, str]:
    """(exit status or None after ``timeout`` s, stdout, stderr) of ``python argv`` in the checkout."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [*(READ_ONLY if read_only else []), sys.executable, *argv]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=timeout,
                              preexec_fn=_limits(fsize))
    except subprocess.TimeoutExpired:
        return None, "", ""
    return proc.returncode, proc.stdout, proc.stderr.strip()


def _before_work(rc: int | None, err: str) -> str:
    if rc is None:
        return "unhelpful crash"  # still working long after the fault: it was not checked first
    return _clear_cli(rc, err)


def probes_output_faults(tmp: Path) -> dict[str, str]:
    """Disk full, a read-only output folder, an --out that is a file: one line, exit 2, before any work."""
    out: dict[str, str] = {}
    afile, ro = tmp / "afile", tmp / "read-only"
    afile.write_text("kept")
    ro.mkdir()
    ro.chmod(0o555)
    for name, argv in {**FOLDER_COMMANDS, **FILE_COMMANDS}.items():
        argv = [a.replace("{tmp}", str(tmp)) for a in argv]
        is_file = name in FILE_COMMANDS
        leaf = "x.json" if is_file else "x"
        cases = {"--out is a file" if not is_file else "--out inside a file": (afile / leaf if is_file else afile,
                                                                              {}),
                 "read-only output folder": (ro / leaf, {"read_only": True}),
                 "disk full": (tmp / f"full-{len(out)}" / leaf, {"fsize": 0})}
        if is_file:
            cases["--out is a folder"] = (ro.parent, {})
        for fault, (target, kw) in cases.items():
            rc, _, err = _run([*argv, "--out", str(target)], **kw)
            verdict = _before_work(rc, err)
            if afile.read_text() != "kept" or any(ro.iterdir()):
                verdict = "data loss"
            out[f"{name}: {fault}"] = verdict
    return out


def _mid_run(name: str, argv: list[str], target: Path, fsize: int, resume: list[str]) -> str:
    """A disk that fills after some points: one line that says what was kept, then a rerun that resumes."""
    rc, _, err = _run([*argv, "--out", str(target)], fsize=fsize)
    if rc is None or "Traceback" in err or len(err.splitlines()) != 1:
        print(f"{name}: exit status {rc}, stderr:\n{err}", file=sys.stderr)
        return "unhelpful crash"
    if rc == 0:
        return "unexpected rc 0"  # the cap did not bite: the probe is wrong, not the command
    if not any(word in err for word in ("kept", "keeps")):
        return "unhelpful crash"  # one line, but not what was kept
    rc, stdout, err = _run([*argv, *resume, "--out", str(target)])
    if rc != 0:
        return f"unexpected rc {rc}"
    return "correct"


def probes_mid_run(tmp: Path) -> dict[str, str]:
    """Each writer whose points are stored as they finish, on a disk that fills after the first of them."""
    out: dict[str, str] = {}
    runs = {"run_mpc": ([str(SCRIPTS / "run_mpc.py"), "layer-regime", "--ns", "64,80,96,112,128,144,160,176",
                         "--deltas", "0.85,0.9"], ["--resume"]),  # files over the 4 KiB of the folder check
            "run_construction": ([str(SCRIPTS / "run_construction.py"), "precision", "--ns",
                                  "16,24,32,40,48,56,64,72,80", "--total-letters", "64"], []),
            "score_runs": (FILE_COMMANDS["score_runs"], [])}
    for name, (argv, resume) in runs.items():
        free = tmp / f"{name}-free.json"
        rc, _, err = _run([*argv, "--out", str(free)])
        if rc != 0:
            out[f"{name}: disk fills after some points"] = f"unexpected rc {rc}"
            continue
        whole = json.loads(free.read_text())["data"]
        target = tmp / f"{name}-full.json"
        # the last write of the free run's size less about half a point (timings change a file by a few bytes)
        verdict = _mid_run(name, argv, target, free.stat().st_size - 150, resume)
        if verdict == "correct" and json.loads(target.read_text())["data"] != _without_time(whole, target):
            verdict = "silent wrong"
        out[f"{name}: disk fills after some points"] = verdict
    run = tmp / "train-full"  # a training run whose checkpoint does not fit (the folder check does)
    verdict = _mid_run("run_training", TRAIN[1:], run, 8192, [])
    if verdict == "correct" and not json.loads((run / "results.json").read_text()).get("complete"):
        verdict = "silent wrong"
    out["run_training (one run): disk fills at its first checkpoint"] = verdict
    return out


def _without_time(rows: list, target: Path) -> list:
    """``rows`` with the wall-clock fields of ``target``'s rows (they differ between two runs)."""
    again = json.loads(target.read_text())["data"]
    if len(again) != len(rows):
        return rows
    return [{**r, **{k: a[k] for k in ("seconds",) if k in r and k in a}} for r, a in zip(rows, again, strict=True)]


def probes_data_loss(tmp: Path) -> dict[str, str]:
    """A stored results file is never replaced without --overwrite; a killed run resumes from what it kept."""
    out: dict[str, str] = {}
    derived = {"run_rnn": "rnn/cpu/training.json", "run_efficient_attention": "efficient_attention/cpu/matched.json",
               "run_gnn": "gnn/quick/edge_sweep.json"}
    for name, rel in derived.items():
        root = tmp / f"stored-{name}"
        (root / rel).parent.mkdir(parents=True)
        (root / rel).write_text("stored")
        rc, _, err = _run([*FOLDER_COMMANDS[name], "--out", str(root)])
        out[f"{name}: a stored results file, no --overwrite"] = (
            "data loss" if (root / rel).read_text() != "stored" else _before_work(rc, err))
    for name, argv in FILE_COMMANDS.items():
        stored = tmp / f"stored-{name}.json"
        stored.write_text("stored")
        rc, _, err = _run([*argv, "--out", str(stored)])
        out[f"{name}: a stored results file, no --overwrite"] = (
            "data loss" if stored.read_text() != "stored" else _before_work(rc, err))
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:  # two runs on one results file: the second is refused while the first lives
        for name, argv in FILE_COMMANDS.items():
            target = tmp / f"locked-{name}.json"
            target.with_name(f".{target.name}.lock").write_text(str(holder.pid))
            rc, _, err = _run([*argv, "--out", str(target)])
            out[f"{name}: a second run on one results file"] = (
                "data loss" if target.exists() else _before_work(rc, err))
    finally:
        holder.kill()
        holder.wait()
    out["run_construction: killed after 2 of 4 points"] = _killed_after(
        [str(SCRIPTS / "run_construction.py"), "precision", "--ns", "16,24,32,40", "--total-letters", "256"],
        tmp / "killed.json", 2, 4)
    return out


def _killed_after(argv: list[str], target: Path, n: int, total: int) -> str:
    """SIGKILL a sweep once its partial file holds ``n`` points; the rerun must resume, not restart."""
    import time

    partial = target.with_name(target.stem + ".partial.json")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, *argv, "--out", str(target)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    held = 0
    while proc.poll() is None and held < n:
        time.sleep(0.05)
        try:
            held = len(json.loads(partial.read_text())["data"]["done"])
        except (OSError, ValueError, KeyError):
            held = 0
    proc.kill()
    proc.wait()
    if held < n:
        return "unexpected rc (the sweep ended before it could be killed)"
    rc, stdout, err = _run([*argv, "--out", str(target)])
    if rc != 0:
        return _clear_cli(rc, err) if rc == 2 else "unhelpful crash"
    import re

    resumed = re.search(rf"(\d+) of {total} points already done", stdout)
    done = len(json.loads(target.read_text())["data"]) if target.exists() else 0
    return "correct" if resumed and int(resumed.group(1)) >= n and done >= total else "data loss"

# --------------------------------------------------------------------------- the outside prober's classes
def _script(name: str):
    """``scripts/<name>.py`` as a module (as the tests load it)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPTS))


class _WorkStarted(Exception):
    """Raised by a stand-in for a command's work: the fault was not reported before the work."""


def _main_cli(script: str, argv: list[str], cwd: Path | None = None, **stand_ins) -> tuple[int | str, str]:
    """(exit status of ``run_cli(main, argv)``, stderr) in this process; ``"traceback"`` for an exception that
    escaped, ``"work started"`` when a stand-in of the command's work (``stand_ins``) was called."""
    module, cli = _script(script), _script("cli")
    for name in stand_ins:
        setattr(module, name, lambda *a, **k: (_ for _ in ()).throw(_WorkStarted()))
    err, old = io.StringIO(), Path.cwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code: int | str = cli.run_cli(module.main, argv)
    except _WorkStarted:
        code = "work started"
    except Exception as exc:  # noqa: BLE001 - the classification is the point
        code, _ = "traceback", err.write(f"{type(exc).__name__}: {exc}")
    finally:
        os.chdir(old)
    return code, err.getvalue().strip()


def _verdict(code: int | str, err: str) -> str:
    if code == "work started":
        return "unhelpful crash"  # the fault was reported after the work began, or never
    if code == "traceback":
        return "unhelpful crash"
    if code == 0:
        return "silent wrong"
    lines = err.splitlines()
    if code == 2 and lines and ": error: " in lines[-1] and "Traceback" not in err and lines[0].startswith("usage:"):
        return "clear error"  # argparse's usage and its one-line error
    return _clear_cli(code, err)


_TINY = ["--depth", "1", "--d-model", "16", "--heads", "2", "--seq-len", "8", "--max-hops", "1", "--steps", "4",
         "--warmup-steps", "1", "--no-progress", "--eval-samples", "4"]


def _probes_paths(tmp: Path) -> dict[str, str]:
    from hoplib._book.notebook import ChapterRun
    from hoplib.results import check_writable
    from hoplib.train import RunConfig, TrainConfig, train_run

    out: dict[str, str] = {}
    for name, script, argv in (
            ("run_training --out ''", "run_training", [*_TINY, "--out", ""]),
            ("run_construction --out ''", "run_construction", ["precision", "--ns", "16", "--total-letters", "64",
                                                               "--out", ""]),
            ("score_runs --out ''", "score_runs", [str(ROOT / "results" / "training" / "small"), "--out", ""])):
        cwd = tmp / f"cwd-{script}"
        cwd.mkdir()
        verdict = _verdict(*_main_cli(script, argv, cwd))
        out[f"path: {name}"] = "path escape" if any(cwd.iterdir()) else verdict
    cwd = tmp / "cwd-library"
    cwd.mkdir()
    config = RunConfig(depth=1, d_model=16, heads=2, seq_len=8, max_hops=1,
                       train=TrainConfig(steps=2, warmup_steps=1, eval_samples=4))
    old = Path.cwd()
    os.chdir(cwd)
    try:
        out["path: train_run(config, '')"] = _raises_clear(lambda: train_run(config, "", device="cpu",
                                                                             progress=False))
        out["path: check_writable('')"] = _raises_clear(lambda: check_writable(""))
    finally:
        os.chdir(old)
    if any(cwd.iterdir()):
        out["path: train_run(config, '')"] = "path escape"
    run = ChapterRun("hop_task", "quick", __import__("torch").device("cpu"), 0, {}, tmp / "nbout" / "hop_task")
    for name in ("../../../escaped-nb", str(tmp / "escaped-abs")):
        verdict = _raises_clear(lambda name=name: run.save(name, {"x": 1}))
        escaped = list(tmp.glob("escaped*")) + list(tmp.parent.glob("escaped-nb*"))
        out[f"path: a chapter's run.save({name!r})"] = "path escape" if escaped else verdict
    return out


def _dies_holding(lock: str) -> None:
    from hoplib.results import take_lock

    take_lock(lock, "out")
    os._exit(0)  # killed while holding it: the file stays behind


def _race(lock: str, barrier, outcomes) -> None:
    from hoplib import results

    real = results._alive

    def slow_alive(*args, **kwargs):  # a process that is slow inside the liveness check
        time.sleep(0.05)
        return real(*args, **kwargs)

    results._alive = slow_alive
    barrier.wait()
    try:
        held = results.take_lock(lock, "out")
    except results.LockedError:
        held = None
    outcomes.put(held is not None)
    barrier.wait()
    if held is not None:
        held.release() if hasattr(held, "release") else Path(held).unlink(missing_ok=True)


def _probes_locks(tmp: Path) -> dict[str, str]:
    from hoplib.results import LockedError, take_lock

    out: dict[str, str] = {}
    ctx, lock, winners = multiprocessing.get_context("fork"), str(tmp / ".race.lock"), []
    for _ in range(8):
        dead = ctx.Process(target=_dies_holding, args=(lock,))
        dead.start()
        dead.join()
        barrier, outcomes = ctx.Barrier(4, timeout=120), ctx.Queue()
        racers = [ctx.Process(target=_race, args=(lock, barrier, outcomes)) for _ in range(4)]
        for p in racers:
            p.start()
        winners.append(sum(outcomes.get(timeout=120) for _ in racers))
        for p in racers:
            p.join()
    out["lock: a stale lock raced by 4 reruns, 8 times"] = ("correct" if winners == [1] * 8 else "data loss")
    foreign = tmp / ".foreign.lock"
    record = json.dumps({"host": "node-elsewhere", "boot_id": "another-kernel", "pid": 4242, "started": 1.0})
    foreign.write_text(record)
    try:
        take_lock(foreign, "out")
        out["lock: a lock of a process on another host"] = "data loss"
    except LockedError as exc:
        named = "node-elsewhere" in str(exc) and "4242" in str(exc) and "\n" not in str(exc)
        out["lock: a lock of a process on another host"] = ("clear error" if named and foreign.read_text() == record
                                                            else "unhelpful crash")
    held = tmp / ".held.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from hoplib.results import take_lock; "
                               f"held = take_lock({str(held)!r}, 'out'); print('held', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        held.write_text("999999999")  # its PID as a process of another PID namespace sees it: none here
        out["lock: a live holder whose PID this process cannot see"] = _raises_clear_or(
            lambda: take_lock(held, "out"), "LockedError").replace("silent wrong", "data loss")
    finally:
        holder.kill()
        holder.wait()
    return out


def _counted(_: int, point: dict) -> int:
    calls = Path(point["dir"]) / f"calls{point['x']}"
    calls.write_text(str(int(calls.read_text()) + 1 if calls.exists() else 1))
    if point.get("fail") and (Path(point["dir"]) / "fail").exists():
        raise RuntimeError("stopped")
    return point["x"] * 10


def _stopped_sweep(folder: Path) -> tuple[list[dict], Path]:
    from hoplib.sweep import run_sweep

    folder.mkdir()
    (folder / "fail").write_text("")
    points = [{"dir": str(folder), "x": 1}, {"dir": str(folder), "x": 2, "fail": True}]
    with contextlib.suppress(RuntimeError), contextlib.redirect_stdout(io.StringIO()):
        run_sweep(_counted, points, folder / "sweep.json", {"p": 1})
    (folder / "fail").unlink()
    return points, folder / "sweep.json"


def _probes_partials(tmp: Path) -> dict[str, str]:
    from hoplib.sweep import run_sweep
    from hoplib.train import RunConfig, train_run

    out: dict[str, str] = {}
    points, path = _stopped_sweep(tmp / "ow")
    with contextlib.redirect_stdout(io.StringIO()):
        run_sweep(_counted, points, path, {"p": 1}, overwrite=True)
    out["partial: --overwrite beside a partial file"] = ("correct" if (tmp / "ow" / "calls1").read_text() == "2"
                                                          else "silent wrong")
    points, path = _stopped_sweep(tmp / "old")
    partial = path.with_name("sweep.partial.json")
    record = json.loads(partial.read_text())
    record["provenance"]["git_commit"] = "0" * 40
    partial.write_text(json.dumps(record))
    with contextlib.redirect_stdout(io.StringIO()):
        out["partial: a partial file of another commit"] = _raises_clear(
            lambda: run_sweep(_counted, points, path, {"p": 1}))
    score_runs, sweep_dir, scores = _script("score_runs"), tmp / "sweep", tmp / "scores.json"
    base = dict(d_model=16, heads=2, seq_len=12, max_hops=3, lr=3e-3, warmup_steps=2, batch_size=8,
                eval_samples=10, seed=1, steps=5)
    for depth in (1, 2):
        train_run(RunConfig.from_dict({**base, "depth": depth}), sweep_dir / f"L{depth}", device="cpu",
                  progress=False)
    real = score_runs.score_run

    def stops_at_l2(i: int, run: str, *, folder: str):
        if run == "L2":
            raise KeyboardInterrupt
        return real(i, run, folder=folder)

    score_runs.score_run = stops_at_l2
    with contextlib.suppress(KeyboardInterrupt), contextlib.redirect_stdout(io.StringIO()):
        score_runs.main([str(sweep_dir), "--out", str(scores)])
    score_runs.score_run = real
    retrained = RunConfig.from_dict({**base, "depth": 1, "steps": 40, "lr": 1e-2, "seed": 2})
    train_run(retrained, sweep_dir / "L1", device="cpu", progress=False, overwrite=True)
    with contextlib.redirect_stdout(io.StringIO()):
        score_runs.main([str(sweep_dir), "--out", str(scores)])
    stored = json.loads((sweep_dir / "L1" / "results.json").read_text())["per_k_error"]
    sha = hashlib.sha256((sweep_dir / "L1" / "model.pt").read_bytes()).hexdigest()
    rows = [r for r in json.loads(scores.read_text())["data"] if r["run"] == "L1"]
    fresh = all(abs(sum(r["errors"]) / len(r["errors"]) - stored[str(r["k"])]) < 1e-6 for r in rows)
    named = all(r.get("model_sha256") == sha for r in rows)  # which weights each score came from
    out["partial: score_runs resumed after a run was retrained"] = "correct" if fresh and named else "silent wrong"
    return out


def _probes_data(tmp: Path) -> dict[str, str]:
    from hoplib import grids, report
    from hoplib.results import load_stored

    out: dict[str, str] = {}
    root = tmp / "store"
    root.mkdir()
    cases = {"NaN": '{"provenance": {}, "data": [{"k": 1, "error": NaN}]}',
             "Infinity": '{"provenance": {}, "data": [{"k": 1, "error": Infinity}]}',
             'depth "1"': '{"provenance": {}, "data": [{"depth": "1", "k": 1, "error": 0.1}]}',
             "error 1.5": '{"provenance": {}, "data": [{"depth": 1, "k": 1, "error": 1.5}]}',
             "parameters.complete false": '{"provenance": {}, "parameters": {"complete": false}, "data": []}'}
    for i, (what, text) in enumerate(cases.items()):
        (root / f"{i}.json").write_text(text)
        out[f"data: load_stored of a file with {what}"] = _raises_clear(lambda i=i: load_stored(f"{i}.json",
                                                                                                   root=root))
    out["data: crossing_k with a NaN error"] = _raises_clear(lambda: report.crossing_k({1: 0.0, 2: math.nan,
                                                                                        3: 0.9}))
    run = tmp / "collect" / "L1_m16_H2_ninf_s0"
    run.mkdir(parents=True)
    config = {"depth": "1", "d_model": 16, "heads": 2, "seed": 0, "steps": 2, "n_train": None}
    (run / "results.json").write_text(json.dumps({"config": config, "complete": True, "per_k_error": {"1": 0.5},
                                                  "per_k_error_pooled": {"1": 0.5}}))
    out['data: collect of a run with depth "1"'] = _raises_clear(lambda: grids.collect(tmp / "collect"))
    store, results = tmp / "results", ROOT / "results"
    (store / "training" / "depth").mkdir(parents=True)
    (store / "released").symlink_to(results / "released")
    (store / "training" / "authors-errors.json").symlink_to(results / "training" / "authors-errors.json")
    for f in sorted((results / "training" / "depth").glob("*/results.json")):
        (store / "training" / "depth" / f.parent.name).mkdir()
        (store / "training" / "depth" / f.parent.name / "results.json").symlink_to(f)
    hit = store / "training" / "depth" / "L2_m64_H4_ninf_s0" / "results.json"
    record = json.loads(hit.read_text())
    record["per_k_error"]["2"] = math.nan
    hit.unlink()
    hit.write_text(json.dumps(record))
    old = os.environ.get("HOPLIB_RESULTS")
    os.environ["HOPLIB_RESULTS"] = str(store)
    try:
        kstar, _ = grids.growth_points("depth")
        out["data: growth_points with a NaN per_k_error"] = ("silent wrong" if kstar["k*"].isna().any()
                                                             else "correct")
    except (ValueError, TypeError) as exc:
        out["data: growth_points with a NaN per_k_error"] = "clear error" if str(exc) else "unhelpful crash"
    finally:
        os.environ.pop("HOPLIB_RESULTS") if old is None else os.environ.__setitem__("HOPLIB_RESULTS", old)
    return out


def _probes_construction() -> dict[str, str]:
    import torch

    from hoplib.construction import count_errors, hop_transformer
    from hoplib.tasks import HopTask

    out: dict[str, str] = {}
    try:
        model = hop_transformer(2, 64, 8, inverse_temperature=1e38)
        x = HopTask(seq_len=64, alphabet_size=8).letters(8, torch.Generator().manual_seed(0), torch.device("cpu"))
        out["construction: inverse_temperature 1e38"] = "silent wrong" if count_errors(model, x) else "correct"
    except ValueError as exc:
        out["construction: inverse_temperature 1e38"] = "clear error" if str(exc) else "unhelpful crash"
    out["construction: predict on float letters 0.7, 2.9"] = _raises_clear(
        lambda: hop_transformer(1, 8, 4).predict(torch.tensor([[0.7, 2.9]])))
    return out


def _workers_outlive(tmp: Path) -> str:
    """SIGKILL a sweep with two local workers: the workers must end too (a watchdog on their parent)."""
    tmp.mkdir()
    (tmp / "slowjob.py").write_text("import os, time\nfrom pathlib import Path\n\ndef job(i, folder):\n"
                                    "    Path(folder, f'worker-{os.getpid()}').write_text('')\n    time.sleep(600)\n")
    driver = (f"import sys; sys.path.insert(0, {str(tmp)!r}); import slowjob\nfrom hoplib.sweep import map_points\n"
              f"map_points(slowjob.job, [{str(tmp)!r}] * 2, workers=2)\n")
    parent = subprocess.Popen([sys.executable, "-c", driver], env={**os.environ, "OMP_NUM_THREADS": "1"},
                              stderr=subprocess.DEVNULL)  # its resource tracker's note on the killed pool
    pids: list[int] = []
    try:
        for _ in range(1200):
            pids = [int(p.name.split("-")[1]) for p in tmp.glob("worker-*")]
            if len(pids) == 2 or parent.poll() is not None:
                break
            time.sleep(0.1)
        if len(pids) != 2:
            return "unexpected rc (the workers did not start)"
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        for _ in range(100):
            if not [p for p in pids if _running(p)]:
                return "correct"
            time.sleep(0.1)
        return "silent wrong"  # the workers keep computing (and writing) for a sweep that is gone
    finally:
        parent.kill()
        for p in pids:
            if _running(p):
                os.kill(p, signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _probes_cli(tmp: Path) -> dict[str, str]:
    from hoplib.sweep import slurm_executor

    out: dict[str, str] = {}
    out["cli: run_training --checkpoint-every 0"] = _verdict(*_main_cli(
        "run_training", [*_TINY, "--checkpoint-every", "0", "--out", str(tmp / "ck0")]))
    for extra in (["--steps", "0"], ["--steps", "50"]):
        out[f"cli: run_training --grid quick {' '.join(extra)}"] = _verdict(*_main_cli(
            "run_training", ["--grid", "quick", "--no-progress", *extra, "--out", str(tmp / "g")], _grid=1))
    out["cli: run_efficient_attention --steps 0"] = _verdict(*_main_cli(
        "run_efficient_attention", ["--part", "alphabet", "--steps", "0", "--out", str(tmp / "ea")], run_part=1))
    out["cli: run_gnn --steps 0"] = _verdict(*_main_cli(
        "run_gnn", ["--profile", "quick", "--steps", "0", "--out", str(tmp / "gnn")], run_sweep=1))
    old = os.environ["PATH"]
    os.environ["PATH"] = str(tmp)  # no sbatch here
    try:
        out["cli: --slurm without Slurm"] = _raises_clear(lambda: slurm_executor(tmp / "logs"))
    finally:
        os.environ["PATH"] = old
    out["cli: run_training --slurm for one run (a grid's option)"] = _verdict(*_main_cli(
        "run_training", [*_TINY, "--slurm", "logs", "--out", str(tmp / "sl")]))
    out["cli: kill -9 of a --workers 2 sweep"] = _workers_outlive(tmp / "kill")
    return out


def _probes_tracebacks(tmp: Path) -> dict[str, str]:
    from hoplib.results import load_stored

    out: dict[str, str] = {}
    (tmp / "bad" / "L1").mkdir(parents=True)
    (tmp / "bad" / "L1" / "results.json").write_text("[1, 2]")
    out["traceback: score_runs on a malformed run record"] = _verdict(*_main_cli(
        "score_runs", [str(tmp / "bad"), "--out", str(tmp / "bad.json")]))
    (tmp / "bad2" / "L1" / "results.json").mkdir(parents=True)
    out["traceback: score_runs on a run whose results.json is a folder"] = _verdict(*_main_cli(
        "score_runs", [str(tmp / "bad2"), "--out", str(tmp / "bad2.json")]))
    shutil.copytree(ROOT / "results" / "training" / "small" / "L2_m16_H1_ninf_s0", tmp / "bad3" / "L2")
    (tmp / "bad3" / "L2" / "model.pt").write_bytes(b"not a model")
    out["traceback: score_runs on a run whose model.pt is damaged"] = _verdict(*_main_cli(
        "score_runs", [str(tmp / "bad3"), "--out", str(tmp / "bad3.json")]))
    (tmp / "store2" / "x.json").mkdir(parents=True)
    out["traceback: load_stored of a folder"] = _raises_clear(lambda: load_stored("x.json", root=tmp / "store2"))
    return out


def probes_outside(tmp: Path) -> dict[str, str]:
    """One probe or more per class the outside prober found (see the module doc)."""
    out: dict[str, str] = {}
    for name, probe in (("paths", _probes_paths), ("locks", _probes_locks), ("partials", _probes_partials),
                        ("data", _probes_data), ("cli", _probes_cli), ("tracebacks", _probes_tracebacks)):
        (tmp / name).mkdir()
        out |= probe(tmp / name)
    return out | _probes_construction()


def main(argv: list[str] | None = None) -> int:
    fast = "--fast" in (sys.argv[1:] if argv is None else argv)
    results: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "outside").mkdir()
        results |= probes_outside(tmp / "outside")
        if fast:
            return _summary(results)
        results |= probes_library()
        results |= probes_training(tmp)
        results |= probes_checkpoint(tmp)
        results |= probes_notebooks(tmp)
        results |= probes_output_faults(tmp)
        results |= probes_mid_run(tmp)
        results |= probes_data_loss(tmp)
    return _summary(results)


def _summary(results: dict[str, str]) -> int:
    """Print one line per probe and the counts; 1 if any probe found a fault."""
    for name, verdict in results.items():
        print(f"{verdict:16s} {name}")
    counts = Counter(results.values())
    print(", ".join(f"{v}: {counts[v]}" for v in ("clear error", "correct", "silent wrong", "unhelpful crash",
                                                  "data loss", "path escape")) + f" ({len(results)} probes)")
    bad = counts["silent wrong"] + counts["unhelpful crash"] + counts["data loss"] + counts["path escape"] + sum(
        n for v, n in counts.items() if v.startswith("unexpected"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
