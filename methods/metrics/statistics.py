"""Statistics of a split's embeddings that papers report beside retrieval metrics, declared like
metrics so tables show them (``methods.metrics.declarations.STATISTICS``): the within-set circular
variance of set models (Kim, Kim, Kwak, CVPR 2023, Table 3: "(Var.)", the natural log of the
average circular variance). They are computed from the encodings by the model
(``RetrievalModel.evaluation_statistics``), not from a score matrix; evaluation reports them under
the protocol ``set_statistics``. Their implementations here only refuse a score matrix.
"""
from __future__ import annotations

from methods.errors import HarnessError
from methods.metrics.declarations import STATISTICS
from methods.metrics.implementations import implement_metric


def _from_embeddings(name: str):
    def compute(context) -> float:
        raise HarnessError(f"{name} is a statistic of the embeddings, computed by the model, not from a score matrix")
    return compute


for _name in STATISTICS:
    implement_metric(_name, _from_embeddings(_name))
