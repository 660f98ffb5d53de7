"""Tests of hoplib.released and scripts/evaluate_released.py: the authors' checkpoints in hoplib's GPT, their
cache and their evaluation."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
from pathlib import Path
from urllib.error import URLError

import matplotlib
import pytest
import torch
import torch.nn as nn
from _scripts import load_script

from hoplib import evaluate, models, released
from hoplib.tasks import HopTask

matplotlib.use("Agg")
transformers = pytest.importorskip("transformers")
script = load_script("evaluate_released")


class Encoder(nn.Module):
    """The authors' GPT2Encoder (src/models.py): a GPT2Model under the attribute ``backbone``."""

    def __init__(self, depth: int = 2, width: int = 32, heads: int = 4):
        super().__init__()
        cfg = transformers.GPT2Config(vocab_size=30, n_positions=100, n_embd=width, n_layer=depth, n_head=heads,
                                      use_cache=False, summary_type="cls_index", attn_implementation="eager")
        self.backbone = transformers.GPT2Model(cfg)

    def forward(self, ids):
        return self.backbone(ids).last_hidden_state  # the authors' logits: the final LayerNorm's output


def random_encoder(seed: int = 0, **kw) -> Encoder:
    torch.manual_seed(seed)
    enc = Encoder(**kw)
    with torch.no_grad():  # LayerNorms start at gain 1, bias 0: randomise them so the mapping is really tested
        for name, p in enc.named_parameters():
            if "ln_" in name:
                p.add_(0.3 * torch.randn_like(p))
    return enc.eval()


def save(state: dict, path: Path) -> Path:
    torch.save(state, path)
    return path


@pytest.fixture
def checkpoint(tmp_path):
    enc = random_encoder()
    return enc, save(enc.state_dict(), tmp_path / "model_100000.pt")


def test_saved_format_is_backbone_prefixed_gpt2_state_dict(checkpoint):
    enc, path = checkpoint
    keys = list(torch.load(path, map_location="cpu", weights_only=True))
    assert all(k.startswith("backbone.") for k in keys) and "backbone.h.0.attn.c_attn.weight" in keys


def test_loaded_checkpoint_matches_huggingface_forward_on_hop_inputs(checkpoint):
    enc, path = checkpoint
    model = released.load_checkpoint(path, heads=4)
    assert model.config.head == "layernorm" and model.config.depth == 2 and model.config.d_model == 32
    assert (model.config.vocab_size, model.config.n_positions) == (30, 100) and not model.training
    x, _ = HopTask().sample(16, seed=3)
    with torch.no_grad():
        ref = enc(x)
        ours = model(x)
    assert ours.shape == ref.shape == (16, 99, 32)
    assert torch.allclose(ours, ref, atol=1e-5, rtol=0)
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))


def test_loaded_checkpoint_attention_matches_huggingface_attentions(checkpoint):
    enc, path = checkpoint
    model = released.load_checkpoint(path, heads=4)
    x, _ = HopTask().sample(4, seed=5)
    with torch.no_grad():
        ref = enc.backbone(x, output_attentions=True).attentions
        _, ours = model(x, return_attention=True)
    assert len(ours) == len(ref) == 2
    for a, b in zip(ours, ref, strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_loaded_checkpoint_keeps_every_released_tensor_exactly(checkpoint):
    enc, path = checkpoint
    sd = released.load_checkpoint(path, heads=4).state_dict()
    src = enc.backbone.state_dict()
    assert torch.equal(sd["blocks.1.attn.qkv.weight"], src["h.1.attn.c_attn.weight"].t())
    assert torch.equal(sd["blocks.0.mlp.proj.weight"], src["h.0.mlp.c_proj.weight"].t())
    assert torch.equal(sd["ln_f.bias"], src["ln_f.bias"]) and torch.equal(sd["wpe.weight"], src["wpe.weight"])
    assert sum(p.numel() for p in src.values()) == models.count_parameters(released.load_checkpoint(path, heads=4))


def test_old_causal_mask_buffers_are_ignored(checkpoint, tmp_path):
    enc, _ = checkpoint
    state = dict(enc.state_dict())
    state["backbone.h.0.attn.bias"] = torch.ones(1, 1, 100, 100).tril().bool()
    state["backbone.h.0.attn.masked_bias"] = torch.tensor(-1e4)
    model = released.load_checkpoint(save(state, tmp_path / "old.pt"), heads=4)
    assert model.config.depth == 2


def test_unknown_file_without_heads_asks_for_heads(checkpoint):
    _, path = checkpoint
    with pytest.raises(ValueError, match="pass heads="):
        released.load_checkpoint(path)


@pytest.mark.parametrize("damage, match", [
    (lambda s: s.pop("backbone.ln_f.bias"), "missing key backbone.ln_f.bias"),
    (lambda s: s.pop("backbone.h.1.mlp.c_fc.bias"), "missing key backbone.h.1.mlp.c_fc.bias"),
    (lambda s: s.__setitem__("backbone.h.0.attn.c_proj.weight", torch.zeros(32, 33)), "has shape"),
    (lambda s: s["backbone.h.1.ln_2.weight"].__setitem__(3, float("nan")), "non-finite"),
    (lambda s: s.__setitem__("backbone.h.5.ln_1.weight", torch.ones(32)), "unused keys"),
    (lambda s: s.__setitem__("lm_head.weight", torch.ones(30, 32)), "unexpected key"),
    (lambda s: s.__setitem__("backbone.wte.weight", [1, 2]), "not a tensor"),
])
def test_damaged_checkpoints_raise_value_error_naming_file_and_key(checkpoint, tmp_path, damage, match):
    enc, _ = checkpoint
    state = {k: v.clone() for k, v in enc.state_dict().items()}
    damage(state)
    path = save(state, tmp_path / "damaged.pt")
    with pytest.raises(ValueError, match=match) as err:
        released.load_checkpoint(path, heads=4)
    assert "damaged.pt" in str(err.value)


def test_files_that_are_not_checkpoints_raise_value_error(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ValueError, match="junk.pt is not a torch checkpoint"):
        released.load_checkpoint(junk, heads=4)
    tensor = save(torch.ones(3), tmp_path / "tensor.pt")
    with pytest.raises(ValueError, match="tensor.pt is not a checkpoint"):
        released.load_checkpoint(tensor, heads=4)
    with pytest.raises(FileNotFoundError):
        released.load_checkpoint(tmp_path / "absent.pt", heads=4)
    with pytest.raises(TypeError):
        released.load_checkpoint(3, heads=4)


def test_heads_must_divide_the_width(checkpoint):
    _, path = checkpoint
    with pytest.raises(ValueError, match="not a multiple of heads"):
        released.load_checkpoint(path, heads=5)


# --------------------------------------------------------------------------- names, cache, download
def test_names_cover_the_released_grid_with_their_shapes():
    names = released.names()
    assert len(names) == 25 and len(set(names)) == 25
    assert set(names) == set(released.SHA256) | set(released.GIT_BLOB)  # one digest per file
    assert not set(released.SHA256) & set(released.GIT_BLOB)
    m = released.info("width8-depth6")
    assert (m.depth, m.d_model, m.heads, m.n_train, m.key) == (6, 256, 8, None, (6, 8, -1))
    assert released.info("width4-depth3-samples10k").n_train == 10000
    assert m.url.startswith(f"https://raw.githubusercontent.com/{released.REPOSITORY}/{released.COMMIT}/")
    with pytest.raises(KeyError):
        released.info("width4-depth9")


def fake_release(monkeypatch, name: str, payload: bytes) -> None:
    """Pretend ``payload`` is the released file ``name`` (its SHA-256 is the one stored)."""
    monkeypatch.setitem(released.SHA256, name, hashlib.sha256(payload).hexdigest())


def test_download_verifies_and_caches_then_needs_no_network(tmp_path, monkeypatch):
    payload = b"weights of width4-depth2"
    fake_release(monkeypatch, "width4-depth2", payload)
    calls = []
    monkeypatch.setattr(released, "urlopen", lambda url, timeout: calls.append(url) or io.BytesIO(payload))
    path = released.download("width4-depth2", tmp_path)
    assert path == tmp_path / "width4-depth2.pt" and path.read_bytes() == payload
    assert calls == [released.info("width4-depth2").url]
    assert released.available(tmp_path) == ["width4-depth2"]

    def no_network(url, timeout):
        raise AssertionError("the network must not be touched when the file is cached")

    monkeypatch.setattr(released, "urlopen", no_network)
    assert released.download("width4-depth2", tmp_path) == path


def test_download_offline_raises_one_line_connection_error(tmp_path, monkeypatch):
    def offline(url, timeout):
        raise URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(released, "urlopen", offline)
    with pytest.raises(ConnectionError, match="cannot download width4-depth3 .*no network") as err:
        released.download("width4-depth3", tmp_path)
    assert "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []  # no partial file left behind


def test_download_with_wrong_content_is_rejected_and_not_cached(tmp_path, monkeypatch):
    fake_release(monkeypatch, "width4-depth2", b"the real weights")
    monkeypatch.setattr(released, "urlopen", lambda url, timeout: io.BytesIO(b"something else"))
    with pytest.raises(ValueError, match="is not the released width4-depth2"):
        released.download("width4-depth2", tmp_path)
    assert list(tmp_path.iterdir()) == [] and released.available(tmp_path) == []


def test_files_without_sha256_are_verified_by_git_blob_id(tmp_path, monkeypatch):
    payload = b"depth-6 weights"
    blob = hashlib.sha1(f"blob {len(payload)}\0".encode() + payload).hexdigest()
    monkeypatch.setitem(released.GIT_BLOB, "width4-depth6", blob)
    path = tmp_path / "width4-depth6.pt"
    path.write_bytes(payload)
    assert released.verify(path, "width4-depth6") == hashlib.sha256(payload).hexdigest()
    path.write_bytes(payload + b"!")
    with pytest.raises(ValueError, match="git blob"):
        released.verify(path, "width4-depth6")


def test_cache_folder_comes_from_argument_then_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(released.CACHE_ENV, str(tmp_path / "env"))
    assert released.resolve_cache() == tmp_path / "env"
    assert released.resolve_cache(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv(released.CACHE_ENV)
    assert released.resolve_cache() == Path.home() / ".cache" / "hoplib" / "released"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_extract_from_git_copies_the_file_at_the_commit(tmp_path, monkeypatch, checkpoint):
    enc, ckpt = checkpoint
    repo = tmp_path / "clone"
    target = repo / released.info("width4-depth2").path
    target.parent.mkdir(parents=True)
    shutil.copy(ckpt, target)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "models"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    monkeypatch.setattr(released, "COMMIT", head)
    fake_release(monkeypatch, "width4-depth2", ckpt.read_bytes())
    path = script.extract_from_git(repo, "width4-depth2", tmp_path / "cache")
    assert path.read_bytes() == ckpt.read_bytes()
    model = released.load("width4-depth2", tmp_path / "cache")  # heads from the registry: H = 4
    assert model.config.heads == 4
    with pytest.raises(ValueError, match="has no"):
        script.extract_from_git(repo, "width4-depth3", tmp_path / "cache")
    with pytest.raises(ValueError, match="not a git repository"):
        script.extract_from_git(tmp_path / "cache", "width4-depth3", tmp_path / "cache")


def test_load_of_a_model_not_in_the_cache_says_how_to_fetch_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="download"):
        released.load("width4-depth2", tmp_path)


# --------------------------------------------------------------------------- evaluation
@pytest.fixture
def small_model(checkpoint):
    return released.load_checkpoint(checkpoint[1], heads=4)


def test_dropout_evaluation_is_reproducible_differs_from_eval_mode_and_restores_mode(small_model):
    task = released.released_task()
    a = script.per_k_error_dropout(small_model, task, n_samples=8, ks=[1, 4], dropout_seed=1)
    b = script.per_k_error_dropout(small_model, task, n_samples=8, ks=[1, 4], dropout_seed=1)
    assert a == b and list(a) == [1, 4] and not small_model.training
    off = evaluate.per_k_error(small_model, task, n_samples=8, ks=[1, 4], metric="pooled", device="cpu")
    x, _ = task.sample(8, k=4, seed=4)
    small_model.train()
    with torch.no_grad():
        noisy = small_model(x)
    small_model.eval()
    assert not torch.allclose(noisy, small_model(x).detach())  # dropout really is on in training mode
    assert set(off) == set(a)


def test_evaluate_model_returns_both_metrics_dropout_errors_and_alignment(small_model):
    data = script.evaluate_model(small_model, n_samples=4, n_dropout=2, ks=[1, 2], n_align=2)
    assert set(data["errors"]) == {"paper", "pooled", "pooled_dropout"}
    assert all(set(e) == {1, 2} and all(0 <= v <= 1 for v in e.values()) for e in data["errors"].values())
    json.dumps(data)  # storable as JSON
    scores = released.decode_alignment(data["alignment"])
    assert scores.shape == (2, 4, 2, 19) and data["alignment"]["patterns"][0] == "prev"
    direct = evaluate.best_find_per_head(small_model, released.released_task(), ks=[2], js=range(17),
                                         n_samples=2, device="cpu")["scores"][:, :, 0]
    assert torch.allclose(scores[:, :, 1], direct, atol=5e-4)


def test_alignment_encoding_round_trips_to_a_thousandth():
    scores = torch.rand(3, 2, 4, 5)
    table = {"ks": [1, 2, 3, 4], "patterns": ["prev", "find^0", "find^1", "find^2", "start"], "scores": scores}
    enc = script.encode_alignment(table)
    assert torch.allclose(released.decode_alignment(enc), scores, atol=5e-4)
    enc["scores_permille"][0][0].pop()
    with pytest.raises(ValueError):
        released.decode_alignment(enc)


# --------------------------------------------------------------------------- the real released files, if cached
@pytest.mark.skipif("width4-depth2" not in released.available(), reason="released checkpoint not in the cache")
def test_released_depth2_model_has_table3_parameters_and_matches_huggingface():
    model = released.load("width4-depth2")
    assert models.count_parameters(model) == 413_440  # Table 3 of the paper, L = 2, m = 128
    enc = Encoder(depth=2, width=128, heads=4)
    enc.load_state_dict(torch.load(released.cached_path("width4-depth2"), map_location="cpu", weights_only=True))
    x, _ = released.released_task().sample(8, seed=0)
    with torch.no_grad():
        ref, ours = enc.eval()(x), model(x)
    assert torch.allclose(ours, ref, atol=1e-4, rtol=1e-5)
    top2 = ref.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1]) > 1e-3  # the trained model has exact ties at a few positions
    assert clear.float().mean() > 0.95 and torch.equal(ours.argmax(-1)[clear], ref.argmax(-1)[clear])


# --------------------------------------------------------------------------- summaries of stored results
def test_load_stored_results_finds_files_by_model_name(tmp_path):
    from hoplib.results import save_results

    save_results(tmp_path / "released" / "width4-depth3.json", {"errors": {}}, {}, "cpu")
    (tmp_path / "released" / "unrelated.json").write_text("{}")
    found = released.load_stored_results(root=tmp_path)
    assert list(found) == ["width4-depth3"] and found["width4-depth3"].data == {"errors": {}}


def test_evaluation_script_writes_results_with_checkpoint_provenance_and_skips_done_ones(tmp_path, monkeypatch,
                                                                                        checkpoint):
    mod = script
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(checkpoint[1], cache / "width4-depth2.pt")
    fake_release(monkeypatch, "width4-depth2", checkpoint[1].read_bytes())
    args = ["--out", str(tmp_path / "released"), "--cache-dir", str(cache), "--names", "width4-depth2",
            "--n-samples", "2", "--n-dropout", "2", "--n-align", "1"]
    assert mod.main(args) == 0
    stored = released.load_stored_results(root=tmp_path)["width4-depth2"]
    prov = stored.record["provenance"]
    assert prov["checkpoint_commit"] == released.COMMIT and prov["checkpoint_file"].endswith("model_100000.pt")
    assert prov["checkpoint_sha256"] == hashlib.sha256(checkpoint[1].read_bytes()).hexdigest()
    assert stored.data["model"]["parameters"] == models.count_parameters(released.load("width4-depth2", cache))
    assert set(stored.data["errors"]["pooled"]) == {str(k) for k in range(17)}
    before = stored.path.stat().st_mtime_ns
    assert mod.main(args) == 0 and stored.path.stat().st_mtime_ns == before  # done: skipped
    assert mod.main(["--out", str(tmp_path / "x"), "--cache-dir", str(tmp_path / "empty")]) == 1
