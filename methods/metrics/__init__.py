"""Metrics on a score matrix with a relevance description, registered by name
(``methods.metrics.registry.METRICS``), and the named evaluation protocols.

Importing the package registers every metric module's entries.
"""
from methods.metrics import eccv, eccv_caption, label_prediction, label_ranking, retrieval, statistics  # noqa: F401  (registration)
