"""Chapter "Logarithmic depth suffices" (``chapters/construction.md``): Theorem 4.2 compiled into real weights,
tracr-style: :mod:`~.layout` (named residual subspaces), :mod:`~.blocks` (heads and MLPs, weights written by
subspace name), :mod:`~.layers` (one builder per layer kind, the pointer program), :mod:`~.model` (the model,
its builders, Lemma A.2 in practice) and :mod:`~.pointer_programs` (exhaustive searches over pointer programs).
Stored runs: ``python scripts/run_construction.py precision|search``."""

from hoplib.construction.layers import hop_program, program_hops
from hoplib.construction.model import count_errors, hop_transformer, multi_hop_transformer, precision_study

__all__ = ["count_errors", "hop_program", "hop_transformer", "multi_hop_transformer", "precision_study",
           "program_hops"]
