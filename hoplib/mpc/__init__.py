"""Massively Parallel Computation (Sections 2-3 of the paper): :mod:`~hoplib.mpc.simulator` (the model, with
its limits enforced), :mod:`~hoplib.mpc.primitives` (sorting, scans, lookups), :mod:`~hoplib.mpc.protocols`
(hop_k, connectivity), :mod:`~hoplib.mpc.routing` (Lemma 3.2, which the chapter ``mpc.md`` turns into
Theorem 3.1's transformer) and :mod:`~hoplib.mpc.layer_sim` (Theorem 3.4)."""

from hoplib.mpc.simulator import Message, MPCLimitError, MPCNotConvergedError, MPCProtocolError, MPCSimulator, Table

__all__ = ["MPCLimitError", "MPCNotConvergedError", "MPCProtocolError", "MPCSimulator", "Message", "Table"]
