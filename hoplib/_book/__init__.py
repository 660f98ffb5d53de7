"""A chapter's start (:mod:`~hoplib._book.notebook`: profile, device, seed, style, ``glue``): what the pages need,
not the library. The chapters' profiles as data, and what they cost, are read by ``scripts/profiles.py``."""
