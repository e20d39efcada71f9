"""MVSA's oracles: the float64 per-pair reference (ASA blocks over the CNN maps, SCAN's similarity).
Beside it, descriptions written by hand (``DESCRIPTIONS``) and what the public code runs (``SOURCE_BEHAVIOUR``)."""
import torch

from methods.models.mvsa import MVSA
from tests.oracles._descriptions import REAL, TOY, run, text
from tests.oracles._float64 import EMBED, MVSA_SHAPES, N_IMAGES, build, features
from tests.oracles.scan import scan_matrix
from tests.test_mvsa_scan import scan_similarity
from tests.test_sgraf import l2, linear


def mvsa_instances(model, grids):
    """(N, D) instances of one image from its (H, W, C) maps: per scale a projection, ASA blocks
    (softmax(theta phi^T) g, W_z, eval-mode BatchNorm, residual), the instance map; finer maps
    pooled over k x k cells to the coarsest grid, scales concatenated finest first; l2."""
    gh, gw = model.grid
    parts = []
    for scale in model.scales:
        h, w, c = grids[scale].shape
        branch = model.branches[scale]
        x = linear(branch.project, grids[scale].reshape(h * w, c))
        for block in branch.asa:
            attention = torch.softmax(linear(block.theta, x) @ linear(block.phi, x).t(), dim=1)
            y = linear(block.out, attention @ linear(block.g, x))
            if block.bn is not None:
                bn = block.bn
                y = (y - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps) * bn.weight + bn.bias
            x = x + y
        inst = linear(branch.instance, x).reshape(h, w, -1)
        if len(model.scales) > 1 and (h, w) != (gh, gw):
            cells = inst.reshape(gh, h // gh, gw, w // gw, -1)
            inst = cells.amax(dim=(1, 3)) if model.fusion_pooling == "max" else cells.mean(dim=(1, 3))
        parts.append(inst.reshape(-1, inst.shape[-1]))
    return l2(torch.cat(parts))


def mvsa_reference(model, images, text_batch):
    grids = images["features"]
    return scan_matrix(model, [mvsa_instances(model, {s: g[i] for s, g in grids.items()}) for i in range(N_IMAGES)],
                       text_batch)


def float64_cases():
    grids = {s: features(N_IMAGES, *shape) for s, shape in MVSA_SHAPES.items()}
    for scales, pooling, asa, similarity in (
            (["conv4", "conv5"], "max", dict(blocks=2, batchnorm=True), scan_similarity()),
            (["conv4", "conv5"], "avg", dict(blocks=1, batchnorm=True), scan_similarity("i2t", "lse", 4.0, 5.0)),
            (["conv5"], None, dict(blocks=1, batchnorm=False), scan_similarity("t2i", "lse", 9.0, 6.0))):
        yield (f"mvsa {scales} {pooling} {asa} {similarity}",
               build(MVSA, "resnet18", MVSA_SHAPES, scales, pooling, 16, EMBED, asa={**asa, "inter_dim": 7},
                     similarity=similarity, bidirectional_text=True),
               {"features": {s: grids[s] for s in scales}}, mvsa_reference)


# (run config, dataset config block, the description written by hand)
DESCRIPTIONS = [
    (run({"kind": "mvsa", "backbone": "r152", "grid_scales": ["conv4", "conv5"], "fusion_pooling": "max",
          "candidate_dim": 2048, "embed_dim": 1024, "asa": {"blocks": 1, "inter_dim": 1024, "batchnorm": True},
          "similarity": {"direction": "t2i", "aggregation": "avg", "lambda_softmax": 9.0},
          "text": text(300, 1024, bidirectional=True, word_init="glove")}, [(20, False), (15, True)],
         batch_size=128), REAL,
     "ResNet-152 (weights resnet152-394f9c45.pth) conv4 + conv5 (max-pooled to the coarsest), CNN fine-tuned, "
     "1 ASA, C 2048, D 1024, t-i AVG (λ1 9), bi-GRU 1024, word 300 (GloVe); 20+15 epochs, batch 128"),
    (run({"kind": "mvsa", "backbone": "r18_toy", "grid_scales": ["conv5"], "fusion_pooling": None,
          "candidate_dim": 128, "embed_dim": 64, "asa": {"blocks": 0, "inter_dim": 64, "batchnorm": True},
          "similarity": {"direction": "t2i", "aggregation": "lse", "lambda_softmax": 9.0, "lambda_lse": 6.0},
          "text": text(32, 64, bidirectional=True)}, [(3, False)]), TOY,
     "ResNet-18 (toy pre-trained) conv5, CNN frozen, no ASA, C 128, D 64, t-i LSE (λ1 9, λ2 6), "
     "bi-GRU 64, word 32; 3 epochs, batch 16"),
]


# what the public code runs, written from that code (not from config/methods): method file -> keys
SOURCE_BEHAVIOUR = {
    # MVSA: no public code; Zheng, Ben, Yuan, ACML 2019, supplement Section 1: ResNet-152, C = 2048,
    # D = 1024, BatchNorm in ASA, GloVe 300-d words, bi-GRU 1024, margin 0.2, clip 2.0, Adam, batch 128.
    "mvsa": {"model.backbone": "resnet152", "model.candidate_dim": 2048, "model.embed_dim": 1024,
             "model.asa.batchnorm": True, "model.text.word_dim": 300, "model.text.word_init": "glove",
             "model.text.hidden_dim": 1024, "model.text.bidirectional": True, "loss.margin": 0.2,
             "training.grad_clip": 2.0, "training.optimizer": "adam", "training.batch_size": 128},
}
