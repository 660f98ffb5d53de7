"""The authors' released checkpoints, loaded into :class:`hoplib.models.GPT` and re-evaluated with hoplib.

The authors' repository ``chsanford/hop-induction-heads`` (commit :data:`COMMIT`) holds their step-100000
weights: HuggingFace ``GPT2Model`` state dicts under ``backbone.``, whose final LayerNorm output is the logit
vector (``head="layernorm"`` in hoplib). :func:`download` or :func:`extract_from_git` caches one (hash
checked; never in this repository, which has no licence to copy them), :func:`load` converts it weight for
weight, :func:`evaluate_model` scores it with dropout off and on (the authors' evaluation never called
``.eval()``) and with the head alignment of Appendix G.4.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.error import URLError
from urllib.request import urlopen

import torch

from hoplib import evaluate, report
from hoplib._book.device import get_device
from hoplib.models import GPT, GPTConfig
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
    return RELEASED[name]


def released_task() -> HopTask:
    """The hop_k task of the released models (:data:`TASK_SETTINGS`, inputs of length 99)."""
    return HopTask(**TASK_SETTINGS)


# --------------------------------------------------------------------------- cache, hashes, download
def resolve_cache(cache_dir: str | os.PathLike | None = None) -> Path:
    """``cache_dir``, else ``$HOPLIB_RELEASED_CACHE``, else ``~/.cache/hoplib/released``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "hoplib" / "released"


def cached_path(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    return resolve_cache(cache_dir) / f"{info(name).name}.pt"


def file_digests(path: str | os.PathLike) -> dict[str, str]:
    """``{"sha256", "git_blob"}`` of a file (the git blob id is SHA-1 of ``"blob <size>\\0" + bytes``)."""
    path = Path(path)
    sha256, blob = hashlib.sha256(), hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha256.update(chunk)
            blob.update(chunk)
    return {"sha256": sha256.hexdigest(), "git_blob": blob.hexdigest()}


def verify(path: str | os.PathLike, name: str) -> str:
    """Check that ``path`` holds the released file ``name`` (its SHA-256, else its git blob id); return its
    SHA-256, or raise ``ValueError`` naming the file."""
    digests, want = file_digests(path), SHA256.get(name)
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
    """Names of the released models present in the cache with the right hash."""
    return [n for n in RELEASED if (p := cached_path(n, cache_dir)).is_file() and _is_verified(p, n)]


def _cache_slot(name: str, cache_dir: str | os.PathLike | None) -> tuple[ReleasedModel, Path, Path | None]:
    """``(model, cached path, temporary path to write to)``; no temporary path when a verified copy exists."""
    target = cached_path(name, cache_dir)
    if target.is_file() and _is_verified(target, name):
        return info(name), target, None
    target.parent.mkdir(parents=True, exist_ok=True)
    return info(name), target, target.with_name(f".{target.name}.part")


def _store(tmp: Path, name: str, target: Path) -> Path:
    """Verify the temporary file and move it onto ``target`` atomically (it is removed on failure)."""
    try:
        verify(tmp, name)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def download(name: str, cache_dir: str | os.PathLike | None = None, *, timeout: float = 60.0) -> Path:
    """Fetch released model ``name`` from GitHub into the cache (verified, then renamed into place); a copy
    already cached with the right hash is returned without the network."""
    model, target, tmp = _cache_slot(name, cache_dir)
    if tmp is None:
        return target
    try:
        with urlopen(model.url, timeout=timeout) as response, tmp.open("wb") as fh:
            for chunk in iter(lambda: response.read(1 << 20), b""):
                fh.write(chunk)
    except (URLError, OSError) as exc:
        tmp.unlink(missing_ok=True)
        raise ConnectionError(f"cannot download {name} from {model.url} (no network? "
                              f"{getattr(exc, 'reason', exc)}); copy the file to {target} or use "
                              "hoplib.released.extract_from_git on a clone") from None
    return _store(tmp, name, target)


def extract_from_git(git_dir: str | os.PathLike, name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Copy released model ``name`` out of a local clone (bare or not) of the authors' repository into the
    cache, verified like a download; ``ValueError`` when the clone lacks the commit or the file."""
    model, target, tmp = _cache_slot(name, cache_dir)
    if tmp is None:
        return target
    git = Path(git_dir).expanduser()
    git = git / ".git" if (git / ".git").is_dir() else git
    with tmp.open("wb") as fh:
        proc = subprocess.run(["git", "--git-dir", str(git), "show", f"{COMMIT}:{model.path}"],
                              stdout=fh, stderr=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        tmp.unlink()
        raise ValueError(f"{git_dir} has no {model.path} at {COMMIT[:8]}: {proc.stderr.decode().strip()}")
    return _store(tmp, name, target)


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

    Returns ``(config, state)`` for :class:`hoplib.models.GPT` with the LayerNorm head; depth, width,
    embedding rows and positions come from the tensors, ``heads`` must be given. Every tensor must be used
    (only the causal-mask buffers are skipped), finite and of the right shape; otherwise a ``ValueError``
    names ``source`` and the key: a checkpoint of another configuration must not load half-way.
    """
    if not isinstance(state, dict) or not state:
        raise ValueError(f"{source} is not a checkpoint: expected a non-empty state dict, got {type(state).__name__}")
    hf = {}
    for key, val in state.items():
        if not isinstance(key, str) or not key.startswith("backbone.") or not isinstance(val, torch.Tensor):
            raise ValueError(f"{source}: unexpected key {key!r} or not a tensor (the authors' keys start with "
                             "'backbone.')")
        if not key.endswith(_BUFFERS):
            hf[key.removeprefix("backbone.")] = val
    if missing := [k for k in _TOP_KEYS if k not in hf]:
        raise ValueError(f"{source}: missing key backbone.{missing[0]}")
    rows, m = hf["wte.weight"].shape
    depth = 0
    while f"h.{depth}.ln_1.weight" in hf:
        depth += 1
    if depth == 0 or m % heads:
        raise ValueError(f"{source}: no transformer blocks, or width {m} not a multiple of heads = {heads}")
    cfg = GPTConfig(vocab_size=rows, n_positions=hf["wpe.weight"].shape[0], depth=depth, d_model=m, heads=heads,
                    dropout=dropout, head="layernorm")
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
    return cfg, out


def load_checkpoint(path: str | os.PathLike, device: str | torch.device = "cpu", *,
                    heads: int | None = None) -> GPT:
    """A hoplib GPT (LayerNorm head, dropout 0.1, eval mode) with a released file's weights, read with
    ``torch.load(..., map_location="cpu", weights_only=True)``. ``heads`` defaults to that of the released
    model with the file's hash; for other files it must be given. Bad files raise ``ValueError``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    if heads is None:
        d = file_digests(path)
        match = [n for n in RELEASED if d["sha256"] == SHA256.get(n) or d["git_blob"] == GIT_BLOB[n]]
        if not match:
            raise ValueError(f"{path} is not a released file with a known hash; pass heads= (the authors used "
                             f"H = m / 32: 4 for m = 128, 8 for m = 256)")
        heads = RELEASED[match[0]].heads
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds of errors on foreign files
        raise ValueError(f"{path} is not a torch checkpoint readable with weights_only=True: {exc}") from None
    cfg, mapped = convert_state_dict(state, heads, source=str(path))
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
                        metric: str = "pooled", ks: list[int] | None = None) -> dict[int, float]:
    """Per-k error with dropout on (the model in training mode), as the authors' evaluation ran. Same samples
    as :func:`hoplib.evaluate.per_k_error`; the masks come from ``dropout_seed``; the mode is restored."""
    ks = list(range(task.min_hops, task.max_hops + 1)) if ks is None else list(ks)
    dev, was_training = next(model.parameters()).device, model.training
    out: dict[int, float] = {}
    try:
        model.train()
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
            torch.manual_seed(dropout_seed)
            for k in ks:
                x, y = task.sample(n_samples, k=k, seed=seed + k, device=dev)
                pred = torch.cat([model(x[i:i + 500]).argmax(-1) for i in range(0, n_samples, 500)])
                out[k] = evaluate.errors_from_predictions(pred, y, task, metric)
    finally:
        model.train(was_training)
    return out


def evaluate_model(model: GPT, *, n_samples: int = 500, n_dropout: int = 200, seed: int = 0,
                   ks: list[int] | None = None, n_align: int = 10, align_seed: int = 0,
                   device: str | torch.device = "cpu") -> dict[str, Any]:
    """The ``data`` of ``results/released/<name>.json``: ``errors`` ``{"paper", "pooled", "pooled_dropout"}``,
    each ``{k: error}``, and ``alignment``, Appendix G.4's scores of every head against prev, find^0..16 and
    start for every k (:func:`hoplib.evaluate.best_find_per_head`, stored by :func:`encode_alignment`)."""
    task = released_task()
    ks = list(range(task.min_hops, task.max_hops + 1)) if ks is None else list(ks)
    rows = evaluate.error_records(model, task, n_samples=n_samples, seed=seed, device=device, ks=ks)
    errors = {m: {r["k"]: r["error"] for r in rows if r["metric"] == m} for m in evaluate.METRICS}
    errors["pooled_dropout"] = per_k_error_dropout(model, task, n_samples=n_dropout, seed=seed, ks=ks)
    best = evaluate.best_find_per_head(model, task, ks=ks, js=range(task.max_hops + 1), n_samples=n_align,
                                       seed=align_seed, device=device)
    return {"errors": errors, "alignment": encode_alignment(best)}


def encode_alignment(table: dict[str, Any]) -> dict[str, Any]:
    """Compact JSON form of alignment scores: ``{"ks", "patterns", "scores_permille"}``, the last a nested
    list [layer][head][k] of strings, each the P scores of one cell in thousandths, space-separated."""
    permille = torch.round(torch.as_tensor(table["scores"]).float().clamp(0, 1) * 1000).long().tolist()
    return {"ks": [int(k) for k in table["ks"]], "patterns": list(table["patterns"]),
            "scores_permille": [[[" ".join(map(str, cell)) for cell in head] for head in layer]
                                for layer in permille]}


def decode_alignment(alignment: dict[str, Any]) -> torch.Tensor:
    """The alignment scores (L, H, K, P) of a stored ``alignment`` entry, in [0, 1]."""
    cells = [[[[int(v) for v in cell.split()] for cell in head] for head in layer]
             for layer in alignment["scores_permille"]]
    return torch.tensor(cells, dtype=torch.float32) / 1000


def best_pattern_table(alignment: dict[str, Any], *, authors: bool = False,
                       ks: list[int] | None = None) -> dict[str, Any]:
    """The per-head best pattern for each k (the paper's Figures 14-15) from stored scores, in the format of
    :func:`hoplib.evaluate.best_find_per_head`; ``authors=True`` lets only find^1..find^16 compete."""
    all_scores, stored_ks = decode_alignment(alignment), [int(x) for x in alignment["ks"]]
    ks = stored_ks if ks is None else [int(k) for k in ks]
    names = list(alignment["patterns"])
    keep = [i for i, n in enumerate(names) if not authors or (n.startswith("find^") and n != "find^0")]
    scores = all_scores[:, :, [stored_ks.index(k) for k in ks]][..., keep]
    best_score, best = scores.max(dim=-1)
    return {"ks": ks, "patterns": [names[i] for i in keep], "scores": scores, "best": best,
            "best_score": best_score}


# --------------------------------------------------------------------------- comparison with the paper
def published_errors(path: str | os.PathLike | None = None) -> dict[tuple[int, int, int], dict[int, float]]:
    """The authors' published errors (pooled metric, 100 samples per k, dropout on) as ``{(L, H, n_train):
    {k: error}}`` (n_train = -1: fresh samples), by default from the book's copy
    ``results/training/authors-errors.json``."""
    from hoplib._book.results import results_dir

    path = Path(path) if path is not None else results_dir() / "training" / "authors-errors.json"
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    out: dict[tuple[int, int, int], dict[int, float]] = {}
    for key, val in raw.get("errors", raw).items():
        (depth, heads, n_train), k = ast.literal_eval(key)
        out.setdefault((depth, heads, n_train), {})[int(k)] = float(val)
    return {key: dict(sorted(row.items())) for key, row in sorted(out.items())}


def comparison_table(reevaluated: dict[str, dict[str, Any]],
                     published: dict[tuple[int, int, int], dict[int, float]] | None = None):
    """A pandas DataFrame, one row per (released model, k): name, depth, d_model, heads, n_train (-1 = fresh
    samples), k, published, pooled, paper, pooled_dropout and diff = pooled - published."""
    import pandas as pd

    published = published_errors() if published is None else published
    rows = []
    for name, data in reevaluated.items():
        model, errs = info(name), {m: {int(k): v for k, v in e.items()} for m, e in data["errors"].items()}
        pub = published.get(model.key, {})
        rows += [{"name": name, "depth": model.depth, "d_model": model.d_model, "heads": model.heads,
                  "n_train": model.key[2], "k": k, "published": pub.get(k, math.nan),
                  **{m: errs[m].get(k, math.nan) for m in ("pooled", "paper", "pooled_dropout")}}
                 for k in sorted(errs["pooled"])]
    table = pd.DataFrame(rows)
    if not table.empty:
        table["diff"] = table["pooled"] - table["published"]
    return table


def errors_by_depth(table, column: str = "pooled", *, n_train: int = -1, heads: int = 4) -> dict[int, dict[int, float]]:
    """``{depth: {k: error}}`` of one column of a :func:`comparison_table`, one width and training-set size."""
    rows = table[(table["n_train"] == n_train) & (table["heads"] == heads)]
    return {int(d): {int(k): float(e) for k, e in zip(g["k"], g[column], strict=True)}
            for d, g in rows.groupby("depth")}


def depth_thresholds(errors: dict[int, dict[int, float]], threshold: float = report.THRESHOLD):
    """Per k >= 1: L*(k) (:func:`hoplib.report.smallest_depth`) beside ⌊log₂k⌋+2 and ⌈log₂k⌉+2, and which it
    follows: "both" (a power of two), "floor", "ceil", "below floor", "above ceil"; where no depth reaches
    the threshold, "above floor" if the deepest depth is the floor formula (so L* is at least the ceiling),
    "above ceil" if it is at least the ceiling, else "not reached" (no information). A pandas DataFrame."""
    import pandas as pd

    star, deepest = report.smallest_depth(errors, threshold=threshold), max(errors)
    rows = []
    for k in (k for k in star if k >= 1):
        lo, hi, s = report.depth_floor(k), report.depth_ceil(k), star[k]
        if s is None:
            follows = "above ceil" if deepest >= hi else "above floor" if deepest >= lo else "not reached"
        else:
            follows = ("both" if s == lo == hi else "floor" if s == lo else "ceil" if s == hi else
                       "below floor" if s < lo else "above ceil")
        rows.append({"k": k, "L_star": s, "floor": lo, "ceil": hi, "follows": follows, "max_depth": deepest})
    return pd.DataFrame(rows)


def load_stored_results(folder: str = "released", root: str | os.PathLike | None = None) -> dict[str, Any]:
    """``{name: Stored}`` for every released model with a results file ``results/<folder>/<name>.json``."""
    from hoplib._book.results import load_stored

    found = {n: load_stored(f"{folder}/{n}.json", required=False, root=root) for n in RELEASED}
    return {n: s for n, s in found.items() if s is not None}
