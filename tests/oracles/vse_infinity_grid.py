"""VSE-infinity on a CNN grid's oracles: the float64 per-pair reference written from woodfrog/vse_infty's
equations (branch master: lib/encoders.py EncoderImageFull, lib/modules/resnet.py
ResnetFeatureExtractor.forward, EncoderText, GPO), one image and one caption at a time; a description
written by hand; and what its public code runs (train_grid.sh with the README's WSL backbone)."""
from functools import partial

from methods.models.vse_infinity_grid import VSEInfinityGrid
from tests.oracles._descriptions import REAL, run
from tests.oracles._float64 import EMBED, MVSA_SHAPES, N_IMAGES, build, cosine_matrix, features
from tests.oracles.vse_infinity import POOLS, scan_l2, tiny_bert_encoder
from tests.test_sgraf import linear

GRID_SCHEDULE = {"embedding_warmup_epochs": 1, "backbone_warmup_epochs": 0, "backbone_lr_factor": 0.01}


def reference_grid(model, images, text_batch, pooling):
    """EncoderImageFull at inference: the last map (C, H, W) viewed as (C, H*W) and transposed, so
    cell k is row k // W, column k % W -> fc (no MLP for a backbone) -> pooled over every cell -> l2;
    the text as ``reference_bert``."""
    pool = POOLS[pooling]
    image_vectors = []
    for grid in images["features"]["conv5"]:                     # cached as (H, W, C)
        chw = grid.permute(2, 0, 1)
        cells = chw.reshape(chw.shape[0], -1).t()
        image_vectors.append(scan_l2(pool(model.image_pool, linear(model.fc, cells))))
    caption_vectors = []
    for tokens, n in zip(text_batch["tokens"], text_batch["lengths"]):
        states = model.text.bert(tokens[:n][None]).last_hidden_state[0]
        caption_vectors.append(scan_l2(pool(model.text_pool, linear(model.text.linear, states))))
    return cosine_matrix(image_vectors, caption_vectors)


def float64_cases():
    model = build(VSEInfinityGrid, "resnet18", MVSA_SHAPES, "frozen", ["conv5"], EMBED, text=tiny_bert_encoder(),
                  backbone_schedule=GRID_SCHEDULE, pooling="gpo", grid_drop=0.2)
    yield ("grid gpo, BERT", model, {"features": {"conv5": features(N_IMAGES, *MVSA_SHAPES["conv5"])}},
           partial(reference_grid, pooling="gpo"))


# (run config, dataset config block, the description written by hand)
DESCRIPTIONS = [
    (run({"kind": "vse_infinity_grid", "backbone": "r152", "backbone_bn": "frozen", "grid_scales": ["conv5"], "embed_dim": 1024,
          "backbone_schedule": GRID_SCHEDULE, "grid_drop": 0.2, "pooling": "gpo",
          "text": {"kind": "bert", "encoder": "bert_base_uncased", "out_dim": 1024, "lr_factor": 0.1}},
         [(25, True)], batch_size=128, images={"kind": "squash", "size": 512, "pixels": "imagenet"}), REAL,
     "ResNet-152 (weights resnet152-394f9c45.pth) last-map grid at 512×512 px, CNN fine-tuned (lr x0.01), "
     "embed 1024, GPO pooling, BERT bert_base_uncased -> 1024 (lr x0.1); 25 epochs, batch 128"),
]


# The grid path (master), written from its code: train_grid.sh (--num_epochs=25 --lr_update=15
# --learning_rate=5e-4 --precomp_enc_type backbone --vse_mean_warmup_epochs 1
# --backbone_warmup_epochs 0 --embedding_warmup_epochs 1 --optim adam --backbone_lr_factor 0.01
# --input_scale_factor 2.0) with the README's --backbone_source wsl, arguments.py (batch 128,
# embed 1024, margin 0.2, grad_clip 2), lib/vse.py (AdamW, decay_factor 1e-4), train.py (the
# warm-up options and warmup_alpha; model_best.pth by RSUM), lib/encoders.py EncoderImageFull
# (grid drop 0.2, fc then GPO), lib/modules/resnet.py (every BatchNorm in eval mode),
# image_caption.py RawImageDataset (256 x 2.0 = 512 px, squashed; crops of 60-100 %, flips; ImageNet
# normalisation for a source other than detector; caption pieces masked / replaced / deleted).
SOURCE_BEHAVIOUR = {"vse_infinity_grid_bert": {
    "model.backbone": "resnext101_wsl", "model.backbone_bn": "frozen", "model.grid_scales": ["conv5"],
    "model.embed_dim": 1024,
    "model.backbone_schedule": GRID_SCHEDULE, "model.grid_drop": 0.2, "model.pooling": "gpo",
    "model.text.kind": "bert", "model.text.encoder": "bert_base_uncased", "model.text.out_dim": 1024,
    "model.text.lr_factor": 0.1, "loss.kind": "triplet_hardest", "loss.margin": 0.2, "loss.warmup_sum_epochs": 1,
    "training.batch_size": 128, "training.optimizer": "adamw", "training.weight_decay": 1.0e-4,
    "training.grad_clip": 2.0, "training.amp": False, "training.batching": "captions",
    "training.batch_positives": "diagonal", "training.selection_metric": "rsum",
    "training.caption_augment": {"prob": 0.2, "mask": 0.5, "replace": 0.1},
    "training.images": {"kind": "squash", "size": 512, "pixels": "imagenet"},
    "training.finetune_augment": "crop_squash_flip",
    "training.stages.0.epochs": 25, "training.stages.0.lr": 5.0e-4, "training.stages.0.finetune_backbone": True,
    "training.stages.0.schedule": {"kind": "step", "decay_epochs": [15], "gamma": 0.1}}}
