"""Theorem 4.2 compiled into real weights, tracr-style (chapter "Logarithmic depth suffices"): named residual
subspaces (:mod:`~.layout`), weights written by subspace name (:mod:`~.blocks`, :mod:`~.layers`), the model
(:mod:`~.model`) and searches over pointer programs (:mod:`~.pointer_programs`)."""

from hoplib.construction.layers import hop_program, program_hops
from hoplib.construction.model import count_errors, hop_transformer, multi_hop_transformer, precision_study

__all__ = ["count_errors", "hop_program", "hop_transformer", "multi_hop_transformer", "precision_study",
           "program_hops"]
