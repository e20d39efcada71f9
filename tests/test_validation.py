"""Validation before compute: each bad input stops `snakemake` while the DAG is built, before
any job starts, with one message naming the file or key. The dataset is Flickr30K's layout
filled with the tiny synthetic files (Karpathy JSON, images, BUTD-style precomputed regions)."""
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.conftest import REPO, copy_workflow, fitting_weights, flickr_layout, snakemake

pytestmark = pytest.mark.e2e


def make_flickr(tiny_dag: Path, work: Path) -> dict:
    """A private copy of the synthetic data in Flickr30K's layout (its test split grown to the 1,000
    images of protocol f30k_1k), and resnet152 weights that fit; returns its config block."""
    src = tiny_dag / "results/synthetic"
    flickr = flickr_layout(src / "data", src / "precomp", work / "flickr")
    fitting_weights(work / "resnet152.pth", "resnet152")
    return {"backbones": {"resnet152": {"arch": "resnet152", "weights": str(work / "resnet152.pth")}},
            "datasets": {"flickr": flickr}}


def flickr_vocab(work: Path, extra_words=(), captions=None) -> Path:
    from methods.data.karpathy import load_splits
    from methods.data.text import Vocabulary
    from methods.data.tokenizers import Tokenizer

    if captions is None:
        captions = load_splits(work / "flickr/dataset_flickr30k.json", {"train": ["train"]}, 5)["train"].captions
    # the flickr block's tokenizer: nltk with the layout's planted Punkt model (tests.conftest.flickr_layout)
    vocab = Vocabulary.build(captions, 1, Tokenizer.from_dataset({"tokenizer": "nltk"}, work / "flickr/nltk_data",
                                                                 "datasets.flickr"))
    vocab = Vocabulary(vocab.idx2word + list(extra_words), vocab.tokenizer)
    path = work / "flickr_vocab.json"
    vocab.save(path)
    return path


def bad_paper(work: Path, **row_changes) -> str:
    paper = yaml.safe_load((REPO / "methods/papers/vsepp.yaml").read_text())
    paper["tables"]["table1"]["rows"][0].update(row_changes)
    path = work / "bad_paper.yaml"
    path.write_text(yaml.safe_dump(paper))
    return str(path)


def held_out_only_words(work: Path) -> list[str]:
    from methods.data.karpathy import load_splits
    from methods.data.tokenizers import Tokenizer

    tokenize = Tokenizer("nltk_line")
    splits = load_splits(work / "flickr/dataset_flickr30k.json", {"train": ["train"], "test": ["test"]}, 5)
    train = {t for c in splits["train"].captions for t in tokenize(c)}
    return sorted({t for c in splits["test"].captions for t in tokenize(c)} - train)


def case_unknown_table(work, cfg):
    return cfg, "tables/table9_flickr.csv", r"no table 'table9' is declared for dataset 'flickr'"


def case_unknown_method(work, cfg):
    cfg["papers"] = [bad_paper(work, method="vsepp_typo")]
    return cfg, "tables/table1_flickr.csv", r"bad_paper.yaml: row '\w+' names unknown method 'vsepp_typo'"


def case_hyperparameter_type(work, cfg):
    cfg["papers"] = [bad_paper(work, overrides={"loss.margin": "0.2"})]
    return cfg, "tables/table1_flickr.csv", r"loss.margin: '0.2' is not of type 'number'"


def case_hyperparameter_range(work, cfg):
    cfg["papers"] = [bad_paper(work, overrides={"loss.margin": -0.2})]
    return cfg, "tables/table1_flickr.csv", r"loss.margin: -0.2 is less than the minimum of 0"


def case_config_range(work, cfg):
    cfg["resources"] = {"train": {"threads": 0, "mem_mb": 1000, "runtime": 10, "gpus": 1}}
    return cfg, "tables/table1_flickr.csv", r"resources.train.threads: 0 is less than the minimum of 1"


def case_missing_karpathy_file(work, cfg):
    cfg["datasets"]["flickr"]["karpathy_json"] = str(work / "nowhere/dataset_flickr30k.json")
    return cfg, "tables/table1_flickr.csv", r"Karpathy split file not found: \S*nowhere/dataset_flickr30k.json"


def case_missing_image(work, cfg):
    images = work / "flickr/images_copy"
    shutil.copytree(work / "flickr/flickr30k-images", images)
    victim = sorted(images.iterdir())[-1]
    victim.unlink()
    cfg["datasets"]["flickr"]["images_dir"] = str(images)
    return cfg, "tables/table1_flickr.csv", rf"datasets.flickr.images_dir: 1 images of split '\w+' are missing, e.g. \S*{victim.name}"


def case_features_shape(work, cfg):
    path = work / "flickr/f30k_precomp/test_ims.npy"
    np.save(path, np.load(path)[:, :, :128])
    return cfg, "tables/table1_flickr.csv", r"f30k_precomp/test_ims.npy: shape \(\d+, 12, 128\), expected \(N, 12, 256\)"


def case_features_dtype(work, cfg):
    path = work / "flickr/f30k_precomp/dev_ims.npy"
    np.save(path, np.load(path).astype(np.int32))
    return cfg, "tables/table1_flickr.csv", r"f30k_precomp/dev_ims.npy: dtype int32, expected a float array"


def case_caption_count(work, cfg):
    path = work / "flickr/f30k_precomp/train_caps.txt"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n")
    return cfg, "tables/table1_flickr.csv", rf"f30k_precomp/train_caps.txt: {len(lines) - 1} captions for {len(lines) // 5} feature rows"


def case_vocab_of_other_captions(work, cfg):
    other = ["a man rides a bike down the street", "two dogs play in the snow", "a woman reads a book"]
    cfg["datasets"]["flickr"]["vocab"] = str(flickr_vocab(work, captions=other))
    return cfg, "tables/table1_flickr.csv", r"datasets.flickr.vocab \(\S*flickr_vocab.json\): \d+/\d+ caption tokens \(\d+%\) are not in the vocabulary"


def case_vocab_with_test_words(work, cfg):
    leaked = held_out_only_words(work)
    assert leaked, "the tiny dataset has no test-only words"
    cfg["datasets"]["flickr"]["vocab"] = str(flickr_vocab(work, extra_words=leaked))
    return cfg, "tables/table1_flickr.csv", rf"datasets.flickr.vocab \(\S+\): {len(leaked)} vocabulary words occur only in dev/test captions"


def case_unknown_protocol(work, cfg):
    cfg["datasets"]["flickr"]["protocols"] = ["f30k_5k"]
    return cfg, "tables/table1_flickr.csv", r"datasets.flickr.protocols.0: 'f30k_5k' is not one of \['f30k_1k'"


CASES = [case_unknown_table, case_unknown_method, case_hyperparameter_type, case_hyperparameter_range,
         case_config_range, case_missing_karpathy_file, case_missing_image, case_features_shape,
         case_features_dtype, case_caption_count, case_vocab_of_other_captions, case_vocab_with_test_words,
         case_unknown_protocol]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__[5:] for c in CASES])
def test_bad_input_stops_the_dag_before_any_job(tiny_dag, tmp_path, case):
    work = copy_workflow(tmp_path)
    shutil.copy(REPO / "tests/data/tiny.yaml", work / "tiny.yaml")
    cfg, target, message = case(work, make_flickr(tiny_dag, work))
    (work / "case.yaml").write_text(yaml.safe_dump(cfg))
    for dry in (True, False):  # planning and running fail alike, before anything is written
        proc = snakemake(work, target, *(["-n"] if dry else []), "--configfile", "tiny.yaml", "case.yaml", check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0
        assert re.search(message, out, re.MULTILINE), out[-3000:]
        # one line, whichever Snakemake hook found it (rule files, input functions of any rule)
        assert "Traceback" not in out and sum(line.startswith("error:") for line in out.splitlines()) == 1, out[-3000:]
        assert not (work / "results").exists() and not (work / "tables").exists()


def test_the_good_flickr_layout_passes_the_checks(tiny_dag, tmp_path):
    """The control: the same layout unchanged, and a vocabulary built from its training captions."""
    work = copy_workflow(tmp_path)
    shutil.copy(REPO / "tests/data/tiny.yaml", work / "tiny.yaml")
    cfg = make_flickr(tiny_dag, work)
    cfg["datasets"]["flickr"]["vocab"] = str(flickr_vocab(work))
    (work / "case.yaml").write_text(yaml.safe_dump(cfg))
    snakemake(work, "tables/table1_flickr.csv", "-n", "--configfile", "tiny.yaml", "case.yaml")
