"""Chapter "Training": the named sweeps of Section 4.2 / Appendix G and the stored ones read back
(:mod:`~hoplib.training.sweep`); the chapter itself reads the heads against a noise floor. The training loop
is :mod:`hoplib.train`, the evaluation :mod:`hoplib.evaluate`, the depth report :mod:`hoplib.report`."""
