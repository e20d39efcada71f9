"""SGRAF's oracles: the float64 per-pair reference of tests/test_sgraf.py.
Beside it, descriptions written by hand (``DESCRIPTIONS``) and what the public code runs (``SOURCE_BEHAVIOUR``)."""
from methods.models.sgraf import SGRAF
from tests.oracles._descriptions import REAL, TOY, run, text
from tests.oracles._float64 import EMBED, N_IMAGES, REGION_DIM, REGIONS, SIM, build, features
from tests.test_sgraf import reference_matrix as sgraf_reference_matrix


def sgraf_reference(model, images, text_batch):
    return sgraf_reference_matrix(model, images["features"], text_batch["tokens"], text_batch["lengths"])


def float64_cases():
    for options in (dict(heads=["sgr", "saf"], sgr_steps=3),
                    dict(heads=["saf"], attention={"direction": "i2t", "smooth": 9.0}),
                    dict(heads=["avg"], similarity="scalar", nodes={"global": False, "local": True}),
                    dict(heads=["sgr"], nodes={"global": False, "local": True}, sgr_steps=1)):
        yield (str(options), build(SGRAF, REGION_DIM, REGIONS, EMBED, SIM, bidirectional_text=True, **options),
               {"features": features(N_IMAGES, REGIONS, REGION_DIM)}, sgraf_reference)


# (run config, dataset config block, the description written by hand)
DESCRIPTIONS = [
    (run({"kind": "sgraf", "embed_dim": 32, "sim_dim": 8, "similarity": "vector", "heads": ["sgr", "saf"],
          "text": text(16, 32, bidirectional=True)}, [(3, False)], batch_size=32), TOY,
     "12×256 RoIAlign regions of ResNet-18 (toy pre-trained) conv4, embed 32, graph dim 8, bi-GRU 32, "
     "word 16; 3 epochs, batch 32"),
    (run({"kind": "sgraf", "embed_dim": 1024, "sim_dim": 256, "similarity": "scalar", "heads": ["avg"],
          "text": text(300, 1024, bidirectional=True)}, [(20, False)], batch_size=128), REAL,
     "36×2048 precomputed regions, embed 1024, bi-GRU 1024, word 300; 20 epochs, batch 128"),  # cosines: no graph
]


# what the public code runs, written from that code (not from config/methods): method file -> keys
SOURCE_BEHAVIOUR = {
    # Paranioar/SGRAF (python3.6): opts.py (--max_violation store_false, i.e. on; margin 0.2; embed 1024;
    # word 300; batch 128; grad_clip 2; lr 2e-4), model.py (bi-GRU, dropout 0.4 on words and in
    # VisualSA, SCAN_attention smooth 9.0, diagonal ContrastiveLoss with max_violation from the first
    # step, no warm-up); no AMP. (SGR steps, nodes and
    # graph dimension are the ablation tables' factors, set per row.)
    "sgraf": {"loss.kind": "triplet_hardest", "loss.margin": 0.2, "loss.warmup_sum_epochs": 0, "model.embed_dim": 1024,
              "model.text.word_dim": 300, "model.text.hidden_dim": 1024, "model.text.bidirectional": True,
              "model.text.embed_dropout": 0.4, "model.sa_dropout": 0.4, "model.attention.smooth": 9.0,
              "training.batch_size": 128, "training.batching": "captions",
              "training.batch_positives": "diagonal", "training.amp": False, "training.grad_clip": 2.0,
              "training.optimizer": "adam"},
}
