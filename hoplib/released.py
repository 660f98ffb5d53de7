"""The authors' released checkpoints, loaded into :class:`hoplib.models.GPT` and re-evaluated with hoplib.

Section 4.2 and Appendix G of the paper train GPT-2 transformers on hop_k; the authors' repository
``chsanford/hop-induction-heads`` (commit :data:`COMMIT`) holds the step-100000 weights of those models in
``models/induction_hops_full_seq/<name>/model_100000.pt``: HuggingFace ``GPT2Model`` state dicts of their
``GPT2Encoder`` wrapper (keys ``backbone.<GPT2Model key>``, ``Conv1D`` weights stored as (in, out)), saved from
Apple MPS tensors, so they load only with a CPU ``map_location``. Their model has no output layer: the final
LayerNorm's output is the logit vector (paper-spec section 7), which is ``head="layernorm"`` in hoplib.

This module

* lists the released models (:func:`names`, :data:`RELEASED`), fetches one from GitHub into a local cache and
  checks its hash (:func:`download`), or copies it out of a local clone (:func:`extract_from_git`);
* converts a checkpoint into a hoplib GPT with exactly its weights (:func:`load_checkpoint`, :func:`load`);
* re-evaluates a model with hoplib's own data and metrics, per-k errors (Section 4.2) and the head alignment
  scores of Appendix G.4 (:func:`evaluate_model`), and with dropout left on, as the authors' evaluation ran
  (:func:`per_k_error_dropout`);
* compares re-evaluated and published errors (:func:`published_errors`, :func:`comparison_table`), finds the
  empirical depth threshold per k and the formula it follows, ⌊log₂k⌋+2 or ⌈log₂k⌉+2 (Theorem 4.2 and its
  matching bound; :func:`depth_thresholds`), and draws the alignment heatmap (:func:`plot_alignment`);
* reads the stored re-evaluations back for the book (:func:`load_stored_results`) and summarises them
  (:func:`wide_table`, :func:`difference_summary`, :func:`plot_errors`, :func:`best_pattern_table`).

The weights are never copied into the book's repository (the authors' repository has no licence file): they
live in :func:`resolve_cache`, ``~/.cache/hoplib/released`` unless ``$HOPLIB_RELEASED_CACHE`` or an argument says
otherwise. The repository also lists depth-6 and width-8 models; they are listed here with their git blob ids,
so :func:`download` can verify them too, but no SHA-256 of them was available when this module was written.
"""

from __future__ import annotations

import hashlib
import math
import os
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.error import URLError
from urllib.request import urlopen

import torch

from hoplib import evaluate
from hoplib._book.device import get_device
from hoplib._book.validate import check_choice, check_int
from hoplib.models import GPT, GPTConfig
from hoplib.report import chance_error, depth_ceil, depth_floor
from hoplib.tasks import HopTask

REPOSITORY = "chsanford/hop-induction-heads"
COMMIT = "5735bca9545545774098994e21392b51b285bcc5"
STEP = 100000
MODEL_DIR = "models/induction_hops_full_seq"
CACHE_ENV = "HOPLIB_RELEASED_CACHE"
TASK_SETTINGS = {"seq_len": 100, "alphabet_size": 4, "max_hops": 16, "min_hops": 0}
"""The task of every released model (their ``task_kwargs``: seq_len 100, char_tokens 4, hops 0..16)."""
DROPOUT = 0.1  # HuggingFace GPT2Config's default, used in training and left on in the authors' evaluation
PUBLISHED_N_SAMPLES = 100
"""Test sequences per k behind the published errors (``samples_per_hop`` of the authors' ``error_plots.ipynb``)."""

GIT_BLOB = {
    "width4-depth2": "29f328f97f7f1eba0eb15a2c389bb33460239e80",
    "width4-depth2-samples1k": "69edf3b0b55310c8e04bd816cb66a533cf5bc25d",
    "width4-depth2-samples3k": "3a112fd0e82ef98dd1b8c09711d0a04a0fece150",
    "width4-depth2-samples10k": "936a450fb90f98795e4c8b4f79d45433a716fd6d",
    "width4-depth3": "c8f9053ab7ae5dd37cb1f5a38bf99978fff827e5",
    "width4-depth3-samples1k": "20305ce35377e59c644627adb1caf4b7bd4f2330",
    "width4-depth3-samples3k": "6b5588b5b02b35c6a596d6ad31313a0775e2df7c",
    "width4-depth3-samples10k": "9e95653d2c18f35b625ccef2acc4e946bd803e43",
    "width4-depth4": "397ceebedd2f78295918417a40cdc3c4a88d2795",
    "width4-depth4-samples1k": "fb8af6a43e9d8e199af4bc308a9f2aad90940362",
    "width4-depth4-samples3k": "97d28c88dc9fb1d4d635639d6c653aaa5c3549a9",
    "width4-depth4-samples10k": "dceda125f1273b24bb53762660b620e02e74304a",
    "width4-depth5": "3617d83ab260ff1a50bd95e75cf0ba73ba73117e",
    "width4-depth5-samples1k": "b1adcb5b958728e84dd2d19c365959cfe485576d",
    "width4-depth5-samples3k": "d5c3d00b1a19fe80fb4bfd2e808ac1146c9e241a",
    "width4-depth5-samples10k": "98bf25a0edab14ba31dd356ea6b990d0b70eb79f",
    "width4-depth6": "162db0685f9bf2e43d722283e0687496f6aa2841",
    "width4-depth6-samples1k": "fdccc36f8dce6017b34bc662da9fff06124bbf65",
    "width4-depth6-samples3k": "d7e6e2231c5b415d176d9c50db9372fee4bea371",
    "width4-depth6-samples10k": "672eaeeb3285dd9ae0c3f26d2fd15fd193794bf4",
    "width8-depth2": "ef6c34e0283f49713693661bdc1be3d2c687f9c2",
    "width8-depth3": "e00d3ffdeea06c06c45445e3f771137a5928e37a",
    "width8-depth4": "eaa05d268223efa0615b0c3667ae4444bc479e3f",
    "width8-depth5": "0755f53fe10b790f3b26e43f8ac6a3df9ead8b60",
    "width8-depth6": "468c2a988c61d42181a50dc2bf71fe746ddf086f",
}
"""Git blob id (SHA-1 of ``"blob <size>\\0" + content``) of every released ``model_100000.pt`` at :data:`COMMIT`."""

SHA256 = {
    "width4-depth2": "6cc682f5b8f37c7b2f33d123b09cd902377ca3adb4a6021ff8e1c0d35eaf4f19",
    "width4-depth2-samples1k": "d78e9d7063d72f84635f9f6f9bfb4d1ffe63fd41c81eaebe07209781ef74a427",
    "width4-depth2-samples3k": "5451b654ea7ca1f49d8533bd960a7a2c3653a31308c994e3c6de7a5c7495cc6f",
    "width4-depth2-samples10k": "97c4b046f4f3436f8f4c0a8dd79b31ab107e7a12c3cfb2f400833ddf7b0f4c8e",
    "width4-depth3": "f993472878b663f9d9fc4f43ee8e42a7dc8dd882d71ad1a0a481db134ac61400",
    "width4-depth3-samples1k": "a1e4b0c0492e7c6ddf467d8d670879999cf20f0576b73b92f12370a17ddb98e2",
    "width4-depth3-samples3k": "9307468eb23689604c166bab6826f79f5cea6744e3ff06f7b88b09ee01a49756",
    "width4-depth3-samples10k": "c8dd04bb122986260febad7aa8d12e05db35646e976108f91af78d5ceb983f30",
    "width4-depth4": "5d4c6913b6da5769e32c1fcd1d461f53f54f8fb66e642aca832158d99ef4514b",
    "width4-depth4-samples1k": "509c0b846e7264a550da2a89d9963c00f345d36f2c316e81e3b578e32d284c9d",
    "width4-depth4-samples3k": "64d902c712b3412c2847ef94bdb3b5b3cf6063810f5f199f85c24dda9748af36",
    "width4-depth4-samples10k": "656f143a34af7329f81030c18dbf5efc83b8fcc1903568bbfeb6466c5b054790",
    "width4-depth5": "a6137a50ce3e00caf72f49ae7c5c457fe6a255fdc1c593f737d349935f9cff27",
    "width4-depth5-samples1k": "74c3c806d03281cf19bcbd075562438c1db367d6f48b9442e08f18d2cb3c8929",
    "width4-depth5-samples3k": "62067794e04cb35ad8ae970187a3153409a20c791f8fb853383e665fb01d9193",
    "width4-depth5-samples10k": "9ef6090365606d7ab58c8a37c52759c81e6854c5c932f638a6bd0fe5815723b0",
}
"""SHA-256 of the released files that could be read from a clone of :data:`COMMIT` (all m = 128, L = 2..5)."""

_SAMPLES = {"": None, "-samples1k": 1000, "-samples3k": 3000, "-samples10k": 10000}


@dataclass(frozen=True)
class ReleasedModel:
    """One released model: its folder name, depth L, width m, heads H and training-set size (None = fresh data)."""

    name: str
    depth: int
    d_model: int
    heads: int
    n_train: int | None

    @property
    def path(self) -> str:
        """The file's path inside the authors' repository."""
        return f"{MODEL_DIR}/{self.name}/model_{STEP}.pt"

    @property
    def url(self) -> str:
        """The raw GitHub URL of the file at :data:`COMMIT`."""
        return f"https://raw.githubusercontent.com/{REPOSITORY}/{COMMIT}/{self.path}"

    @property
    def key(self) -> tuple[int, int, int]:
        """The key ``(L, H, n_train)`` of the authors' ``errors.json`` (n_train = -1 for fresh samples)."""
        return (self.depth, self.heads, -1 if self.n_train is None else self.n_train)

    @property
    def label(self) -> str:
        """A short label, e.g. ``'L=4, m=128, n=1000'``."""
        return f"L={self.depth}, m={self.d_model}, n={'∞' if self.n_train is None else self.n_train}"


def _released() -> dict[str, ReleasedModel]:
    out = {}
    for name in GIT_BLOB:
        width, depth = name.split("-")[:2]
        heads = int(width.removeprefix("width"))
        n_train = _SAMPLES[name.removeprefix(f"{width}-{depth}")]
        out[name] = ReleasedModel(name, int(depth.removeprefix("depth")), 32 * heads, heads, n_train)
    return out


RELEASED: dict[str, ReleasedModel] = _released()
"""Every released model by name (m = 32·H as in the authors' configs: "width4" is m = 128, H = 4)."""


def names() -> list[str]:
    """Names of all released models, as the folders of the authors' repository (``'width4-depth2-samples1k'``)."""
    return list(RELEASED)


def info(name: str) -> ReleasedModel:
    """The :class:`ReleasedModel` called ``name`` (a ``ValueError`` lists the names for an unknown one)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}")
    if name not in RELEASED:
        raise ValueError(f"name must be one of the released models {names()}, got {name!r}")
    return RELEASED[name]


def released_task() -> HopTask:
    """The hop_k task of the released models (:data:`TASK_SETTINGS`, inputs of length 99)."""
    return HopTask(**TASK_SETTINGS)


# --------------------------------------------------------------------------- cache, hashes, download
def resolve_cache(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where checkpoints are kept: ``cache_dir``, else ``$HOPLIB_RELEASED_CACHE``, else ``~/.cache/hoplib/released``."""
    if cache_dir is not None:
        if not isinstance(cache_dir, (str, os.PathLike)):
            raise TypeError(f"cache_dir must be a path, got {type(cache_dir).__name__}")
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "hoplib" / "released"


def cached_path(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache file of model ``name``: ``<cache>/<name>.pt`` (it may not exist; see :func:`resolve_cache`)."""
    return resolve_cache(cache_dir) / f"{info(name).name}.pt"


def file_digests(path: str | os.PathLike) -> dict[str, str]:
    """``{"sha256": ..., "git_blob": ...}`` of a file (the git blob id is SHA-1 of ``"blob <size>\\0" + bytes``)."""
    path = Path(path)
    sha256 = hashlib.sha256()
    blob = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha256.update(chunk)
            blob.update(chunk)
    return {"sha256": sha256.hexdigest(), "git_blob": blob.hexdigest()}


def verify(path: str | os.PathLike, name: str) -> str:
    """Check that ``path`` holds the released file ``name``: its SHA-256 (:data:`SHA256`), else its git blob id.

    Returns the file's SHA-256; raises ``ValueError`` naming the file on a mismatch.
    """
    info(name)
    digests = file_digests(path)
    want = SHA256.get(name)
    if want is not None and digests["sha256"] != want:
        raise ValueError(f"{path} is not the released {name}: sha256 {digests['sha256']}, expected {want}")
    if want is None and digests["git_blob"] != GIT_BLOB[name]:
        raise ValueError(f"{path} is not the released {name}: git blob {digests['git_blob']}, "
                         f"expected {GIT_BLOB[name]}")
    return digests["sha256"]


def _is_verified(path: Path, name: str) -> bool:
    try:
        verify(path, name)
    except (OSError, ValueError):
        return False
    return True


def available(cache_dir: str | os.PathLike | None = None) -> list[str]:
    """Names of the released models present in the cache with the right hash, in the order of :func:`names`."""
    return [n for n in RELEASED if (p := cached_path(n, cache_dir)).is_file() and _is_verified(p, n)]


def _store(data_path: Path, name: str, target: Path) -> Path:
    """Verify the temporary file ``data_path`` and move it onto ``target`` atomically (it is removed on failure)."""
    try:
        verify(data_path, name)
        os.replace(data_path, target)
    finally:
        if data_path.exists():
            data_path.unlink()
    return target


def _cache_slot(name: str, cache_dir: str | os.PathLike | None) -> tuple[ReleasedModel, Path, Path | None]:
    """``(model, cached path, temporary path to write to)``; the temporary path is None when a verified copy
    is already cached."""
    model = info(name)
    target = cached_path(name, cache_dir)
    if target.is_file() and _is_verified(target, name):
        return model, target, None
    target.parent.mkdir(parents=True, exist_ok=True)
    return model, target, target.with_name(f".{target.name}.part")


def download(name: str, cache_dir: str | os.PathLike | None = None, *, timeout: float = 60.0) -> Path:
    """Fetch released model ``name`` from GitHub (raw file at :data:`COMMIT`) into the cache; return its path.

    A file already cached with the right hash is returned without touching the network. The download goes to a
    temporary file, is verified (:func:`verify`) and renamed into place. Without network access this raises
    ``ConnectionError`` in one line, saying what to do instead.
    """
    model, target, tmp = _cache_slot(name, cache_dir)
    if tmp is None:
        return target
    try:
        with urlopen(model.url, timeout=timeout) as response, tmp.open("wb") as fh:
            for chunk in iter(lambda: response.read(1 << 20), b""):
                fh.write(chunk)
    except (URLError, OSError) as exc:
        if tmp.exists():
            tmp.unlink()
        reason = getattr(exc, "reason", exc)
        raise ConnectionError(f"cannot download {name} from {model.url} (no network? {reason}); copy the file "
                              f"to {target} or use hoplib.released.extract_from_git on a clone") from None
    return _store(tmp, name, target)


def extract_from_git(git_dir: str | os.PathLike, name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Copy released model ``name`` out of a local clone (bare or not) of the authors' repository into the cache.

    Reads ``<COMMIT>:<path>`` with ``git show``; the file is verified like a download. Raises ``ValueError``
    when the clone lacks the commit or the file.
    """
    model, target, tmp = _cache_slot(name, cache_dir)
    if tmp is None:
        return target
    with tmp.open("wb") as fh:
        proc = subprocess.run(["git", "--git-dir", str(_git_dir(git_dir)), "show", f"{COMMIT}:{model.path}"],
                              stdout=fh, stderr=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        tmp.unlink()
        raise ValueError(f"{git_dir} has no {model.path} at {COMMIT[:8]}: {proc.stderr.decode().strip()}")
    return _store(tmp, name, target)


def _git_dir(path: str | os.PathLike) -> Path:
    path = Path(path).expanduser()
    if (path / ".git").is_dir():
        return path / ".git"
    if not (path / "objects").is_dir():
        raise ValueError(f"{path} is not a git repository (no objects/ or .git/ folder)")
    return path


# --------------------------------------------------------------------------- loading
_BLOCK_KEYS = {  # HuggingFace GPT2Model block key -> (hoplib Block key, Conv1D weight to transpose)
    "ln_1.weight": ("ln1.weight", False), "ln_1.bias": ("ln1.bias", False),
    "attn.c_attn.weight": ("attn.qkv.weight", True), "attn.c_attn.bias": ("attn.qkv.bias", False),
    "attn.c_proj.weight": ("attn.proj.weight", True), "attn.c_proj.bias": ("attn.proj.bias", False),
    "ln_2.weight": ("ln2.weight", False), "ln_2.bias": ("ln2.bias", False),
    "mlp.c_fc.weight": ("mlp.fc.weight", True), "mlp.c_fc.bias": ("mlp.fc.bias", False),
    "mlp.c_proj.weight": ("mlp.proj.weight", True), "mlp.c_proj.bias": ("mlp.proj.bias", False),
}
_TOP_KEYS = {"wte.weight": "wte.weight", "wpe.weight": "wpe.weight", "ln_f.weight": "ln_f.weight",
             "ln_f.bias": "ln_f.bias"}
_BUFFERS = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers that older transformers saved; not weights


def convert_state_dict(state: dict, heads: int, *, source: str = "state dict",
                       dropout: float = DROPOUT) -> tuple[GPTConfig, dict[str, torch.Tensor]]:
    """Map a ``GPT2Encoder`` state dict (``backbone.`` + HuggingFace ``GPT2Model`` keys) to hoplib's GPT.

    Returns ``(config, state)`` for :class:`hoplib.models.GPT` with the LayerNorm head. Depth, width, embedding
    rows and positions are read from the tensors; ``heads`` cannot be and must be given. Every tensor must be
    used (only the causal-mask buffers ``attn.bias``/``attn.masked_bias`` are skipped), finite and of the right
    shape; otherwise a ``ValueError`` names ``source`` and the key.
    """
    heads = check_int("heads", heads, low=1)
    if not isinstance(state, dict) or not state:
        raise ValueError(f"{source} is not a checkpoint: expected a non-empty state dict, got {type(state).__name__}")
    hf = {}
    for key, val in state.items():
        if not isinstance(key, str) or not key.startswith("backbone."):
            raise ValueError(f"{source}: unexpected key {key!r} (the authors' keys start with 'backbone.')")
        if not isinstance(val, torch.Tensor):
            raise ValueError(f"{source}: {key} is a {type(val).__name__}, not a tensor")
        if not key.endswith(_BUFFERS):
            hf[key.removeprefix("backbone.")] = val
    for key in _TOP_KEYS:
        if key not in hf:
            raise ValueError(f"{source}: missing key backbone.{key}")
    rows, m = hf["wte.weight"].shape if hf["wte.weight"].dim() == 2 else (0, 0)
    if not m or hf["wpe.weight"].dim() != 2:
        raise ValueError(f"{source}: backbone.wte.weight and backbone.wpe.weight must be 2-D")
    depth = 0
    while f"h.{depth}.ln_1.weight" in hf:
        depth += 1
    if depth == 0:
        raise ValueError(f"{source}: no transformer blocks (backbone.h.0.ln_1.weight is missing)")
    if m % heads:
        raise ValueError(f"{source}: width {m} is not a multiple of heads = {heads}")
    cfg = GPTConfig(vocab_size=rows, n_positions=hf["wpe.weight"].shape[0], depth=depth, d_model=m, heads=heads,
                    dropout=dropout, head="layernorm")
    return cfg, _mapped(hf, cfg, source)


def _mapped(hf: dict[str, torch.Tensor], cfg: GPTConfig, source: str) -> dict[str, torch.Tensor]:
    want = GPT(cfg).state_dict()
    out: dict[str, torch.Tensor] = {}
    pairs = [(k, v, False) for k, v in _TOP_KEYS.items()]
    pairs += [(f"h.{i}.{k}", f"blocks.{i}.{v}", t) for i in range(cfg.depth) for k, (v, t) in _BLOCK_KEYS.items()]
    for hf_key, key, transpose in pairs:
        if hf_key not in hf:
            raise ValueError(f"{source}: missing key backbone.{hf_key}")
        val = hf.pop(hf_key).detach().to("cpu", torch.float32)
        val = val.t() if transpose and val.dim() == 2 else val
        if val.shape != want[key].shape:
            shape = tuple(want[key].t().shape if transpose else want[key].shape)
            raise ValueError(f"{source}: backbone.{hf_key} has shape {tuple(val.shape)}, expected {shape}")
        if not bool(torch.isfinite(val).all()):
            raise ValueError(f"{source}: backbone.{hf_key} has non-finite values (NaN or inf)")
        out[key] = val.contiguous()
    if hf:
        raise ValueError(f"{source}: unused keys {sorted('backbone.' + k for k in hf)[:5]} "
                         f"(a deeper or different model?)")
    return out


def _heads_of(path: Path) -> int:
    digests = file_digests(path)
    match = [n for n in RELEASED if digests["sha256"] == SHA256.get(n) or digests["git_blob"] == GIT_BLOB[n]]
    if not match:
        raise ValueError(f"{path} is not a released file with a known hash; pass heads= (the authors used "
                         f"H = m / 32: 4 for m = 128, 8 for m = 256)")
    return RELEASED[match[0]].heads


def load_checkpoint(path: str | os.PathLike, device: str | torch.device = "cpu", *,
                    heads: int | None = None) -> GPT:
    """A hoplib :class:`~hoplib.models.GPT` (LayerNorm head, dropout 0.1, eval mode) with a released file's weights.

    ``path`` is a ``model_100000.pt`` of the authors (or any state dict in their format). ``heads`` defaults to
    that of the released model with the file's SHA-256; for other files it must be given. The file is read with
    ``torch.load(..., map_location="cpu", weights_only=True)`` (the authors saved MPS tensors). Bad files (not
    a checkpoint, missing or unused keys, wrong shapes, NaN) raise ``ValueError`` naming the file.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file path, got {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds of errors on foreign files
        raise ValueError(f"{path} is not a torch checkpoint readable with weights_only=True: {exc}") from None
    cfg, mapped = convert_state_dict(state, _heads_of(path) if heads is None else heads, source=str(path))
    model = GPT(cfg)
    model.load_state_dict(mapped, strict=True)
    return model.to(get_device(device)).eval()


def load(name: str, cache_dir: str | os.PathLike | None = None, device: str | torch.device = "cpu") -> GPT:
    """Released model ``name`` from the cache (verified; see :func:`download` to fetch it)."""
    path = cached_path(name, cache_dir)
    if not path.is_file():
        raise FileNotFoundError(f"{name} is not in the cache {path.parent}; fetch it with "
                                f"hoplib.released.download({name!r}) or extract_from_git")
    verify(path, name)
    return load_checkpoint(path, device, heads=info(name).heads)


# --------------------------------------------------------------------------- evaluation
@torch.no_grad()
def per_k_error_dropout(model: GPT, task: HopTask, *, n_samples: int = 100, seed: int = 0, dropout_seed: int = 0,
                        metric: str = "pooled", ks: Iterable[int] | None = None) -> dict[int, float]:
    """Per-k error (Section 4.2) with the model in training mode, dropout on, as the authors' evaluation ran.

    Their notebook never calls ``.eval()``, so the published errors were measured with dropout 0.1 active. Same
    samples as :func:`hoplib.evaluate.per_k_error` (``seed + k``); the dropout masks come from ``dropout_seed``.
    Data and masks are made on the model's device; the model's mode is restored.
    """
    if not isinstance(model, torch.nn.Module) or not isinstance(task, HopTask):
        raise TypeError(f"model must be a torch.nn.Module and task a HopTask, got {type(model).__name__} and "
                        f"{type(task).__name__}")
    check_choice("metric", metric, evaluate.METRICS)
    seed = check_int("seed", seed, low=0, high=2**30 - 1 - task.max_hops)
    n_samples = check_int("n_samples", n_samples, low=1)
    ks = (list(range(task.min_hops, task.max_hops + 1)) if ks is None
          else [check_int("ks[i]", k, low=task.min_hops, high=task.max_hops) for k in ks])
    dev = next(model.parameters()).device
    was_training = model.training
    out: dict[int, float] = {}
    try:
        model.train()
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
            torch.manual_seed(check_int("dropout_seed", dropout_seed, low=0))
            for k in ks:
                x, y = task.sample(n_samples, k=k, seed=seed + k, device=dev)
                pred = torch.cat([model(x[i:i + 500]).argmax(-1) for i in range(0, n_samples, 500)])
                out[k] = evaluate.errors_from_predictions(pred, y, task, metric)
    finally:
        model.train(was_training)
    return out


def evaluate_model(model: GPT, *, n_samples: int = 500, n_dropout: int = 200, seed: int = 0,
                   ks: Iterable[int] | None = None, n_align: int = 10, align_seed: int = 0,
                   device: str | torch.device = "cpu") -> dict[str, Any]:
    """Re-evaluate a released model on hoplib's data: the JSON-ready ``data`` of ``results/released/<name>.json``.

    ``errors``: ``{"paper", "pooled", "pooled_dropout"}`` each ``{k: error}`` (Section 4.2; the last with dropout
    on and ``n_dropout`` samples per k, see :func:`per_k_error_dropout`); ``alignment``: Appendix G.4's scores
    of every head against prev, find^0..16 and start for every k, from
    :func:`hoplib.evaluate.best_find_per_head` on ``n_align`` samples per k (:func:`encode_alignment`).
    """
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a hoplib.models.GPT, got {type(model).__name__}")
    task = released_task()
    ks = list(range(task.min_hops, task.max_hops + 1)) if ks is None else list(ks)
    rows = evaluate.error_records(model, task, n_samples=n_samples, seed=seed, device=device, ks=ks)
    errors = {m: {r["k"]: r["error"] for r in rows if r["metric"] == m} for m in evaluate.METRICS}
    errors["pooled_dropout"] = per_k_error_dropout(model, task, n_samples=n_dropout, seed=seed, ks=ks)
    best = evaluate.best_find_per_head(model, task, ks=ks, js=range(task.max_hops + 1), n_samples=n_align,
                                       seed=align_seed, device=device)
    return {"errors": errors, "alignment": encode_alignment(best)}


def encode_alignment(table: dict[str, Any]) -> dict[str, Any]:
    """Compact JSON form of :func:`hoplib.evaluate.best_find_per_head`'s scores: ``{"ks", "patterns",
    "scores_permille"}``, the last a nested list [layer][head][k] of strings, each the P scores of one cell in
    thousandths, space-separated, in the order of ``patterns`` (read back with :func:`decode_alignment`)."""
    if not isinstance(table, dict) or not {"ks", "patterns", "scores"} <= set(table):
        raise TypeError("table must be the dict returned by hoplib.evaluate.best_find_per_head")
    permille = torch.round(torch.as_tensor(table["scores"]).float().clamp(0, 1) * 1000).long().tolist()
    return {"ks": [int(k) for k in table["ks"]], "patterns": list(table["patterns"]),
            "scores_permille": [[[" ".join(map(str, cell)) for cell in head] for head in layer]
                                for layer in permille]}


def decode_alignment(alignment: dict[str, Any]) -> torch.Tensor:
    """The alignment scores (L, H, K, P) of a stored ``alignment`` entry (:func:`encode_alignment`), in [0, 1]."""
    if not isinstance(alignment, dict) or not {"ks", "patterns", "scores_permille"} <= set(alignment):
        raise TypeError("alignment must be the 'alignment' entry of a released results file")
    cells = [[[[int(v) for v in cell.split()] for cell in head] for head in layer]
             for layer in alignment["scores_permille"]]
    scores = torch.tensor(cells, dtype=torch.float32) / 1000
    if scores.dim() != 4 or scores.shape[2:] != (len(alignment["ks"]), len(alignment["patterns"])):
        raise ValueError(f"alignment scores have shape {tuple(scores.shape)}, expected (L, H, "
                         f"{len(alignment['ks'])}, {len(alignment['patterns'])})")
    return scores


# --------------------------------------------------------------------------- comparison with the paper
def published_errors(path: str | os.PathLike | None = None) -> dict[tuple[int, int, int], dict[int, float]]:
    """The authors' published errors (their ``local/errors.json``, pooled metric, 100 samples per k, dropout on).

    ``{(L, H, n_train): {k: error}}`` with n_train = -1 for fresh samples; read from ``path``, by default the
    book's copy ``results/training/authors-errors.json`` (which wraps them under ``"errors"``).
    """
    import ast
    import json

    from hoplib._book.results import results_dir

    path = Path(path) if path is not None else results_dir() / "training" / "authors-errors.json"
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    raw = raw.get("errors", raw) if isinstance(raw, dict) else raw
    if not isinstance(raw, dict):
        raise ValueError(f"{path} is not an errors.json of the authors (a dict of '((L, H, n), k)' keys)")
    out: dict[tuple[int, int, int], dict[int, float]] = {}
    for key, val in raw.items():
        (depth, heads, n_train), k = ast.literal_eval(key)
        out.setdefault((depth, heads, n_train), {})[int(k)] = float(val)
    return {key: dict(sorted(row.items())) for key, row in sorted(out.items())}


def comparison_table(reevaluated: dict[str, dict[str, Any]],
                     published: dict[tuple[int, int, int], dict[int, float]] | None = None):
    """A pandas DataFrame, one row per (released model, k): published error beside hoplib's re-evaluation.

    ``reevaluated`` maps model names to the ``data`` of their results files (:func:`evaluate_model`). Columns:
    name, depth, d_model, heads, n_train (-1 = fresh samples), k, published, pooled, paper, pooled_dropout and
    diff = pooled - published.
    """
    import pandas as pd

    if not isinstance(reevaluated, dict):
        raise TypeError(f"reevaluated must be a dict name -> results data, got {type(reevaluated).__name__}")
    published = published_errors() if published is None else published
    rows = []
    for name, data in reevaluated.items():
        model = info(name)
        pub = published.get(model.key, {})
        errs = {m: {int(k): v for k, v in e.items()} for m, e in data["errors"].items()}
        for k in sorted(errs["pooled"]):
            rows.append({"name": name, "depth": model.depth, "d_model": model.d_model, "heads": model.heads,
                         "n_train": model.key[2], "k": k, "published": pub.get(k, math.nan),
                         **{m: errs[m].get(k, math.nan) for m in ("pooled", "paper", "pooled_dropout")}})
    table = pd.DataFrame(rows)
    if not table.empty:
        table["diff"] = table["pooled"] - table["published"]
    return table


def depth_thresholds(errors: dict[int, dict[int, float]], threshold: float = 0.05, ks: Iterable[int] | None = None):
    """Per k >= 1: the smallest depth with error <= ``threshold`` and which depth formula it follows.

    ``errors`` is ``{depth: {k: error}}``. Returns a pandas DataFrame with columns k, L_star (None when no
    depth reaches the threshold), floor (⌊log₂k⌋+2), ceil (⌈log₂k⌉+2), max_depth and follows: ``"both"`` (L* is
    the common value at a power of two), ``"floor"``, ``"ceil"``, ``"below floor"`` (shallower than both
    formulas), ``"above ceil"`` (deeper than both, or no depth reaches the threshold although the deepest is
    at least the ceil formula), ``"above floor"`` (no depth reaches it, the deepest is the floor formula, so
    L* is the ceil formula or more) or ``"not reached"`` (no depth reaches it and the deepest is shallower than
    both formulas: no information).
    """
    import pandas as pd

    if not isinstance(errors, dict) or not errors:
        raise ValueError("errors must be a non-empty dict {depth: {k: error}}")
    if not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be a number in [0, 1], got {threshold!r}")
    depths = sorted(errors)
    all_ks = sorted({int(k) for row in errors.values() for k in row if int(k) >= 1})
    ks = all_ks if ks is None else [check_int("ks[i]", k, low=1) for k in ks]
    rows = []
    for k in ks:
        star = next((d for d in depths if errors[d].get(k, math.inf) <= threshold), None)
        lo, hi = depth_floor(k), depth_ceil(k)
        if star is None:  # L* > max depth: informative only when the formulas ask for no more than that
            follows = "above ceil" if depths[-1] >= hi else "above floor" if depths[-1] >= lo else "not reached"
        else:
            follows = ("both" if star == lo == hi else "floor" if star == lo else "ceil" if star == hi else
                       "below floor" if star < lo else "above ceil")
        rows.append({"k": k, "L_star": star, "floor": lo, "ceil": hi, "follows": follows,
                     "max_depth": depths[-1]})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- figures
def plot_alignment(alignment: dict[str, Any], k: int, ax=None, *, title: str = "",
                   patterns: Iterable[str] | None = None):
    """Heatmap of Appendix G.4's alignment scores of a released model on hop_k (the paper's Figures 11-13).

    One row per (layer, head), 1-based (``L1 h1``), one column per pattern (prev, find^j, start), colour =
    score in [0, 1] with a colour bar. ``alignment`` is the ``"alignment"`` entry of a results file
    (:func:`evaluate_model`); ``patterns`` selects columns (default all). Returns the axes.
    """
    import matplotlib.pyplot as plt

    all_scores = decode_alignment(alignment).numpy()
    ks = [int(x) for x in alignment["ks"]]
    if k not in ks:
        raise ValueError(f"k must be one of the evaluated hop counts {ks}, got {k!r}")
    names = list(alignment["patterns"])
    cols = names if patterns is None else list(patterns)
    if unknown := [p for p in cols if p not in names]:
        raise ValueError(f"patterns must be among {names}, got {unknown}")
    scores = all_scores[:, :, ks.index(k)]  # (L, H, P)
    n_layers, n_heads, _ = scores.shape
    grid = scores[:, :, [names.index(p) for p in cols]].reshape(n_layers * n_heads, len(cols))
    if ax is None:
        _, ax = plt.subplots(figsize=(0.42 * len(cols) + 2.5, 0.3 * n_layers * n_heads + 1.5))
    img = ax.imshow(grid, vmin=0, vmax=1, cmap="Blues", aspect="auto", interpolation="nearest")
    ax.figure.colorbar(img, ax=ax, label="alignment score", fraction=0.04, pad=0.02)
    labels = [p.replace("find^", "") if p.startswith("find^") else p for p in cols]
    ax.set_xticks(range(len(cols)), labels)
    ax.set_yticks(range(n_layers * n_heads),
                  [f"L{la + 1} h{h + 1}" for la in range(n_layers) for h in range(n_heads)])
    for la in range(1, n_layers):
        ax.axhline(la * n_heads - 0.5, color="black", lw=0.8)
    ax.set_xlabel("pattern: j of find^j, prev(ious token) or start")
    ax.set_title(title or f"alignment with find^j on hop_{k}")
    return ax


def plot_alignments(alignment: dict[str, Any], ks: Sequence[int], *, label: str = "",
                    patterns: Iterable[str] | None = None):
    """:func:`plot_alignment` for each k of ``ks``, stacked (one full-width panel per k, titled
    ``"{label}, hop_k"``); returns the figure."""
    import matplotlib.pyplot as plt

    ks = [check_int("ks[i]", k, low=0) for k in ks]
    if not ks:
        raise ValueError("ks must name at least one hop count")
    cols = list(patterns) if patterns is not None else None
    n_rows = int(decode_alignment(alignment).shape[0] * decode_alignment(alignment).shape[1])
    fig, axes = plt.subplots(len(ks), 1, figsize=(8, (0.3 * n_rows + 1.6) * len(ks)), squeeze=False)
    for ax, k in zip(axes[:, 0], ks, strict=True):
        plot_alignment(alignment, k, ax, patterns=cols, title=f"{label}, hop_{k}" if label else "")
    fig.tight_layout()
    return fig


def best_pattern_table(alignment: dict[str, Any], *, authors: bool = False,
                       ks: Iterable[int] | None = None) -> dict[str, Any]:
    """The per-head best pattern for each k (the paper's Figures 14-15) from stored alignment scores.

    Same format as :func:`hoplib.evaluate.best_find_per_head` (for :func:`hoplib.plots.plot_best_pattern`).
    ``authors=True`` restricts the candidates to find^1..find^16, as the authors' figures do; otherwise prev,
    find^0..16 and start all compete. ``ks`` (default all stored) selects columns.
    """
    all_scores = decode_alignment(alignment)
    stored_ks = [int(x) for x in alignment["ks"]]
    ks = stored_ks if ks is None else [int(k) for k in ks]
    if missing := [k for k in ks if k not in stored_ks]:
        raise ValueError(f"ks must be among the stored hop counts {stored_ks}, got {missing}")
    names = list(alignment["patterns"])
    keep = [i for i, n in enumerate(names) if not authors or (n.startswith("find^") and n != "find^0")]
    scores = all_scores[:, :, [stored_ks.index(k) for k in ks]]
    scores = scores[..., keep]
    best_score, best = scores.max(dim=-1)
    return {"ks": ks, "patterns": [names[i] for i in keep], "scores": scores, "best": best,
            "best_score": best_score}


# --------------------------------------------------------------------------- stored results and summaries
COLUMNS = {"published": "published (dropout on, 100 samples)", "pooled": "hoplib (dropout off)",
           "paper": "hoplib, paper metric (dropout off)", "pooled_dropout": "hoplib (dropout on)"}
"""The error columns of :func:`comparison_table` and how figures and tables label them."""


def load_stored_results(folder: str = "released", root: str | os.PathLike | None = None) -> dict[str, Any]:
    """``{name: Stored}`` for every released model with a results file ``results/<folder>/<name>.json``.

    Uses :func:`hoplib._book.results.load_stored`; models without a stored file are left out.
    """
    from hoplib._book.results import load_stored

    found = {n: load_stored(f"{folder}/{n}.json", required=False, root=root) for n in RELEASED}
    return {n: s for n, s in found.items() if s is not None}


def errors_by_depth(table, column: str = "pooled", *, n_train: int = -1, heads: int = 4) -> dict[int, dict[int, float]]:
    """``{depth: {k: error}}`` of one column of a :func:`comparison_table`, for one width and training-set size."""
    check_choice("column", column, tuple(COLUMNS))
    rows = table[(table["n_train"] == n_train) & (table["heads"] == heads)]
    return {int(d): {int(k): float(e) for k, e in zip(g["k"], g[column], strict=True)}
            for d, g in rows.groupby("depth")}


def wide_table(table, *, n_train: int = -1, ks: Iterable[int] = (1, 2, 3, 4, 6, 8, 12, 16),
               columns: Iterable[str] = ("published", "pooled", "pooled_dropout"), heads: int = 4):
    """A display table: one row per (depth, source), one column per k (the layout of the paper's tables)."""
    import pandas as pd

    ks, columns = [int(k) for k in ks], list(columns)
    for c in columns:
        check_choice("columns[i]", c, tuple(COLUMNS))
    rows = table[(table["n_train"] == n_train) & (table["heads"] == heads) & table["k"].isin(ks)]
    if rows.empty:
        raise ValueError(f"table has no rows with n_train={n_train}, heads={heads} and k in {ks}")
    out = rows.melt(id_vars=["depth", "k"], value_vars=columns, var_name="source", value_name="error")
    out["source"] = pd.Categorical(out["source"].map(COLUMNS), [COLUMNS[c] for c in columns], ordered=True)
    return out.pivot_table(index=["depth", "source"], columns="k", values="error", observed=True)


def difference_summary(table, *, min_k: int = 1, min_published: float = 0.01,
                       max_published: float = 0.5) -> dict[str, float]:
    """How re-evaluated errors differ from the published ones, over all (model, k >= ``min_k``) rows.

    ``mean_abs_off`` / ``max_abs_off``: |hoplib (dropout off) - published|; ``mean_abs_on`` / ``max_abs_on``:
    the same with dropout on; ``share_lower_off``: share of rows where hoplib's dropout-off error is lower;
    ``lowest_published_not_lower``: the smallest published error among the other rows (nan if none);
    ``median_ratio_off``: median of hoplib (dropout off) / published over the ``rows_ratio`` rows whose
    published error lies strictly between ``min_published`` and ``max_published`` (solved and near-chance
    cells left out); ``rows``: the number of rows.
    """
    check_int("min_k", min_k, low=0)
    for name, val in (("min_published", min_published), ("max_published", max_published)):
        if not isinstance(val, (int, float)) or not 0 <= val <= 1:
            raise ValueError(f"{name} must be a number in [0, 1], got {val!r}")
    rows = table[(table["k"] >= min_k) & table["published"].notna()]
    if rows.empty:
        raise ValueError("table has no rows with a published error")
    off, on = (rows["pooled"] - rows["published"]).abs(), (rows["pooled_dropout"] - rows["published"]).abs()
    lower = rows["pooled"] < rows["published"]
    mid = rows[(rows["published"] > min_published) & (rows["published"] < max_published)]
    return {"rows": int(len(rows)), "mean_abs_off": float(off.mean()), "max_abs_off": float(off.max()),
            "mean_abs_on": float(on.mean()), "max_abs_on": float(on.max()),
            "share_lower_off": float(lower.mean()),
            "lowest_published_not_lower": float(rows.loc[~lower, "published"].min()) if (~lower).any() else math.nan,
            "rows_ratio": int(len(mid)), "median_ratio_off": float((mid["pooled"] / mid["published"]).median())}


def plot_errors(table, ax=None, *, n_train: int = -1, column: str = "pooled", heads: int = 4, title: str = ""):
    """Error against k (log scale), one colour per depth: ``column`` solid, the published errors dashed.

    The layout of the paper's Figure 2 (``n_train=-1``) and Figures 16-19 (finite ``n_train``).
    """
    import matplotlib.pyplot as plt

    ax = ax or plt.gca()
    ours = errors_by_depth(table, column, n_train=n_train, heads=heads)
    pub = errors_by_depth(table, "published", n_train=n_train, heads=heads)
    if not ours:
        raise ValueError(f"table has no rows with n_train={n_train} and heads={heads}")
    cmap = plt.get_cmap("viridis")
    for i, depth in enumerate(sorted(ours)):
        colour = cmap(i / max(1, len(ours) - 1) * 0.85)
        ks = [k for k in sorted(ours[depth]) if k >= 1]
        ax.plot(ks, [ours[depth][k] for k in ks], "o-", ms=3, color=colour, label=f"L={depth}")
        ax.plot(ks, [pub[depth].get(k, math.nan) for k in ks], "--", color=colour, alpha=0.6)
    ax.axhline(chance_error(released_task()), color="grey", ls=":", lw=1)  # chance, from the task
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8, 16], ["1", "2", "4", "8", "16"])
    ax.set_ylim(-0.02, 0.8)
    ax.set_xlabel("k")
    ax.set_ylabel("error")
    ax.set_title(title or f"n = {'∞' if n_train == -1 else n_train}")
    ax.legend(loc="best", ncols=2, handlelength=1.2, columnspacing=0.8)
    return ax


def plot_error_grid(table, sizes: Sequence[int], *, column: str = "pooled", heads: int = 4, ncols: int = 2):
    """:func:`plot_errors` for every training-set size of ``sizes`` present in ``table`` (``-1``: fresh
    samples, the paper's Figure 2; the others its Figures 16-19), ``ncols`` panels a row, one shared error axis,
    sized for the page's width. Returns the figure."""
    import matplotlib.pyplot as plt

    ncols = check_int("ncols", ncols, low=1)
    panels = [int(n) for n in sizes if (table["n_train"] == n).any()]
    if not panels:
        raise ValueError(f"table has no rows for any of the sizes {list(sizes)}")
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.8 * ncols, 3.2 * nrows), sharey=True, squeeze=False)
    for ax, n in zip(axes.flat, panels, strict=False):
        plot_errors(table, ax, n_train=n, column=column, heads=heads)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig
