"""Kernel and Longformer attention as blackboard protocols, and depth experiments (Cor. 5.3, 5.4).

The lower bounds of Corollaries 5.3 and 5.4 come from the same reduction as the RNN bound (Corollary 5.2,
:func:`hoplib.lower_bounds.rnn.simulate_rnn_protocol`): cut the input into contiguous blocks held by players
P_p, ..., P_1 (P_p leftmost), let round l compute layer l, and count what the players must post so that
everyone can finish the layer on their own block. This module runs both reductions on real
:class:`hoplib.models.GPT` models with the attentions of :mod:`hoplib.lower_bounds.efficient_attention`, with exact
bit accounting on a :class:`hoplib.lower_bounds.communication.Blackboard` (Definition E.1):

* :func:`simulate_kernel_protocol` (Corollary 5.3): kernel attention's causal prefix sums S = sum phi(k_j)
  v_j^T (m' x d_head per head) and z = sum phi(k_j) are all that crosses a block boundary, so in round l each
  player continues the sums from the previous player's post over its own block
  (:func:`hoplib.lower_bounds.efficient_attention.kernel_attention_prefix`) and posts them: H (m'(d_head + 1) + 1)
  float32 numbers (the +1 is the stabiliser's running maximum), independent of N.
* :func:`simulate_longformer_protocol` (Corollary 5.4): a query at position i only sees keys in
  [i - w, i] and the global positions j = 0 (mod g), so in round l each player posts the layer-(l-1)
  activations of its last min(w, block length) tokens and of its global tokens (those not already among the
  last w); with blocks shorter than w a window can reach back over several players, which this rule covers.

Each returns ``(output, bits)``: P_1's logits at the last position, equal to ``model(x)[0, -1]`` up to float
rounding, and the bits posted, which :func:`kernel_protocol_bits` and :func:`longformer_protocol_bits`
predict exactly. :func:`kernel_paper_scale` and :func:`longformer_paper_scale` give the message sizes the
corollaries name (m m' H p and (w + N/(g k)) m H p), to compare with N / k^6
(:func:`hoplib.lower_bounds.pointer_chasing.lower_bound_scale`); :func:`reduction_record` runs a reduction on
the pointer-chasing sequences of Proposition E.4.

The second half measures FAVOR+ against softmax (:func:`favor_error`) and trains small GPTs with softmax,
Performer and Longformer attention at equal depth and width on multi-task hop_k (:func:`attention_sweep`,
through :func:`hoplib.lower_bounds.sweep.run_sweep`); its records are reported with :mod:`hoplib.report`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, ScalarFormatter

from hoplib._book.validate import check_choice, check_int
from hoplib.lower_bounds import communication as comm
from hoplib.lower_bounds import efficient_attention as attn
from hoplib.lower_bounds import pointer_chasing as pchase
from hoplib.models import GPT, GPTConfig, gpt_for_task
from hoplib.tasks import HopTask, find_k

KINDS = attn.KINDS
FLOAT_BITS = 32
"""Bits per posted number: float32, counted honestly (the paper's p)."""

# --------------------------------------------------------------------------- shared pieces


def _prepare(model: object, x: object, num_players: int, kind: str) -> tuple[torch.Tensor, dict[int, tuple[int, int]]]:
    """Validate a protocol's inputs; return the ids on the model's device and the players' blocks."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a hoplib.models.GPT, got {type(model).__name__}")
    if model.config.attention.name != kind:
        raise ValueError(f"model must have {kind} attention, got {model.config.attention.name!r}")
    xt = comm.sequence_ids(x, next(model.parameters()).device)
    n = len(xt)
    if n > model.config.n_positions:
        raise ValueError(f"x must have length <= n_positions = {model.config.n_positions}, got {n}")
    num_players = check_int("num_players", num_players, low=1, high=n)
    if int(xt.min()) < 0 or int(xt.max()) >= model.config.vocab_size:
        raise ValueError(f"x must hold ids in [0, {model.config.vocab_size - 1}]")
    if model.training:
        raise ValueError("model must be in eval mode (call model.eval()): the protocol has no dropout")
    return xt, comm.block_bounds(n, num_players)


def _embed(model: GPT, ids: torch.Tensor, lo: int) -> torch.Tensor:
    """Token and position embeddings (1, T, m) of a block of ``ids`` starting at position ``lo``."""
    pos = torch.arange(lo, lo + len(ids), device=ids.device)
    return (model.wte(ids) + model.wpe(pos)).unsqueeze(0)


def _heads(model: GPT, x: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    block = model.blocks[layer]
    return block.attn.qkv_heads(block.ln1(x))


def _finish_block(model: GPT, layer: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Output projection, residual and MLP of ``layer`` on a block, given the attention mix ``y`` (1, H, T, d)."""
    block = model.blocks[layer]
    x = x + block.attn.project(y)
    return x + block.mlp(block.ln2(x))


def _p1_output(model: GPT, x: torch.Tensor, last_round: bool, result: dict) -> tuple[int, ...] | None:
    """P_1's post: nothing before the last round; then the argmax class of its last position's logits (which it
    keeps in ``result["output"]``)."""
    if not last_round:
        return None
    z = model.ln_f(x[0, -1])
    logits = result["output"] = z if model.unembed is None else model.unembed(z)
    return comm.int_to_bits(int(logits.argmax()), comm.class_bits(logits.shape[-1]))


def _run(model: GPT, xt: torch.Tensor, bounds: dict[int, tuple[int, int]], make: Callable[..., comm.Player],
         blackboard: comm.Blackboard | None) -> tuple[torch.Tensor, int]:
    """Run the players ``make(ids, lo, j, result)`` of every block for ``depth`` rounds; P_1's logits and bits."""
    result: dict[str, torch.Tensor] = {}
    players = [make(xt[lo:hi], lo, j, result) for j, (lo, hi) in sorted(bounds.items())]
    board = comm.run_protocol(players, model.config.depth, blackboard=blackboard)
    return result["output"], board.total_bits


# --------------------------------------------------------------------------- Corollary 5.3: kernel attention


def _kernel_player(model: GPT, num_players: int) -> Callable[..., comm.Player]:
    cfg = model.config
    h, dh, mf = cfg.heads, cfg.d_model // cfg.heads, cfg.attention.n_features
    shapes = [(1, h, mf, dh), (1, h, mf), (1, h)]
    sizes = [math.prod(s) for s in shapes]

    def make(ids: torch.Tensor, lo: int, j: int, result: dict) -> comm.Player:
        local = {"x": _embed(model, ids, lo)}

        def play(r: int, board: comm.Blackboard) -> object:
            if r > cfg.depth:
                return None
            state = None
            if j < num_players:  # continue the running sums (S, z, M) that P_{j+1} posted this round
                flat = comm.bits_to_floats(board.last_message(j + 1, r), (sum(sizes),), ids.device)
                state = tuple(part.reshape(s) for part, s in zip(torch.split(flat, sizes), shapes, strict=True))
            q, k, v = _heads(model, local["x"], r - 1)
            y, state = attn.kernel_attention_prefix(q, k, v, model.blocks[r - 1].attn.features, state=state)
            local["x"] = _finish_block(model, r - 1, local["x"], y.to(v.dtype))
            if j > 1:
                return comm.floats_to_bits(torch.cat([s.reshape(-1) for s in state]))
            return _p1_output(model, local["x"], r == cfg.depth, result)
        return play
    return make


@torch.no_grad()
def simulate_kernel_protocol(model: GPT, x: np.ndarray | torch.Tensor, num_players: int,
                             blackboard: comm.Blackboard | None = None) -> tuple[torch.Tensor, int]:
    """Run a Performer GPT (kernel attention) as the blackboard protocol of Corollary 5.3's proof.

    ``x`` (1-D ids) is cut into ``num_players`` contiguous blocks
    (:func:`hoplib.lower_bounds.communication.block_bounds`), P_p leftmost, P_1 rightmost. Round l = layer l:
    P_p, ..., P_1 in turn read the previous player's post of this round (the stabilised running sums (S, z, M)
    per head after all earlier positions, float32 bits), continue kernel attention over their own block with
    :func:`hoplib.lower_bounds.efficient_attention.kernel_attention_prefix`, finish the layer (projection,
    residual, MLP) on their block, and, except P_1, post the new running sums: heads * (m'(d_head + 1) + 1) * 32
    bits. In the last round P_1 applies the final LayerNorm and head at its last position and posts the argmax
    class (ceil(log2 C) bits). Returns ``(logits at the last position, bits posted)``; the logits equal
    ``model(x[None])[0, -1]`` up to float rounding.
    """
    xt, bounds = _prepare(model, x, num_players, "performer")
    return _run(model, xt, bounds, _kernel_player(model, len(bounds)), blackboard)


def kernel_message_bits(heads: int, d_head: int, n_features: int) -> int:
    """Bits of one post in :func:`simulate_kernel_protocol`: 32 H (m'(d_head + 1) + 1)."""
    heads = check_int("heads", heads, low=1)
    d_head = check_int("d_head", d_head, low=1)
    n_features = check_int("n_features", n_features, low=1)
    return FLOAT_BITS * heads * (n_features * (d_head + 1) + 1)


def kernel_protocol_bits(n_layers: int, num_players: int, heads: int, d_head: int, n_features: int,
                         n_classes: int) -> int:
    """Total bits of :func:`simulate_kernel_protocol`: L (p - 1) 32 H (m'(d_head + 1) + 1) + ceil(log2 C).

    Independent of N: this is why kernel attention is cheap, and why Corollary 5.3 bites.
    """
    n_layers = check_int("n_layers", n_layers, low=1)
    num_players = check_int("num_players", num_players, low=1)
    n_classes = check_int("n_classes", n_classes, low=1)
    return n_layers * (num_players - 1) * kernel_message_bits(heads, d_head, n_features) + comm.class_bits(n_classes)


def kernel_paper_scale(d_model: int, n_features: int, heads: int, precision: int = FLOAT_BITS) -> int:
    """m m' H p, the message size of Corollary 5.3 (the paper's K'^T V is m' x m per head)."""
    return (check_int("d_model", d_model, low=1) * check_int("n_features", n_features, low=1)
            * check_int("heads", heads, low=1) * check_int("precision", precision, low=1))


# --------------------------------------------------------------------------- Corollary 5.4: Longformer masks


def _multiples(lo: int, hi: int, g: int | None) -> int:
    """Number of j in [lo, hi) with j = 0 mod g (0 if g is None)."""
    if g is None or hi <= lo:
        return 0
    return (hi - 1) // g - (lo - 1) // g


def posted_positions(n: int, num_players: int, window: int, global_every: int | None) -> dict[int, list[int]]:
    """For each player j, the positions whose activations P_j posts in every round of the Longformer protocol.

    P_j's block [s, e) contributes its last min(w, e - s) positions (every later window that reaches back into
    this block only reaches these: a later query i >= e sees j >= i - w >= e - w) and its global positions
    (multiples of g, which every later query sees), each once. P_1 posts none (nobody comes after it).
    """
    n = check_int("n", n, low=1)
    window = check_int("window", window, low=0)
    if global_every is not None:
        global_every = check_int("global_every", global_every, low=1)
    out: dict[int, list[int]] = {}
    for j, (s, e) in comm.block_bounds(n, num_players).items():
        tail = set(range(max(s, e - window), e)) if j > 1 else set()
        glob = {t for t in range(s, e) if j > 1 and global_every is not None and t % global_every == 0}
        out[j] = sorted(tail | glob)
    return dict(sorted(out.items()))


def _window_attention(model: GPT, layer: int, x: torch.Tensor, lo: int, ctx_pos: list[int],
                      ctx_x: list[torch.Tensor]) -> torch.Tensor:
    """Layer ``layer``'s Longformer attention for the queries of a block starting at ``lo`` (activations ``x``),
    over the posted keys (positions ``ctx_pos``, activations ``ctx_x``) and the block itself."""
    spec = model.config.attention
    w, g = spec.window, spec.global_every
    pos = torch.tensor(ctx_pos + list(range(lo, lo + x.shape[1])), device=x.device)
    xs = torch.cat(ctx_x + [x[0]]).unsqueeze(0) if ctx_x else x
    q, k, v = _heads(model, xs, layer)
    i, jpos = pos[len(ctx_pos):].unsqueeze(1), pos.unsqueeze(0)
    allowed = (jpos <= i) & (((i - jpos) <= w) | ((jpos % g == 0) if g is not None else False))
    return F.scaled_dot_product_attention(q[:, :, len(ctx_pos):], k, v, attn_mask=allowed)


def _longformer_player(model: GPT, num_players: int, posts: dict[int, list[int]]) -> Callable[..., comm.Player]:
    cfg = model.config

    def make(ids: torch.Tensor, lo: int, j: int, result: dict) -> comm.Player:
        local = {"x": _embed(model, ids, lo)}

        def play(r: int, board: comm.Blackboard) -> object:
            if r > cfg.depth:
                return None
            ctx_pos: list[int] = []  # what earlier players posted this round: layer-(l-1) activations
            ctx_x: list[torch.Tensor] = []
            for jj in range(num_players, j, -1):
                if posts[jj]:
                    ctx_pos += posts[jj]
                    ctx_x.append(comm.bits_to_floats(board.last_message(jj, r), (len(posts[jj]), cfg.d_model),
                                                     ids.device))
            message = comm.floats_to_bits(local["x"][0, [t - lo for t in posts[j]]]) if posts[j] else None
            y = _window_attention(model, r - 1, local["x"], lo, ctx_pos, ctx_x)
            local["x"] = _finish_block(model, r - 1, local["x"], y)
            return message if j > 1 else _p1_output(model, local["x"], r == cfg.depth, result)
        return play
    return make


@torch.no_grad()
def simulate_longformer_protocol(model: GPT, x: np.ndarray | torch.Tensor, num_players: int,
                                 blackboard: comm.Blackboard | None = None) -> tuple[torch.Tensor, int]:
    """Run a Longformer GPT as the blackboard protocol of Corollary 5.4's proof.

    Blocks and speaking order as in :func:`simulate_kernel_protocol`. In round l, P_j (j > 1) posts the
    layer-(l-1) activations (d_model float32 each) of the positions :func:`posted_positions` gives it, then
    every player reads everything posted so far in this round, which contains every key position its queries
    may attend outside its block (the window reaching back w positions, possibly across several players, and
    all earlier global positions), computes layer l on its block (masked softmax over those keys and its own
    block, with the mask of :func:`hoplib.lower_bounds.efficient_attention.longformer_mask`), and keeps the
    result. In the last round P_1 posts the argmax class. Returns ``(logits at the last position, bits posted)``.
    """
    xt, bounds = _prepare(model, x, num_players, "longformer")
    spec = model.config.attention
    posts = posted_positions(len(xt), len(bounds), spec.window, spec.global_every)
    return _run(model, xt, bounds, _longformer_player(model, len(bounds), posts), blackboard)


def longformer_protocol_bits(n: int, num_players: int, n_layers: int, d_model: int, window: int,
                             global_every: int | None, n_classes: int) -> int:
    """Total bits of :func:`simulate_longformer_protocol`, in closed form over the blocks.

    L * 32 m * sum over P_p..P_2's blocks [s, e) of (min(w, e - s) + #{multiples of g in [s, e - min(w, e - s))})
    + ceil(log2 C). For blocks of length >= w this is about L 32 m (p - 1) (w + N/(g p)).
    """
    n = check_int("n", n, low=1)
    num_players = check_int("num_players", num_players, low=1, high=n)
    n_layers = check_int("n_layers", n_layers, low=1)
    d_model = check_int("d_model", d_model, low=1)
    window = check_int("window", window, low=0)
    if global_every is not None:
        global_every = check_int("global_every", global_every, low=1)
    n_classes = check_int("n_classes", n_classes, low=1)
    sizes = comm.block_sizes(n, num_players)
    tokens, s = 0, 0
    for size in sizes[:-1]:  # every block but P_1's
        e = s + size
        tail = min(window, size)
        tokens += tail + _multiples(s, e - tail, global_every)
        s = e
    return n_layers * FLOAT_BITS * d_model * tokens + comm.class_bits(n_classes)


def longformer_paper_scale(n: int, k: int, window: int, global_every: int | None, d_model: int, heads: int,
                           precision: int = FLOAT_BITS) -> float:
    """(w + N/(g k)) m H p, the message size of Corollary 5.4 (N/(g k) = 0 without global tokens)."""
    n = check_int("n", n, low=1)
    k = check_int("k", k, low=1)
    window = check_int("window", window, low=0)
    glob = 0.0 if global_every is None else n / (check_int("global_every", global_every, low=1) * k)
    return ((window + glob) * check_int("d_model", d_model, low=1) * check_int("heads", heads, low=1)
            * check_int("precision", precision, low=1))


# --------------------------------------------------------------------------- the reductions on hop_k inputs


def reduction_model(kind: str, instance: pchase.PointerChasingInstance, *, depth: int, d_model: int, heads: int,
                    n_features: int | None = None, window: int | None = None,
                    global_every: int | None = None, seed: int = 0) -> GPT:
    """A randomly initialised GPT (eval mode) with ``kind`` attention for Proposition E.4's sequences.

    Vocabulary 2q + 2, context 2kq + 1, one logit per symbol; the attention is
    :func:`hoplib.lower_bounds.efficient_attention.attention_spec` of ``kind`` and its settings. Weights drawn
    from ``seed``; the reduction does not care what the weights are, only that the protocol reproduces the
    forward pass.
    """
    check_choice("kind", kind, ("performer", "longformer"))
    if not isinstance(instance, pchase.PointerChasingInstance):
        raise TypeError(f"instance must be a PointerChasingInstance, got {type(instance).__name__}")
    seed = check_int("seed", seed, low=0, high=2**32 - 1)
    spec = attn.attention_spec(kind, n_features=n_features, window=window, global_every=global_every)
    cfg = GPTConfig(vocab_size=instance.alphabet_size, n_positions=instance.length, depth=depth, d_model=d_model,
                    heads=heads, attention=spec)
    torch.manual_seed(seed)
    return GPT(cfg).eval()


def reduction_record(kind: str, k: int, q: int, *, depth: int, d_model: int, heads: int,
                     n_features: int | None = None, window: int | None = None, global_every: int | None = None,
                     seed: int = 0) -> dict[str, Any]:
    """Run one reduction on a random pointer-chasing instance (k players, Proposition E.4) and report it.

    Returns ``{"kind", "k", "q", "N", "depth", "d_model", "heads", "n_features", "window", "global_every",
    "bits", "formula_bits", "message_bits", "paper_scale", "N/k^6", "max_abs_diff"}``: the bits posted, the
    formula's prediction, the longest single message, the corollary's message scale, the lower-bound scale
    and the largest difference between the protocol's logits and the forward pass.
    """
    instance = pchase.random_instance(check_int("k", k, low=1), check_int("q", q, low=2), seed=seed)
    x, _ = pchase.to_hop_sequence(instance)
    model = reduction_model(kind, instance, depth=depth, d_model=d_model, heads=heads, n_features=n_features,
                            window=window, global_every=global_every, seed=seed)
    board = comm.Blackboard(k)
    device = next(model.parameters()).device
    if kind == "performer":
        out, bits = simulate_kernel_protocol(model, x, k, blackboard=board)
        formula = kernel_protocol_bits(depth, k, heads, d_model // heads, n_features, model.num_classes)
        scale: float = kernel_paper_scale(d_model, n_features, heads)
    else:
        out, bits = simulate_longformer_protocol(model, x, k, blackboard=board)
        formula = longformer_protocol_bits(len(x), k, depth, d_model, window, global_every, model.num_classes)
        scale = longformer_paper_scale(len(x), k, window, global_every, d_model, heads)
    with torch.no_grad():
        direct = model(torch.from_numpy(x).to(device)[None])[0, -1]
    return {"kind": kind, "k": k, "q": q, "N": len(x), "depth": depth, "d_model": d_model, "heads": heads,
            "n_features": n_features, "window": window, "global_every": global_every, "bits": bits,
            "formula_bits": formula, "message_bits": board.max_message_bits, "paper_scale": scale,
            "N/k^6": pchase.lower_bound_scale(len(x), k), "max_abs_diff": float((out - direct).abs().max())}


def plot_reduction_bits(records: Sequence[dict[str, Any]], ax: plt.Axes | None = None) -> Figure:
    """Longest message (bits) against N for each reduction, with the corollaries' scales and N / k^6."""
    if not records:
        raise ValueError("records must be a non-empty list of reduction_record dicts")
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3.4))
    else:
        fig = ax.figure
    colours = {"performer": "C0", "longformer": "C1"}
    for kind in ("performer", "longformer"):
        rs = sorted((r for r in records if r["kind"] == kind), key=lambda r: r["N"])
        if not rs:
            continue
        ns = [r["N"] for r in rs]
        ax.plot(ns, [r["message_bits"] for r in rs], "o-", color=colours[kind], label=f"{kind}: measured message")
        ax.plot(ns, [r["paper_scale"] for r in rs], "s--", color=colours[kind], alpha=0.6,
                label=f"{kind}: paper's scale")
    rs = sorted(records, key=lambda r: r["N"])
    ax.plot([r["N"] for r in rs], [r["N/k^6"] for r in rs], "k^", label="N / k^6 (each run's k)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(sorted({r["N"] for r in records}))
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("bits")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- FAVOR+ against softmax


def favor_error(n_features: Sequence[int], *, seq_len: int = 32, d_head: int = 16, heads: int = 4,
                input_scale: float = 0.5, n_draws: int = 3, seed: int = 0) -> list[dict[str, Any]]:
    """Mean absolute error of FAVOR+ causal attention weights against exact softmax weights, per m'.

    Fixed Gaussian q, k (entries N(0, ``input_scale``^2)); for each m' in ``n_features`` and each of
    ``n_draws`` feature draws, records ``{"n_features", "draw", "weight_error", "output_error"}`` (mean
    |A - A_exact| and mean |A v - A_exact v|).
    """
    ms = [check_int("n_features[i]", m, low=1) for m in n_features]
    seq_len = check_int("seq_len", seq_len, low=1)
    d_head = check_int("d_head", d_head, low=1)
    heads = check_int("heads", heads, low=1)
    n_draws = check_int("n_draws", n_draws, low=1)
    gen = torch.Generator().manual_seed(check_int("seed", seed, low=0, high=2**32 - 1))
    q, k, v = (torch.randn(heads, seq_len, d_head, generator=gen) for _ in range(3))
    q, k = q * input_scale, k * input_scale
    exact = attn.masked_softmax_weights(q, k, torch.ones(seq_len, seq_len, dtype=torch.bool).tril())
    out = []
    for m in ms:
        for d in range(n_draws):
            a = attn.kernel_attention_weights(q, k, attn.orthogonal_features(m, d_head, seed=seed * 1000 + d))
            out.append({"n_features": m, "draw": d, "weight_error": float((a - exact).abs().mean()),
                        "output_error": float((a @ v - exact @ v).abs().mean())})
    return out


def favor_slope(records: Sequence[dict[str, Any]], key: str = "weight_error") -> float:
    """Least-squares slope of log(mean error) against log m' (about -1/2 for a Monte Carlo estimate)."""
    if not records:
        raise ValueError("records must be a non-empty list of favor_error dicts")
    check_choice("key", key, ("weight_error", "output_error"))
    ms = sorted({r["n_features"] for r in records})
    if len(ms) < 2:
        raise ValueError("records must cover at least two values of n_features")
    means = [np.mean([r[key] for r in records if r["n_features"] == m]) for m in ms]
    return float(np.polyfit(np.log(ms), np.log(means), 1)[0])


def plot_favor_error(records: Sequence[dict[str, Any]], ax: plt.Axes | None = None) -> Figure:
    """Mean error against m' (log-log, mean over draws), with a 1/sqrt(m') reference line."""
    if not records:
        raise ValueError("records must be a non-empty list of favor_error dicts")
    if ax is None:
        fig, ax = plt.subplots(figsize=(5, 3.2))
    else:
        fig = ax.figure
    ms = sorted({r["n_features"] for r in records})
    for key, label in (("weight_error", "attention weights"), ("output_error", "attention output")):
        means = [np.mean([r[key] for r in records if r["n_features"] == m]) for m in ms]
        ax.plot(ms, means, "o-", label=label)
    ref = np.mean([r["output_error"] for r in records if r["n_features"] == ms[0]])
    ax.plot(ms, [ref * math.sqrt(ms[0] / m) for m in ms], "k:", label="∝ 1/√m'")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("random features m'")
    ax.set_ylabel("mean |FAVOR+ − softmax|")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- training experiment


def out_of_reach(task: HopTask, window: int, depths: Sequence[int], *, n_samples: int = 100,
                 seed: int = 0) -> list[dict[str, Any]]:
    """The locality behind Corollary 5.4, measured on ``task``'s test data: through a causal window of radius
    ``window`` = w, an L-layer Longformer's output at position i depends on positions i - Lw .. i only (and on
    the global position 0, the hop count). hop_k at i needs every letter from find^k(i) - 1 (the last match)
    to i, a span of i - find^k(i) + 2 positions; where that span exceeds Lw + 1, the answer depends on letters
    the model cannot see. Returns ``{"depth", "k", "share"}`` per depth L and k >= 1: the share of answered
    positions out of reach, averaged per sample as the paper's metric is (samples as in
    :func:`hoplib.evaluate.per_k_error` with this ``seed``)."""
    if not isinstance(task, HopTask):
        raise TypeError(f"task must be a HopTask, got {type(task).__name__}")
    window = check_int("window", window, low=1)
    depths = [check_int("depths[i]", d, low=1) for d in depths]
    n_samples = check_int("n_samples", n_samples, low=1)
    out = []
    for k in range(max(task.min_hops, 1), task.max_hops + 1):
        letters, _ = task.draw(n_samples, k, check_int("seed", seed, low=0) + k, "cpu")
        ptr = find_k(letters, k)
        answered = ptr >= 0
        span = torch.arange(letters.shape[-1]) - ptr + 2
        for d in depths:
            far = ((span > d * window + 1) & answered).sum(dim=1).double()
            keep = answered.sum(dim=1) > 0
            out.append({"depth": d, "k": k, "share": float((far[keep] / answered.sum(dim=1)[keep]).mean())})
    return out


def locality_check(records: Sequence[dict[str, Any]], shares: Sequence[dict[str, Any]], *,
                   threshold: float = 0.1, min_share: float = 0.05) -> dict[str, Any]:
    """Trained Longformer errors (``records``: ``{"depth", "k", "error"}``) against :func:`out_of_reach`.

    Where an answer depends on letters out of reach, a model can only guess it. Returns ``floor_ratio``, the
    smallest error / share over the (L, k) with share at least ``min_share``; ``horizon[L]``, the largest K
    with share at most ``2 * threshold`` at every k <= K (if the error is at least half the share, no more can
    be solved at error ``threshold``); ``reach[L]``, the largest K the trained model solves at ``threshold``;
    and ``above[L]``, the largest error - share over k (how far the model stays above what it cannot see)."""
    share = {(int(r["depth"]), int(r["k"])): float(r["share"]) for r in shares}
    errors = {(int(r["depth"]), int(r["k"])): float(r["error"]) for r in records if r["k"] >= 1}
    if not errors or any(key not in share for key in errors):
        raise ValueError("records must be non-empty and shares must cover each of their (depth, k)")
    depths = sorted({d for d, _ in errors})
    ratios = [errors[key] / share[key] for key in errors if share[key] >= min_share]

    def run(depth: int, ok: Callable[[int], bool]) -> int:
        ks = sorted(k for d, k in errors if d == depth)
        return next((k - 1 for k in ks if not ok(k)), ks[-1])

    return {"floor_ratio": min(ratios) if ratios else float("nan"),
            "horizon": {d: run(d, lambda k, d=d: share[(d, k)] <= 2 * threshold) for d in depths},
            "reach": {d: run(d, lambda k, d=d: errors[(d, k)] <= threshold) for d in depths},
            "above": {d: max(errors[(d, k)] - share[(d, k)] for dd, k in errors if dd == d) for d in depths}}


def plot_locality(records: Sequence[dict[str, Any]], shares: Sequence[dict[str, Any]], *, title: str = ""
                  ) -> Figure:
    """Test error against k of trained Longformer models (``records``: ``{"depth", "k", "error"}``, k >= 1
    shown), one colour per depth, each beside the share of answers out of its reach (:func:`out_of_reach`,
    dashed). Returns the figure."""
    depths = sorted({int(r["depth"]) for r in records})
    if not depths or not shares:
        raise ValueError("records and shares must be non-empty lists of dicts")
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(7.6, 3.8))
    colours = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(depths)))
    for colour, d in zip(colours, depths, strict=True):
        err = sorted((r["k"], r["error"]) for r in records if r["depth"] == d and r["k"] >= 1)
        out = sorted((r["k"], r["share"]) for r in shares if r["depth"] == d)
        ax.plot(*zip(*err, strict=True), "o-", color=colour, lw=1.6, label=f"L = {d}")
        if out:
            ax.plot(*zip(*out, strict=True), "--", color=colour, lw=1.2)
    handles = ax.get_legend_handles_labels()[0] + [
        Line2D([], [], color="0.3", marker="o", lw=1.6, label="test error"),
        Line2D([], [], color="0.3", ls="--", lw=1.2, label="out of reach")]
    ax.set_xlabel("hops k")
    ax.set_ylabel("test error / share of answers")
    ax.set_ylim(-0.03, 1.03)
    ax.legend(handles=handles, fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        ax.set_title(title, fontsize=11)
    fig.tight_layout()
    return fig


def _build(task: HopTask, heads: int, n_features: int, window: int, global_every: int | None):  # noqa: ANN202
    def build(point: dict[str, Any]) -> tuple[GPT, dict[str, Any]]:
        kind = point["kind"]
        settings = {"n_features": n_features if kind == "performer" else None,
                    "window": window if kind == "longformer" else None,
                    "global_every": global_every if kind == "longformer" else None}
        model = gpt_for_task(task, depth=point["depth"], d_model=point["d_model"], heads=heads,
                             attention=attn.attention_spec(kind, **settings))
        return model, {"heads": heads, **settings}
    return build


def attention_sweep(task: HopTask, *, kinds: Sequence[str] = KINDS, depths: Sequence[int] = (1, 2),
                    d_model: int = 32, heads: int = 4, n_features: int = 16, window: int = 4,
                    global_every: int | None = None, steps: int = 100, batch_size: int = 32, lr: float = 1e-3,
                    warmup_steps: int = 10, n_samples: int = 100, seed: int = 0,
                    device: str | torch.device = "auto", progress: bool = True,
                    on_model: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    """Train one GPT per (attention kind, depth) on multi-task hop_k and measure its error for every k.

    All models have the same width ``d_model`` and ``heads``; Performer models use ``n_features`` random
    features, Longformer models window radius ``window`` and global positions every ``global_every`` (0-based,
    so position 0, the hop-count token, is global whenever g is set). Training is :func:`hoplib.train.fit`
    with ``TrainConfig(steps, batch_size, lr, warmup_steps, seed=seed)`` (AdamW, warmup and linear decay, fresh
    samples each step), evaluation :func:`hoplib.evaluate.per_k_error` (the paper's metric, ``n_samples`` per
    k), through :func:`hoplib.lower_bounds.sweep.run_sweep`. Returns tidy records ``{"kind", "depth",
    "d_model", "heads", "n_features", "window", "global_every", "params", "k", "error", "final_loss",
    "train_time_s"}``.
    """
    from hoplib.lower_bounds.sweep import run_sweep
    from hoplib.train import TrainConfig

    if not isinstance(task, HopTask):
        raise TypeError(f"task must be a HopTask, got {type(task).__name__}")
    kinds = [check_choice("kinds[i]", kd, KINDS) for kd in kinds]
    depths = [check_int("depths[i]", d, low=1) for d in depths]
    d_model = check_int("d_model", d_model, low=1)
    config = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup_steps=warmup_steps, seed=seed)
    grid = [{"kind": kd, "depth": d, "d_model": d_model} for kd in kinds for d in depths]
    build = _build(task, check_int("heads", heads, low=1), n_features, window, global_every)
    return run_sweep(task, grid, build, config, n_samples=n_samples, device=device, progress=progress,
                     on_model=on_model)
