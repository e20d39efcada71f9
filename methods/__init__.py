"""Reproducibility harness for image-text retrieval papers.

Layers, each importing only from itself and below: base helpers (``errors``, ``io``, ``config``,
``registry``, ``runtime``, ``cli``; ``untrusted``, files from the internet read within bounds) ->
``data`` -> ``features`` -> ``models`` -> ``losses`` and ``metrics`` -> ``training`` and ``scoring``
(``released``: the authors' weights) -> ``report`` -> ``plan``, ``api`` and the commands (``train``,
``evaluate``, ``ensemble``). ``papers/`` holds the declarative paper files.
"""
