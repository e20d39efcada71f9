"""Retrieval metrics on the image x caption score matrix, and the named evaluation protocols."""
