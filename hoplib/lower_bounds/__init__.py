"""Chapters on lower bounds beyond transformers (Section 5 and Appendix E of the paper).

- :mod:`~hoplib.lower_bounds.communication`: the blackboard model of Definition E.1, the engine shared by every
  reduction (players, blocks of the input, exact bit counts and bit encodings).
- :mod:`~hoplib.lower_bounds.pointer_chasing`: pointer chasing (Definition E.2), its encoding as hop_k
  (Proposition E.4) and the two protocols behind Proposition E.3.
- :mod:`~hoplib.lower_bounds.rnn`: recurrent models, the exact RNN constructions and Corollary 5.2's reduction.
- :mod:`~hoplib.lower_bounds.efficient_attention`, :mod:`~hoplib.lower_bounds.efficient`: kernel (Performer)
  and Longformer attention plugged into :class:`hoplib.models.GPT`, and their blackboard reductions
  (Corollaries 5.3 and 5.4).
- :mod:`~hoplib.lower_bounds.cot`: one-layer transformers with chain of thought (Definition 5.5, Corollary 5.6).
- :mod:`~hoplib.lower_bounds.graphs`, :mod:`~hoplib.lower_bounds.gnn`: graph connectivity, GNNs against
  transformers (Theorem 5.1, Corollaries 3.3 and 3.5).
- :mod:`~hoplib.lower_bounds.sweep`: the depth sweeps (one model per family and depth, trained with
  :func:`hoplib.train.fit`) whose records the chapters report with :mod:`hoplib.report`.
- :mod:`~hoplib.lower_bounds.experiments`: the chapters' measurements, profiles, tables and figures.
"""
