"""The notebook test's two halves, shared by its tests: a fresh environment as a Colab user has it, and nbval's
comparison of a notebook run afresh with the outputs it stores (the web build's, for a chapter)."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"  # what legitimately varies between two runs


def nbval_command(notebook: Path, python: str | os.PathLike = sys.executable) -> list[str]:
    """``python -m pytest --nbval`` on one notebook: every code cell runs in a fresh kernel of ``python`` and its
    text outputs are compared with those the notebook stores, after the sanitize file's substitutions."""
    return [str(python), "-m", "pytest", "--nbval", "--nbval-current-env", "--nbval-sanitize-with", str(SANITIZE),
            "--nbval-cell-timeout", "900", "-p", "no:cacheprovider", "--color=no", "-q", "-rf",
            "--rootdir", str(notebook.parent), str(notebook)]


def run_nbval(notebook: Path, python: str | os.PathLike = sys.executable, env: dict[str, str] | None = None,
              timeout: float = 3600) -> subprocess.CompletedProcess:
    """Run :func:`nbval_command` (from the notebook's folder, where nbval starts its kernel)."""
    env = {k: v for k, v in (env or os.environ).items() if k not in ("PYTEST_ADDOPTS", "PYTHONPATH")}
    return subprocess.run(nbval_command(notebook, python), cwd=notebook.parent, env=env, capture_output=True,
                          text=True, timeout=timeout)


def failed_cells(output: str) -> list[str]:
    """The ``FAILED ...::Cell n`` lines of nbval's summary."""
    return [line for line in output.splitlines() if line.startswith("FAILED")]


def _main_site_packages() -> str:
    return next(p for p in site.getsitepackages() if p.endswith("site-packages"))


def colab_environment(tmp: Path, notebooks: list[Path]) -> dict[str, Path]:
    """A new venv without hoplib, a git repository standing in for the book's public one (hoplib, results/ and
    the given Colab ``notebooks``) and a work folder. The venv sees this environment's third-party packages
    (torch, numpy, jupyter, pytest, nbval: Colab's preinstalled set and the test's tools) through a .pth file,
    but not hoplib: the first notebook run clones the stand-in and installs hoplib from it."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    venv_site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                    check=True, capture_output=True, text=True).stdout.strip())
    (venv_site / "preinstalled.pth").write_text(_main_site_packages() + "\n")
    work = tmp / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run([str(py), "-c", "import hoplib"], cwd=work, capture_output=True, text=True, env=env)
    assert probe.returncode != 0, "hoplib must not be importable before the install cell runs"
    checkout = tmp / "checkout"
    checkout.mkdir()
    for item in ("pyproject.toml", "README.md", "_toc.yml", "_config.yml"):
        shutil.copy(ROOT / item, checkout / item)
    skip = shutil.ignore_patterns("__pycache__", "*.partial.json")
    for folder in ("hoplib", "results"):
        shutil.copytree(ROOT / folder, checkout / folder, ignore=skip)
    (checkout / "chapters").mkdir()
    for nb in notebooks:
        shutil.copy(nb, checkout / "chapters" / nb.name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=checkout, check=True)
    subprocess.run([*git, "add", "."], cwd=checkout, check=True)
    subprocess.run([*git, "commit", "-qm", "snapshot"], cwd=checkout, check=True)
    return {"py": py, "site": venv_site, "work": work, "checkout": checkout}


def colab_run_env(checkout: Path) -> dict[str, str]:
    """The environment of a notebook run: the install cell clones ``checkout``; the thread count is this
    process's (``OMP_NUM_THREADS``), which CI (``.ci/run``) sets once for the build and the tests."""
    env = {**os.environ, "HOPLIB_INSTALL_SOURCE": str(checkout), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    return env
