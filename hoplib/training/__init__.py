"""Chapter "Training": the named sweeps of Section 4.2 / Appendix G and the stored ones read back
(:mod:`~hoplib.training.sweep`), and head alignment read against a noise floor (:mod:`~hoplib.training.heads`).
The training loop itself is :mod:`hoplib.train`, the evaluation :mod:`hoplib.evaluate`, the depth report
:mod:`hoplib.report`."""
