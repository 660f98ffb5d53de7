"""Lower bounds beyond transformers (Section 5 and Appendix E of the paper): the blackboard
(:mod:`.communication`), pointer chasing (:mod:`.pointer_chasing`), recurrent models (:mod:`.rnn`), kernel and
Longformer attention (:mod:`.efficient_attention`) and their blackboard reductions (:mod:`.reductions`), chain
of thought (:mod:`.cot`), graphs and GNNs (:mod:`.graphs`, :mod:`.gnn`), and the depth sweeps (:mod:`.sweep`).
"""
