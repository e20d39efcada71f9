"""Every error a user can cause is one line naming the file (and line, entry or key) and what was
expected: malformed or incomplete files of every kind the harness reads, a full disk or an
unwritable results folder, errors found while Snakemake builds the DAG and errors of a job at
run time. And every output gets the permissions the user's umask gives, so a lab can share them."""
import errno
import os
import re
import shutil
import stat
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml

from methods import api
from methods.config import REPO_ROOT, load_harness_config, load_yaml, validate
from methods.data.datasets import load_dataset_payload
from methods.data.karpathy import load_karpathy
from methods.data.positives import load_positives
from methods.data.precomp import check_npy_header, open_precomp
from methods.data.text import Vocabulary
from methods.data.tokenizers import Tokenizer
from methods.placement import KNOWN_RESOURCES
from methods.scoring import average_similarities
from methods.errors import MAX_MESSAGE_CHARS, HarnessError, run_cli
from methods.io import read_json, torch_save, write_json, write_text
from methods.models.checkpoint import load_trained_model, read_model_file, save_trained_model
from methods.report.figure import scatter
from methods.report.table_rows import to_csv
from tests.conftest import REPO, copy_workflow, planted_punkt, snakemake

CONFIG = REPO_ROOT / "config" / "config.yaml"


def error_line(fn, *args) -> str:
    """The message of the HarnessError ``fn(*args)`` raises, checked to be one bounded line."""
    with pytest.raises(HarnessError) as info:
        fn(*args)
    message = str(info.value)
    assert message and "\n" not in message and len(message) <= MAX_MESSAGE_CHARS, repr(message)
    return message


def karpathy_images(n=2):
    return [{"filename": f"im{i}.jpg", "imgid": i, "split": "test",
             "sentences": [{"raw": f"caption {k} of image {i}", "tokens": ["caption"], "sentid": 5 * i + k}
                           for k in range(5)]} for i in range(n)]


# --- files the harness reads ---------------------------------------------------------------

def test_karpathy_file_not_json(tmp_path):
    path = tmp_path / "dataset_flickr30k.json"
    path.write_text('{"images": [\n  {"filename": "a.jpg",}\n]}\n')
    assert re.search(r"dataset_flickr30k.json:2:\d+: not valid JSON \(.+\); expected a JSON object with 'images'",
                     error_line(load_karpathy, path, 5))
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    assert "dataset_flickr30k.json: not a UTF-8 text file, so not JSON" in error_line(load_karpathy, path, 5)


@pytest.mark.parametrize("change, expected", [
    (lambda images: images[1].pop("split"), r"images\[1\] \(im1.jpg\): no 'split' string"),
    (lambda images: images[0]["sentences"][2].pop("raw"),
     r"images\[0\] \(im0.jpg\): sentences\[2\] has no 'raw' caption string"),
    (lambda images: images[1].pop("sentences"), r"images\[1\] \(im1.jpg\): no 'sentences' list"),
    (lambda images: images[0].update(imgid="7"), r"images\[0\] \(im0.jpg\): 'imgid' is '7', not an integer"),
    (lambda images: images.append("im2.jpg"), r"images\[2\]: is a str, not an object"),
], ids=["no split", "sentence without raw", "no sentences", "imgid a string", "entry not an object"])
def test_karpathy_entry_missing_a_field(tmp_path, change, expected):
    images = karpathy_images()
    change(images)
    path = tmp_path / "k.json"
    write_json(path, {"images": images})
    assert re.search(rf"k.json: {expected}; expected a JSON object", error_line(load_karpathy, path, 5))
    write_json(path, [{"images": images}])
    assert "k.json: no 'images' list at the top level" in error_line(load_karpathy, path, 5)


def test_vocabulary_file_errors(tmp_path):
    path = tmp_path / "vocab.json"
    path.write_text('{"word2idx": {"<pad>": 0}, "idx": 4\n')
    assert re.search(r"vocab.json:2:\d+: not valid JSON .*expected \{\"word2idx\"", error_line(Vocabulary.load, path))
    words = ["<pad>", "<start>", "<end>", "<unk>", "dog"]
    good = {"word2idx": {w: i for i, w in enumerate(words)}, "idx2word": {str(i): w for i, w in enumerate(words)},
            "idx": 5}
    write_json(path, {k: v for k, v in good.items() if k != "idx"})
    assert "vocab.json: not a vocabulary JSON: no 'idx'" in error_line(Vocabulary.load, path)
    write_json(path, {**good, "idx2word": {k: v for k, v in good["idx2word"].items() if k != "3"}})
    assert "vocab.json: idx2word has no word for index 3 ('idx' is 5)" in error_line(Vocabulary.load, path)
    write_json(path, {**good, "idx2word": {"0": "dog", **{k: v for k, v in good["idx2word"].items() if k != "0"}}})
    assert "vocab.json: vocabulary must start with ('<pad>', '<start>', '<end>', '<unk>')" in error_line(
        Vocabulary.load, path)


def test_extended_positives_file_errors(tmp_path):
    path = tmp_path / "positives_synthetic.json"
    write_json(path, {"dataset": "synthetic", "definition": "x"})
    assert "positives_synthetic.json: no 'splits' object at the top level" in error_line(load_positives, path)
    write_json(path, {"splits": {"test": {"caption_images": {"0": 3}}}})
    assert "positives_synthetic.json: splits.test.caption_images must map each sentid to a list of image ids" in \
        error_line(load_positives, path)
    path.write_text('{"splits": {"test": }}')
    assert re.search(r"positives_synthetic.json:1:\d+: not valid JSON", error_line(load_positives, path))


def test_precomputed_features_and_captions_errors(tmp_path):
    np.save(tmp_path / "test_ims.npy", np.zeros((2, 36, 8), np.float32))
    (tmp_path / "test_caps.txt").write_text("a dog\n" * 10)
    good = (tmp_path / "test_ims.npy").read_bytes()
    (tmp_path / "test_ims.npy").write_text("id,feature\n0,0.1\n")  # a CSV saved under the expected name
    assert "test_ims.npy: not a .npy file (no NumPy header)" in error_line(open_precomp, tmp_path, "test", 36, 8, 5)
    (tmp_path / "test_ims.npy").write_bytes(good[:-100])  # an interrupted copy
    assert "test_ims.npy: shorter than its .npy header says (a partial copy?)" in error_line(
        open_precomp, tmp_path, "test", 36, 8, 5)
    (tmp_path / "test_ims.npy").write_bytes(good)
    (tmp_path / "test_caps.txt").write_bytes(b"a dog\n" * 2 + b"a caf\xe9 in latin-1\n" + b"a dog\n" * 7)
    assert "test_caps.txt:3: not UTF-8 text (byte 0xe9)" in error_line(open_precomp, tmp_path, "test", 36, 8, 5)
    (tmp_path / "test_caps.txt").write_text("a dog\n" * 10 + "\n")   # a trailing blank line
    assert error_line(open_precomp, tmp_path, "test", 36, 8, 5).endswith(
        "test_caps.txt: 11 captions for 2 feature rows in " + str(tmp_path / "test_ims.npy") + "; expected 5 x rows "
        "(texts_per_image; or one row per caption) (line 11 is blank: one caption per line, no blank lines)")
    (tmp_path / "dev_pooled.npy").write_bytes(b"")
    assert "dev_pooled.npy: an empty file (0 bytes); expected an array written by numpy.save" in error_line(
        check_npy_header, tmp_path / "dev_pooled.npy", (2, None))


def test_model_file_errors(tmp_path):
    path = tmp_path / "model.pt"
    assert "model file not found: " in error_line(read_model_file, path)
    path.write_bytes(b"PK\x03\x04 half a zip")
    assert re.search(r"model file \S+model.pt is corrupt or unreadable \(\w+: .+\); delete it", error_line(
        read_model_file, path))
    torch.save({"state_dict": {}, "config": {}}, path)  # a bare state dict file, not a harness model file
    assert re.search(r"model file \S+model.pt has no vocab_size, best; it was not written by this harness",
                     error_line(read_model_file, path))


def random_init_backbones() -> dict:
    """The config's backbones at random weights: a clean clone has no pre-trained synthetic ResNet."""
    return {name: {**bb, "weights": "none"} for name, bb in api.harness_config()["backbones"].items()}


@pytest.fixture(scope="module")
def tiny_model_file(tmp_path_factory):
    """A model file of the synthetic VSE++ (frozen CNN: no backbone weights), as training writes it."""
    cfg = api.experiment_config("vsepp", "synthetic")
    model = api.build_model(cfg, vocab_size=20, image_shape={"dim": 512}, backbones=random_init_backbones())
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("backbone.")}
    path = tmp_path_factory.mktemp("model") / "model.pt"
    save_trained_model(path, cfg, "0123456789", 0, 20, {"dim": 512}, {"finetuned": False}, state)
    return path


def test_model_weights_of_another_shape(tiny_model_file, tmp_path):
    backbones = random_init_backbones()
    load_trained_model(tiny_model_file, backbones, torch.device("cpu"))  # the control loads
    ckpt = torch.load(tiny_model_file, weights_only=True)
    name = next(k for k, v in ckpt["state_dict"].items() if v.ndim == 2)
    ckpt["state_dict"][name] = torch.zeros(3, 3)
    bad = tmp_path / "model.pt"
    torch.save(ckpt, bad)
    message = error_line(load_trained_model, bad, backbones, torch.device("cpu"))
    assert re.search(rf"model.pt: weights do not fit the model its config builds \(.*size mismatch for {name}", message)


def test_api_mistakes_are_one_line_each(tiny_model_file, tmp_path):
    """A notebook user's mistakes with a trained model (20 token ids, 512-d pooled images)."""
    model, info = api.load_model(tiny_model_file, backbones=random_init_backbones())
    words = Vocabulary(["<pad>", "<start>", "<end>", "<unk>"] + [f"w{i}" for i in range(16)], Tokenizer("nltk_line"))
    assert len(words) == info["vocab_size"] == 20
    api.encode_texts(model, ["w1 w2", "w3"], words)   # the controls
    api.encode_images(model, np.zeros((2, 512), np.float32))
    other = Vocabulary(words.idx2word + ["w16", "w17"], words.tokenizer)
    other.save(tmp_path / "other_vocab.json")
    assert error_line(api.encode_texts, model, ["w1 w2"], str(tmp_path / "other_vocab.json")) == (
        f"encode_texts: {tmp_path / 'other_vocab.json'} has 22 words, but the model was trained with a vocabulary "
        f"of 20: use the vocabulary of its training run")
    assert error_line(api.encode_texts, model, "w1 w2", words) == (
        "encode_texts: texts is one string; pass a list of captions (e.g. [caption])")
    assert error_line(api.encode_texts, model, [[1, 5, 20, 2]]) == (
        "encode_texts: token ids must lie in [0, 20) (the model's vocabulary size); got ids from 1 to 20")
    assert error_line(api.encode_images, model, np.zeros((2, 36, 512), np.float32)) == (
        "encode_images: image features of shape (2, 36, 512), but the model reads (N, C) with C = 512 "
        "(its image shape {'dim': 512})")
    assert "image features of shape (2, 2048)" in error_line(api.encode_images, model, np.zeros((2, 2048)))
    if not torch.cuda.is_available():
        no_gpu = "device 'cuda' was asked for, but no GPU is visible (torch.cuda.is_available() is False); use device='cpu'"
        assert error_line(api.load_model, tiny_model_file, "cuda") == f"load_model: {no_gpu}"
        assert error_line(api.encode_texts, model, [[1, 2]], None, 8, "cuda") == f"encode_texts: {no_gpu}"


def test_dataset_and_experiment_configs_the_dag_writes(tmp_path):
    path = tmp_path / "dataset.json"
    path.write_text('{"name": "flickr", "dataset": {"kind": "karpathy"')  # cut short
    assert re.search(r"dataset.json:1:\d+: not valid JSON", error_line(load_dataset_payload, path))
    write_json(path, {"name": "flickr", "dataset": {"kind": "karpathy"}})  # no 'paths'
    assert "dataset.json: no 'dataset' and 'paths' objects, so not the dataset config the DAG writes" in error_line(
        load_dataset_payload, path)
    assert re.search(r"file not found: \S+config.json", error_line(read_json, tmp_path / "runs/x/config.json"))


def test_method_and_paper_yaml_not_yaml(tmp_path):
    path = tmp_path / "paper.yaml"
    path.write_text("paper: x\ntables:\n  t1: [a\n  b: 2\n")
    assert re.search(r"paper.yaml: not valid YAML: .*line 3, column \d+", error_line(load_yaml, path))
    latin1 = tmp_path / "method.yaml"
    latin1.write_bytes("method: caf\u00e9\n".encode("latin-1"))     # saved in another encoding
    assert error_line(load_yaml, latin1) == f"{latin1}: not a UTF-8 text file, so not YAML"
    folder = tmp_path / "papers.yaml"
    folder.mkdir()
    assert error_line(load_yaml, folder) == f"{folder}: a directory, not a YAML file"


def test_a_truncated_similarity_file_of_an_ensemble_member_is_named(tmp_path):
    good, bad = tmp_path / "a.npy", tmp_path / "b.npy"
    np.save(good, np.ones((2, 10), dtype=np.float32))
    np.save(bad, np.ones((2, 10), dtype=np.float32))
    bad.write_bytes(bad.read_bytes()[:-8])                               # a partial copy
    assert error_line(average_similarities, [good, bad]) == f"{bad}: shorter than its .npy header says (a partial copy?)"


def test_schema_errors_are_one_line_with_the_first_key(tmp_path):
    cfg = yaml.safe_load(CONFIG.read_text())
    cfg["tolerance"]["recall"] = "two"
    cfg["tolerance"]["rank"] = -1
    cfg["resources"]["train"]["threads"] = 0
    bad = tmp_path / "c.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    assert re.search(r"c.yaml: invalid config config: resources.train.threads: 0 is less than the minimum of 1 "
                     r"\(and 2 more\)$", error_line(load_harness_config, bad))
    cfg = yaml.safe_load(CONFIG.read_text())
    cfg["datasets"]["flickr"]["protocols"] = {f"key{i}": "x" * 100 for i in range(2000)}  # 200 KB of value
    message = error_line(validate, cfg, "config", "c.yaml")
    assert re.search(r"c.yaml: invalid config config: datasets.flickr.protocols: \{'key0': .* is not of type 'array'",
                     message)


def test_a_config_that_passed_once_still_fails_once_it_changes():
    """validate remembers what passed (a plan checks many equal configs): a changed object, or the
    same values under other types, is checked again."""
    cfg = yaml.safe_load(CONFIG.read_text())
    assert validate(cfg, "config", "c.yaml") is cfg
    assert validate(cfg, "config", "c.yaml") is cfg
    cfg["resources"]["train"]["threads"] = 0   # the same object, changed in place
    assert "resources.train.threads: 0 is less than the minimum of 1" in error_line(validate, cfg, "config", "c.yaml")
    cfg["resources"]["train"]["threads"] = 1
    protocols = cfg["datasets"]["flickr"]["protocols"]
    validate(cfg, "config", "c.yaml")
    cfg["datasets"]["flickr"]["protocols"] = tuple(protocols)   # equal as JSON, but no array
    assert "datasets.flickr.protocols: " in error_line(validate, cfg, "config", "c.yaml")


def test_a_multi_line_message_is_joined():
    message = "weights do not fit (Error(s) in loading:\n\tsize mismatch for a\n\tsize mismatch for b)"
    joined = "weights do not fit (Error(s) in loading: size mismatch for a; size mismatch for b)"
    assert str(HarnessError(message)) == joined


# --- writing outputs ------------------------------------------------------------------------

@pytest.fixture
def disk_full(tmp_path, monkeypatch):
    """Writes land on /dev/full (the kernel answers ENOSPC), as on a full results disk."""
    def temp_on_full_disk(path, suffix):
        tmp = path.parent / f".{path.name}.full{suffix}"
        tmp.symlink_to("/dev/full")
        return tmp
    monkeypatch.setattr("methods.io._new_temp_file", temp_on_full_disk)


@pytest.mark.parametrize("name, write", [
    ("table1_flickr.csv", lambda out, table: write_text(out, to_csv([]))),
    ("reproduced_vs_reported_flickr.png", lambda out, table: scatter([str(table)], str(out), "flickr")),
], ids=["table", "figure"])
def test_full_disk_is_named(tmp_path, name, write, disk_full):
    table = tmp_path / "input.csv"  # a figure's input, written before the disk filled up
    table.write_text(to_csv([]))
    out = tmp_path / "outputs" / name
    assert error_line(write, out, table) == f"no space left on device while writing {out}"
    assert list(out.parent.iterdir()) == []  # nothing half-written


# root writes anywhere: it runs the writes without the capabilities that override file modes
AS_ORDINARY_USER = ([] if os.geteuid() != 0 else
                    ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner",
                     "--inh-caps=-dac_override,-dac_read_search,-fowner"])


@pytest.mark.skipif(AS_ORDINARY_USER and not shutil.which("setpriv"), reason="root, and no setpriv to drop its rights")
def test_read_only_results_folder_is_named(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    folder.chmod(0o555)
    script = ("import sys, torch\n"
              "from methods.errors import run_cli\n"
              "from methods.io import torch_save, write_json\n"
              "run_cli(lambda: torch_save(sys.argv[1], {'w': torch.zeros(2)}) if sys.argv[2] == 'pt' "
              "else write_json(sys.argv[1], {}))\n")
    try:
        for out, kind in [(folder / "model.pt", "pt"), (folder / "synthetic" / "dataset.json", "json")]:
            proc = subprocess.run([*AS_ORDINARY_USER, sys.executable, "-c", script, str(out), kind],
                                  capture_output=True, text=True, cwd=REPO)
            assert proc.returncode == 2
            assert proc.stderr == f"error: permission denied writing {out} (is its folder read-only?)\n"
    finally:
        folder.chmod(0o755)


def test_results_path_blocked_by_a_file(tmp_path):
    (tmp_path / "results").write_text("not a folder")
    out = tmp_path / "results" / "synthetic" / "vocab.json"
    assert error_line(write_json, out, {}) == f"could not write {out}: Not a directory"


def test_entry_points_print_one_line_and_exit_2(tmp_path, capsys):
    def unreadable():
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "eval_test.json"))

    missing = tmp_path / "nowhere.json"
    for fn, expected in [(lambda: read_json(missing), f"error: file not found: {missing}"),
                         (unreadable, f"error: {tmp_path / 'eval_test.json'}: permission denied")]:
        with pytest.raises(SystemExit) as exit_info:
            run_cli(fn)
        assert exit_info.value.code == 2
        assert capsys.readouterr().err == expected + "\n"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_outputs_get_the_umask_permissions(tmp_path, tiny_model_file, umask, mode):
    previous = os.umask(umask)
    try:
        table = tmp_path / "tables" / "table1_flickr.csv"
        write_text(table, to_csv([]))
        figure = tmp_path / "figures" / "reproduced_vs_reported_flickr.png"
        scatter([str(table)], str(figure), "flickr")
        checkpoint = tmp_path / "runs" / "model.pt"
        torch_save(checkpoint, torch.load(tiny_model_file, weights_only=True))
        for path in (table, figure, checkpoint):
            assert stat.S_IMODE(path.stat().st_mode) == mode, f"{path}: {oct(stat.S_IMODE(path.stat().st_mode))}"
    finally:
        os.umask(previous)


# --- on the Snakemake console -----------------------------------------------------------------

def case_sentence_without_raw(tmp_path):
    """Found by an input function (Snakemake wraps its exception in an InputFunctionException)."""
    images = karpathy_images(3)
    del images[2]["sentences"][4]["raw"]
    karpathy = tmp_path / "dataset_flickr30k.json"
    write_json(karpathy, {"images": images})
    (tmp_path / "images").mkdir()
    cfg = {"datasets": {"flickr": {"karpathy_json": str(karpathy), "images_dir": str(tmp_path / "images"),
                                   "nltk_data": str(planted_punkt(tmp_path / "nltk_data"))}}}
    return cfg, (f"error: {karpathy}: images[2] (im2.jpg): sentences[4] has no 'raw' caption string; "
                 f"expected a JSON object with 'images': [{{'filename', 'split' (train|restval|val|test), "
                 f"'sentences': [{{'raw': ...}}, ...] (texts_per_image per image, e.g. 5 captions), "
                 f"optional 'labels': [0/1, ...] (multi-hot)}}, ...] (Karpathy split file)")


def case_config_value_and_two_more(tmp_path):
    """Found while the rule files are read (the config is validated at the top of common.smk)."""
    cfg = {"tolerance": {"recall": "two", "rank": -1}, "results_dir": 3}
    return cfg, ("error: config/config.yaml (with --config/--configfile overrides): invalid config config: "
                 "results_dir: 3 is not of type 'string' (and 2 more)")


def case_misspelled_resource(tmp_path):
    """Found before the config is read: a resource no job reads, given with the SLURM profile."""
    known = ", ".join(sorted(k for k in KNOWN_RESOURCES if not k.startswith("_")))
    return {}, ("error: default-resources (workflow profile or command line): unknown resource 'slurm_partiton' "
                f"(did you mean 'slurm_partition'?); known: {known}"), \
        ["--workflow-profile", "workflow/profiles/slurm", "--default-resources", "slurm_partiton=gpu"]


@pytest.mark.e2e
@pytest.mark.parametrize("case", [case_sentence_without_raw, case_config_value_and_two_more, case_misspelled_resource],
                         ids=["input function", "rule files", "profile"])
def test_dag_build_error_is_one_line_on_the_console(tmp_path, case):
    work = tmp_path / "work"
    work.mkdir()
    copy_workflow(work)
    cfg, expected, *args = case(tmp_path)
    (work / "case.yaml").write_text(yaml.safe_dump(cfg))
    proc = snakemake(work, "-n", "--configfile=case.yaml", *(args[0] if args else []), "--",
                     "tables/table1_flickr.csv", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert [line for line in out.splitlines() if re.search(r"^error|Error|Exception", line)] == [expected], out[-3000:]
    assert "Traceback" not in out and "File \"" not in out, out[-3000:]


@pytest.mark.e2e
def test_a_failed_job_shows_its_error_on_the_console(tmp_path):
    """A job's output goes to results/logs/; its error line must reach the console too, in a plain
    run (no workflow profile: the rule's shell prints its log's end) and with the local profile."""
    work = copy_workflow(tmp_path)
    snakemake(work, "results/synthetic/dataset.json")
    (work / "results/synthetic/dataset.json").write_text('{"name": "synthetic",')  # e.g. a hand edit gone wrong
    for profile in (["--workflow-profile", "none"], ["--workflow-profile", "workflow/profiles/local"]):
        proc = snakemake(work, *profile, "results/synthetic/data/stats.json", check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0
        line = r"^error: results/synthetic/dataset.json:1:\d+: not valid JSON \(.+\)$"
        assert re.search(line, out, re.M), out[-3000:]
        assert "Traceback" not in out, out[-3000:]
