"""Chapter "Logarithmic depth suffices": the paper's constructions in real transformer weights.

Holds Theorem 4.2 (hop_k in ⌈log₂k⌉+2 layers, Lemmas A.2, D.1, D.2 of Appendix D), the multi-lookup variant with
⌊log₂k⌋+2 layers, the exhaustive search over one-lookup pointer programs (why one lookup per layer cannot do
better), the reproduction of the paper's v1 find, and the precision study (how many bits the attention needs).
"""

from hoplib.construction.transformer import *  # noqa: F403
from hoplib.construction.transformer import __all__  # noqa: F401
