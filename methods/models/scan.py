"""SCAN (Lee, Chen, Hua, Hu, He, ECCV 2018): stacked cross attention, as kuanghuei/SCAN's model.py.

Image: precomputed regions -> fc (Xavier) -> l2 per region. Text: word embedding (uniform
+-0.1, no dropout) -> (bi-)GRU, directions averaged -> l2 per word. Similarity: cross attention
between regions and words in one direction (``t2i`` or ``i2t``) with the softmax temperature
lambda_softmax, aggregated by ``avg`` or ``lse`` (lambda_lse) (``methods.models.scan_similarity``).
The paper's "t-i + i-t" rows are two such models whose score matrices are averaged (an ensemble
row in the paper file).
"""
from __future__ import annotations

import torch

from methods.models.base import CrossAttentionModel, register_model
from methods.models.cross_attention import RegionFeatures, WordFeatures
from methods.models.layers import SCAN_L2NORM_EPS, l2norm, xavier_linear
from methods.models.scan_similarity import AGGREGATIONS, DIRECTIONS, scan_pair_elements, scan_scores
from methods.models.text import GRUTextEncoder


def check_similarity(similarity: dict) -> tuple[str, str, float, float | None]:
    """A ``similarity`` block's direction, aggregation, lambda_softmax and lambda_lse (LSE only), checked."""
    direction, aggregation = similarity["direction"], similarity["aggregation"]
    lambda_softmax, lambda_lse = similarity["lambda_softmax"], similarity.get("lambda_lse")
    if direction not in DIRECTIONS:
        raise ValueError(f"similarity direction must be one of {DIRECTIONS}, not {direction!r}")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"similarity aggregation must be one of {AGGREGATIONS}, not {aggregation!r}")
    if lambda_softmax <= 0:
        raise ValueError(f"lambda_softmax must be positive, not {lambda_softmax}")
    if aggregation == "lse" and (lambda_lse is None or lambda_lse <= 0):
        raise ValueError(f"LSE aggregation needs a positive lambda_lse, not {lambda_lse}")
    if aggregation == "avg" and lambda_lse is not None:
        raise ValueError(f"lambda_lse {lambda_lse} has no effect on AVG aggregation: leave it out")
    return direction, aggregation, lambda_softmax, lambda_lse


# model: the encodings' dtype; float64: kuanghuei/SCAN's evaluation precision (score_matrix)
EVALUATION_DTYPES = ("model", "float64")


@register_model("scan")
class SCAN(CrossAttentionModel):
    image_arguments = {"region_dim": "dim", "n_regions": "regions"}

    def __init__(self, region_dim: int, n_regions: int, embed_dim: int, text: GRUTextEncoder, similarity: dict,
                 evaluation_dtype: str = "model"):
        """``similarity``: {direction, aggregation, lambda_softmax, lambda_lse (LSE only)}."""
        super().__init__()
        direction, aggregation, lambda_softmax, lambda_lse = check_similarity(similarity)
        if evaluation_dtype not in EVALUATION_DTYPES:
            raise ValueError(f"evaluation_dtype must be one of {EVALUATION_DTYPES}, not {evaluation_dtype!r}")
        self.evaluation_dtype = evaluation_dtype
        self.n_regions = n_regions   # sizes the scoring blocks
        self.fc = xavier_linear(region_dim, embed_dim)
        self.text = text
        self.text.l2norm_eps = SCAN_L2NORM_EPS
        self.direction, self.aggregation = direction, aggregation
        self.lambda_softmax, self.lambda_lse = lambda_softmax, lambda_lse

    def encode_images(self, batch: dict) -> RegionFeatures:
        regions = l2norm(self.fc(batch["features"].to(self.fc.weight.dtype)), eps=SCAN_L2NORM_EPS)
        return RegionFeatures(regions, regions.new_zeros(regions.shape[0], 0))   # no global vector

    def encode_texts(self, batch: dict) -> WordFeatures:
        lengths = batch["lengths"].to(batch["tokens"].device)
        words = self.text.words(batch["tokens"], lengths)
        return WordFeatures(words, lengths, words.new_zeros(words.shape[0], 0))

    def score(self, img: RegionFeatures, cap: WordFeatures) -> torch.Tensor:
        return scan_scores(img.regions, cap.words, cap.mask, self.direction, self.aggregation,
                           self.lambda_softmax, self.lambda_lse)

    def pair_elements(self, length: int) -> int:
        return scan_pair_elements(self.n_regions, length)
