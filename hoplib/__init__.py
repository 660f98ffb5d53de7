"""hoplib: the executable companion to "Transformers, parallel computation, and logarithmic depth".

One module per idea: :mod:`hoplib.tasks` (the k-hop task and its data), :mod:`hoplib._book.device` (device and
seeds), :mod:`hoplib._book.provenance` (results files), :mod:`hoplib.exercises` (checkers for the book's
exercises), and the modules of the later chapters.
"""

__version__ = "0.1.0"
