"""VSRN's oracles: the float64 per-pair reference (fc -> [l2] -> residual GCN blocks -> l2 -> GRU
over regions -> [BN] -> l2; cosine).
Beside it, descriptions written by hand (``DESCRIPTIONS``) and what the public code runs (``SOURCE_BEHAVIOUR``)."""
from functools import partial

from methods.models.vsrn import VSRN
from tests.oracles._descriptions import REAL, TOY, run, text
from tests.oracles._float64 import (EMBED, N_IMAGES, REGION_DIM, REGIONS, batch_norm_eval, build, caption_vectors,
                                    cosine_matrix, features, plain_l2)
from tests.test_sgraf import linear


def vsrn_reference(model, images, text_batch, region_l2norm, l2norm_after_fc, final_bn):
    axis = {"feature": 1, "region_axis": 0}[region_l2norm]   # of one image's (N regions, D)
    image_vectors = []
    for regions in images["features"]:
        v = linear(model.fc, regions)
        if l2norm_after_fc:
            v = plain_l2(v, dim=axis)
        for block in model.gcn:      # V* = V + BN(W (R g(V))), R = theta(V) phi(V)^T / N
            relation = linear(block.theta, v) @ linear(block.phi, v).t() / v.shape[0]
            v = v + batch_norm_eval(block.bn, linear(block.w, relation @ linear(block.g, v)))
        v = plain_l2(v, dim=axis)
        _, hidden = model.gru(v[None])                       # regions in order
        h = hidden[-1, 0]
        image_vectors.append(plain_l2(batch_norm_eval(model.bn, h) if final_bn else h))
    return cosine_matrix(image_vectors, caption_vectors(model, text_batch))


def float64_cases():
    for options in (dict(region_l2norm="feature", l2norm_after_fc=True, final_bn=True),
                    dict(region_l2norm="region_axis", l2norm_after_fc=True, final_bn=True),
                    dict(region_l2norm="region_axis", l2norm_after_fc=False, final_bn=False)):
        model = build(VSRN, REGION_DIM, EMBED, gcn_blocks=4, **options)
        yield (str(options), model, {"features": features(N_IMAGES, REGIONS, REGION_DIM)},
               partial(vsrn_reference, **options))


# (run config, dataset config block, the description written by hand)
DESCRIPTIONS = [
    (run({"kind": "vsrn", "embed_dim": 64, "gcn_blocks": 2, "text": text(16, 64)}, [(5, False)], batch_size=8),
     TOY, "12×256 RoIAlign regions of ResNet-18 (toy pre-trained) conv4, embed 64, 2 GCN blocks, GRU 64, "
          "word 16; 5 epochs, batch 8"),
    (run({"kind": "vsrn", "embed_dim": 2048, "gcn_blocks": 4, "text": text(300, 2048, num_layers=2)},
         [(150, False)], batch_size=128, batching="images"), REAL,
     "36×2048 precomputed regions, embed 2048, 4 GCN blocks, 2-layer GRU 2048, word 300; "
     "150 epochs, batch 128 images"),
]


# what the public code runs, written from that code (not from config/methods): method file -> keys
SOURCE_BEHAVIOUR = {
    # MauritsBleeker/ecir-2022-reproducibility-bleeker VSRN/ (the study's copy of KunpengLi1994/VSRN):
    # l2norm over dim 1 of the regions (VSRN#7), final BatchNorm on both datasets, 4 Rs_GCN blocks,
    # embed 2048, selection on R@1 + R@5, --max_violation, diagonal ContrastiveLoss, fp32.
    "vsrn": {"model.region_l2norm": "region_axis", "model.final_bn": True, "model.gcn_blocks": 4,
             "model.embed_dim": 2048, "model.text.word_dim": 300, "model.text.hidden_dim": 2048,
             "model.text.bidirectional": False, "training.selection_metric": "r1_r5_sum",
             "loss.kind": "triplet_hardest", "loss.margin": 0.2, "training.batch_size": 128,
             "training.batching": "captions", "training.batch_positives": "diagonal", "training.amp": False,
             "training.grad_clip": 2.0},
    # KunpengLi1994/VSRN itself (README commands, model.py, models/, misc/utils.py, data.py): the same
    # encoders with the final BatchNorm for f30k_precomp only, the caption generator (EncoderRNN
    # 2048 -> 512, DecoderRNN 512 units, 300-d words, max_len 60, dropout 0.2) on the reasoned
    # regions with LanguageModelCriterion added to the summed max-violation hinge, its parameters
    # twice in Adam's list; 30 epochs at 2e-4, x0.1 after --lr_update epochs.
    "vsrn_captioning": {
        "model.region_l2norm": "region_axis", "model.gcn_blocks": 4, "model.embed_dim": 2048,
        "model.text.word_dim": 300, "model.text.hidden_dim": 2048, "model.text.bidirectional": False,
        "model.caption_decoder": {"hidden_dim": 512, "word_dim": 300, "max_len": 60, "input_dropout": 0.2,
                                  "listed_twice": True},
        "loss.terms.0.kind": "triplet_hardest", "loss.terms.0.margin": 0.2, "loss.terms.1.kind": "caption_generation",
        "loss.terms.1.weight": 1.0, "training.selection_metric": "r1_r5_sum", "training.batch_size": 128,
        "training.batching": "captions", "training.batch_positives": "diagonal", "training.optimizer": "adam",
        "training.weight_decay": 0.0, "training.amp": False, "training.grad_clip": 2.0,
        "training.stages.0.epochs": 30, "training.stages.0.lr": 2e-4},
}
# VSRN model.py skips the first region l2norm on Flickr30K only, and has its final BatchNorm there only;
# the Flickr30K command decays the rate after 10 epochs
PER_DATASET = {("vsrn", "flickr"): {"model.l2norm_after_fc": False}, ("vsrn", "coco"): {"model.l2norm_after_fc": True},
               ("vsrn_captioning", "flickr"): {"model.l2norm_after_fc": False, "model.final_bn": True,
                                               "training.stages.0.schedule": {"kind": "step", "decay_epochs": [10],
                                                                              "gamma": 0.1}},
               ("vsrn_captioning", "coco"): {"model.l2norm_after_fc": True, "model.final_bn": False,
                                             "training.stages.0.schedule": {"kind": "step", "decay_epochs": [15],
                                                                            "gamma": 0.1}}}
# keys a row may set as its own factor, so not declared switches: the study's VSRN rows vary the loss
ROW_FACTORS = {"vsrn": {"loss.kind"}}
