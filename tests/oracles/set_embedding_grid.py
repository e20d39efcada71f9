"""Set embeddings on a CNN grid: the float64 per-pair reference (the grid's cells row by row, with 2-D
positions on the keys; ``tests.oracles.set_embedding``).
Beside it, descriptions written by hand (``DESCRIPTIONS``) and what the public code runs (``SOURCE_BEHAVIOUR``)."""
from functools import partial

from methods.models.set_embedding import SetEmbeddingGrid
from tests.oracles._descriptions import REAL, run, text
from tests.oracles._float64 import EMBED, MVSA_SHAPES, N_IMAGES, build, features
from tests.oracles.set_embedding import set_reference


def float64_cases():
    slot = {"kind": "slot", "iterations": 2, "heads": 2, "head_dim": 3, "ff_mult": 2, "competition": "slots"}
    grid = {"conv5": features(N_IMAGES, *MVSA_SHAPES["conv5"])}
    for module, similarity in (({**slot, "padding": "leak"}, {"kind": "smooth_chamfer", "alpha": 16.0}),
                               ({"kind": "pie"}, {"kind": "mil"})):
        yield (f"set grid {module} {similarity}",
               build(SetEmbeddingGrid, "resnet18", MVSA_SHAPES, ["conv5"], "frozen", EMBED, 3, set_module=module,
                     similarity=similarity, dropout=0.1, bidirectional_text=True),
               {"features": grid}, partial(set_reference, similarity=similarity))


# (run config, dataset config block, the description written by hand)
DESCRIPTIONS = [
    (run({"kind": "set_embedding_grid", "backbone": "r152", "backbone_bn": "train", "grid_scales": ["conv5"],
          "embed_dim": 1024, "set_size": 4,
          "set_module": {"kind": "slot", "iterations": 4, "heads": 4, "head_dim": 512, "ff_mult": 4,
                         "competition": "slots", "padding": "leak"},
          "similarity": {"kind": "smooth_chamfer", "alpha": 16.0},
          "text": text(300, 1024, bidirectional=True, word_init="glove")}, [(50, False), (70, True)],
         batch_size=200, batching="images"), REAL,
     "ResNet-152 (weights resnet152-394f9c45.pth) conv5 grid, CNN fine-tuned, D 1024, K 4, slot set module "
     "(T 4, padding leak), smooth_chamfer (alpha 16), bi-GRU 1024, word 300 (GloVe); 50+70 epochs, "
     "batch 200 images"),
]


# what the public code runs, written from that code (not from config/methods): method file -> keys
SOURCE_BEHAVIOUR = {
    # The same code's CNN path (model_spm.py EncoderImage without BUTD, ResNet-152 7x7 cells) and
    # the appendix's ResNet-152 + bi-GRU schedule: 120 epochs, the CNN frozen for the first 50
    # (--warm_img), trained in train mode afterwards, random-resized crops and flips.
    "set_embeddings_grid": {"model.backbone": "resnet152", "model.grid_scales": ["conv5"],
                            "model.backbone_bn": "train", "model.embed_dim": 1024, "model.set_size": 4,
                            "model.similarity.kind": "smooth_chamfer", "model.similarity.alpha": 16.0,
                            "model.text.word_dim": 300, "model.text.hidden_dim": 1024,
                            "model.text.word_init": "glove", "loss.terms.0.margin": 0.2,
                            "training.stages.0.epochs": 50, "training.stages.1.epochs": 70,
                            "training.stages.1.finetune_backbone": True,
                            "training.finetune_augment": "random_resized_crop_flip", "training.amp": True,
                            "training.caption_augment": {"prob": 0.2, "mask": 0.5, "replace": 0.1}},
}
# appendix A: lr 1e-3 on COCO, 2e-3 on Flickr30K
PER_DATASET = {("set_embeddings_grid", "coco"): {"training.stages.0.lr": 1e-3},
               ("set_embeddings_grid", "flickr"): {"training.stages.0.lr": 2e-3}}
