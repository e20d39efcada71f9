"""Reproducibility harness for image-text retrieval papers.

Sub-packages: ``data`` (datasets, vocabulary, synthetic generator), ``features``
(cached CNN features), ``models``, ``losses``, ``metrics``, ``training``,
``report`` (tables and figures) and ``papers`` (declarative paper files).
"""
