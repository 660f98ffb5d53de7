"""Chapters on lower bounds beyond transformers (Section 5 and Appendices E-F of the paper).

- :mod:`~hoplib.lower_bounds.communication`: the blackboard/communication engine shared by every lower bound
  (players, messages, exact bit counts) and the pointer-chasing protocols (Proposition E.3).
- :mod:`~hoplib.lower_bounds.rnn`: recurrent models, the RNN construction and Corollary 5.2 / Proposition E.4.
- :mod:`~hoplib.lower_bounds.efficient_attention`, :mod:`~hoplib.lower_bounds.efficient`: kernel (Performer)
  and Longformer attention, their blackboard reductions (Corollaries 5.3 and 5.4).
- :mod:`~hoplib.lower_bounds.cot`: chain of thought for one-layer transformers (Theorem 5.5 and Section 5.3).
- :mod:`~hoplib.lower_bounds.graphs`, :mod:`~hoplib.lower_bounds.gnn`: graph connectivity, GNNs against
  transformers (Theorem 5.1, Corollary 3.3).
"""
