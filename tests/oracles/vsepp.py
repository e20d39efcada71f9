"""VSE++'s oracles: the float64 per-pair reference (pooled -> [l2] -> fc -> l2; cosine).
Beside it, descriptions written by hand (``DESCRIPTIONS``) and what the public code runs (``SOURCE_BEHAVIOUR``)."""
from functools import partial

from methods.features.backbone import ResNetBackbone
from methods.models.vsepp import VSEPP
from tests.oracles._descriptions import REAL, TOY, run, text
from tests.oracles._float64 import EMBED, N_IMAGES, build, caption_vectors, cosine_matrix, features, plain_l2
from tests.test_sgraf import linear


def vsepp_reference(model, images, text_batch, pre_fc_l2norm, image_l2norm=True):
    """Per image: [l2], fc, then l2 unless VSE0's --no_imgnorm; scores the dot products (evaluation.py)."""
    embed = plain_l2 if image_l2norm else (lambda v: v)
    image_vectors = [embed(linear(model.fc, plain_l2(p) if pre_fc_l2norm else p)) for p in images["features"]]
    return cosine_matrix(image_vectors, caption_vectors(model, text_batch))


def float64_cases():
    for pre_fc_l2norm, image_l2norm in ((True, True), (False, True), (True, False)):
        model = build(VSEPP, ResNetBackbone("resnet18", "none"), EMBED, pre_fc_l2norm=pre_fc_l2norm,
                      image_l2norm=image_l2norm)
        yield (f"pre_fc_l2norm={pre_fc_l2norm}, image_l2norm={image_l2norm}", model,
               {"features": features(N_IMAGES, 512)},
               partial(vsepp_reference, pre_fc_l2norm=pre_fc_l2norm, image_l2norm=image_l2norm))


# (run config, dataset config block, the description written by hand)
DESCRIPTIONS = [
    (run({"kind": "vsepp", "backbone": "r18_toy", "embed_dim": 128, "text": text(32, 128)},
         [(3, False), (1, True)]), TOY,
     "ResNet-18 (toy pre-trained), CNN fine-tuned, 512-d pooled, embed 128, GRU 128, word 32; 3+1 epochs, batch 16"),
    (run({"kind": "vsepp", "backbone": "r152", "embed_dim": 1024, "text": text(300, 1024, word_init="glove")},
         [(30, False)], batch_size=128), REAL,
     "ResNet-152 (weights resnet152-394f9c45.pth), CNN frozen, 2048-d pooled, embed 1024, "
     "GRU 1024, word 300 (GloVe); 30 epochs, batch 128"),
]


# what the public code runs, written from that code (not from config/methods): method file -> keys
SOURCE_BEHAVIOUR = {
    # fartashf/vsepp (master): train.py defaults and the README's ResNet rows (--cnn_type resnet152,
    # --max_violation), model.py EncoderImageFull (CNN output l2-normalised before the fc),
    # EncoderText (unidirectional GRU), ContrastiveLoss (diagonal positives, margin 0.2); no AMP.
    "vsepp": {"model.backbone": "resnet152", "model.embed_dim": 1024, "model.pre_fc_l2norm": True,
              "model.text.word_dim": 300, "model.text.hidden_dim": 1024, "model.text.bidirectional": False,
              "loss.margin": 0.2, "training.batch_size": 128, "training.batching": "captions",
              "training.batch_positives": "diagonal", "training.amp": False, "training.grad_clip": 2.0,
              "training.optimizer": "adam"},
}
