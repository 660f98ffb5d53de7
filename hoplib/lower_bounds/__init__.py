"""The chapters on lower bounds beyond transformers (Section 5 and Appendices E-F of the paper).

- :mod:`~hoplib.lower_bounds.communication`: the blackboard engine shared by every lower bound (Definition E.1:
  players, posts, exact bit counts).
- :mod:`~hoplib.lower_bounds.pointer_chasing`: pointer chasing (Definition E.2, Propositions E.3 and E.4) and its
  encoding as hop_k inputs.
- :mod:`~hoplib.lower_bounds.rnn`: recurrent models, the exact hop_k RNN and Corollary 5.2's protocol.
- :mod:`~hoplib.lower_bounds.efficient_attention`, :mod:`~hoplib.lower_bounds.efficient`: kernel (Performer) and
  Longformer attention, plugged into the core GPT, and their blackboard reductions (Corollaries 5.3 and 5.4).
- :mod:`~hoplib.lower_bounds.cot`: one layer with a chain of thought (Definition 5.5, Corollary 5.6).
- :mod:`~hoplib.lower_bounds.graphs`, :mod:`~hoplib.lower_bounds.gnn`: graph connectivity, GNNs against
  transformers (Theorem 5.1, Corollaries 3.3 and 3.5).
- :mod:`~hoplib.lower_bounds.sweep`: depth sweeps of any sequence model family through the core's training loop.
- :mod:`~hoplib.lower_bounds.experiments`: one module per chapter (profiles, computations, tables, figures).
"""
