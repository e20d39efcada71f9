"""Set embeddings on a CNN grid: the float64 per-pair reference (the grid's cells row by row, with 2-D
positions on the keys; ``tests.oracles.set_embedding``).
Beside it, descriptions written by hand (``DESCRIPTIONS``) and what the public code runs (``SOURCE_BEHAVIOUR``)."""
from functools import partial

import torch

from methods.models.set_embedding import SetEmbeddingGrid
from tests.oracles._descriptions import REAL, run, text
from tests.oracles._float64 import EMBED, LENGTHS, MVSA_SHAPES, N_IMAGES, build, features
from tests.oracles.set_embedding import set_elements, set_reference, sine
from tests.oracles.vse_infinity import tiny_bert_encoder
from tests.test_sgraf import linear


def bert_text_sets(model, text_batch):
    """DivE EncoderTextBERT, each caption alone and unpadded (so no attention mask): the projected
    last hidden states are the set module's inputs (padded to the batch's longest, which the masked
    slot module ignores, its sine positions scaled by the caption's own length), their max the global."""
    text_sets, longest = [], max(LENGTHS)
    for tokens, n in zip(text_batch["tokens"], LENGTHS):
        local = linear(model.text.linear, model.text.bert(tokens[:n][None]).last_hidden_state[0])
        padded = torch.cat([local, torch.zeros(longest - n, local.shape[1], dtype=local.dtype)])
        text_sets.append(set_elements(model, padded, local.max(dim=0).values, model.text_set, n,
                                      sine(longest, EMBED, n)))
    return text_sets


def float64_cases():
    slot = {"kind": "slot", "iterations": 2, "heads": 2, "head_dim": 3, "ff_mult": 2, "competition": "slots"}
    grid = {"conv5": features(N_IMAGES, *MVSA_SHAPES["conv5"])}
    similarity = {"kind": "smooth_chamfer", "alpha": 16.0}
    yield ("set grid slot (masked), BERT max_tokens",
           build(SetEmbeddingGrid, "resnet18", MVSA_SHAPES, ["conv5"], "frozen", EMBED, 3,
                 set_module={**slot, "padding": "masked"}, similarity=similarity, dropout=0.1,
                 text=tiny_bert_encoder(), text_global="max_tokens"),
           {"features": grid}, partial(set_reference, similarity=similarity, text_sets=bert_text_sets))
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
    (run({"kind": "set_embedding_grid", "backbone": "r152", "backbone_bn": "frozen", "grid_scales": ["conv5"],
          "embed_dim": 1024, "set_size": 4, "lr_scale": {"image": 0.1, "text_set": 0.1, "backbone": 0.01},
          "backbone_frozen_epochs": 1, "text_global": "max_tokens",
          "set_module": {"kind": "slot", "iterations": 4, "heads": 4, "head_dim": 512, "ff_mult": 4,
                         "competition": "slots", "padding": "leak"},
          "similarity": {"kind": "smooth_chamfer", "alpha": 16.0},
          "text": {"kind": "bert", "encoder": "bert_base_uncased", "out_dim": 1024, "lr_factor": 1.0}},
         [(50, True)], batch_size=128, batching="images",
         images={"kind": "squash", "size": 512, "pixels": "imagenet", "antialias": True}), REAL,
     "ResNet-152 (weights resnet152-394f9c45.pth) conv5 grid at 512×512 px, CNN fine-tuned (lr x0.01, frozen in "
     "epoch 1), D 1024, K 4, slot set module (T 4, padding leak), smooth_chamfer (alpha 16), BERT "
     "bert_base_uncased -> 1024 (lr x1), text global max_tokens; 50 epochs, batch 128 images"),
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
    # The same code's CNN and BERT paths (get_cnn('resnext_wsl'), EncoderTextBERT with --txt_pooling
    # max, the paper's "max pooled feature"; train.py param_groups: the text encoder but its set
    # module at lr x --txt_lr_scale 1; data.py --gpo_aug: RandomResizedCrop(512, scale=(0.36, 1)) +
    # flip, evaluation Resize((512, 512)) of the PIL image) and the appendix's ResNeXt-101 + BERT
    # recipe: 128 images with all their captions, 50 epochs from 1e-4, BatchNorm fixed, the CNN not
    # trained in the first epoch (--warm_img --warm_epoch 1), the first epoch without mining
    # (--tri_mean_to_max), automatic mixed precision.
    "set_embeddings_grid_bert": {
        "model.backbone": "resnext101_wsl", "model.grid_scales": ["conv5"], "model.backbone_bn": "frozen",
        "model.backbone_frozen_epochs": 1, "model.embed_dim": 1024, "model.set_size": 4,
        "model.similarity.kind": "smooth_chamfer", "model.similarity.alpha": 16.0,
        "model.text.kind": "bert", "model.text.encoder": "bert_base_uncased", "model.text.out_dim": 1024,
        "model.text.lr_factor": 1.0, "model.text_global": "max_tokens", "loss.terms.0.kind": "triplet_hardest",
        "loss.terms.0.margin": 0.2, "loss.terms.0.reduction": "mean", "loss.terms.0.warmup_sum_epochs": 1,
        "training.batch_size": 128, "training.batching": "images", "training.batch_positives": "same_image",
        "training.amp": True, "training.images": {"kind": "squash", "size": 512, "pixels": "imagenet",
                                                  "antialias": True},
        "training.finetune_augment": "random_resized_crop_flip_36", "training.stages.0.epochs": 50,
        "training.stages.0.lr": 1.0e-4, "training.stages.0.finetune_backbone": True,
        "training.caption_augment": {"prob": 0.2, "mask": 0.5, "replace": 0.1}},
    # yalesong/pvse README.md's COCO command with option.py's defaults (train.py, model.py,
    # loss.py, data.py): the ResNet-152 and the GloVe words fixed (no --img_finetune or
    # --txt_finetune), PIE-Net over the raw 7x7 cells and over the word embeddings, --legacy text,
    # K 2 with the MIL max, --max_violation mean hinges at margin 0.1, MMD 0.01, diversity 0.1,
    # 256 captions a batch (the diagonal masked), Adam amsgrad 2e-4, ReduceLROnPlateau(factor 0.5,
    # min_lr 1e-10) on RSUM, 30 epochs, grad clip 2, model_best by RSUM, fp32.
    "pvse": {"model.backbone": "resnet152", "model.grid_scales": ["conv5"], "model.embed_dim": 1024,
             "model.set_size": 2, "model.set_module": {"kind": "pie", "image_input": "raw"},
             "model.similarity.kind": "mil", "model.dropout": 0.0, "model.text.word_dim": 300,
             "model.text.hidden_dim": 512, "model.text.bidirectional": True, "model.text.word_init": "glove",
             "model.text.embed_init": "normal", "model.text.train_words": False,
             "model.text_global": "concatenate_last_outputs", "model.image_projection.mlp": False,
             "model.image_projection.global_pool": "mean", "model.image_projection.init": "pytorch",
             "loss.terms.0.kind": "triplet_hardest", "loss.terms.0.margin": 0.1, "loss.terms.0.reduction": "mean",
             "loss.terms.0.warmup_sum_epochs": 0, "loss.terms.1.kind": "mmd", "loss.terms.1.weight": 0.01,
             "loss.terms.1.gamma": 0.5, "loss.terms.2.kind": "diversity", "loss.terms.2.weight": 0.1,
             "training.batch_size": 256, "training.batching": "captions", "training.batch_positives": "diagonal",
             "training.optimizer": "adam_amsgrad", "training.weight_decay": 0.0, "training.grad_clip": 2.0,
             "training.amp": False, "training.finetune_augment": "random_resized_crop_flip",
             "training.selection_metric": "rsum", "training.stages.0.epochs": 30, "training.stages.0.lr": 2e-4,
             "training.stages.0.finetune_backbone": False,
             "training.stages.0.schedule": {"kind": "plateau", "mode": "min", "factor": 0.5, "patience": 10,
                                            "threshold": 1e-4, "cooldown": 0, "min_lr": 1e-10}},
}
# appendix A: lr 1e-3 on COCO, 2e-3 on Flickr30K
PER_DATASET = {("set_embeddings_grid", "coco"): {"training.stages.0.lr": 1e-3},
               ("set_embeddings_grid", "flickr"): {"training.stages.0.lr": 2e-3}}
