"""Validation during training and test evaluation are one road: on the same split and model, the
training loop's validation (``methods.training.loop.validate``: encoded with the loop's own
caption pairs, relevance from the items in memory) and the test evaluation's pieces (the public
encoders, relevance read from the Karpathy file, ``evaluate_split``) give equal metrics, for a
label-wise model whose validation ranks by caption, by shared label and predicts labels."""
from pathlib import Path

import numpy as np
import torch

from methods.data.datasets import DatasetPayload
from methods import api
from methods.data.caption_augment import extra_tokens
from methods.config import REPO_ROOT
from methods.data.inputs import CachedImageFeatures, SplitData
from methods.data.text import Vocabulary
from methods.data.tokenizers import Tokenizer
from methods.io import write_json
from methods.metrics.evaluation import evaluate_split
from methods.metrics.protocols import validation_protocols
from methods.metrics.relevance_builders import KarpathySplitItems, build_relevances
from methods.training.loop import TrainInputs, validate

METHOD = REPO_ROOT / "config" / "methods" / "label_wise.yaml"
IMAGES, TPI, REGIONS, DIM, CLASSES = 24, 2, 5, 12, 6
WORDS = ["a", "dog", "cat", "runs", "sits", "on", "grass", "red", "blue", "ball"]


def dev_split(tmp_path: Path):
    rng = np.random.default_rng(0)
    captions = [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 7)))) for _ in range(IMAGES * TPI)]
    labels = (rng.random((IMAGES, CLASSES)) < 0.4).astype(np.uint8)
    features = rng.standard_normal((IMAGES, REGIONS, DIM)).astype(np.float32)
    images = [{"filename": f"im{i}.jpg", "split": "val", "labels": labels[i].tolist(),
               "sentences": [{"raw": captions[i * TPI + k]} for k in range(TPI)]} for i in range(IMAGES)]
    write_json(tmp_path / "d.json", {"images": images})
    payload = DatasetPayload.from_json({"name": "d", "paths": {"karpathy_json": str(tmp_path / "d.json")},
               "dataset": {"splits": {"dev": ["val"]}, "texts_per_image": TPI, "protocols": []}})
    split = SplitData("dev", captions, CachedImageFeatures(features), None, TPI, labels=labels)
    return payload, split


def test_validation_and_test_evaluation_give_equal_metrics_on_one_split(tmp_path):
    payload, dev = dev_split(tmp_path)
    vocab = Vocabulary.build(dev.captions, 1, Tokenizer("nltk_line"))
    cfg = api.experiment_config(METHOD, "synthtags")
    cfg["model"].update({"embed_dim": 16, "n_classes": CLASSES, "n_region_classes": 4,
                         "transformer": {"layers": 1, "heads": 2, "ff_dim": 16, "dropout": 0.0, "init_weights": None},
                         "text": {"word_dim": 8, "hidden_dim": 16, "num_layers": 1, "bidirectional": True,
                                  "word_init": "random"}})
    cfg["training"]["eval_batch_size"] = 7   # several batches, the last one short
    torch.manual_seed(0)
    model = api.build_model(cfg, len(vocab) + extra_tokens(cfg["training"]), {"dim": DIM, "regions": REGIONS}).eval()
    inp = TrainInputs(config=cfg, config_hash="0", seed=0, run_dir=tmp_path, device=torch.device("cpu"), vocab=vocab,
                      train=dev, dev=dev, images_dir=None, crop=224, resize=256, val_max_images=IMAGES,
                      progress=False)
    validated = validate(model, inp, amp=False)

    img = api.encode_images(model, dev.features, batch_size=7, device="cpu")
    txt = api.encode_texts(model, dev.captions, vocab, batch_size=7, device="cpu")
    predictions = model.label_predictions(img, txt)
    protocols = validation_protocols(cfg["training"]["selection_metric"], predictions is not None)
    assert {p.relevance for p in protocols} == {"captions_of_image", "shared_labels", "label_predictions"}
    relevances = build_relevances(protocols, KarpathySplitItems(payload, "dev"))
    results = evaluate_split(api.score(model, img, txt), protocols, "dev", relevances, predictions=predictions)
    evaluated = {k: v for r in results for k, v in r["metrics"].items()}
    assert len(results) == 3 and evaluated == validated
