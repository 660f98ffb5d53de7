"""Chapter "Training": the paper's learned-model experiments (Section 4.2, Appendix G).

- :mod:`~hoplib.training.sweep`: the named grids of runs (``GRIDS``: depth x width x samples x seed), resumable,
  sharded, trained with the core's one loop (:func:`hoplib.train.fit`, :func:`hoplib.train.fit_ensemble`).
- :mod:`~hoplib.training.experiments`: the chapter's profiles, stored sweeps, published errors, the comparison
  of the empirical depth threshold with Theorem 4.2's formulas, and its figures.
- :mod:`~hoplib.training.heads`: head alignment (Appendix G.4) read against a noise floor.
- :mod:`~hoplib.training.flops`, :mod:`~hoplib.training.benchreport`: FLOP counts and the GPU benchmark's summaries.

The shared core (task, model, the one training loop, evaluation, the depth report, the authors' released models)
lives at the top level of :mod:`hoplib`.
"""
