"""Private plumbing of the book (not a chapter): chapter start-up, provenance of results files, device choice,
argument validation, and where the stored results live. Chapters and the library's parts import it; it imports
no part of the book.
"""
