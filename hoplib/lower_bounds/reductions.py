"""The blackboard reductions of Corollaries 5.3 and 5.4: a GPT with kernel (Performer) or Longformer attention
run as a protocol of players holding blocks of its input, round l computing layer l, every bit counted."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from hoplib.lower_bounds import communication as comm
from hoplib.lower_bounds import efficient_attention as attn
from hoplib.models import GPT

FLOAT_BITS = 32  # bits per posted number: float32, counted honestly (the paper's p)

Step = Callable[[int, int, int, torch.Tensor, comm.Blackboard], tuple[torch.Tensor, object]]
"""P_j's attention in layer l: ``(l, j, lo, x, board) -> (the attention mix y (1, H, T, d), P_j's post)`` for
the activations x (1, T, m) of its block, which starts at position ``lo``."""


def _heads(model: GPT, x: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    block = model.blocks[layer]
    return block.attn.qkv_heads(block.ln1(x))


@torch.no_grad()
def _simulate(model: GPT, x: np.ndarray | torch.Tensor, num_players: int, kind: str,
              make_step: Callable[[int], Step], blackboard: comm.Blackboard | None) -> tuple[torch.Tensor, int]:
    """Run ``model`` as the protocol whose attention is ``make_step(len(x))`` (the rest of a layer is token-wise);
    P_1 posts the argmax class in the last round. Returns (last-position logits, bits posted)."""
    if model.config.attention.name != kind:  # the other protocol would post the wrong things
        raise ValueError(f"model must have {kind} attention, got {model.config.attention.name!r}")
    if model.training:  # dropout would make the protocol differ from the model
        raise ValueError("model must be in eval mode (call model.eval()): the protocol has no dropout")
    xt = comm.sequence_ids(x, next(model.parameters()).device)
    depth, step, result = model.config.depth, make_step(len(xt)), {}

    def player(j: int, lo: int, hi: int) -> comm.Player:
        local = {"x": (model.wte(xt[lo:hi]) + model.wpe(torch.arange(lo, hi, device=xt.device))).unsqueeze(0)}

        def play(r: int, board: comm.Blackboard) -> object:
            y, message = step(r - 1, j, lo, local["x"], board)
            block = model.blocks[r - 1]
            h = local["x"] = local["x"] + block.attn.project(y)
            h = local["x"] = h + block.mlp(block.ln2(h))
            if j > 1 or r < depth:
                return message
            z = model.ln_f(h[0, -1])
            logits = result["output"] = z if model.unembed is None else model.unembed(z)
            return comm.int_to_bits(int(logits.argmax()), comm.class_bits(logits.shape[-1]))
        return play

    bounds = sorted(comm.block_bounds(len(xt), num_players).items())
    board = comm.run_protocol([player(j, lo, hi) for j, (lo, hi) in bounds], depth, blackboard=blackboard)
    return result["output"], board.total_bits


# --------------------------------------------------------------------------- Corollary 5.3: kernel attention
def kernel_player(model: GPT, num_players: int) -> Step:
    """P_j's attention in round l = layer + 1 of the kernel protocol: continue
    layer l's running sums (S, z, M) from P_{j+1}'s post over its block, and post
    the new sums (P_1 posts none)."""
    cfg = model.config
    h, dh, mf = cfg.heads, cfg.d_model // cfg.heads, cfg.attention.n_features
    shapes = [(1, h, mf, dh), (1, h, mf), (1, h)]  # S, z and the stabiliser M
    sizes = [math.prod(s) for s in shapes]

    def step(layer: int, j: int, lo: int, x: torch.Tensor,
             board: comm.Blackboard) -> tuple[torch.Tensor, object]:
        state = None  # P_p starts with empty sums
        if j < num_players:
            posted = board.last_message(j + 1, layer + 1)
            flat = comm.bits_to_floats(posted, (sum(sizes),), x.device)
            parts = torch.split(flat, sizes)
            state = tuple(p.reshape(s) for p, s in zip(parts, shapes, strict=True))
        q, k, v = _heads(model, x, layer)
        features = model.blocks[layer].attn.features
        y, state = attn.kernel_attention_prefix(q, k, v, features, state=state)
        if j == 1:
            return y.to(v.dtype), None
        flat = torch.cat([s.reshape(-1) for s in state])
        return y.to(v.dtype), comm.floats_to_bits(flat)
    return step


def simulate_kernel_protocol(model: GPT, x: np.ndarray | torch.Tensor, num_players: int,
                             blackboard: comm.Blackboard | None = None) -> tuple[torch.Tensor, int]:
    """Run a Performer GPT as Corollary 5.3's protocol (:func:`kernel_player`, float32 bits); P_1 posts the
    argmax class at the end. Returns (last-position logits, bits posted)."""
    return _simulate(model, x, num_players, "performer", lambda n: kernel_player(model, num_players), blackboard)


def kernel_protocol_bits(n_layers: int, num_players: int, heads: int, d_head: int, n_features: int,
                         n_classes: int) -> int:
    """Total bits of :func:`simulate_kernel_protocol`: L (p - 1) 32 H (m'(d_head + 1) + 1) + ceil(log2 C)."""
    message = FLOAT_BITS * heads * (n_features * (d_head + 1) + 1)
    return n_layers * (num_players - 1) * message + comm.class_bits(n_classes)


# --------------------------------------------------------------------------- Corollary 5.4: Longformer masks
def posted_positions(n: int, num_players: int, window: int,
                     global_every: int | None) -> dict[int, list[int]]:
    """``{j: positions}`` whose activations P_j posts each round of the Longformer
    protocol: the last min(w, block length) positions of its block [s, e) (a later
    query i >= e sees only keys >= i - w >= e - w) and its global positions, which
    every later query sees. P_1 posts none: nobody comes after it."""
    out = {}
    for j, (s, e) in sorted(comm.block_bounds(n, num_players).items()):
        tail = set(range(max(s, e - window), e))
        glob = {t for t in range(s, e) if global_every and t % global_every == 0}
        out[j] = [] if j == 1 else sorted(tail | glob)
    return out


def _longformer_player(model: GPT, num_players: int, posts: dict[int, list[int]]) -> Step:
    """P_j posts the layer-l inputs at ``posts[j]`` and attends over its block and what P_p..P_{j+1} posted."""
    m, spec = model.config.d_model, model.config.attention

    def step(layer: int, j: int, lo: int, x: torch.Tensor, board: comm.Blackboard) -> tuple[torch.Tensor, object]:
        ctx_pos = [t for jj in range(num_players, j, -1) for t in posts[jj]]
        ctx_x = [comm.bits_to_floats(board.last_message(jj, layer + 1), (len(posts[jj]), m), x.device)
                 for jj in range(num_players, j, -1) if posts[jj]]
        pos = torch.tensor(ctx_pos + list(range(lo, lo + x.shape[1])), device=x.device)
        q, k, v = _heads(model, torch.cat([*ctx_x, x[0]]).unsqueeze(0), layer)
        allowed = attn.longformer_mask(lo + x.shape[1], spec.window, spec.global_every, x.device)[lo:][:, pos]
        y = F.scaled_dot_product_attention(q[:, :, len(ctx_pos):], k, v, attn_mask=allowed)
        return y, (comm.floats_to_bits(x[0, [t - lo for t in posts[j]]]) if posts[j] else None)
    return step


def simulate_longformer_protocol(model: GPT, x: np.ndarray | torch.Tensor, num_players: int,
                                 blackboard: comm.Blackboard | None = None) -> tuple[torch.Tensor, int]:
    """Run a Longformer GPT as Corollary 5.4's protocol: in round l each P_j posts its layer-(l-1) activations at
    :func:`posted_positions`. Returns (last-position logits, bits posted)."""
    spec = model.config.attention

    def make_step(n: int) -> Step:
        posts = posted_positions(n, num_players, spec.window, spec.global_every)
        return _longformer_player(model, num_players, posts)
    return _simulate(model, x, num_players, "longformer", make_step, blackboard)


def longformer_protocol_bits(n: int, num_players: int, n_layers: int, d_model: int, window: int,
                             global_every: int | None, n_classes: int) -> int:
    """Total bits of :func:`simulate_longformer_protocol`: L 32 m times the tokens P_p, ..., P_2 post, plus
    ceil(log2 C); about L 32 m (p - 1)(w + N/(g p)) when blocks are at least w long."""
    tokens = 0
    for j, (s, e) in comm.block_bounds(n, num_players).items():
        tail = e - min(window, e - s)  # the last min(w, block length) tokens start here; globals before them
        if j > 1:
            tokens += e - tail + ((tail - 1) // global_every - (s - 1) // global_every if global_every else 0)
    return n_layers * FLOAT_BITS * d_model * tokens + comm.class_bits(n_classes)
