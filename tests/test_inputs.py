"""Bad input gets one clear error naming what is wrong and where; nothing partial is left behind."""
import hashlib
import json

import numpy as np
import pytest
import yaml

from methods.config import REPO_ROOT, load_harness_config, validate
from methods.data.karpathy import load_splits
from methods.data.precomp import open_precomp
from methods.data.synthetic import generate
from methods.data.tokenizers import Tokenizer
from methods.data.text import Vocabulary
from methods.errors import HarnessError
from methods.io import atomic_path, write_json
from methods.training.loop import load_checkpoint
from methods.plan import Plan

CONFIG = REPO_ROOT / "config" / "config.yaml"


def test_synthetic_generation_is_byte_identical_for_a_seed(tmp_path):
    splits = {"train": 6, "val": 2, "test": 2}
    for d in ("a", "b"):
        generate(tmp_path / d, 5, 48, 4, splits, min_objects=1, family_size=2, tokenizer=Tokenizer("nltk_line"))
    digest = lambda d: {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((tmp_path / d).rglob("*.*"))}
    assert digest("a") == digest("b")
    data = json.loads((tmp_path / "a" / "dataset_synthetic.json").read_text())
    img = data["images"][0]
    assert len(img["sentences"]) == 5 and len(set(s["raw"] for s in img["sentences"])) == 5
    assert len(img["boxes"]) == len(img["box_labels"]) >= 1 and len(img["labels"]) == len(data["label_names"])


def test_vocabulary_from_training_captions_only(tmp_path):
    generate(tmp_path, 1, 48, 2, {"train": 4, "val": 2, "test": 2}, min_objects=1, family_size=2, tokenizer=Tokenizer("nltk_line"))
    splits = load_splits(tmp_path / "dataset_synthetic.json", {"train": ["train"], "test": ["test"]}, 5)
    splits["train"].captions[0] = "zebra " * 5  # appears 5 times in train: kept at threshold 4
    splits["test"].captions[0] = "giraffe " * 9  # only in test: must not enter
    vocab = Vocabulary.build(splits["train"].captions, threshold=4, tokenizer=Tokenizer("nltk_line"))
    assert "zebra" in vocab.word2idx and "giraffe" not in vocab.word2idx
    assert vocab.encode("giraffe")[1] == vocab.word2idx["<unk>"]
    vocab.save(tmp_path / "v.json")
    assert Vocabulary.load(tmp_path / "v.json").idx2word == vocab.idx2word
    with pytest.raises(HarnessError, match="not in the vocabulary"):
        Vocabulary(["<pad>", "<start>", "<end>", "<unk>", "a"], Tokenizer("nltk_line")).check_covers(["zebras run fast"], "v.json")


def test_karpathy_captions_per_image_checked(tmp_path):
    path = tmp_path / "k.json"
    write_json(path, {"images": [{"filename": "a.jpg", "split": "test", "sentences": [{"raw": "x"}] * 4}]})
    with pytest.raises(HarnessError, match="4 captions; at least 5"):
        load_splits(path, {"test": ["test"]}, 5)
    with pytest.raises(HarnessError, match="Karpathy split file not found"):
        load_splits(tmp_path / "missing.json", {"test": ["test"]}, 5)


def test_precomp_shapes_and_caption_counts(tmp_path):
    np.save(tmp_path / "test_ims.npy", np.zeros((4, 36, 16), np.float32))
    (tmp_path / "test_caps.txt").write_text("c\n" * 20)
    ims, caps, step = open_precomp(tmp_path, "test", 36, 16, 5)
    assert ims.shape == (4, 36, 16) and len(caps) == 20 and step == 1
    with pytest.raises(HarnessError, match=r"shape \(4, 36, 16\), expected \(N, 36, 2048\)"):
        open_precomp(tmp_path, "test", 36, 2048, 5)
    (tmp_path / "test_caps.txt").write_text("c\n" * 19)
    with pytest.raises(HarnessError, match="19 captions for 4 feature rows"):
        open_precomp(tmp_path, "test", 36, 16, 5)
    with pytest.raises(HarnessError, match="dev_ims.npy"):
        open_precomp(tmp_path, "dev", 36, 16, 5)


def test_config_type_errors_name_the_key(tmp_path):
    cfg = yaml.safe_load(CONFIG.read_text())
    cfg["tolerance"]["recall"] = "two"
    bad = tmp_path / "c.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    with pytest.raises(HarnessError, match=r"tolerance.recall: 'two' is not of type 'number'"):
        load_harness_config(bad)


def test_unknown_method_and_bad_hyperparameter_in_a_paper_file(tmp_path):
    paper = yaml.safe_load((REPO_ROOT / "methods/papers/vsepp.yaml").read_text())
    paper["tables"]["table1"]["rows"][0]["method"] = "vsepp_typo"
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(paper))
    cfg = load_harness_config(CONFIG)
    cfg["papers"] = [str(path)]
    with pytest.raises(HarnessError, match="unknown method 'vsepp_typo'"):
        Plan(cfg)
    paper["tables"]["table1"]["rows"][0]["method"] = "vsepp"
    paper["tables"]["table1"]["rows"][0]["overrides"] = {"loss.margin": "0.2"}
    path.write_text(yaml.safe_dump(paper))
    with pytest.raises(HarnessError, match=r"loss.margin: '0.2' is not of type 'number'"):
        Plan(cfg)
    paper["tables"]["table1"]["rows"][0]["overrides"] = {"loss.kind": "triplet_semihard"}
    path.write_text(yaml.safe_dump(paper))
    with pytest.raises(HarnessError, match="loss.kind: 'triplet_semihard' is not one of"):
        Plan(cfg)


def test_reported_numbers_need_a_source_and_ensemble_size():
    row = {"id": "x", "label": "x", "method": "m", "seeds": [0],
           "reported": {"flickr": {"f30k_1k": {"metrics": {"i2t_r1": 1.0}}}}}
    paper = {"paper": "p", "key": "p", "methods": {}, "tables": {"t": {"title": "t", "datasets": ["flickr"], "rows": [row]}}}
    with pytest.raises(HarnessError, match="'source' is a required property"):
        validate(paper, "paper", "p.yaml")


def test_corrupt_checkpoint_is_a_clear_error(tmp_path):
    bad = tmp_path / "last.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(HarnessError, match="last.pt is corrupt or unreadable.*delete it"):
        load_checkpoint(bad)


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.json"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_missing_backbone_weights_named():
    from methods.features.backbone import ResNetBackbone

    with pytest.raises(HarnessError, match="no weights configured"):
        ResNetBackbone("resnet18", None)
    with pytest.raises(HarnessError, match="weights file not found: /nonexistent.pth"):
        ResNetBackbone("resnet18", "/nonexistent.pth")
