"""hoplib: the executable companion to "Transformers, parallel computation, and logarithmic depth", one module
per idea (:mod:`hoplib.tasks`, :mod:`hoplib.models`, :mod:`hoplib.train`, ...), imported by the book's chapters."""

__version__ = "0.2.0"
