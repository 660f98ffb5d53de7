"""Massively Parallel Computation (Section 2 and 3 of the paper): a simulator that enforces the model,
protocols for hop_k and connectivity, Lemma 3.2's routing layer (transformers simulate MPC, Theorem 3.1),
and a transformer layer run as an MPC protocol (Theorem 3.4).
"""

from hoplib.mpc.simulator import (
    Message,
    MPCLimitError,
    MPCNotConvergedError,
    MPCProtocolError,
    MPCSimulator,
    MPCStats,
    RoundContext,
    Table,
)

__all__ = ["MPCLimitError", "MPCNotConvergedError", "MPCProtocolError", "MPCSimulator", "MPCStats", "Message",
           "RoundContext", "Table"]
