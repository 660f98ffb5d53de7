"""Chapter "Logarithmic depth suffices" (``chapters/construction.md``): Theorem 4.2 compiled into real weights.

Holds, for Sanford, Hsu & Telgarsky (arXiv v1, numbering of ``paper-spec.md``):

* Theorem 4.2 with Lemmas D.1 (lookUp), D.2 (lastOccurrence) and A.2 (softmax as hardmax): a causal softmax
  transformer with one head per layer and constant width computing hop_k in ⌈log₂ k⌉ + 2 layers — the paper
  states ⌊log₂ k⌋ + 2; the two agree when k is a power of two (:func:`hop_transformer`), and the multi-task
  model of the paper's experiments, which reads k from the k-token, in max(3, ⌈log₂ max_hops⌉ + 2) layers
  (:func:`multi_hop_transformer`);
* why one lookUp per layer cannot do better: exhaustive searches over pointer programs
  (:mod:`~hoplib.construction.pointer_programs`);
* Lemma D.2 as written in v1, whose embedding wraps around (:func:`lemma_d2_v1_find`);
* Lemma A.2 in practice: the temperature and precision the construction needs (:func:`precision_study`).

Modules, tracr-style: :mod:`~.layout` (named residual subspaces), :mod:`~.blocks` (heads, MLPs and their weight
builders), :mod:`~.layers` (one builder per layer kind: embedding, previous letter, find¹, doubling step,
readout), :mod:`~.model` (:class:`HopTransformer`), :mod:`~.depth` (depth formulas, pointer programs),
:mod:`~.temperature` (Lemma A.2), :mod:`~.v1`, :mod:`~.precision`, :mod:`~.plotting`, :mod:`~.cli`
(``python -m hoplib.construction precision|search --out FILE``) and :mod:`~.experiments` (the chapter's
computations and figures).
"""

from hoplib.construction.depth import ACC, KEEP, PTR, depth_ceil, depth_floor, hop_program, program_hops
from hoplib.construction.layout import SUBSPACE_DOC
from hoplib.construction.model import HopTransformer, Trace, count_errors, hop_transformer, multi_hop_transformer
from hoplib.construction.plotting import describe_residuals, plot_attention
from hoplib.construction.precision import min_exact_inverse_temperature, precision_study
from hoplib.construction.temperature import lemma_a2_inverse_temperature
from hoplib.construction.v1 import lemma_d2_v1_find

__all__ = [
    "ACC",
    "KEEP",
    "PTR",
    "SUBSPACE_DOC",
    "HopTransformer",
    "Trace",
    "count_errors",
    "depth_ceil",
    "depth_floor",
    "describe_residuals",
    "hop_program",
    "hop_transformer",
    "lemma_a2_inverse_temperature",
    "lemma_d2_v1_find",
    "min_exact_inverse_temperature",
    "multi_hop_transformer",
    "plot_attention",
    "precision_study",
    "program_hops",
]
