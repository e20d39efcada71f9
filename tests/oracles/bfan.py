"""BFAN's oracles: the float64 per-pair similarity of CrossmodalGroup/BFAN model.py (``func_attention``,
``focal_equal``, ``focal_prob``, ``xattn_score``), written from its equations one (image, caption)
pair at a time, and its ContrastiveLoss. Beside them, descriptions written by hand
(``DESCRIPTIONS``) and what the public code runs (``SOURCE_BEHAVIOUR``)."""
import torch

from methods.models.bfan import BFAN
from tests.oracles._descriptions import REAL, TOY, run, text
from tests.oracles._float64 import EMBED, LENGTHS, N_IMAGES, REGION_DIM, REGIONS, build, features
from tests.oracles.scan import caption_words
from tests.test_sgraf import l2, linear


def leaky_relu(x):
    return torch.where(x > 0, x, 0.1 * x)


def cosine(x, y):
    """model.py cosine_similarity: x . y / max(|x| |y|, 1e-8), per row."""
    return (x * y).sum(-1) / (x.norm(dim=-1) * y.norm(dim=-1)).clamp(min=1e-8)


def focal_indicator(a, focal):
    """H_i = [F_i > 0] over one query's weights a (S,): F_i = sum_j (a_i - a_j) g_j with the
    confidence g_j = 1 (``equal``) or sqrt(a_j) (``prob``)."""
    confidence = torch.ones_like(a) if focal == "equal" else a.sqrt()
    f = ((a[:, None] - a[None, :]) * confidence[None, :]).sum(dim=1)
    return (f > 0).to(a.dtype)


def focal_attention(query, context, lambda_softmax, focal, empty_focus):
    """func_attention for one pair: (Q, D) queries attending to (S, D) context fragments -> (Q, D)."""
    sim = l2(leaky_relu(context @ query.t()), dim=1)          # (S, Q), each fragment over the queries
    weights = torch.softmax(lambda_softmax * sim.t(), dim=1)   # (Q, S), over the context
    rows = []
    for a in weights:
        h = focal_indicator(a, focal)
        if empty_focus == "keep_all" and h.sum() == 0:
            h = torch.ones_like(a)
        rows.append(h * a / (h * a).sum())                   # 0/0 when nothing is kept (empty_focus nan)
    return torch.stack(rows) @ context


def reference_pair(regions, words, focal, lambda_softmax, empty_focus="nan"):
    """One pair's score: t-i (words attend to regions) plus i-t (regions attend to words), each the
    mean cosine of a query with its attended vector."""
    t2i = cosine(words, focal_attention(words, regions, lambda_softmax, focal, empty_focus)).mean()
    i2t = cosine(regions, focal_attention(regions, words, lambda_softmax, focal, empty_focus)).mean()
    return t2i + i2t


def score_matrix(model, images, text_batch):
    """Every pair, one at a time, from the model's weights; differentiable (the indicator is a comparison)."""
    regions = [l2(linear(model.fc, f)) for f in images["features"]]
    words = [caption_words(model, text_batch["tokens"][c, :int(n)]) for c, n in enumerate(text_batch["lengths"])]
    return torch.stack([torch.stack([reference_pair(r, w, model.focal, model.lambda_softmax, model.empty_focus)
                                     for w in words]) for r in regions])


def contrastive_loss(scores, margin=0.2):
    """model.py ContrastiveLoss with max_violation: per image, its hardest caption's hinge; per
    caption, its hardest image's hinge; positives on the diagonal; summed."""
    n = scores.shape[0]
    total = scores.new_zeros(())
    for i in range(n):
        total = total + max((margin + scores[i, j] - scores[i, i]).clamp(min=0) for j in range(n) if j != i)
        total = total + max((margin + scores[j, i] - scores[i, i]).clamp(min=0) for j in range(n) if j != i)
    return total


def reference(model, images, text_batch):
    return score_matrix(model, images, text_batch)


def float64_cases():
    # the shared captions hold a one-word caption, whose i-t attention keeps nothing in the source (0/0):
    # these cases run the corrected empty_focus; tests/test_bfan.py checks the source's NaN
    for focal, lambda_softmax in (("equal", 20.0), ("prob", 20.0), ("prob", 4.0)):
        yield (f"bfan {focal} λ {lambda_softmax:g}",
               build(BFAN, REGION_DIM, REGIONS, EMBED, bidirectional_text=True, focal=focal,
                     lambda_softmax=lambda_softmax, empty_focus="keep_all"),
               {"features": features(N_IMAGES, REGIONS, REGION_DIM)}, reference)


assert 1 in LENGTHS   # the case above exists


# (run config, dataset config block, the description written by hand)
DESCRIPTIONS = [
    (run({"kind": "bfan", "embed_dim": 64, "text": text(32, 64, bidirectional=True), "focal": "prob",
          "lambda_softmax": 20.0, "empty_focus": "nan", "evaluation_dtype": "float64"}, [(4, False)]), TOY,
     "12×256 RoIAlign regions of ResNet-18 (toy pre-trained) conv4, embed 64, focal attention t-i + i-t "
     "(prob, λ 20), bi-GRU 64, word 32; 4 epochs, batch 16"),
    (run({"kind": "bfan", "embed_dim": 1024, "text": text(300, 1024, bidirectional=True), "focal": "equal",
          "lambda_softmax": 20.0}, [(15, False)], batch_size=128), REAL,
     "36×2048 precomputed regions, embed 1024, focal attention t-i + i-t (equal, λ 20), bi-GRU 1024, word 300; "
     "15 epochs, batch 128"),
]


# what the public code runs, written from that code (not from config/methods): method file -> keys
SOURCE_BEHAVIOUR = {
    # CrossmodalGroup/BFAN: README commands (--max_violation --lambda_softmax=20 --embed_size=1024
    # --batch_size=128), train.py defaults (margin 0.2, word_dim 300, grad_clip 2, Adam), model.py
    # (bi-GRU of embed_size units, directions averaged; ContrastiveLoss on the diagonal; the 0/0 of an
    # empty focus), evaluation.py (float64 scoring); no AMP. (The focal type is a row's setting.)
    "bfan": {"loss.kind": "triplet_hardest", "loss.margin": 0.2, "model.embed_dim": 1024,
             "model.lambda_softmax": 20.0, "model.empty_focus": "nan",
             "model.text.word_dim": 300, "model.text.hidden_dim": 1024, "model.text.bidirectional": True,
             "training.batch_size": 128, "training.batching": "captions", "training.batch_positives": "diagonal",
             "training.amp": False, "training.grad_clip": 2.0, "training.optimizer": "adam",
             "model.evaluation_dtype": "float64"},
}
