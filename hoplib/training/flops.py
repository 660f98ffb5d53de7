"""Analytic FLOP count of a training step of :class:`hoplib.models.GPT` (for the GPU benchmark of Section 4.2 /
Appendix G's grid, ``benchmarks/bench_gpu.py``).

The count is the standard one of Kaplan et al. (2020), Chinchilla (Hoffmann et al. 2022, Appendix F) and PaLM
(Chowdhery et al. 2022, Appendix B): a matrix product of an (a x b) by a (b x c) matrix costs 2abc FLOPs
(one multiply and one add per term), so a forward pass over D = B * T tokens costs

    forward = 2 * N_mm * D  +  L * 2 * 2 * B * T^2 * m,

where N_mm is the number of weights that take part in matrix products (per layer 12 m^2: the fused QKV
projection 3m^2, the attention output m^2, the MLP 4m^2 + 4m^2; plus the unembedding m * C of the linear head,
none for the authors' LayerNorm head) and the second term is attention: the scores Q K^T and the weighted values
A V, each 2 * B * T^2 * m per layer (summed over heads). Attention is counted over the full T x T square, as
``scaled_dot_product_attention``'s kernels and ``torch.utils.flop_counter`` count it, although a causal mask
makes half of it unnecessary. The backward pass costs twice the forward (a gradient for the inputs and one for
the weights of every product), so a training step costs ``3 * forward``: with attention neglected this is the
familiar 6 N D.

Left out, as in those papers: biases, LayerNorm, GELU, softmax, dropout, residual additions, embedding
look-ups, the loss and the optimiser update (all elementwise, O(N + B T m) per step, a few percent at most
for these widths). Only softmax and Longformer attention (which runs SDPA over the full square with a mask) are
counted; Performer's kernel attention is not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hoplib._book.validate import check_int

if TYPE_CHECKING:
    from hoplib.models import GPT, GPTConfig, GPTEnsemble


def matmul_parameters(config: GPTConfig | GPT | GPTEnsemble) -> int:
    """N_mm: weights of ``config``'s model that enter matrix products (no biases, LayerNorms, embeddings)."""
    config = _config(config)
    m = config.d_model
    unembed = m * config.num_classes if config.head == "linear" else 0
    return config.depth * 12 * m * m + unembed


def forward_flops(config: GPTConfig | GPT | GPTEnsemble, batch_size: int, seq_len: int) -> int:
    """Matrix-product FLOPs of one forward pass over a batch of ``batch_size`` sequences of ``seq_len`` tokens."""
    config = _config(config)
    b = check_int("batch_size", batch_size, low=1)
    t = check_int("seq_len", seq_len, low=1, high=config.n_positions)
    attention = config.depth * 2 * 2 * b * t * t * config.d_model
    return 2 * matmul_parameters(config) * b * t + attention


def train_flops_per_step(config: GPTConfig | GPT | GPTEnsemble, batch_size: int, seq_len: int) -> int:
    """Matrix-product FLOPs of one training step (forward + backward = 3 x forward) of one model.

    ``config`` is a :class:`hoplib.models.GPTConfig` (or anything with a ``config`` attribute holding one, e.g.
    a :class:`hoplib.models.GPT`); ``seq_len`` is the number of tokens per sequence (``HopTask.length``, 99
    for the paper's N = 100), at most ``config.n_positions``. See the module docstring for the formula.
    """
    return 3 * forward_flops(config, batch_size, seq_len)


def _config(config: object) -> GPTConfig:
    from hoplib.models import GPTConfig

    if not isinstance(config, GPTConfig) and isinstance(getattr(config, "config", None), GPTConfig):
        config = config.config  # a GPT or a GPTEnsemble (per-model count)
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a hoplib.models.GPTConfig (or a GPT), got {type(config).__name__}")
    if config.attention.name not in ("softmax", "longformer"):
        raise ValueError(f"config.attention must be 'softmax' or 'longformer' (SDPA over the full square), "
                         f"got {config.attention.name!r}")
    return config
