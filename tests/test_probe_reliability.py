"""scripts/probe_reliability.py --fast: the probes of the outside prober's classes find no fault."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_fast_reliability_probes_find_no_fault():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "probe_reliability.py"), "--fast"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    counts = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "silent wrong: 0, unhelpful crash: 0, data loss: 0, path escape: 0" in counts, counts
    assert int(counts.rpartition("(")[2].split()[0]) >= 30  # every class probed
