"""SCAN's oracles: the float64 per-pair similarity of kuanghuei/SCAN model.py (tests/test_mvsa_scan.py).
Beside it, descriptions written by hand (``DESCRIPTIONS``) and what the public code runs (``SOURCE_BEHAVIOUR``)."""
import torch

from methods.models.scan import SCAN
from tests.oracles._descriptions import TOY, run, text
from tests.oracles._float64 import EMBED, LENGTHS, N_IMAGES, REGION_DIM, REGIONS, build, features
from tests.test_mvsa_scan import reference_pair as scan_reference_pair
from tests.test_mvsa_scan import scan_similarity
from tests.test_sgraf import l2, linear


def caption_words(model, tokens):
    """(L, D) words of one unpadded caption: bi-GRU, directions averaged, l2 (SCAN's l2norm)."""
    out, _ = model.text.gru(model.text.embed(tokens[None]))
    half = out.shape[-1] // 2
    return l2((out[0, :, :half] + out[0, :, half:]) / 2)


def scan_matrix(model, instances, text_batch):
    """Scores of every image's (N, D) instances with every caption, one pair at a time."""
    words = [caption_words(model, text_batch["tokens"][c, :n]) for c, n in enumerate(LENGTHS)]
    return torch.tensor([[scan_reference_pair(inst, w, model.direction, model.aggregation, model.lambda_softmax,
                                              model.lambda_lse) for w in words] for inst in instances],
                        dtype=torch.float64)


def scan_reference(model, images, text_batch):
    return scan_matrix(model, [l2(linear(model.fc, f)) for f in images["features"]], text_batch)


def float64_cases():
    for direction, aggregation, lambda_softmax, lambda_lse in (("t2i", "avg", 9.0, None), ("t2i", "lse", 9.0, 6.0),
                                                               ("i2t", "avg", 4.0, None), ("i2t", "lse", 4.0, 20.0)):
        yield (f"scan {direction} {aggregation}",
               build(SCAN, REGION_DIM, REGIONS, EMBED, bidirectional_text=True,
                     similarity=scan_similarity(direction, aggregation, lambda_softmax, lambda_lse)),
               {"features": features(N_IMAGES, REGIONS, REGION_DIM)}, scan_reference)


# (run config, dataset config block, the description written by hand)
DESCRIPTIONS = [
    (run({"kind": "scan", "embed_dim": 64, "text": text(32, 64, bidirectional=True), "evaluation_dtype": "float64",
          "similarity": {"direction": "i2t", "aggregation": "lse", "lambda_softmax": 4.0, "lambda_lse": 5.0}},
         [(4, False)]), TOY,
     "12×256 RoIAlign regions of ResNet-18 (toy pre-trained) conv4, embed 64, i-t LSE (λ1 4, λ2 5), "
     "bi-GRU 64, word 32; 4 epochs, batch 16"),
]


# what the public code runs, written from that code (not from config/methods): method file -> keys
SOURCE_BEHAVIOUR = {
    # kuanghuei/SCAN: README commands (--max_violation --bi_gru, margin 0.2, embed 1024, word 300,
    # batch 128, grad_clip 2), model.py (ContrastiveLoss on the diagonal), train.py (Adam); no AMP.
    # (Direction, aggregation and lambdas are the four settings, set per row.)
    "scan": {"loss.kind": "triplet_hardest", "loss.margin": 0.2, "model.embed_dim": 1024,
             "model.text.word_dim": 300, "model.text.hidden_dim": 1024, "model.text.bidirectional": True,
             "training.batch_size": 128, "training.batching": "captions", "training.batch_positives": "diagonal",
             "training.amp": False, "training.grad_clip": 2.0, "training.optimizer": "adam",
             "model.evaluation_dtype": "float64"},
}
