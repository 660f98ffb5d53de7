"""Chapter "Training": the paper's learned-model experiments (Section 4.2, Appendix G).

- :mod:`~hoplib.training.sweep`: the grids of runs (depth x width x samples x seed), resumable, sharded.
- :mod:`~hoplib.training.flops`, :mod:`~hoplib.training.benchreport`: FLOP counts and the GPU benchmark's
  summaries.

The shared core (task, model, the one training loop, evaluation, the depth report) lives at the top level of
:mod:`hoplib`.
"""
