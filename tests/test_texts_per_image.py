"""Datasets with any number of texts per image (1 for tag datasets), image labels, region classes
and the masked-prediction targets of training batches (label-wise retrieval, Yang et al., IJCAI 2021)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from methods.data.datasets import DatasetPayload
from methods.config import validate
from methods.data.caption_augment import CaptionAugmentation, extra_tokens
from methods.data.inputs import IMAGE_INPUTS, CachedImageFeatures, SplitData
from methods.data.karpathy import Split, load_splits
from methods.data.masked_prediction import IGNORE, MaskedPrediction
from methods.data.precomp import open_precomp
from methods.data.text import Vocabulary
from methods.data.tokenizers import Tokenizer
from methods.errors import HarnessError
from methods.metrics.eccv_caption import split_coco_ids
from methods.training.data import PairCollator, make_train_dataset, training_batches

# one text (its tags) per image; labels over 4 classes
TAGS = ["dog grass", "cat sofa", "dog cat", "sky", "grass sky dog"]
LABELS = [[1, 0, 1, 0], [0, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 1], [1, 0, 1, 1]]
TRAIN = 4  # images 0-3 train, image 4 test


def error_line(fn, *args) -> str:
    with pytest.raises(HarnessError) as info:
        fn(*args)
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    return message


def write_karpathy(tmp_path, texts_per_image=1, labels=True):
    images = [{"filename": f"{k}.jpg", "split": "train" if k < TRAIN else "test", "imgid": 10 + k,
               "sentences": [{"raw": tags}], **({"labels": lab} if labels else {})}
              for k, (tags, lab) in enumerate(zip(TAGS, LABELS))]
    path = tmp_path / "dataset_tags.json"
    path.write_text(json.dumps({"images": images}))
    return path


def payload(tmp_path, **extra) -> dict:
    return DatasetPayload.from_json({"name": "tags", "dataset": {"splits": {"train": ["train"], "test": ["test"]}, "texts_per_image": 1,
                                        "precomp": {"n_regions": 3, "feature_dim": 2}, **extra},
            "paths": {"karpathy_json": str(write_karpathy(tmp_path))}})


def write_regions(tmp_path, split, n, classes=None):
    np.save(tmp_path / f"{split}_ims.npy", np.arange(n * 3 * 2, dtype=np.float32).reshape(n, 3, 2))
    (tmp_path / f"{split}_caps.txt").write_text("".join(t + "\n" for t in (TAGS[:TRAIN] if split == "train" else TAGS[TRAIN:])))
    if classes is not None:
        np.save(tmp_path / f"{split}_region_classes.npy", classes)


# -- one text per image: Karpathy file -> SplitData -> batches ----------------------------------

def test_one_text_per_image_split_labels_and_batches(tmp_path):
    split = load_splits(write_karpathy(tmp_path), {"train": ["train"]}, 1)["train"]
    assert split.texts_per_image == 1 and split.captions == TAGS[:TRAIN] and split.labels == LABELS[:TRAIN]
    np.save(tmp_path / "train_pooled.npy", np.arange(8, dtype=np.float32).reshape(4, 2))
    data = IMAGE_INPUTS.get("pooled").load(payload(tmp_path), "train", tmp_path, {"backbone": "x"})
    assert len(data) == 4 and data.texts_per_image == 1
    assert data.labels.dtype == np.uint8 and data.labels.tolist() == LABELS[:TRAIN]
    assert data.text_labels().tolist() == LABELS[:TRAIN]       # one text per image: the same rows

    vocab = Vocabulary.build(TAGS, threshold=1, tokenizer=Tokenizer("nltk_line"))
    dataset = make_train_dataset("captions", data.captions, vocab, 1, None)
    assert len(dataset) == 4 and [dataset[k][0] for k in range(4)] == [0, 1, 2, 3]  # text k -> image k
    items = [dataset[2], dataset[0], dataset[2]]
    diagonal = PairCollator(data.features, "diagonal", data.labels)(items)
    assert diagonal["image_index"].tolist() == [2, 0, 2]
    assert diagonal["image_labels"].tolist() == [[1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 0]]
    assert diagonal["text_labels"].tolist() == [[1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 0]]
    assert diagonal["image_labels"].dtype == torch.float32 and "token_targets" not in diagonal
    same = PairCollator(data.features, "same_image", data.labels)(items)
    assert same["image_index"].tolist() == [0, 2]                # U = 2 distinct images, B = 3 texts
    assert same["image_labels"].tolist() == [[1, 0, 1, 0], [1, 1, 0, 0]]
    assert same["text_labels"].tolist() == [[1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 0]]
    assert torch.equal(same["features"], torch.tensor([[0.0, 1.0], [4.0, 5.0]]))


def test_texts_of_an_image_share_its_labels_in_image_batches(tmp_path):
    captions = [f"image {i} text {j}" for i in range(3) for j in range(2)]
    labels = np.array([[1, 0], [0, 1], [1, 1]], dtype=np.uint8)
    data = SplitData("train", captions, CachedImageFeatures(np.zeros((3, 2), np.float32)), None, 2, labels)
    assert data.text_labels().tolist() == [[1, 0], [1, 0], [0, 1], [0, 1], [1, 1], [1, 1]]
    vocab = Vocabulary.build(captions, threshold=1, tokenizer=Tokenizer("nltk_line"))
    dataset = make_train_dataset("images", captions, vocab, 2, None)
    batch = PairCollator(data.features, "same_image", labels)([dataset[2], dataset[1]])
    assert batch["image_index"].tolist() == [1, 2]
    assert batch["image_labels"].tolist() == [[0, 1], [1, 1]]
    assert batch["text_labels"].tolist() == [[1, 1], [1, 1], [0, 1], [0, 1]]


def test_bad_labels_are_one_line_errors(tmp_path):
    from methods.data.inputs import CachedImageFeatures, SplitData, label_matrix
    feats = CachedImageFeatures(np.zeros((2, 2), np.float32))
    assert "labels of shape (3, 2)" in error_line(SplitData, "s", ["a", "b"], feats, None, 1,
                                                  np.zeros((3, 2), np.uint8))
    assert "value 2" in error_line(SplitData, "s", ["a", "b"], feats, None, 1, np.full((2, 2), 2, np.uint8))
    assert "lists of one length" in error_line(label_matrix, Split("s", ["a", "b"], [0, 1], ["x", "y"], 1,
                                                                   [[1, 0], [1]]))
    assert "other than 0 and 1" in error_line(label_matrix, Split("s", ["a", "b"], [0, 1], ["x", "y"], 1,
                                                                  [[1, 0], [3, 0]]))
    path = write_karpathy(tmp_path)
    data = json.loads(path.read_text())
    del data["images"][1]["labels"]
    path.write_text(json.dumps(data))
    assert "3 of the 4 images of split 'train' have 'labels'" in error_line(load_splits, path, {"train": ["train"]}, 1)


def test_texts_per_image_is_a_required_dataset_key_and_counts_sentences(tmp_path):
    from methods.config import load_harness_config, REPO_ROOT
    ds = load_harness_config(REPO_ROOT / "config/config.yaml")["datasets"]["flickr"]
    assert ds["texts_per_image"] == 5
    assert "texts_per_image" in error_line(validate, {k: v for k, v in ds.items() if k != "texts_per_image"},
                                           "config#dataset", "c.yaml")
    assert "texts_per_image: 0 is less than the minimum" in error_line(validate, {**ds, "texts_per_image": 0},
                                                                       "config#dataset", "c.yaml")
    # two texts per image asked of a file with one: the image is named
    assert "image 0.jpg has 1 captions; at least 2" in error_line(
        load_splits, write_karpathy(tmp_path), {"train": ["train"]}, 2)


def test_open_precomp_with_one_text_per_image(tmp_path):
    write_regions(tmp_path, "train", 4)
    ims, caps, step = open_precomp(tmp_path, "train", 3, 2, 1)
    assert ims.shape == (4, 3, 2) and caps == TAGS[:TRAIN] and step == 1   # one row per image (= per text)
    (tmp_path / "train_caps.txt").write_text("a\n" * 8)
    assert "8 captions for 4 feature rows" in error_line(open_precomp, tmp_path, "train", 3, 2, 1)
    # five texts per image: 20 lines for 4 rows, or one row per caption (step 5) for 20 rows
    (tmp_path / "train_caps.txt").write_text("a\n" * 20)
    assert open_precomp(tmp_path, "train", 3, 2, 5)[2] == 1
    np.save(tmp_path / "train_ims.npy", np.zeros((20, 3, 2), np.float32))
    assert open_precomp(tmp_path, "train", 3, 2, 5)[2] == 5


# -- region classes ----------------------------------------------------------------------------

def test_region_classes_are_read_for_the_train_split_only_when_asked(tmp_path):
    classes = np.array([[0, 7, 3], [5, 5, 1], [2, 9, 4], [8, 6, 0]], dtype=np.int64)
    write_regions(tmp_path, "train", 4, classes)
    write_regions(tmp_path, "test", 1)                      # no class file: the test split needs none
    regions, pl = IMAGE_INPUTS.get("regions"), payload(tmp_path)
    asked = {"region_classes": True, "n_classes": 4}   # a label-wise model: region classes and labels
    assert regions.files("d", "train", asked) == ["d/train_ims.npy", "d/train_caps.txt", "d/train_region_classes.npy"]
    assert regions.files("d", "test", asked) == ["d/test_ims.npy", "d/test_caps.txt"]
    assert regions.files("d", "train", {}) == ["d/train_ims.npy", "d/train_caps.txt"]
    train = regions.load(pl, "train", tmp_path, asked)
    assert isinstance(train.region_classes, np.memmap) and train.region_classes.tolist() == classes.tolist()
    assert train.labels.tolist() == LABELS[:TRAIN] and train.texts_per_image == 1
    plain = regions.load(pl, "train", tmp_path, {})     # a model without a label head reads neither
    assert plain.region_classes is None and plain.labels is None
    test = regions.load(pl, "test", tmp_path, asked)
    assert test.region_classes is None and test.labels.tolist() == LABELS[TRAIN:]


@pytest.mark.parametrize("bad", [np.zeros((4, 2), np.int64), np.zeros((3, 3), np.int64), np.zeros((4, 3), np.float32)])
def test_a_bad_region_class_file_is_a_one_line_error_naming_it(tmp_path, bad):
    write_regions(tmp_path, "train", 4, bad)
    message = error_line(IMAGE_INPUTS.get("regions").load, payload(tmp_path), "train", tmp_path, {"region_classes": True})
    assert f"{tmp_path / 'train_region_classes.npy'}: shape {bad.shape}" in message and "(4, 3)" in message


# -- masked prediction -------------------------------------------------------------------------

def test_masked_words_share_and_targets_over_many_draws():
    n, mask_id = 200_000, 50
    words = torch.randint(4, 50, (n,), generator=torch.Generator().manual_seed(0)).tolist()
    tokens = [1, *words, 2]
    out, targets = MaskedPrediction(0.15, 0.15, mask_id).mask_words(tokens, torch.Generator().manual_seed(3))
    assert len(out) == len(targets) == len(tokens) and out[0] == 1 and out[-1] == 2
    masked = [k for k, t in enumerate(out) if t == mask_id]
    assert abs(len(masked) - 0.15 * n) < 5 * (n * 0.15 * 0.85) ** 0.5
    # the target is the original id exactly where <mask> was put, and IGNORE everywhere else
    assert all((targets[k] == tokens[k]) if out[k] == mask_id else (targets[k] == IGNORE and out[k] == tokens[k])
               for k in range(len(tokens)))
    # each word with its own independent draw: the same draws as the public code's per-word random()
    draws = torch.rand(n, generator=torch.Generator().manual_seed(3)).tolist()
    assert masked == [k + 1 for k, u in enumerate(draws) if u < 0.15]


def test_region_selection_share_and_targets_come_from_the_class_array():
    classes = np.random.default_rng(0).integers(0, 1600, size=(2000, 36))
    targets = MaskedPrediction(0.15, 0.15, 9).select_regions(classes, torch.Generator().manual_seed(1))
    chosen = targets != IGNORE
    n = classes.size
    assert targets.dtype == torch.long and abs(int(chosen.sum()) - 0.15 * n) < 5 * (n * 0.15 * 0.85) ** 0.5
    assert torch.equal(targets[chosen], torch.from_numpy(classes)[chosen])
    assert MaskedPrediction(0.15, 0.0, 9).select_regions(classes[:3]).eq(IGNORE).all()


@pytest.mark.parametrize("batching,positives", [("captions", "diagonal"), ("captions", "same_image"),
                                                ("images", "same_image")])
def test_batches_carry_masked_targets_with_both_batchings(tmp_path, batching, positives):
    captions = [f"a dog {w} on grass near {v}" for w in ("runs", "sits", "jumps") for v in ("trees", "water")]
    texts_per_image = 2
    vocab = Vocabulary.build(captions, threshold=1, tokenizer=Tokenizer("nltk_line"))
    classes = np.arange(3 * 4, dtype=np.int64).reshape(3, 4) + 100
    split = SplitData("train", captions, CachedImageFeatures(np.zeros((3, 4, 2), np.float32)), None,
                      texts_per_image, np.eye(3, dtype=np.uint8), classes)
    training = {"batching": batching, "batch_positives": positives,
                "masked_prediction": {"word_prob": 0.5, "region_prob": 0.5}}
    dataset, collate = training_batches(training, split, vocab, None)
    torch.manual_seed(0)
    items = [dataset[k] for k in ((1, 2) if batching == "images" else (5, 0, 1, 4))]
    batch = collate(items)
    texts = [2, 3, 4, 5] if batching == "images" else [5, 0, 1, 4]
    original = [vocab.encode(captions[k]) for k in texts]
    tokens, targets, mask_id = batch["tokens"], batch["token_targets"], len(vocab)
    assert targets.shape == tokens.shape and targets.dtype == torch.long
    for row, ids in enumerate(original):
        for pos in range(tokens.shape[1]):
            if pos >= len(ids):                                  # padding: IGNORE (tokens pad with 0)
                assert targets[row, pos] == IGNORE and tokens[row, pos] == 0
            elif tokens[row, pos] == mask_id:
                assert targets[row, pos] == ids[pos] and 0 < pos < len(ids) - 1
            else:
                assert targets[row, pos] == IGNORE and tokens[row, pos] == ids[pos]
    assert (tokens == mask_id).any() and (targets == IGNORE).any()
    rows = batch["image_index"]
    assert batch["region_class_targets"].shape == (len(rows), 4) == (batch["positives"].shape[0], 4)
    expected = {"diagonal": [2, 0, 0, 2], "same_image": [0, 2]}[positives] if batching == "captions" else [1, 2]
    assert rows.tolist() == expected
    region = batch["region_class_targets"]
    selected = region != IGNORE
    assert torch.equal(region[selected], torch.from_numpy(classes[rows.numpy()])[selected])
    assert batch["image_labels"].tolist() == np.eye(3)[rows.numpy()].tolist()
    assert batch["text_labels"].tolist() == np.eye(3)[[k // 2 for k in texts]].tolist()
    # the global torch RNG seeds the draws (as caption augmentation's): a re-seeded run draws the same
    torch.manual_seed(0)
    again = collate([dataset[k] for k in ((1, 2) if batching == "images" else (5, 0, 1, 4))])
    assert all(torch.equal(batch[k], again[k]) for k in ("tokens", "token_targets", "region_class_targets"))


def test_masked_prediction_needs_region_classes_and_shares_the_mask_token():
    with pytest.raises(HarnessError, match="model.region_classes: true"):
        PairCollator(None, "diagonal", None, None, MaskedPrediction(0.15, 0.15, 9))
    # words only: no region classes needed, and the batch has no region targets
    words_only = PairCollator(CachedImageFeatures(np.zeros((2, 3, 4), np.float32)), "diagonal", None, None,
                              MaskedPrediction(1.0, 0.0, 9))
    batch = words_only([(0, [1, 5, 2], None, [IGNORE, 5, IGNORE]), (1, [1, 9, 6, 2], None, [IGNORE, IGNORE, 6, IGNORE])])
    assert "region_class_targets" not in batch
    assert batch["token_targets"].tolist() == [[IGNORE, 5, IGNORE, IGNORE], [IGNORE, IGNORE, 6, IGNORE]]
    masked = {"masked_prediction": {"word_prob": 0.15, "region_prob": 0.15}}
    assert extra_tokens(masked) == 1 and extra_tokens({"masked_prediction": {"word_prob": 0, "region_prob": 0.15}}) == 0
    both = {**masked, "caption_augment": {"prob": 0.2, "mask": 0.5, "replace": 0.1}}
    assert extra_tokens(both) == 1                                           # one <mask> id for both
    assert MaskedPrediction.from_config(both, 30).mask_id == CaptionAugmentation.from_config(both, 30).mask_id == 30
    # a word caption augmentation already masked is not masked again (no target)
    out, targets = MaskedPrediction(1.0, 0.0, 30).mask_words([1, 30, 7, 2])
    assert out == [1, 30, 30, 2] and targets == [IGNORE, IGNORE, 7, IGNORE]


def test_masked_prediction_config_keys():
    from methods import api
    cfg = api.experiment_config("vsrn", "synthetic",
                                overrides={"training.masked_prediction": {"word_prob": 0.15, "region_prob": 0.15}})
    assert cfg["training"]["masked_prediction"] == {"word_prob": 0.15, "region_prob": 0.15}
    with pytest.raises(HarnessError, match="masked_prediction"):
        api.experiment_config("vsrn", "synthetic",
                              overrides={"training.masked_prediction": {"word_prob": 1.5, "region_prob": 0.15}})


# -- ECCV Caption / CxC need 5 captions per image ------------------------------------------------

def test_eccv_caption_with_another_text_count_is_a_one_line_error(tmp_path):
    split = Split("testall", ["a.jpg", "b.jpg"], [1, 2], ["x", "y"], 1)
    assert "1 texts per image, but ECCV Caption / CxC are defined on 5 captions per COCO image" in error_line(
        split_coco_ids, tmp_path / "dataset_coco.json", split)
