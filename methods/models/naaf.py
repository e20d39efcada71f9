"""NAAF (Zhang, Mao, Wang, Zhang, CVPR 2022): negative-aware attention, as CrossmodalGroup/NAAF's
model.py computes it (``xattn_score`` in training, ``xattn_score_test`` in evaluation), for a block
of (image, caption) pairs at once.

Encoders as SCAN's (the public code is built on kuanghuei/SCAN): regions -> fc (Xavier) -> l2 per
region; word embedding (GloVe or uniform +-0.1) -> bi-GRU, directions averaged -> l2 per word.

For regions v_r and words t_j, s_rj = v_r . t_j, and t a threshold: below it a region is taken
as mismatched with the word. Per word j, three terms (words attend to regions only):

- negative: m_j = max_r (s_rj - t), counted when m_j < 0 (no region of the image matches the word:
  a penalty); in evaluation the indicator is [sum_k A_jk m_k < 0] instead, with A_jk =
  softmax_k(intra_lambda t_j . t_k) over the caption's words (``intra_propagation``), and the term
  still m_j;
- positive, by the attended feature: w_rj = e_rj / (sum_r e_rj + 1e-8), e_rj = exp(lambda (s_rj - t))
  for s_rj > t and 0 otherwise; the term is t_j . a_j / max(|a_j|, 1e-8), a_j = sum_r w_rj v_r;
- positive, by relevance: SCAN's t-i attention alpha_rj (LeakyReLU_0.1, l2 over the caption's
  words, softmax over regions of lambda times it); the term is sum_r alpha_rj s_rj.

The score is the mean over the caption's words of the three summed. Evaluation scores with the
safe threshold; training with the mined one (``training_outputs``).

Threshold mining (training, one caption at a time, as the source's loop): a caption whose own
image scores highest among the batch's images is ranked correctly; its words' best-region
similarities max_r s_rj with its own image are matched samples, those with the batch's
lowest-scoring image mismatched ones. Once a batch has mined more than ``mined_words`` words,
each further correct caption fits the two Gaussians (means, unbiased stds) and takes the
larger root of A x^2 + B x + C = 0 with A = sp^2 - sn^2, B = 2 (mp sn^2 - mn sp^2),
C = (mn sp)^2 - (mp sn)^2 + 2 (sp sn)^2 log(sn / (alpha sp) + 1e-8), x = (-B + sqrt(E)) / (2A + 1e-10)
where E = B^2 - 4AC > 0, as the threshold, and mp - 3 sp as the safe threshold; a value outside
[0, 1] becomes 0, and each is 0.7 the new value plus 0.3 the one before. While the batch has mined
fewer than ``mined_words`` words both are 0 (``unmined_thresholds: zero``); the next caption scores
with whatever the last one left. No gradient flows through the thresholds. The state (the two
thresholds and the last fitted means and stds) is in float64 buffers, saved with the weights.

The attended vectors are never formed: as in ``methods.models.scan_similarity``, t_j . a_j is
sum_r w_rj s_rj and |a_j|^2 = w^T G w with G the regions' Gram matrix.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from methods.models.base import CrossAttentionModel, register_model
from methods.models.cross_attention import RegionFeatures, WordFeatures, region_word_cosines
from methods.models.layers import SCAN_L2NORM_EPS, at_least_float32, l2norm, xavier_linear
from methods.models.scan import EVALUATION_DTYPES
from methods.models.text import GRUTextEncoder

UNMINED_THRESHOLDS = ("zero", "keep")
L1NORM_EPS = 1e-8          # model.py l1norm: sum |x| + 1e-8
COSINE_EPS = 1e-8          # model.py cosine_similarity: the attended norm clamped at 1e-8
LOG_EPS = 1e-8             # inside the log of the threshold's constant term
ROOT_EPS = 1e-10           # added to 2A before the division
NEW_WEIGHT, OLD_WEIGHT = 0.7, 0.3   # a new threshold estimate against the one before (0.3, not 1 - 0.7)
SAFE_STDS = 3.0            # the safe threshold: the matched mean less 3 stds
STATE = ("threshold", "safe_threshold", "matched_mean", "matched_std", "mismatched_mean", "mismatched_std")


def attended_norm(sq_norm: torch.Tensor) -> torch.Tensor:
    """|a| from |a|^2 with a zero gradient where a = 0 (every region below the threshold): sqrt's
    derivative is infinite there, and the clamp after it would multiply that by 0."""
    positive = sq_norm > 0
    return torch.where(positive, sq_norm.clamp(min=0).masked_fill(~positive, 1.0).sqrt(), 0.0)


def thresholded_terms(raw: torch.Tensor, gram: torch.Tensor, threshold: float, lambda_softmax: float):
    """The negative term's m (I, C, L) and the attended-feature positive term (I, C, L) of raw
    similarities ``raw`` (I, C, R, L) at ``threshold``; ``gram`` (I, R, R) the regions' Gram matrices."""
    shifted = raw - threshold
    best = shifted.max(dim=2).values                                       # m_j: max over regions
    wide = at_least_float32(shifted)
    e = torch.where(wide > 0, torch.exp(lambda_softmax * wide), 0.0)       # masked_fill(<= 0, -1e9) then exp
    w = e / (e.sum(dim=2, keepdim=True) + L1NORM_EPS)
    dots = (w * raw).sum(2)                                                # t_j . a_j
    sq_norm = torch.einsum("icrl,irs,icsl->icl", w, at_least_float32(gram), w)
    return best, dots / attended_norm(sq_norm).clamp(min=COSINE_EPS)


def relevance_terms(raw: torch.Tensor, mask: torch.Tensor, lambda_softmax: float) -> torch.Tensor:
    """(I, C, L) sum_r alpha_rj s_rj, alpha SCAN's t-i attention (``inter_relations``)."""
    s = F.leaky_relu(raw, 0.1) * mask[None, :, None, :]                   # padded words: out of the l2 norm
    s = l2norm(at_least_float32(s), dim=3, eps=SCAN_L2NORM_EPS)
    alpha = torch.softmax(lambda_softmax * s, dim=2)                       # over regions
    return (alpha * raw).sum(2)


def intra_attention(words: torch.Tensor, mask: torch.Tensor, intra_lambda: float) -> torch.Tensor:
    """(C, L, L) A_jk = softmax over the caption's words k of intra_lambda t_j . t_k (``intra_relation``)."""
    logits = intra_lambda * at_least_float32(words @ words.transpose(1, 2))
    return torch.softmax(logits.masked_fill(~mask[:, None, :], float("-inf")), dim=2)


def mean_over_words(terms: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(I, C, L) -> (I, C): the mean over each caption's words."""
    mask = mask[None].to(terms.dtype)
    return (terms * mask).sum(-1) / mask.sum(-1)


def naaf_scores(regions: torch.Tensor, words: torch.Tensor, mask: torch.Tensor, threshold: float,
                lambda_softmax: float, intra_lambda: float | None) -> torch.Tensor:
    """(I, C) evaluation similarities (``xattn_score_test``) of a block: ``regions`` (I, R, D), ``words``
    (C, L, D) zero-padded, ``mask`` (C, L); ``intra_lambda`` None scores without intra-modal propagation."""
    raw = at_least_float32(region_word_cosines(regions, words))            # (I, C, R, L)
    best, attended = thresholded_terms(raw, regions @ regions.transpose(1, 2), threshold, lambda_softmax)
    if intra_lambda is None:
        negative = best * (best < 0)
    else:
        propagated = torch.einsum("clk,ick->icl", intra_attention(words, mask, intra_lambda), best)
        negative = best * (propagated < 0)
    return mean_over_words(negative + attended + relevance_terms(raw, mask, lambda_softmax), mask)


def optimal_thresholds(matched: torch.Tensor, mismatched: torch.Tensor, alpha: float,
                       threshold: float, safe: float) -> tuple[float, float, tuple[float, float, float, float]]:
    """The thresholds after one estimate from the mined samples (``threshold``, ``safe``: before it)
    and the fitted (matched mean, std, mismatched mean, std); in the samples' dtype, as the source."""
    mp, mn, sp, sn = matched.mean(), mismatched.mean(), matched.std(), mismatched.std()
    a = sp.pow(2) - sn.pow(2)
    b = 2 * ((mp * sn.pow(2)) - (mn * sp.pow(2)))
    c = (mn * sp).pow(2) - (mp * sn).pow(2) + 2 * (sp * sn).pow(2) * torch.log(sn / (alpha * sp) + LOG_EPS)
    stats = (mp.item(), sp.item(), mn.item(), sn.item())
    e = b.pow(2) - 4 * a * c
    new, new_safe = threshold, safe
    if e > 0:
        new = ((-b + torch.sqrt(e)) / (2 * a + ROOT_EPS)).item()
        new_safe = (mp - SAFE_STDS * stats[1]).item()
    new = 0.0 if new < 0 or new > 1 else new   # the source resets a value above 1 to 0 too
    new_safe = 0.0 if new_safe < 0 or new_safe > 1 else new_safe
    return NEW_WEIGHT * new + OLD_WEIGHT * threshold, NEW_WEIGHT * new_safe + OLD_WEIGHT * safe, stats


def check_settings(lambda_softmax: float, alpha: float, mined_words: int, unmined_thresholds: str,
                   intra_lambda: float, evaluation_dtype: str) -> None:
    for name, value in (("lambda_softmax", lambda_softmax), ("alpha", alpha), ("intra_lambda", intra_lambda)):
        if not value > 0:
            raise ValueError(f"{name} must be positive, not {value}")
    if mined_words < 1:
        raise ValueError(f"mined_words must be at least 1, not {mined_words}")
    if unmined_thresholds not in UNMINED_THRESHOLDS:
        raise ValueError(f"unmined_thresholds must be one of {UNMINED_THRESHOLDS}, not {unmined_thresholds!r}")
    if evaluation_dtype not in EVALUATION_DTYPES:
        raise ValueError(f"evaluation_dtype must be one of {EVALUATION_DTYPES}, not {evaluation_dtype!r}")


@register_model("naaf")
class NAAF(CrossAttentionModel):
    image_arguments = {"region_dim": "dim", "n_regions": "regions"}

    scoring_image_block = None   # the pair intermediates hold no embedding dimension (Gram trick)

    def __init__(self, region_dim: int, n_regions: int, embed_dim: int, text: GRUTextEncoder, lambda_softmax: float,
                 alpha: float = 2.0, mined_words: int = 200, unmined_thresholds: str = "zero",
                 intra_propagation: bool = True, intra_lambda: float = 5.0, evaluation_dtype: str = "model"):
        super().__init__()
        check_settings(lambda_softmax, alpha, mined_words, unmined_thresholds, intra_lambda, evaluation_dtype)
        self.lambda_softmax, self.alpha, self.mined_words = lambda_softmax, alpha, mined_words
        self.unmined_thresholds = unmined_thresholds
        self.intra_propagation, self.intra_lambda = intra_propagation, intra_lambda
        self.evaluation_dtype = evaluation_dtype
        self.n_regions = n_regions   # sizes the scoring blocks
        self.fc = xavier_linear(region_dim, embed_dim)
        self.text = text
        self.text.l2norm_eps = SCAN_L2NORM_EPS   # model.py l2norm: |x| + 1e-8
        # the source keeps these in its options (opt.thres, opt.thres_safe, opt.mean_pos, ...), which
        # train.py saves in each checkpoint; float64, as Python floats (0 at the start, its defaults)
        for name in STATE:
            self.register_buffer(name, torch.zeros((), dtype=torch.float64))

    def encode_images(self, batch: dict) -> RegionFeatures:
        regions = l2norm(self.fc(batch["features"].to(self.fc.weight.dtype)), eps=SCAN_L2NORM_EPS)
        return RegionFeatures(regions, regions.new_zeros(regions.shape[0], 0))   # no global vector

    def encode_texts(self, batch: dict) -> WordFeatures:
        lengths = batch["lengths"].to(batch["tokens"].device)
        words = self.text.words(batch["tokens"], lengths)
        return WordFeatures(words, lengths, words.new_zeros(words.shape[0], 0))

    def score(self, img: RegionFeatures, cap: WordFeatures) -> torch.Tensor:
        return naaf_scores(img.regions, cap.words, cap.mask, float(self.safe_threshold), self.lambda_softmax,
                           self.intra_lambda if self.intra_propagation else None)

    def training_outputs(self, img: RegionFeatures, cap: WordFeatures) -> dict:
        """The training scores (``xattn_score``: the mined threshold, no intra-modal propagation),
        mining the thresholds caption by caption as the source does: each caption's scores depend
        on what the captions before it mined. Image c is caption c's (``batch_positives: diagonal``);
        a caption past the batch's images is never a correct one."""
        regions, words, mask = img.regions, cap.words, cap.mask
        raw = at_least_float32(region_word_cosines(regions, words))        # (I, C, R, L)
        relevance = relevance_terms(raw, mask, self.lambda_softmax)        # threshold-free
        gram = regions @ regions.transpose(1, 2)
        best_region = raw.detach().max(dim=2).values                       # (I, C, L): the mined samples
        threshold, safe = float(self.threshold), float(self.safe_threshold)
        matched, mismatched, mined, stats = [], [], 0, None
        columns = []
        for c, n in enumerate(cap.lengths.tolist()):
            best, attended = thresholded_terms(raw[:, c:c + 1, :, :n], gram, threshold, self.lambda_softmax)
            column = (best * (best < 0) + attended + relevance[:, c:c + 1, :n]).mean(-1)[:, 0]   # (I,)
            columns.append(column)
            with torch.no_grad():
                if int(column.argmax()) == c:
                    matched.append(best_region[c, c, :n])
                    mismatched.append(best_region[int(column.argmin()), c, :n])
                    mined += n
                    if mined > self.mined_words:
                        threshold, safe, stats = optimal_thresholds(torch.cat(matched), torch.cat(mismatched),
                                                                    self.alpha, threshold, safe)
            if mined < self.mined_words and self.unmined_thresholds == "zero":
                threshold = safe = 0.0
        self._keep_state(threshold, safe, stats)
        return {"scores": [torch.stack(columns, dim=1)]}

    @torch.no_grad()
    def _keep_state(self, threshold: float, safe: float, stats: tuple | None) -> None:
        self.threshold.fill_(threshold)
        self.safe_threshold.fill_(safe)
        if stats is not None:
            for name, value in zip(STATE[2:], stats):
                getattr(self, name).fill_(value)

    def pair_elements(self, length: int) -> int:
        """Per pair: the similarities, shifted, exponentials, weights, products, relevance weights."""
        return 12 * self.n_regions * length

