"""The label-wise model's oracles: the float64 per-item forward of tests/test_label_wise.py (regions /
bi-GRU words -> one shared pre-norm transformer -> ReLU -> sigmoid label vectors (l2) -> mean over
tokens -> cosine).
Beside it, descriptions written by hand (``DESCRIPTIONS``)."""
from functools import partial

from tests.oracles._descriptions import REAL, TOY, run, text
from tests.oracles._float64 import N_IMAGES, REGION_DIM, REGIONS, cosine_matrix, features
from tests.test_label_wise import build as build_label_wise
from tests.test_label_wise import reference_image as reference_label_image
from tests.test_label_wise import reference_text as reference_label_text


def label_wise_reference(model, images, text_batch, masked, over_padding):
    padded_to = int(text_batch["lengths"].max())
    image_vectors = [reference_label_image(model, regions)[0] for regions in images["features"]]
    text_vectors = [reference_label_text(model, tok, int(n), padded_to, masked, over_padding)[0]
                    for tok, n in zip(text_batch["tokens"], text_batch["lengths"])]
    return cosine_matrix(image_vectors, text_vectors)


def float64_cases():
    for masked, over_padding, shared in ((False, True, True), (True, False, False)):
        model = build_label_wise(text_padding_mask=masked, mean_over_padding=over_padding, shared_transformer=shared).eval()
        yield (f"label_wise mask {masked} padded mean {over_padding} shared {shared}", model,
               {"features": features(N_IMAGES, REGIONS, REGION_DIM)},
               partial(label_wise_reference, masked=masked, over_padding=over_padding))


# (run config, dataset config block, the description written by hand)
DESCRIPTIONS = [
    (run({"kind": "label_wise", "embed_dim": 1024, "n_classes": 24, "shared_transformer": True,
          "transformer": {"layers": 6, "heads": 8, "ff_dim": 2048}, "retrieval_score": "cosine",
          "text": text(300, 1024, bidirectional=True)}, [(45, False)], batch_size=64), REAL,
     "36×2048 precomputed regions, D 1024, shared 6-layer transformer (8 heads, FF 2048), 24 labels, "
     "bi-GRU 1024, word 300, cosine scores; 45 epochs, batch 64"),
    (run({"kind": "label_wise", "embed_dim": 64, "n_classes": 14, "shared_transformer": False,
          "transformer": {"layers": 2, "heads": 4, "ff_dim": 128}, "retrieval_score": "dot",
          "text": text(32, 64, bidirectional=True)}, [(4, False)], batch_size=64), TOY,
     "12×256 RoIAlign regions of ResNet-18 (toy pre-trained) conv4, D 64, per-modality 2-layer transformer "
     "(4 heads, FF 128), 14 labels, bi-GRU 64, word 32, dot-product scores; 4 epochs, batch 64"),
]
