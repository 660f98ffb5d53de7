"""Massively Parallel Computation (Sections 2-3 of the paper): :mod:`~hoplib.mpc.simulator` (the model, with
its limits enforced), :mod:`~hoplib.mpc.primitives` (sorting, scans, lookups), :mod:`~hoplib.mpc.protocols`
(hop_k, connectivity) and :mod:`~hoplib.mpc.layer_sim` (Theorem 3.4). Lemma 3.2's routing layer and Theorem
3.1's transformer are built in the chapter ``mpc.md``."""

from hoplib.mpc.simulator import Message, MPCLimitError, MPCNotConvergedError, MPCProtocolError, MPCSimulator, Table

__all__ = ["MPCLimitError", "MPCNotConvergedError", "MPCProtocolError", "MPCSimulator", "Message", "Table"]
