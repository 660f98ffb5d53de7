"""The blackboard reductions of Corollaries 5.3 and 5.4: a GPT with kernel (Performer) or Longformer attention
run as a protocol of players holding contiguous blocks of its input (round l computes layer l), every bit
counted, the output equal to the forward pass and the bits to closed formulas."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from hoplib.lower_bounds import communication as comm
from hoplib.lower_bounds import efficient_attention as attn
from hoplib.lower_bounds import pointer_chasing as pchase
from hoplib.models import GPT, GPTConfig

FLOAT_BITS = 32
"""Bits per posted number: float32, counted honestly (the paper's p)."""

# --------------------------------------------------------------------------- shared pieces


def _prepare(model: object, x: object, num_players: int, kind: str) -> tuple[torch.Tensor, dict[int, tuple[int, int]]]:
    """The ids on the model's device and the players' blocks."""
    if model.config.attention.name != kind:  # the other protocol would post the wrong things
        raise ValueError(f"model must have {kind} attention, got {model.config.attention.name!r}")
    if model.training:  # dropout would make the protocol differ from the model
        raise ValueError("model must be in eval mode (call model.eval()): the protocol has no dropout")
    xt = comm.sequence_ids(x, next(model.parameters()).device)
    return xt, comm.block_bounds(len(xt), num_players)


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
    """P_1's post in the last round: the argmax class of its last logits (kept in ``result``)."""
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


def kernel_player(model: GPT, num_players: int) -> Callable[..., comm.Player]:
    """``make(ids, lo, j, result)``: P_j of the kernel protocol, holding ``ids`` from
    position ``lo``. In round l it continues layer l's running sums (S, z, M) from
    P_{j+1}'s post over its block, finishes layer l there and posts the new sums."""
    cfg = model.config
    h, dh, mf = cfg.heads, cfg.d_model // cfg.heads, cfg.attention.n_features
    shapes = [(1, h, mf, dh), (1, h, mf), (1, h)]  # S, z and the stabiliser M
    sizes = [math.prod(s) for s in shapes]

    def make(ids: torch.Tensor, lo: int, j: int, result: dict) -> comm.Player:
        local = {"x": _embed(model, ids, lo)}  # P_j's activations

        def play(r: int, board: comm.Blackboard) -> object:
            if r > cfg.depth:
                return None
            state = None  # P_p starts with empty sums
            if j < num_players:
                posted = board.last_message(j + 1, r)
                flat = comm.bits_to_floats(posted, (sum(sizes),), ids.device)
                parts = torch.split(flat, sizes)
                state = tuple(p.reshape(s) for p, s in zip(parts, shapes, strict=True))
            q, k, v = _heads(model, local["x"], r - 1)
            features = model.blocks[r - 1].attn.features
            y, state = attn.kernel_attention_prefix(q, k, v, features, state=state)
            local["x"] = _finish_block(model, r - 1, local["x"], y.to(v.dtype))
            if j > 1:
                return comm.floats_to_bits(torch.cat([s.reshape(-1) for s in state]))
            return _p1_output(model, local["x"], r == cfg.depth, result)
        return play
    return make


@torch.no_grad()
def simulate_kernel_protocol(model: GPT, x: np.ndarray | torch.Tensor, num_players: int,
                             blackboard: comm.Blackboard | None = None) -> tuple[torch.Tensor, int]:
    """Run a Performer GPT as Corollary 5.3's protocol: each player continues the running sums (S, z, M) per
    head that the previous player posted, finishes each layer on its block and posts the new sums (float32
    bits); P_1 posts the argmax class at the end. Returns (last-position logits, bits posted)."""
    xt, bounds = _prepare(model, x, num_players, "performer")
    return _run(model, xt, bounds, kernel_player(model, len(bounds)), blackboard)


def kernel_message_bits(heads: int, d_head: int, n_features: int) -> int:
    """Bits of one post in :func:`simulate_kernel_protocol`: 32 H (m'(d_head + 1) + 1)."""
    return FLOAT_BITS * heads * (n_features * (d_head + 1) + 1)


def kernel_protocol_bits(n_layers: int, num_players: int, heads: int, d_head: int, n_features: int,
                         n_classes: int) -> int:
    """Total bits of :func:`simulate_kernel_protocol`: L (p - 1) 32 H (m'(d_head + 1) + 1) + ceil(log2 C)."""
    return n_layers * (num_players - 1) * kernel_message_bits(heads, d_head, n_features) + comm.class_bits(n_classes)


def kernel_paper_scale(d_model: int, n_features: int, heads: int, precision: int = FLOAT_BITS) -> int:
    """m m' H p, the message size of Corollary 5.3 (the paper's K'^T V is m' x m per head)."""
    return d_model * n_features * heads * precision


# --------------------------------------------------------------------------- Corollary 5.4: Longformer masks


def _multiples(lo: int, hi: int, g: int | None) -> int:
    """Number of j in [lo, hi) with j = 0 mod g (0 if g is None)."""
    if g is None or hi <= lo:
        return 0
    return (hi - 1) // g - (lo - 1) // g


def posted_positions(n: int, num_players: int, window: int,
                     global_every: int | None) -> dict[int, list[int]]:
    """``{j: positions}`` whose activations P_j posts each round of the Longformer
    protocol: the last min(w, block length) positions of its block [s, e) (a later
    query i >= e sees only keys >= i - w >= e - w) and its global positions, which
    every later query sees. P_1 posts none: nobody comes after it."""
    out: dict[int, list[int]] = {}
    for j, (s, e) in comm.block_bounds(n, num_players).items():
        if j == 1:
            out[j] = []
            continue
        tail = set(range(max(s, e - window), e))
        glob = {t for t in range(s, e) if global_every and t % global_every == 0}
        out[j] = sorted(tail | glob)
    return dict(sorted(out.items()))


def _window_attention(model: GPT, layer: int, x: torch.Tensor, lo: int, ctx_pos: list[int],
                      ctx_x: list[torch.Tensor]) -> torch.Tensor:
    """Longformer attention of a block's queries over the posted keys and the block itself."""
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
    """Run a Longformer GPT as Corollary 5.4's protocol: in round l each P_j (j > 1) posts the layer-(l-1)
    activations of the positions :func:`posted_positions` names, and every player computes layer l on its block
    from its own activations and those posted before it. Returns (last-position logits, bits posted)."""
    xt, bounds = _prepare(model, x, num_players, "longformer")
    spec = model.config.attention
    posts = posted_positions(len(xt), len(bounds), spec.window, spec.global_every)
    return _run(model, xt, bounds, _longformer_player(model, len(bounds), posts), blackboard)


def longformer_protocol_bits(n: int, num_players: int, n_layers: int, d_model: int, window: int,
                             global_every: int | None, n_classes: int) -> int:
    """Total bits of :func:`simulate_longformer_protocol`: L 32 m times the tokens P_p, ..., P_2 post, plus
    ceil(log2 C); about L 32 m (p - 1)(w + N/(g p)) when blocks are at least w long."""
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
    glob = 0.0 if global_every is None else n / (global_every * k)
    return (window + glob) * d_model * heads * precision


# --------------------------------------------------------------------------- the reductions on hop_k inputs


def reduction_model(kind: str, instance: pchase.PointerChasingInstance, *, depth: int, d_model: int, heads: int,
                    n_features: int | None = None, window: int | None = None,
                    global_every: int | None = None, seed: int = 0) -> GPT:
    """A random GPT (eval mode, weights from ``seed``) with ``kind`` attention for Proposition E.4's sequences."""
    spec = attn.attention_spec(kind, n_features=n_features, window=window, global_every=global_every)
    cfg = GPTConfig(vocab_size=instance.alphabet_size, n_positions=instance.length, depth=depth, d_model=d_model,
                    heads=heads, attention=spec)
    torch.manual_seed(seed)
    return GPT(cfg).eval()


def reduction_record(kind: str, k: int, q: int, *, depth: int, d_model: int, heads: int,
                     n_features: int | None = None, window: int | None = None, global_every: int | None = None,
                     seed: int = 0) -> dict[str, Any]:
    """Run one reduction on a random pointer-chasing instance with k players (Proposition E.4): the bits posted
    and the formula's, the longest message, the corollary's scale, N/k^6 and the gap to the forward pass."""
    instance = pchase.random_instance(k, q, seed=seed)
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
