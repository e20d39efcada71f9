"""Inputs that a job used to discover only after a long compute (a training, a feature
extraction) are named when the DAG is built, in one line: NaN/inf in precomputed features, a test
split of the wrong size for its protocol, GloVe of the wrong dimension or malformed, word_init:
glove without a GloVe file, backbone weights of another architecture, an empty image, and
device: cuda on a machine without a GPU (local runs only)."""
import json
import os
import re
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch
import torchvision
import yaml

from methods.data import finite
from methods.data.word_vectors import check_word_vectors, initial_word_vectors
from methods.data.finite import check_finite_array, non_finite_rows
from methods.data.glove import check_glove_head, load_word_vectors
from methods.data.input_cache import CACHE_NAME
from methods.data.synthetic import generate
from methods.data.tokenizers import Tokenizer
from methods.data.text import Vocabulary
from methods.errors import HarnessError
from methods.features import weights_check
from methods.features.backbone import weights_mismatch
from methods.features.weights_check import check_weights_fit
from methods.metrics.protocols import check_split_sizes
from methods.placement import check_gpu_for_local_run, cuda_visible, runs_jobs_here
from tests.conftest import REPO, copy_workflow, fitting_weights, flickr_layout, snakemake
from tests.records import READER_LIMITS
from tests.test_validation import bad_paper


# -- units: each check on a hand-built bad input ---------------------------------------------

@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float32, ">f4", np.float16])
@pytest.mark.parametrize("chunk_bytes", [1, 2 * 3 * 4 * 4, 1 << 20])   # under a row; two rows; the whole file
def test_non_finite_rows_counted_across_chunks(tmp_path, order, dtype, chunk_bytes):
    array = np.zeros((10, 3, 4), dtype, order=order)
    array[3, 1, 2] = np.nan
    array[7, 0, 0] = -np.inf
    array[7, 2, 3] = np.nan  # a second bad value in the same row: still one row
    array[9, 2, 3] = np.inf  # the last value of the file
    path = tmp_path / "ims.npy"
    np.save(path, array)
    brute = [i for i in range(10) if not np.isfinite(np.load(path)[i].astype(np.float64)).all()]
    assert brute == [3, 7, 9]
    assert non_finite_rows(path, chunk_bytes) == (10, 3, 3)
    np.save(path, np.ones((5, 2), dtype, order=order))
    assert non_finite_rows(path, chunk_bytes) == (5, 0, None)
    np.save(path, np.ones((0, 36, 8), dtype))
    assert non_finite_rows(path, chunk_bytes) == (0, 0, None)


def test_non_finite_scan_of_a_large_file_holds_one_chunk_in_memory(tmp_path):
    """A 1 GiB feature file (sparse: zeros) is scanned with about one chunk resident; a memory map
    of the whole file would count every page it read (1 GiB) in the process's resident memory."""
    path = tmp_path / "train_ims.npy"
    rows = 2**30 // (36 * 2048 * 4)
    np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, 36, 2048))  # sparse: no page written
    script = ("import resource, sys\n"
              "from methods.data.finite import non_finite_rows\n"
              "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              "print(non_finite_rows(sys.argv[1]), before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True, cwd=REPO)
    result, before_kib, after_kib = out.stdout.rsplit(" ", 2)
    assert result == f"({rows}, 0, None)"
    assert (int(after_kib) - int(before_kib)) * 1024 < 300 * 2**20, out.stdout   # KiB on Linux


def test_finite_check_names_file_row_and_count_and_scans_each_version_once(tmp_path, monkeypatch):
    path = tmp_path / "test_ims.npy"
    np.save(path, np.ones((6, 2, 3), np.float32))
    scans = []
    scan = finite._scan
    monkeypatch.setattr(finite, "_scan", lambda p: scans.append(p) or scan(p))
    results = tmp_path / "results"
    check_finite_array(path, results)
    check_finite_array(path, results)
    assert len(scans) == 1 and (results / CACHE_NAME).is_file()
    bad = np.ones((6, 2, 3), np.float32)
    bad[4, 1, 1] = np.inf
    np.save(path, bad)  # same size: the mtime tells the versions apart
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    with pytest.raises(HarnessError, match=rf"^{re.escape(str(path))}: 1 of 6 image rows hold NaN or inf values "
                                           rf"\(first: row 4\)"):
        check_finite_array(path, results, "image rows")
    assert len(scans) == 2


@pytest.mark.parametrize("protocol, split, n, message", [
    ("f30k_1k", "test", 200, r"datasets.d.splits.test: 200 images in k.json, but protocol f30k_1k "
                             r"\(datasets.d.protocols\) needs 1000"),
    ("coco_5k", "testall", 1000, r"datasets.d.splits.testall: 1000 images in k.json, but protocol coco_5k "
                                 r"\(datasets.d.protocols\) needs 5000"),
    ("coco_1k_5fold", "testall", 4999, r"datasets.d.splits.testall: 4999 images .* protocol coco_1k_5fold .* needs 5000"),
])
def test_test_split_size_must_fit_its_protocol(protocol, split, n, message):
    with pytest.raises(HarnessError, match=message):
        check_split_sizes("d", [protocol], {split: n}, "k.json")
    check_split_sizes("d", [protocol], {split: 5000 if protocol.startswith("coco") else 1000}, "k.json")
    check_split_sizes("d", ["synthetic_test"], {"test": n}, "k.json")  # defined on any size


def glove_file(path, dim, lines=5, bad_line=None):
    text = [f"w{i} " + " ".join(f"0.{i}" for _ in range(dim)) for i in range(lines)]
    if bad_line is not None:
        text[bad_line - 1] = text[bad_line - 1].rsplit(" ", 1)[0]  # one value short
    path.write_text("\n".join(text) + "\n")
    return path


def test_glove_of_another_dimension_or_malformed(tmp_path):
    with pytest.raises(HarnessError, match=r"g200.txt: 200-dimensional word vectors .* the model's word_dim "
                                           r"\(model.text.word_dim\) is 300"):
        check_glove_head(glove_file(tmp_path / "g200.txt", 200), 300)
    with pytest.raises(HarnessError, match=r"bad.txt:3: malformed line \(starts 'w2 0.2 .*'\): expected a word then "
                                           r"300 finite numbers"):
        check_glove_head(glove_file(tmp_path / "bad.txt", 300, bad_line=3), 300)
    nan = tmp_path / "nan.txt"
    nan.write_text("a 0.1 0.2 0.3\nb 0.1 nan 0.3\n")
    with pytest.raises(HarnessError, match=r"nan.txt:2: malformed line"):
        check_glove_head(nan, 3)
    with pytest.raises(HarnessError, match=r"empty.txt: empty file"):
        (tmp_path / "empty.txt").write_text("")
        check_glove_head(tmp_path / "empty.txt", 300)
    # GloVe 840B has a few words with spaces in them: valid lines, never a vocabulary word
    spaced = tmp_path / "spaced.txt"
    spaced.write_text(". 1 2 3\n. . . 4 5 6\nat name@x.com 7 8 9\n")
    assert check_glove_head(spaced, 3) == 3
    vectors = load_word_vectors(spaced, Vocabulary(["<pad>", "<start>", "<end>", "<unk>", "."], Tokenizer("nltk_line")), 3)
    assert vectors[4].tolist() == [1.0, 2.0, 3.0]


def test_word_init_glove_needs_a_glove_file_of_word_dim(tmp_path):
    cfg = {"results_dir": str(tmp_path), "datasets": {"flickr": {"kind": "karpathy", "glove": None}}}
    model = {"text": {"word_dim": 300, "word_init": "glove"}}
    with pytest.raises(HarnessError, match=r"experiment vsepp-0123456789 sets model.text.word_init: glove, but "
                                           r"datasets.flickr.glove is not set"):
        check_word_vectors(cfg, "flickr", model, "vsepp-0123456789")
    cfg["datasets"]["flickr"]["glove"] = str(glove_file(tmp_path / "g50.txt", 50))
    with pytest.raises(HarnessError, match=r"g50.txt: 50-dimensional word vectors"):
        check_word_vectors(cfg, "flickr", model, "vsepp-0123456789")
    check_word_vectors(cfg, "flickr", {"text": {"word_dim": 300, "word_init": "random"}}, "vsepp-0123456789")


def test_a_training_job_reads_the_vectors_of_its_vocabulary_words(tmp_path):
    vectors = tmp_path / "g3.txt"
    vectors.write_text("cat 1 2 3\ndog 4 5 6\nemu 7 8 9\n")
    vocab = Vocabulary(["<pad>", "<start>", "<end>", "<unk>", "dog", "cat", "yak"], Tokenizer("nltk_line"))
    glove = {"text": {"word_dim": 3, "word_init": "glove"}}
    got = initial_word_vectors(glove, {"glove": vectors}, vocab)
    want = np.zeros((7, 3), dtype=np.float32)
    want[4], want[5] = [4, 5, 6], [1, 2, 3]   # dog, cat; "yak" is not in the file, "emu" not in the vocabulary
    np.testing.assert_array_equal(got, want)
    assert initial_word_vectors({"text": {"word_dim": 3, "word_init": "random"}}, {"glove": vectors}, vocab) is None
    with pytest.raises(HarnessError, match=r"word_init: glove needs datasets.<name>.glove \(a GloVe text file of 3-d"):
        initial_word_vectors(glove, {"glove": None}, vocab)


def weights_cfg(tmp_path, path, arch="resnet152"):
    return {"results_dir": str(tmp_path / "results"), "backbones": {"cnn": {"arch": arch, "weights": str(path)}},
            "untrusted_files": {"memory_mb": READER_LIMITS.memory_mb, "seconds": READER_LIMITS.seconds}}


def test_backbone_weights_must_fit_the_architecture(tmp_path, monkeypatch):
    other = tmp_path / "resnet18.pth"
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), other)
    with pytest.raises(HarnessError, match=rf"backbones.cnn.weights: {re.escape(str(other))} does not fit torchvision "
                                           r"resnet152: \d+ of its keys are missing \(e.g. [\w.]+\); \d+ tensors have "
                                           r"another shape \(e.g. layer1.0.conv1.weight: \(64, 64, 3, 3\), expected "
                                           r"\(64, 64, 1, 1\)\)"):
        check_weights_fit(weights_cfg(tmp_path, other), "cnn")
    empty = tmp_path / "empty.pth"
    empty.write_bytes(b"")
    with pytest.raises(HarnessError, match=r"backbones.cnn.weights: \S+empty.pth is an empty file"):
        check_weights_fit(weights_cfg(tmp_path, empty), "cnn")
    wrapped = tmp_path / "checkpoint.pth"
    torch.save({"state_dict": torchvision.models.resnet18(weights=None).state_dict(), "epoch": 3}, wrapped)
    with pytest.raises(HarnessError, match=r"checkpoint.pth is not a state dict of tensors: a checkpoint with a "
                                           r"'state_dict' entry"):
        check_weights_fit(weights_cfg(tmp_path, wrapped, "resnet18"), "cnn")
    hostile = tmp_path / "resnet152-hostile.pth"   # a crafted download: read by the bounded reader, one line
    with zipfile.ZipFile(hostile, "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02}(X\x01\x00\x00\x00k)" + b"\x85" * 200_000 + b"u.")
    with pytest.raises(HarnessError, match=r"backbones.cnn.weights: \S+resnet152-hostile.pth cannot be read as a "
                                           r"PyTorch state dict \(refused to load \(containers nested deeper than "
                                           r"100 levels"):
        check_weights_fit(weights_cfg(tmp_path, hostile), "cnn")
    # a fitting file passes, once: the verdict is cached by size and mtime
    good = fitting_weights(tmp_path / "resnet152.pth", "resnet152")
    loads = []
    verdict = weights_check.weights_verdict
    monkeypatch.setattr(weights_check, "weights_verdict",
                        lambda arch, p, limits: loads.append(p) or verdict(arch, p, limits))
    check_weights_fit(weights_cfg(tmp_path, good), "cnn")
    check_weights_fit(weights_cfg(tmp_path, good), "cnn")
    assert len(loads) == 1


def test_weights_without_batchnorm_counters_load_and_pass():
    """Weights saved before PyTorch 0.4.1 have no num_batches_tracked: load_state_dict accepts them."""
    state = {k: v for k, v in torchvision.models.resnet18(weights=None).state_dict().items()
             if not k.endswith("num_batches_tracked")}
    torchvision.models.resnet18(weights=None).load_state_dict(state)  # the expectation: it loads
    assert weights_mismatch("resnet18", state) is None
    state["conv1.weight"] = torch.full_like(state["conv1.weight"], float("nan"))
    assert weights_mismatch("resnet18", state) == "holds NaN or inf values in 1 tensors (e.g. conv1.weight)"


def test_cuda_visible_is_torchs_answer():
    """The DAG build asks a child process (it does not import torch): the same answer as here."""
    assert cuda_visible() == torch.cuda.is_available()


def test_cuda_without_gpu_stops_a_local_run_only():
    local = runs_jobs_here(main_process=True, local_executor=True, dry_run=False, touch=False)
    assert local
    # a cluster submit host, a job's snakemake on a node, a dry run, --touch: no job runs here
    assert not runs_jobs_here(main_process=True, local_executor=False, dry_run=False, touch=False)
    assert not runs_jobs_here(main_process=False, local_executor=True, dry_run=False, touch=False)
    assert not runs_jobs_here(main_process=True, local_executor=True, dry_run=True, touch=False)
    assert not runs_jobs_here(main_process=True, local_executor=True, dry_run=False, touch=True)
    jobs = {"train": 15, "evaluate": 15}
    with pytest.raises(HarnessError, match=r"device: cuda \(config\) but no GPU is visible on this machine .* "
                                           r"would start jobs that need one \(15 evaluate, 15 train\)"):
        check_gpu_for_local_run("cuda", runs_here=True, device_jobs=jobs, gpu_visible=False)
    check_gpu_for_local_run("cuda", runs_here=False, device_jobs=jobs, gpu_visible=False)  # cluster
    check_gpu_for_local_run("cuda", runs_here=True, device_jobs={}, gpu_visible=False)     # only CPU jobs left
    check_gpu_for_local_run("cuda", runs_here=True, device_jobs=jobs, gpu_visible=True)
    check_gpu_for_local_run("auto", runs_here=True, device_jobs=jobs, gpu_visible=False)


# -- the DAG: each check runs while it is built, before any job -----------------------------

@pytest.fixture(scope="module")
def flickr_source(tmp_path_factory):
    """A small synthetic dataset with BUTD-style region files (random features), the material of
    the Flickr30K layouts below, and a resnet152 weights file that fits."""
    root = tmp_path_factory.mktemp("flickr_source")
    generate(root / "data", 0, 32, 2, {"train": 10, "val": 5, "test": 5}, min_objects=1, family_size=2,
             tokenizer=Tokenizer("nltk_line"))
    karpathy = json.loads((root / "data/dataset_synthetic.json").read_text())
    rng = np.random.default_rng(0)
    (root / "precomp").mkdir()
    for split, name in (("train", "train"), ("dev", "val"), ("test", "test")):
        images = [e for e in karpathy["images"] if e["split"] == name]
        np.save(root / "precomp" / f"{split}_ims.npy", rng.standard_normal((len(images), 4, 8)).astype(np.float32))
        (root / "precomp" / f"{split}_caps.txt").write_text(
            "".join(s["raw"] + "\n" for e in images for s in e["sentences"][:5]))
    fitting_weights(root / "resnet152.pth", "resnet152")
    return root


def flickr_work(tmp_path, source, test_images=1000):
    work = copy_workflow(tmp_path)
    flickr = flickr_layout(source / "data", source / "precomp", work / "flickr", test_images)
    cfg = {"backbones": {"resnet152": {"arch": "resnet152", "weights": str(source / "resnet152.pth")}},
           "datasets": {"flickr": flickr}}
    return work, cfg


def case_nan_in_features(work, cfg):
    path = work / "flickr/f30k_precomp/dev_ims.npy"
    ims = np.load(path)
    ims[2, 1, 3] = np.nan
    np.save(path, ims)
    return cfg, rf"{re.escape(str(path))}: 1 of 5 image rows hold NaN or inf values \(first: row 2\)"


def case_test_split_too_small(work, cfg):
    return cfg, (r"datasets.flickr.splits.test: 5 images in \S+dataset_flickr30k.json, but protocol f30k_1k "
                 r"\(datasets.flickr.protocols\) needs 1000")


def with_glove_row(work, cfg):
    """The configured papers, VSE++'s first row of table 1 starting its word embeddings from GloVe."""
    glove_row = bad_paper(work, overrides={"model.text.word_init": "glove"})
    default = yaml.safe_load((REPO / "config/config.yaml").read_text())["papers"]
    cfg["papers"] = [glove_row if p.endswith("/vsepp.yaml") else p for p in default]
    return cfg


def case_glove_of_another_dimension(work, cfg):
    cfg["datasets"]["flickr"]["glove"] = str(glove_file(work / "glove.6B.50d.txt", 50))
    return with_glove_row(work, cfg), (r"\S+glove.6B.50d.txt: 50-dimensional word vectors .* the model's "
                                       r"word_dim \(model.text.word_dim\) is 300")


def case_weights_of_another_architecture(work, cfg):
    torch.save(torchvision.models.resnet50(weights=None).state_dict(), work / "resnet50.pth")
    cfg["backbones"]["resnet152"]["weights"] = str(work / "resnet50.pth")
    return cfg, r"backbones.resnet152.weights: \S+resnet50.pth does not fit torchvision resnet152: \d+ of its keys"


def case_empty_image(work, cfg):
    image = sorted((work / "flickr/flickr30k-images").iterdir())[0]
    image.unlink()
    image.touch()
    return cfg, rf"datasets.flickr.images_dir: 1 images of split '\w+' are empty files \(0 bytes\), e.g. \S+{image.name}"


# One case per place a check runs (dataset inputs, protocol sizes, training inputs, backbone
# weights); the other instances of each check are the unit tests above.
CASES = [case_nan_in_features, case_test_split_too_small, case_glove_of_another_dimension,
         case_weights_of_another_architecture, case_empty_image]


@pytest.mark.e2e
@pytest.mark.parametrize("case", CASES, ids=[c.__name__[5:] for c in CASES])
def test_late_input_errors_stop_the_dry_run(flickr_source, tmp_path, case):
    work, cfg = flickr_work(tmp_path, flickr_source, 5 if case is case_test_split_too_small else 1000)
    cfg, message = case(work, cfg)
    (work / "case.yaml").write_text(yaml.safe_dump(cfg))
    proc = snakemake(work, "-n", "--configfile=case.yaml", "tables/table1_flickr.csv", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and re.search(message, out), out[-3000:]
    # one line, whichever Snakemake hook found it (the training rule's input function, for GloVe)
    assert "Traceback" not in out and sum(line.startswith("error:") for line in out.splitlines()) == 1, out[-3000:]
    written = [p for p in (work / "results").rglob("*") if p.is_file()] if (work / "results").exists() else []
    # at most the verdicts of the files that passed; the Karpathy index only where every check of
    # the dataset itself passed (the GloVe and weights cases fail on a row or a backbone)
    kept = [p.name for p in written if p.name.startswith("karpathy-")]
    assert [p.name for p in written if p.name not in kept] in ([], [CACHE_NAME])
    assert not kept or (len(kept) == 1 and case in (case_glove_of_another_dimension,
                                                    case_weights_of_another_architecture))


@pytest.mark.e2e
def test_the_flickr_layout_passes_and_its_features_are_scanned_once(flickr_source, tmp_path):
    """The control of the cases above; a second dry run reads the scan verdicts from the cache."""
    work, cfg = flickr_work(tmp_path, flickr_source)
    (work / "case.yaml").write_text(yaml.safe_dump(cfg))
    snakemake(work, "-n", "--configfile=case.yaml", "tables/table1_flickr.csv")
    cache = json.loads((work / "results" / CACHE_NAME).read_text())
    assert {k.split(":")[0] for k in cache} == {"finite", "weights"}
    assert sorted(k.rsplit("/", 1)[1] for k in cache if k.startswith("finite:")) == [
        "dev_ims.npy", "test_ims.npy", "train_ims.npy"]


@pytest.mark.e2e
@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible here")
def test_cuda_without_gpu_stops_a_local_run_before_any_job(flickr_source, tmp_path):
    work, cfg = flickr_work(tmp_path, flickr_source)
    cfg["device"] = "cuda"
    (work / "case.yaml").write_text(yaml.safe_dump(cfg))
    proc = snakemake(work, "--configfile=case.yaml", "tables/table1_flickr.csv", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert re.search(r"error: device: cuda \(config\) but no GPU is visible on this machine .* would start jobs that "
                     r"need one \(3 features_flickr, \d+ train_flickr\)", out), out[-3000:]
    written = sorted(p.name for p in (work / "results").rglob("*") if p.is_file())   # no job ran: the input
    assert written[0] == CACHE_NAME and len(written) == 2 and written[1].startswith("karpathy-")   # checks' caches


def test_the_wsl_resnext_weights_are_torchvisions_resnext_and_a_resnet_101_file_is_refused():
    """The WSL weights (facebookresearch/WSL-Images builds torchvision's ResNeXt-101 32x8d and loads
    them) fit arch resnext101_32x8d; a ResNet-101 file, whose 3x3 convolutions are not grouped, is
    named for what differs."""
    resnext = torchvision.models.resnext101_32x8d(weights=None).state_dict()
    assert weights_mismatch("resnext101_32x8d", resnext) is None
    problem = weights_mismatch("resnext101_32x8d", torchvision.models.resnet101(weights=None).state_dict())
    assert problem.startswith("does not fit torchvision resnext101_32x8d: ") and "layer1.0.conv1.weight" in problem
