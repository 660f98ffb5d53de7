"""The authors' released checkpoints (HuggingFace ``GPT2Model`` state dicts, LayerNorm head) in hoplib's GPT:
:func:`download` caches one (hash checked; never in this repository: no licence), :func:`load` converts it;
``scripts/evaluate_released.py`` copies them from a clone and scores them with dropout off and on."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.error import URLError
from urllib.request import urlopen

import torch

from hoplib.device import get_device
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

GIT_BLOB = {
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
"""Git blob id (SHA-1 of ``"blob <size>\\0" + content``) of the released files without a known SHA-256."""


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


def _released(name: str) -> ReleasedModel:
    heads, depth, *samples = name.removeprefix("width").split("-")  # m = 32·H: "width4" is m = 128, H = 4
    n_train = {"samples1k": 1000, "samples3k": 3000, "samples10k": 10000}[samples[0]] if samples else None
    return ReleasedModel(name, int(depth.removeprefix("depth")), 32 * int(heads), int(heads), n_train)


RELEASED: dict[str, ReleasedModel] = {name: _released(name) for name in {**SHA256, **GIT_BLOB}}
"""Every released model by name."""


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
    cache = cache_dir or os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "hoplib" / "released"
    return Path(cache).expanduser()


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
    digests = file_digests(path)
    kind, want = ("sha256", SHA256[name]) if name in SHA256 else ("git_blob", GIT_BLOB[name])
    if digests[kind] != want:
        raise ValueError(f"{path} is not the released {name}: {kind.replace('_', ' ')} {digests[kind]}, "
                         f"expected {want}")
    return digests["sha256"]


def _is_verified(path: Path, name: str) -> bool:
    try:
        return path.is_file() and bool(verify(path, name))
    except (OSError, ValueError):
        return False


def available(cache_dir: str | os.PathLike | None = None) -> list[str]:
    """Names of the released models present in the cache with the right hash."""
    return [n for n in RELEASED if _is_verified(cached_path(n, cache_dir), n)]


def fetch_verified(name: str, cache_dir: str | os.PathLike | None, write: Callable[[BinaryIO], None]) -> Path:
    """The cached file ``name``: unless a verified copy exists, ``write`` it to a temporary file, verify
    it, and rename it into place (the temporary file is removed on any failure)."""
    target = cached_path(name, cache_dir)
    if _is_verified(target, name):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.part")
    try:
        with tmp.open("wb") as fh:
            write(fh)
        verify(tmp, name)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def download(name: str, cache_dir: str | os.PathLike | None = None, *, timeout: float = 60.0) -> Path:
    """Fetch released model ``name`` from GitHub into the cache (verified, then renamed into place); a copy
    already cached with the right hash is returned without the network."""
    url, target = info(name).url, cached_path(name, cache_dir)

    def write(fh: BinaryIO) -> None:
        try:
            with urlopen(url, timeout=timeout) as response:
                for chunk in iter(lambda: response.read(1 << 20), b""):
                    fh.write(chunk)
        except (URLError, OSError) as exc:
            raise ConnectionError(f"cannot download {name} from {url} (no network? "
                                  f"{getattr(exc, 'reason', exc)}); copy the file to {target} or use "
                                  "scripts/evaluate_released.py --from-git-dir on a clone") from None

    return fetch_verified(name, cache_dir, write)


# --------------------------------------------------------------------------- loading
_BLOCK_KEYS = {  # HuggingFace GPT2Model block key -> (hoplib Block key, Conv1D weight to transpose)
    "ln_1.weight": ("ln1.weight", False), "ln_1.bias": ("ln1.bias", False),
    "attn.c_attn.weight": ("attn.qkv.weight", True), "attn.c_attn.bias": ("attn.qkv.bias", False),
    "attn.c_proj.weight": ("attn.proj.weight", True), "attn.c_proj.bias": ("attn.proj.bias", False),
    "ln_2.weight": ("ln2.weight", False), "ln_2.bias": ("ln2.bias", False),
    "mlp.c_fc.weight": ("mlp.fc.weight", True), "mlp.c_fc.bias": ("mlp.fc.bias", False),
    "mlp.c_proj.weight": ("mlp.proj.weight", True), "mlp.c_proj.bias": ("mlp.proj.bias", False),
}
_TOP_KEYS = ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias")  # the same names in hoplib's GPT
_BUFFERS = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers that older transformers saved; not weights


def convert_state_dict(state: dict, heads: int, *, source: str = "state dict",
                       dropout: float = DROPOUT) -> tuple[GPTConfig, dict[str, torch.Tensor]]:
    """Map a ``GPT2Encoder`` state dict (``backbone.`` + ``GPT2Model`` keys) to ``(config, state)`` of hoplib's
    GPT. Every tensor must be used, finite and of the right shape, else a ``ValueError`` names ``source`` and
    the key: a checkpoint of another configuration must not load half-way."""
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
    depth = next(i for i in range(len(hf) + 1) if f"h.{i}.ln_1.weight" not in hf)
    (rows, m), n_positions = hf["wte.weight"].shape, hf["wpe.weight"].shape[0]
    if depth == 0 or m % heads:
        raise ValueError(f"{source}: no transformer blocks, or width {m} not a multiple of heads = {heads}")
    cfg = GPTConfig(vocab_size=rows, n_positions=n_positions, depth=depth, d_model=m, heads=heads,
                    dropout=dropout, head="layernorm")
    want, out = GPT(cfg).state_dict(), {}
    pairs = [(k, k, False) for k in _TOP_KEYS]
    pairs += [(f"h.{i}.{k}", f"blocks.{i}.{v}", t) for i in range(depth) for k, (v, t) in _BLOCK_KEYS.items()]
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
        match = [n for n in RELEASED if d["sha256"] == SHA256.get(n) or d["git_blob"] == GIT_BLOB.get(n)]
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
                                f"hoplib.released.download({name!r}) or scripts/evaluate_released.py --from-git-dir")
    verify(path, name)
    return load_checkpoint(path, device, heads=info(name).heads)

# --------------------------------------------------------------------------- stored results
def decode_alignment(alignment: dict[str, Any]) -> torch.Tensor:
    """The alignment scores (L, H, K, P) of a stored ``alignment`` entry, in [0, 1]."""
    cells = [[[[int(v) for v in cell.split()] for cell in head] for head in layer]
             for layer in alignment["scores_permille"]]
    return torch.tensor(cells, dtype=torch.float32) / 1000


def load_stored_results(root: str | os.PathLike | None = None) -> dict[str, Any]:
    """``{name: Stored}`` for every released model with a results file ``results/released/<name>.json``."""
    from hoplib.results import load_stored

    found = {n: load_stored(f"released/{n}.json", required=False, root=root) for n in RELEASED}
    return {n: s for n, s in found.items() if s is not None}
