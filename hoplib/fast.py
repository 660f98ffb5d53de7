"""Fused CPU kernels that train the GPT of :mod:`hoplib.models` faster, computing the same maths.

Training the authors' model (Section 4.2 and Appendix G of the paper: L = 6, m = 128, H = 4, batch 32,
99 tokens, dropout 0.1) on one CPU core with the plain model spends about half of a step outside the matrix
products of the linear layers: drawing dropout masks (``torch.bernoulli_``), the tanh GELU, attention (the
math path of ``scaled_dot_product_attention``, which materialises and post-processes the full masked score
matrix when dropout is on), broadcasting biases into the outputs of ``addmm`` and reshaping heads. This module
replaces those pieces by small C loops, compiled once with the system's C compiler and loaded with
:mod:`ctypes`, while the products of the linear layers stay torch (MKL) calls:

* dropout and "residual + dropout" with masks from a counter-based hash (two rounds of the ``lowbias32``
  integer hash of the element index, keyed by a 64-bit seed drawn from torch's global generator): each
  element is kept with probability 1 - p (to 2^-32) and scaled by 1/(1 - p), exactly the distribution of
  ``torch.nn.functional.dropout``; the backward pass recomputes the mask from the seed instead of storing it;
* GELU with the tanh approximation (HF's ``gelu_new``); the backward pass recomputes the sigmoid rather than
  reading a stored copy (the pass is bound by memory traffic, not arithmetic);
* causal attention with dropout on the weights, per (sequence, head): the score, weighted-value and gradient
  products skip the blocks above the diagonal (about half the work of full products; register tiles of
  4 rows x 16 columns), the softmax and its dropout are fused in, and the kernels write the (B, T, m) output
  and (B, T, 3m) gradient directly, without head merge copies.
  Head sizes that are not multiples of 8 use torch's batched products around the fused softmax instead;
* the biases of the four linear maps of a block are added inside the kernel that consumes their output
  (attention, GELU, residual + dropout), and their gradients are summed there too;
  :func:`linear` is ``F.linear`` without bias with a backward of exactly two matrix products.

The model's maths, parameters and state-dict keys are unchanged (:func:`gpt_forward` reads the parameters
of a :class:`hoplib.models.GPT`); only the dropout masks come from another random stream than torch's, and
float rounding differs (own ``exp``, about 1 ulp; other summation orders). With dropout 0 :func:`gpt_forward`
matches ``model(ids)`` to float tolerance (tests/test_train.py checks logits, gradients and several training
steps). The kernels are compiled with ``-ffast-math`` (vectorised reductions): a NaN in an input need not
propagate through every kernel's output, though it still reaches the loss through the others.

The kernels are CPU-only and single-threaded. :func:`available` says whether they could be built (a C
compiler is needed; the shared library is cached under ``$HOPLIB_CACHE`` or ``~/.cache/hoplib``); where they
are not, or on CUDA/MPS, :func:`hoplib.train.fit` with ``fused=True`` falls back to the model's own forward.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

_SOURCE_FILE = Path(__file__).with_name("fast_kernels.c")  # the C side, compiled on first use

# -ffast-math lets GCC vectorise the loops (reductions, clamps); -mno-recip keeps x86's vectorised division exact
# (otherwise a reciprocal estimate: GELU's 1 - sigmoid near 1 would be off by an ulp, and its gradient with it).
_CFLAGS = ("-O3", "-march=native", "-ffast-math", "-fPIC",
           *(("-mno-recip",) if platform.machine().lower() in ("x86_64", "amd64", "i386", "i686") else ()))
_I64, _U64, _U32, _F32, _P = ctypes.c_int64, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_float, ctypes.c_void_p
_SIGNATURES = {
    "hb_dropout_fwd": (_P, _P, _P, _P, _I64, _I64, _U64, _U32, _F32),
    "hb_dropout_bwd": (_P, _P, _P, _I64, _I64, _U64, _U32, _F32),
    "hb_gelu_fwd": (_P, _P, _P, _I64, _I64),
    "hb_gelu_bwd": (_P, _P, _P, _P, _P, _I64, _I64),
    "hb_split_heads": (_P, _P, _P, _I64, _I64, _I64, _I64),
    "hb_softmax_drop_fwd": (_P, _P, _I64, _I64, _F32, _U64, _U32, _F32),
    "hb_softmax_drop_bwd": (_P, _P, _I64, _I64, _F32, _U64, _U32, _F32),
    "hb_attn_fwd": (_P, _P, _P, _P, _P, _P, _P, _P, _I64, _I64, _I64, _I64, _I64, _F32, _U64, _U32, _F32),
    "hb_attn_bwd": (_P, _P, _P, _P, _P, _P, _P, _P, _I64, _I64, _I64, _I64, _I64, _F32, _U64, _U32, _F32),
}
_SEED_MASK = 2**63 - 1  # seeds travel through autograd as Python ints; keep them within int64
_STATE: dict[str, Any] = {"lib": None, "error": None, "compile_time_s": None, "path": None, "tried": False}


def _cpu_tag() -> str:
    """What -march=native depends on: the CPU's flags (Linux) or its name, plus the compiler's version."""
    tag = platform.machine() + platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                tag += line
                break
    except OSError:
        pass
    return tag


def _cache_dir() -> Path:
    base = os.environ.get("HOPLIB_CACHE")
    if base:
        return Path(base)
    home = Path.home() / ".cache" / "hoplib"
    try:
        home.mkdir(parents=True, exist_ok=True)
        if os.access(home, os.W_OK):
            return home
    except OSError:
        pass
    return Path(tempfile.gettempdir()) / f"hoplib-{os.getuid() if hasattr(os, 'getuid') else 'user'}"


def _build(cc: str) -> Path:
    """Compile the kernels (object with -ffast-math, then a plain link: no flush-to-zero side effects)."""
    source = _SOURCE_FILE.read_text()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    key = hashlib.sha256("\0".join([source, " ".join(_CFLAGS), version, _cpu_tag()]).encode()).hexdigest()[:16]
    folder = _cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"hoplib_fast_{key}.so"
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        c, o, so = Path(tmp) / "k.c", Path(tmp) / "k.o", Path(tmp) / "k.so"
        c.write_text(source)
        for cmd in ([cc, *_CFLAGS, "-c", str(c), "-o", str(o)], [cc, "-shared", str(o), "-o", str(so), "-lm"]):
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()[:500]}")
        os.replace(so, target)  # atomic: concurrent builders each install a complete file
    return target


def load_kernels() -> ctypes.CDLL | None:
    """The compiled kernels (built on first use and cached), or None if they cannot be built here."""
    if _STATE["tried"]:
        return _STATE["lib"]
    _STATE["tried"] = True
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc") or shutil.which("clang")
    if cc is None:
        _STATE["error"] = "no C compiler found (set CC or install gcc)"
        return None
    t0 = time.perf_counter()
    try:
        path = _build(cc)
        lib = ctypes.CDLL(str(path))
        for name, args in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, None
    except (OSError, RuntimeError, subprocess.SubprocessError, AttributeError) as exc:
        _STATE["error"] = f"{type(exc).__name__}: {exc}"
        return None
    _STATE.update(lib=lib, path=str(path), compile_time_s=time.perf_counter() - t0)
    return lib


def available() -> bool:
    """Whether the fused CPU kernels can be used in this process (builds them on first call)."""
    return load_kernels() is not None


def status() -> dict[str, Any]:
    """Build status: ``available``, ``error`` (why not), ``load_time_s`` (compile or cache load), ``path``."""
    load_kernels()
    return {"available": _STATE["lib"] is not None, "error": _STATE["error"],
            "load_time_s": _STATE["compile_time_s"], "path": _STATE["path"]}


def _lib() -> ctypes.CDLL:
    lib = load_kernels()
    if lib is None:
        raise RuntimeError(f"hoplib.fast kernels are not available: {_STATE['error']}")
    return lib


def _ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


def _check_float_cpu(name: str, t: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu" or t.dtype != torch.float32:
        raise ValueError(f"{name} must be a float32 CPU tensor, got {t.dtype} on {t.device}")
    if t.numel() >= 2**32:
        raise ValueError(f"{name} must have fewer than 2**32 elements (32-bit random counters), got {t.numel()}")


def _dropout_params(p: float) -> tuple[int, float]:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= float(p) < 1.0:
        raise ValueError(f"p must be a float in [0, 1), got {p!r}")
    return min(2**32 - 1, round(float(p) * 2**32)), 1.0 / (1.0 - float(p))


def _mix64(x: int) -> int:
    """splitmix64 finaliser: independent-looking 64-bit seeds from consecutive integers."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def draw_seed(generator: torch.Generator | None = None) -> int:
    """A 64-bit kernel seed drawn from torch's (global or given) CPU generator, so checkpoints that store the
    RNG state resume the same dropout masks."""
    return _mix64(int(torch.randint(0, 2**62, (), generator=generator)))


def dropout_mask(shape: tuple[int, ...], p: float, seed: int) -> torch.Tensor:
    """The keep mask (bool) that the kernels use for a tensor of ``shape``, dropout ``p`` and ``seed``."""
    ones = torch.ones(shape, dtype=torch.float32)
    return dropout(ones, p, seed) != 0


def _bias_or_zeros(bias: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    return torch.zeros(x.shape[-1], dtype=x.dtype) if bias is None else bias.contiguous()


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias, res, p, seed):  # noqa: ANN001, ANN205
        thresh, scale = _dropout_params(p)
        x = x.contiguous()
        n = x.shape[-1]
        res_c = None if res is None else res.contiguous()
        y = torch.empty_like(x)
        b = _bias_or_zeros(bias, x)  # keep a reference: the kernel only gets its address
        _lib().hb_dropout_fwd(_ptr(x), _ptr(b), None if res_c is None else _ptr(res_c),
                              _ptr(y), x.numel() // n, n, seed, thresh, scale)
        ctx.p, ctx.seed, ctx.has_res, ctx.has_bias = p, seed, res is not None, bias is not None
        return y

    @staticmethod
    def backward(ctx, g):  # noqa: ANN001, ANN205
        thresh, scale = _dropout_params(ctx.p)
        g = g.contiguous()
        n = g.shape[-1]
        gx = torch.empty_like(g)
        gb = torch.empty(n, dtype=g.dtype) if ctx.has_bias else None
        _lib().hb_dropout_bwd(_ptr(g), _ptr(gx), None if gb is None else _ptr(gb), g.numel() // n, n, ctx.seed,
                              thresh, scale)
        return gx, gb, (g if ctx.has_res else None), None, None


def dropout(x: torch.Tensor, p: float, seed: int, residual: torch.Tensor | None = None,
            bias: torch.Tensor | None = None) -> torch.Tensor:
    """``residual + dropout(x + bias, p)`` (residual and bias optional; bias broadcast over the last axis) with
    the hash mask of ``seed``; differentiable in x, bias and residual."""
    _check_float_cpu("x", x)
    if residual is not None:
        _check_float_cpu("residual", residual)
        if residual.shape != x.shape:
            raise ValueError(f"residual must have the shape of x {tuple(x.shape)}, got {tuple(residual.shape)}")
    if bias is not None:
        _check_float_cpu("bias", bias)
        if bias.shape != (x.shape[-1],):
            raise ValueError(f"bias must have shape ({x.shape[-1]},), got {tuple(bias.shape)}")
    _dropout_params(p)
    return _Dropout.apply(x, bias, residual, float(p), int(seed) & _SEED_MASK)


class _Gelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias):  # noqa: ANN001, ANN205
        x = x.contiguous()
        b = _bias_or_zeros(bias, x)
        n = x.shape[-1]
        y = torch.empty_like(x)
        _lib().hb_gelu_fwd(_ptr(x), _ptr(b), _ptr(y), x.numel() // n, n)
        ctx.save_for_backward(x, b)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, g):  # noqa: ANN001, ANN205
        x, b = ctx.saved_tensors
        g = g.contiguous()
        n = x.shape[-1]
        gx = torch.empty_like(g)
        gb = torch.empty(n, dtype=g.dtype) if ctx.has_bias else None
        _lib().hb_gelu_bwd(_ptr(g), _ptr(x), _ptr(b), _ptr(gx), None if gb is None else _ptr(gb), x.numel() // n, n)
        return gx, gb


def gelu(x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """GELU of ``x + bias``, tanh approximation (``F.gelu(x, approximate="tanh")``, HF's ``gelu_new``), fused."""
    _check_float_cpu("x", x)
    if bias is not None:
        _check_float_cpu("bias", bias)
        if bias.shape != (x.shape[-1],):
            raise ValueError(f"bias must have shape ({x.shape[-1]},), got {tuple(bias.shape)}")
    return _Gelu.apply(x, bias)


class _Attention(torch.autograd.Function):
    """Causal multi-head attention with dropout on the weights: (B, T, 3m) fused qkv -> (B, T, m).

    Head sizes that are multiples of 8 use the fused kernels ``hb_attn_fwd``/``hb_attn_bwd`` (causal blocks
    only, per head, no head merge copies); other head sizes use torch's batched products around the softmax kernel.
    Both give the same values and the same dropout masks.
    """

    @staticmethod
    def forward(ctx, qkv, bias, heads, p, seed):  # noqa: ANN001, ANN205
        b, t, m3 = qkv.shape
        m = m3 // 3
        d = m // heads
        qkv = qkv.contiguous()
        bvec = _bias_or_zeros(bias, qkv)  # keep a reference: the kernel only gets its address
        thresh, keep_scale = _dropout_params(p)
        scale = 1.0 / d**0.5
        ctx.shape, ctx.p, ctx.seed, ctx.scale, ctx.has_bias = (b, t, heads, d), p, seed, scale, bias is not None
        qkv5 = torch.empty(3, b * heads, t, d, dtype=qkv.dtype)
        _lib().hb_split_heads(_ptr(qkv), _ptr(bvec), _ptr(qkv5), b, t, heads, d)
        q, k, v = qkv5[0], qkv5[1], qkv5[2]
        if d % 8 == 0:
            tp = (t + 3 + 7) // 8 * 8  # score row stride: a multiple of 8, >= t + 3 (see the C comments)
            vt = torch.empty(b * heads, d, tp, dtype=qkv.dtype)
            kt = torch.empty(d, tp, dtype=qkv.dtype)
            prob, pd = torch.empty(2, b * heads, t, tp, dtype=qkv.dtype).unbind(0)
            out = torch.empty(b, t, m, dtype=qkv.dtype)
            _lib().hb_attn_fwd(_ptr(q), _ptr(k), _ptr(v), _ptr(vt), _ptr(kt), _ptr(prob), _ptr(pd), _ptr(out), b, t,
                               tp, heads, d, scale, seed, thresh, keep_scale)
            ctx.save_for_backward(q, k, vt, prob, pd)
            ctx.tp = tp
            return out
        s = torch.bmm(q, k.transpose(1, 2))
        pd = torch.empty_like(s)
        _lib().hb_softmax_drop_fwd(_ptr(s), _ptr(pd), b * heads, t, scale, seed, thresh, keep_scale)
        y = torch.bmm(pd, v)
        ctx.save_for_backward(qkv5, s, pd)
        ctx.tp = None
        return y.view(b, heads, t, d).transpose(1, 2).reshape(b, t, m)

    @staticmethod
    def backward(ctx, gy):  # noqa: ANN001, ANN205
        b, t, heads, d = ctx.shape
        thresh, keep_scale = _dropout_params(ctx.p)
        if ctx.tp is not None:
            q, k, vt, prob, pd = ctx.saved_tensors
            gy = gy.contiguous()
            gqkv = torch.empty(b, t, 3 * heads * d, dtype=gy.dtype)
            ds = torch.empty(t, ctx.tp, dtype=gy.dtype)
            _lib().hb_attn_bwd(_ptr(gy), _ptr(q), _ptr(k), _ptr(vt), _ptr(prob), _ptr(pd), _ptr(ds), _ptr(gqkv), b, t,
                               ctx.tp, heads, d, ctx.scale, ctx.seed, thresh, keep_scale)
        else:
            qkv5, prob, pd = ctx.saved_tensors
            q, k, v = qkv5[0], qkv5[1], qkv5[2]
            gy = gy.reshape(b, t, heads, d).transpose(1, 2).reshape(b * heads, t, d)
            g5 = torch.empty_like(qkv5)
            torch.bmm(pd.transpose(1, 2), gy, out=g5[2])
            ds = torch.bmm(gy, v.transpose(1, 2))
            _lib().hb_softmax_drop_bwd(_ptr(prob), _ptr(ds), b * heads, t, ctx.scale, ctx.seed, thresh, keep_scale)
            torch.bmm(ds, k, out=g5[0])
            torch.bmm(ds.transpose(1, 2), q, out=g5[1])
            gqkv = g5.view(3, b, heads, t, d).permute(1, 3, 0, 2, 4).reshape(b, t, 3 * heads * d)
        gb = gqkv.view(b * t, -1).sum(0) if ctx.has_bias else None
        return gqkv, gb, None, None, None


def causal_attention(qkv: torch.Tensor, heads: int, p: float, seed: int,
                     bias: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + causal mask), dropout ``p`` on the weights (mask from ``seed``), times v.

    ``qkv`` (plus ``bias``, shape (3m,), if given) is the fused projection (B, T, 3m) laid out as GPT-2's
    ``c_attn`` output (q, k, v, each H heads of width d = m / H); returns (B, T, m) with heads concatenated, the
    input of the output projection.
    """
    _check_float_cpu("qkv", qkv)
    if bias is not None:
        _check_float_cpu("bias", bias)
        if bias.shape != (qkv.shape[-1],):
            raise ValueError(f"bias must have shape ({qkv.shape[-1]},), got {tuple(bias.shape)}")
    if qkv.dim() != 3 or qkv.shape[-1] % (3 * heads):
        raise ValueError(f"qkv must have shape (B, T, 3 * m) with m a multiple of heads = {heads}, "
                         f"got {tuple(qkv.shape)}")
    b, t, _ = qkv.shape
    if b * heads * t * t >= 2**32:
        raise ValueError("B * H * T * T must be < 2**32 (32-bit random counters)")
    _dropout_params(p)
    return _Attention.apply(qkv, bias, heads, float(p), int(seed) & _SEED_MASK)


class _Linear(torch.autograd.Function):
    """x W^T + b on (..., n_in) with a backward of three plain matrix products (torch's generic backward of
    ``F.linear`` copies the output gradient once more)."""

    @staticmethod
    def forward(ctx, x, w, b):  # noqa: ANN001, ANN205
        x2 = x.reshape(-1, x.shape[-1])
        y = torch.addmm(b, x2, w.t()) if b is not None else torch.mm(x2, w.t())
        ctx.save_for_backward(x2, w)
        ctx.in_shape, ctx.has_bias = x.shape, b is not None
        return y.view(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, g):  # noqa: ANN001, ANN205
        x2, w = ctx.saved_tensors
        g2 = g.reshape(-1, g.shape[-1])
        gx = torch.mm(g2, w).view(ctx.in_shape) if ctx.needs_input_grad[0] else None
        gw = torch.mm(g2.t(), x2)
        gb = g2.sum(0) if ctx.has_bias else None
        return gx, gw, gb


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` with a lean backward (same maths; any float dtype and device)."""
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(f"x must end in weight's input size {weight.shape[1]}, got {tuple(x.shape)}")
    return _Linear.apply(x, weight, bias)


# --------------------------------------------------------------------------- the GPT forward
def supports(model: nn.Module, device: torch.device | str = "cpu") -> bool:
    """Whether :func:`gpt_forward` computes exactly ``model``'s maths on ``device``: a plain
    :class:`hoplib.models.GPT` (no other attention or MLP modules, every config field not known here at its
    default value), float32 parameters, CPU, and the kernels available."""
    from hoplib import models

    dev = torch.device(device) if isinstance(device, str) else device
    if dev.type != "cpu" or type(model) is not models.GPT:
        return False
    known = {"vocab_size", "n_positions", "depth", "d_model", "heads", "dropout", "head", "n_classes",
             "layer_norm_eps"}
    for f in dataclasses.fields(model.config):
        if f.name not in known and getattr(model.config, f.name) != f.default:
            return False
    for blk in model.blocks:
        if (type(blk) is not models.Block or type(blk.attn) is not models.CausalSelfAttention
                or type(blk.mlp) is not models.MLP):
            return False
    if any(p.dtype != torch.float32 or p.device.type != "cpu" for p in model.parameters()):
        return False
    return available()


def gpt_forward(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """``model(ids)`` for a :class:`hoplib.models.GPT` on CPU, computed with the fused kernels.

    Same parameters and maths as :meth:`hoplib.models.GPT.forward` (pre-LayerNorm blocks, causal attention,
    GELU-tanh MLP, dropout ``config.dropout`` in training mode at the same five places: embeddings, attention
    weights, after each residual projection); the dropout masks come from the hash stream seeded by one draw
    from torch's global generator per call. Raises ValueError where :func:`supports` is False.
    """
    if not supports(model, ids.device if isinstance(ids, torch.Tensor) else "cpu"):
        raise ValueError("gpt_forward needs a plain hoplib.models.GPT with float32 parameters on CPU and the "
                         f"fused kernels (available: {available()}, error: {_STATE['error']})")
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        raise ValueError(f"ids must be a LongTensor of shape (B, T), got {getattr(ids, 'shape', ids)!r}")
    cfg = model.config
    t = ids.shape[1]
    if t > cfg.n_positions:
        raise ValueError(f"ids length must be <= n_positions = {cfg.n_positions}, got {t}")
    p = float(cfg.dropout) if model.training else 0.0
    base = draw_seed() if p > 0 else 0
    site = iter(range(1, 4 * cfg.depth + 2))

    def seed() -> int:
        return _mix64(base + next(site))

    def add_dropped(y: torch.Tensor, bias: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        return dropout(y, p, seed(), residual=res, bias=bias)  # p = 0: res + y + bias

    m, eps = cfg.d_model, cfg.layer_norm_eps
    x = F.embedding(ids, model.wte.weight)
    if p > 0:  # dropout(token + position embeddings), the positions added inside the kernel as a (T*m) "bias"
        x = dropout(x.view(ids.shape[0], t * m), p, seed(), bias=model.wpe.weight[:t].reshape(-1)).view(x.shape)
    else:
        x = x + model.wpe.weight[:t]
    for blk in model.blocks:
        h = F.layer_norm(x, (m,), blk.ln1.weight, blk.ln1.bias, eps)
        a = causal_attention(linear(h, blk.attn.qkv.weight), cfg.heads, p, seed(), bias=blk.attn.qkv.bias)
        x = add_dropped(linear(a, blk.attn.proj.weight), blk.attn.proj.bias, x)
        h = F.layer_norm(x, (m,), blk.ln2.weight, blk.ln2.bias, eps)
        h = gelu(linear(h, blk.mlp.fc.weight), bias=blk.mlp.fc.bias)
        x = add_dropped(linear(h, blk.mlp.proj.weight), blk.mlp.proj.bias, x)
    x = F.layer_norm(x, (m,), model.ln_f.weight, model.ln_f.bias, eps)
    return x if model.unembed is None else F.linear(x, model.unembed.weight)
