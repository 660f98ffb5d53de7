"""The blackboard reductions of Corollaries 5.3 and 5.4: a GPT with kernel (Performer) or Longformer attention
run as a protocol of players holding blocks of its input, round l computing layer l, every bit counted
(:func:`simulate`). The Longformer protocol is here; the chapter ``efficient_attention.md`` writes the kernel
player on :func:`simulate` and both bit formulas, and asserts them."""

from __future__ import annotations

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


def layer_heads(model: GPT, x: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries, keys and values (1, H, T, d) of layer ``layer``'s attention on the activations x (1, T, m)."""
    block = model.blocks[layer]
    return block.attn.qkv_heads(block.ln1(x))


@torch.no_grad()
def simulate(model: GPT, x: np.ndarray | torch.Tensor, num_players: int, kind: str,
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
        q, k, v = layer_heads(model, torch.cat([*ctx_x, x[0]]).unsqueeze(0), layer)
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
    return simulate(model, x, num_players, "longformer", make_step, blackboard)
