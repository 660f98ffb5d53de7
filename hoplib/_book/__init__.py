"""A chapter's start (:mod:`~hoplib._book.notebook`: profile, device, seed, style, ``glue``) and the chapters'
profiles as data with what they cost (:mod:`~hoplib._book.profiles`): what the pages need, not the library."""
