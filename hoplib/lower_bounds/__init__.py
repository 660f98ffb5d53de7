"""Lower bounds beyond transformers (Section 5 and Appendix E of the paper): the blackboard, pointer chasing, RNNs,
kernel and Longformer attention, chain of thought, graphs and GNNs, and every model family
trained on hop_k (:mod:`~hoplib.lower_bounds.families`)."""
