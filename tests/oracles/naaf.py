"""NAAF's oracles, written from the equations of CrossmodalGroup/NAAF's model.py: the float64
similarity of one (image, caption) pair (``xattn_score_test``, and ``xattn_score``'s at a given
threshold), the training scores with the threshold mining caption by caption (``xattn_score``),
and ContrastiveLoss. Beside them, descriptions written by hand (``DESCRIPTIONS``) and what the
public code runs (``SOURCE_BEHAVIOUR``)."""
import math

import torch

from methods.models.naaf import NAAF
from tests.oracles._descriptions import REAL, TOY, run, text
from tests.oracles._float64 import EMBED, N_IMAGES, REGION_DIM, REGIONS, build, features
from tests.oracles.bfan import contrastive_loss  # noqa: F401 (the same ContrastiveLoss, max_violation)
from tests.oracles.scan import caption_words
from tests.test_sgraf import l2, linear


def leaky_relu(x):
    return torch.where(x > 0, x, 0.1 * x)


def reference_pair(regions, words, threshold, lambda_softmax, intra_lambda=None):
    """One pair's score: regions (R, D), words (n, D). Per word j, with s_rj = v_r . t_j:
    the negative term m_j = max_r (s_rj - t) when m_j < 0 (or when sum_k A_jk m_k < 0, A the
    caption's intra-modal softmax, if ``intra_lambda``); the attended positive term t_j . a_j / |a_j|
    over the regions above t weighted by exp(lambda (s - t)) (l1, +1e-8); the relevance term sum_r
    alpha_rj s_rj with SCAN's t-i attention. The score is the mean over words of the three."""
    s = regions @ words.t()                                     # (R, n)
    m = (s - threshold).max(dim=0).values                       # (n,)
    if intra_lambda is None:
        negative = m * (m < 0)
    else:
        a = torch.softmax(intra_lambda * (words @ words.t()), dim=1)   # (n, n), over k
        negative = m * ((a @ m) < 0)
    terms = []
    for j in range(words.shape[0]):
        above = s[:, j] > threshold
        e = torch.where(above, torch.exp(lambda_softmax * (s[:, j] - threshold)), torch.zeros_like(s[:, j]))
        w = e / (e.abs().sum() + 1e-8)
        attended = (w[:, None] * regions).sum(0)                # a_j, formed
        norm = attended.norm() if bool(above.any()) else attended.new_zeros(())
        positive_f = (words[j] * attended).sum() / norm.clamp(min=1e-8)
        relevance = l2(leaky_relu(s), dim=1)[:, j]              # over the caption's words
        alpha = torch.softmax(lambda_softmax * relevance, dim=0)
        positive_r = (alpha * s[:, j]).sum()
        terms.append(negative[j] + positive_f + positive_r)
    return torch.stack(terms).mean()


def encodings(model, images, text_batch):
    regions = [l2(linear(model.fc, f)) for f in images["features"]]
    words = [caption_words(model, text_batch["tokens"][c, :int(n)]) for c, n in enumerate(text_batch["lengths"])]
    return regions, words


def score_matrix(model, images, text_batch):
    """Evaluation scores of every pair, one at a time, at the model's safe threshold."""
    regions, words = encodings(model, images, text_batch)
    intra = model.intra_lambda if model.intra_propagation else None
    t = float(model.safe_threshold)
    return torch.stack([torch.stack([reference_pair(r, w, t, model.lambda_softmax, intra) for w in words])
                        for r in regions])


def unbiased_std(x):
    return torch.sqrt(((x - x.mean()) ** 2).sum() / (x.numel() - 1))


def estimate(matched, mismatched, alpha, threshold, safe):
    """One estimate of both thresholds from the mined samples: the larger root of the two
    Gaussians' weighted-density equation, the matched mean less 3 stds, each reset to 0 outside
    [0, 1], then 0.7 of it plus 0.3 of the value before."""
    mp, sp, mn, sn = matched.mean(), unbiased_std(matched), mismatched.mean(), unbiased_std(mismatched)
    a = sp ** 2 - sn ** 2
    b = 2 * (mp * sn ** 2 - mn * sp ** 2)
    c = (mn * sp) ** 2 - (mp * sn) ** 2 + 2 * (sp * sn) ** 2 * torch.log(sn / (alpha * sp) + 1e-8)
    discriminant = b ** 2 - 4 * a * c
    new, new_safe = threshold, safe
    if discriminant > 0:
        new = float((-b + math.sqrt(float(discriminant))) / (2 * a + 1e-10))
        new_safe = float(mp - 3 * sp)
    new = new if 0 <= new <= 1 else 0.0
    new_safe = new_safe if 0 <= new_safe <= 1 else 0.0
    return 0.7 * new + 0.3 * threshold, 0.7 * new_safe + 0.3 * safe, (float(mp), float(sp), float(mn), float(sn))


def training_scores(model, images, text_batch, threshold, safe, mined_words=200, reset=True, alpha=2.0):
    """``xattn_score``: the training scores (I, C), caption by caption, each at the threshold the
    captions before it left, and the state after the batch (threshold, safe, fitted stats or None).
    Caption c's image is image c; it is ranked correctly when image c scores highest."""
    regions, words = encodings(model, images, text_batch)
    matched, mismatched, mined, stats, columns = [], [], 0, None, []
    for c, w in enumerate(words):
        column = torch.stack([reference_pair(r, w, threshold, model.lambda_softmax) for r in regions])
        columns.append(column)
        values = column.detach()
        if c < len(regions) and all(values[c] > values[i] for i in range(len(regions)) if i != c):
            lowest = min(range(len(regions)), key=lambda i: float(values[i]))
            matched.append((regions[c] @ w.t()).max(dim=0).values.detach())
            mismatched.append((regions[lowest] @ w.t()).max(dim=0).values.detach())
            mined += w.shape[0]
            if mined > mined_words:
                threshold, safe, stats = estimate(torch.cat(matched), torch.cat(mismatched), alpha, threshold, safe)
        if mined < mined_words and reset:
            threshold = safe = 0.0
    return torch.stack(columns, dim=1), (threshold, safe, stats)


def reference(model, images, text_batch):
    return score_matrix(model, images, text_batch)


def float64_cases():
    # safe thresholds that leave some words with no region above them (the negative term) and
    # others with some; one case without the intra-modal relation
    for threshold, lambda_softmax, intra in ((0.05, 20.0, True), (0.1, 4.0, True), (0.0, 20.0, False)):
        model = build(NAAF, REGION_DIM, REGIONS, EMBED, bidirectional_text=True, lambda_softmax=lambda_softmax,
                      intra_propagation=intra)
        model.safe_threshold.fill_(threshold)
        yield (f"naaf t {threshold:g} λ {lambda_softmax:g}{'' if intra else ' no intra'}", model,
               {"features": features(N_IMAGES, REGIONS, REGION_DIM)}, reference)


# (run config, dataset config block, the description written by hand)
DESCRIPTIONS = [
    (run({"kind": "naaf", "embed_dim": 64, "text": text(32, 64, bidirectional=True), "lambda_softmax": 20.0,
          "alpha": 2.0, "mined_words": 200, "unmined_thresholds": "zero", "intra_propagation": True,
          "intra_lambda": 5.0, "evaluation_dtype": "float64"}, [(8, False)], batch_size=64), TOY,
     "12×256 RoIAlign regions of ResNet-18 (toy pre-trained) conv4, embed 64, negative-aware attention t-i "
     "(λ 20, α 2, intra-modal), bi-GRU 64, word 32; 8 epochs, batch 64"),
    (run({"kind": "naaf", "embed_dim": 1024, "text": text(300, 1024, bidirectional=True, word_init="glove"),
          "lambda_softmax": 20.0, "intra_propagation": False}, [(20, False)], batch_size=128), REAL,
     "36×2048 precomputed regions, embed 1024, negative-aware attention t-i (λ 20, α 2), bi-GRU 1024, "
     "word 300 (GloVe); 20 epochs, batch 128"),
]


# what the public code runs, written from that code (not from config/methods): method file -> keys
SOURCE_BEHAVIOUR = {
    # CrossmodalGroup/NAAF: README arguments (--lambda_softmax=20 --embed_size=1024, batch 128 on
    # Flickr30K), train.py defaults (margin 0.2, word_dim 300, grad_clip 2, alpha 2, Adam, GloVe
    # words), model.py (bi-GRU of embed_size units, directions averaged; ContrastiveLoss with
    # max_violation on the diagonal; N_POS_WORD > 200; thresholds 0 until then; intra_relation(.., 5)
    # with using_intra_info forced on in xattn_score_test), evaluation.py (float64 scoring); no AMP.
    "naaf": {"loss.kind": "triplet_hardest", "loss.margin": 0.2, "model.embed_dim": 1024,
             "model.lambda_softmax": 20.0, "model.alpha": 2.0, "model.mined_words": 200,
             "model.unmined_thresholds": "zero", "model.intra_propagation": True, "model.intra_lambda": 5.0,
             "model.text.word_dim": 300, "model.text.hidden_dim": 1024, "model.text.bidirectional": True,
             "model.text.word_init": "glove",
             "training.batching": "captions", "training.batch_positives": "diagonal",
             "training.amp": False, "training.grad_clip": 2.0, "training.optimizer": "adam",
             "model.evaluation_dtype": "float64"},
}
# the batch size differs by dataset (README: 128 on Flickr30K, 256 on MSCOCO)
PER_DATASET = {("naaf", "flickr"): {"training.batch_size": 128}, ("naaf", "coco"): {"training.batch_size": 256}}
