"""Hostile released files: each crafted file (a few bytes to a few MB, written here) is refused in
one line, within the reader's bounds (methods.untrusted.sandbox), writing nothing; the harness
process never allocates for it. Each case states its bounds: the reader's peak memory at most its
baseline plus ``LIMITS.memory_mb`` (where it got as far as a reader), its time within
``LIMITS.seconds``, and the test process's own peak memory growing by less than 100 MB."""
import argparse
import copy
import hashlib
import importlib
import io
import json
import pickle
import resource
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from methods import api
from methods.data.text import Vocabulary
from methods.data.tokenizers import Tokenizer
from methods.data.datasets import DatasetPayload, dataset_payload
from methods.errors import HarnessError
from methods.import_released import import_released
from methods.io import write_json
from methods.released import sgraf, vsrn
from methods.untrusted.pickle_scan import MAX_NESTING
from methods.untrusted.safe_load import load_checkpoint, load_json
from methods.untrusted.sandbox import BoundExceeded, ReaderLimits, run_bounded
from methods.released.vocabulary import read_pickled_vocabulary
from tests.records import READER_LIMITS as LIMITS

FIXTURES = Path(__file__).parent / "data" / "released"
SGRAF = FIXTURES / "sgraf" / "f30k_SGR_model_best.pth.tar"
SGRAF_VOCAB = FIXTURES / "sgraf" / "f30k_precomp_vocab.json"
REGIONS = {"precomp": {"n_regions": 36, "feature_dim": None}}
TOKENIZER = Tokenizer("nltk_line")
PARENT_GROWTH = 100 << 20   # bytes: the test process's own peak may grow by less than this per case


@pytest.fixture(autouse=True)
def private_temp(tmp_path_factory, monkeypatch) -> Path:
    """A temporary folder of this test's own, where the readers' folders go."""
    folder = tmp_path_factory.mktemp("temp")
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@pytest.fixture(scope="module")
def reader_baseline(tmp_path_factory) -> int:
    """The peak memory of a reader that reads a legitimate vocabulary: the interpreter's own."""
    from methods.untrusted import safe_load
    _, usage = safe_load._read("pickle", FIXTURES / "vsrn" / "precomp_vocab.pkl", ["__main__.Vocabulary"], LIMITS)
    return usage.peak_rss_bytes


def refused(call, match: str, baseline: int, limits: ReaderLimits = LIMITS, folder: Path | None = None) -> str:
    """``call()`` fails in one line matching ``match``, writing nothing beside the file (in
    ``folder``) or in the temporary folder; the reader (if one ran) and this process stayed within
    their bounds. Returns the line."""
    before, files = peak_rss(), sorted(folder.iterdir()) if folder else []
    with pytest.raises(HarnessError, match=match) as err:
        call()
    assert (sorted(folder.iterdir()) if folder else []) == files
    assert not any(Path(tempfile.gettempdir()).iterdir())   # the reader's folder is gone (private_temp)
    message = str(err.value)
    assert "\n" not in message and "\x1b" not in message
    assert peak_rss() - before < PARENT_GROWTH
    usage = getattr(err.value, "usage", None)
    if usage is not None:
        assert usage.peak_rss_bytes <= baseline + limits.memory_mb * (1 << 20)
        assert usage.wall_seconds <= limits.seconds + 1
    return message


# --- pickles, as a vocabulary file holds them -------------------------------------------------------------

def nested_tuple(depth: int) -> bytes:
    """An empty tuple wrapped ``depth`` times (protocol 2 TUPLE1), without its PROTO and STOP."""
    return b")" + b"\x85" * depth


DEEP_KEY = b"\x80\x02}(" + nested_tuple(200_000) + b"K\x01u."           # 200 KB: {((((...)))): 1}
DEEP_MEMBER = b"\x80\x04\x8f(" + nested_tuple(200_000) + b"\x90."       # {((((...))))}: a set member
MEMO_BOMB = b"\x80\x02Nr" + struct.pack("<I", 250_000_000) + b"."       # 9 bytes: LONG_BINPUT 250,000,000
BYTEARRAY_GLOBAL = b"\x80\x02cbuiltins\nbytearray\n\x8a\x05\x00\x00\x00\xc0\x00\x85R."   # bytearray(3 GiB)
BYTEARRAY8_CLAIM = b"\x80\x05\x96" + struct.pack("<Q", 3 << 30) + b"abc."   # says 3 GiB, holds 3 bytes


@pytest.mark.parametrize("data, match", [
    (DEEP_KEY, rf"containers nested deeper than {MAX_NESTING} levels at byte \d+"),
    (DEEP_MEMBER, rf"containers nested deeper than {MAX_NESTING} levels"),
    (MEMO_BOMB, r"memo index 250000000, beyond the 2 opcodes before it"),
    (BYTEARRAY_GLOBAL, r"refused global builtins.bytearray"),
    (BYTEARRAY8_CLAIM, r"not a readable pickle \(ValueError: expected 3221225472 bytes in a bytearray8"),
])
def test_a_pickle_that_would_crash_or_exhaust_the_reader_is_one_line(tmp_path, reader_baseline, data, match):
    path = tmp_path / "coco_vocab.pkl"
    path.write_bytes(data)
    refused(lambda: read_pickled_vocabulary(path, TOKENIZER, "fartashf/vsepp", LIMITS), rf"coco_vocab.pkl: .*{match}",
            reader_baseline, folder=tmp_path)


# --- the bounds themselves, on readers that do what a hostile file could make a reader do ------------------

HOSTILE_READERS = {
    "crash": "d = {}\nt = ()\nfor _ in range(200_000):\n    t = (t,)\nd[t] = 1\n",   # CPython hashes it in C: SIGSEGV
    "memory": "x = bytearray(2 << 30)\n",
    "cpu": "while True:\n    pass\n",
    "hang": "import time\ntime.sleep(60)\n",
}


@pytest.mark.parametrize("reader, seconds, said", [
    ("crash", 30, r"it crashed the reader \(signal 11, SIGSEGV\)"),
    ("memory", 30, r"it used more than 256 MB of memory \(untrusted_files.memory_mb\)"),
    ("cpu", 1, r"it took more than 1 s \(untrusted_files.seconds\)"),
    ("hang", 1, r"it took more than 1 s \(untrusted_files.seconds\)"),
])
def test_a_reader_that_crashes_exhausts_or_hangs_is_stopped_within_its_bounds(tmp_path, reader_baseline, reader,
                                                                              seconds, said):
    """The child runs a module of this folder (its working directory) within the bounds: the
    harness gets a sentence, never the crash."""
    (tmp_path / f"hostile_{reader}.py").write_text(HOSTILE_READERS[reader])
    limits = ReaderLimits(memory_mb=256, seconds=seconds)
    with pytest.raises(BoundExceeded, match=said) as err:
        run_bounded(f"hostile_{reader}", [], limits, tmp_path)
    usage = err.value.usage
    assert usage.peak_rss_bytes <= reader_baseline + limits.memory_mb * (1 << 20)
    assert usage.wall_seconds <= seconds + 2 and usage.cpu_seconds <= seconds + 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"hostile_{reader}.py", "stderr.txt"]   # no core file


# --- checkpoints ----------------------------------------------------------------------------------------------

def checkpoint_zip(path: Path, data_pkl: bytes, records: dict[str, bytes] | None = None,
                   compressed: tuple[str, ...] = ()) -> Path:
    """A torch.save zip archive of a crafted data.pkl and storage records."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", data_pkl)
        archive.writestr("archive/byteorder", b"little")
        for key, data in (records or {}).items():
            archive.writestr(f"archive/data/{key}", data,
                             zipfile.ZIP_DEFLATED if key in compressed else zipfile.ZIP_STORED)
    return path


def legacy_stream(path: Path, data_pickle: bytes) -> Path:
    """The legacy torch.save stream's three header pickles, then ``data_pickle``."""
    headers = (0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True,
                                             "type_sizes": {"short": 2, "int": 4, "long": 8}})
    path.write_bytes(b"".join(pickle.dumps(h, protocol=2) for h in headers) + data_pickle)
    return path


def namespace_pickle(value: bytes) -> bytes:
    """``{'opt': argparse.Namespace(data_name=<value>)}``, ``value`` a pickled value without PROTO/STOP."""
    return (b"\x80\x02}X\x03\x00\x00\x00optcargparse\nNamespace\n)\x81}X\t\x00\x00\x00data_name" + value +
            b"sbs.")


def stored_pickle(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return zipfile.ZipFile(io.BytesIO(buffer.getvalue())).read("archive/data.pkl")


@pytest.mark.parametrize("make, match", [
    (lambda p: checkpoint_zip(p, b"\x80\x02}(X\x01\x00\x00\x00k" + nested_tuple(200_000) + b"u."),
     rf"containers nested deeper than {MAX_NESTING} levels"),
    (lambda p: checkpoint_zip(p, namespace_pickle(nested_tuple(200_000))),
     rf"containers nested deeper than {MAX_NESTING} levels"),                               # as opt.data_name
    (lambda p: checkpoint_zip(p, MEMO_BOMB), r"memo index 250000000"),
    (lambda p: checkpoint_zip(p, BYTEARRAY_GLOBAL), r"refused to load: it names builtins.bytearray, which a "
                                                    r"checkpoint of this kind never holds"),
    (lambda p: checkpoint_zip(p, stored_pickle({"w": torch.zeros(4)}), {"0": bytes(3 << 20)}, compressed=("0",)),
     r"its zip record 'archive/data/0' is compressed \(method 8\); torch writes every record stored"),
    (lambda p: torch.save({"w": torch.zeros(1, dtype=torch.float64).expand(40_000, 40_000)}, p) or p,
     r"tensor .* is an overlapping view \(shape \(40000, 40000\), stride \(0, 0\)\)"),
    (lambda p: torch.save({"w": torch.zeros(3, 3).to_sparse()}, p) or p,
     r"it names torch._utils._rebuild_sparse_tensor"),
    (lambda p: torch.save({"w": torch.zeros(2, dtype=torch.complex64)}, p) or p, r"it names torch.ComplexFloatStorage"),
    (lambda p: torch.save({"w": torch.zeros(2, device="meta")}, p) or p,
     r"it names torch._utils._rebuild_meta_tensor_no_storage"),
    (lambda p: checkpoint_zip(p, b"\x80\x02\x82\x01."), r"refused opcode EXT1 at byte 2"),
    (lambda p: legacy_stream(p, b"\x80\x04\x8d" + struct.pack("<Q", 1 << 30) + b"abc."),   # scanned in place
     r"not a readable PyTorch checkpoint \(ValueError: expected 1073741824 bytes in a unicodestring8"),
    (lambda p: checkpoint_zip(p, stored_pickle({"w": torch.zeros(4)}), {"0": bytes(8)}),
     r"storage record data/0 holds 8 bytes, but the pickle says 4 float32 elements"),
])
def test_a_checkpoint_that_would_crash_exhaust_or_mislead_is_one_line(tmp_path, reader_baseline, make, match):
    path = make(tmp_path / "model_best.pth.tar")
    assert path.stat().st_size < 4 << 20
    refused(lambda: load_checkpoint(path, ["argparse.Namespace"], LIMITS), rf"model_best.pth.tar: .*{match}",
            reader_baseline, folder=tmp_path)


def test_a_zip_record_named_outside_the_archive_is_refused(tmp_path, reader_baseline):
    path = tmp_path / "model_best.pth.tar"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", stored_pickle({"w": torch.zeros(1)}))
        archive.writestr("archive/../../etc/data/0", bytes(4))
    refused(lambda: load_checkpoint(path, (), LIMITS), r"zip record 'archive/../../etc/data/0' is named outside",
            reader_baseline)


def sgraf_checkpoint(tmp_path: Path, change) -> Path:
    ckpt = load_checkpoint(SGRAF, ["argparse.Namespace"], LIMITS)
    change(ckpt)
    path = tmp_path / "model_best.pth.tar"
    torch.save(ckpt, path)
    return path


def build_bomb(ckpt):
    ckpt["opt"].num_layers = 10 ** 6


@pytest.mark.parametrize("change, match", [
    (build_bomb, r"option 'num_layers' is 1000000, outside 1-4"),
    (lambda c: setattr(c["opt"], "no_imgnorm", torch.tensor([1, 0])), r"option 'no_imgnorm' is a Tensor, not a bool"),
    (lambda c: setattr(c["opt"], "embed_size", "8"), r"option 'embed_size' is str '8', not an int"),
    (lambda c: setattr(c["opt"], "bi_gru", 1), r"option 'bi_gru' is int 1, not a bool"),
    (lambda c: c["model"][0].update({"fc.weight": c["model"][0]["fc.weight"].long()}),
     r"tensor 'img_enc.fc.weight' is int64, but 'fc.weight' of the project's model is float32"),
    (lambda c: c["model"][0].update({"fc.weight": c["model"][0]["fc.weight"] > 0}), r"is bool, but 'fc.weight'"),
    (lambda c: c["model"][0].update({"fc.weight": c["model"][0]["fc.weight"].half()}), r"is float16, but 'fc.weight'"),
    (lambda c: c["model"][2].update({"\x1b[2J\x1b[31mowned": torch.zeros(1)}), r"e.g. 'sim_enc.\\x1b\[2J\\x1b\[31mowned'"),
    (lambda c: c.update(epoch="\x1b]0;owned\x07"), r"its 'epoch' is str '\\x1b\]0;owned\\x07', not an int"),
])
def test_a_checkpoint_whose_options_or_tensors_do_not_fit_is_refused_before_any_build(tmp_path, reader_baseline,
                                                                                       change, match):
    """Before any model is built from the options (10**6 GRU layers took minutes to build), and
    before any tensor is cast (an int64 or complex weight was cast silently); names from the file
    are printed escaped."""
    path = sgraf_checkpoint(tmp_path, change)
    base = api.experiment_config("sgraf", "flickr")["model"]
    refused(lambda: sgraf.import_checkpoint(path, base, REGIONS, LIMITS), rf"model_best.pth.tar: .*{match}",
            reader_baseline, folder=tmp_path)


def test_a_protocol_4_checkpoint_reads_as_torch_reads_it(tmp_path):
    """torch.save(pickle_protocol=4) names its globals by STACK_GLOBAL of strings it pushed."""
    original = torch.load(SGRAF, weights_only=False)   # the repository's own fixture
    path = tmp_path / "model_best.pth.tar"
    torch.save(original, path, pickle_protocol=4)
    loaded = load_checkpoint(path, ["argparse.Namespace"], LIMITS)
    assert vars(loaded["opt"]) == vars(original["opt"])
    for mine, theirs in zip(loaded["model"], original["model"]):
        assert list(mine) == list(theirs) and all(torch.equal(mine[k], theirs[k]) for k in mine)


# --- vocabulary JSON files --------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, match", [
    ("[" * 100_000 + "]" * 100_000, r"refused to load \(containers nested deeper than the interpreter's recursion"),
    ('{"idx": ' + "9" * 5000 + "}", r"refused to load \(an integer too long to read \(Exceeds the limit \(4300 "
                                    r"digits\)"),
    ('{"word2idx": ', r"not a readable vocabulary JSON \(ValueError: line 1 column 14"),
])
def test_a_vocabulary_json_that_would_exhaust_the_reader_is_one_line(tmp_path, reader_baseline, text, match):
    path = tmp_path / "f30k_precomp_vocab.json"
    path.write_text(text)
    refused(lambda: load_json(path, LIMITS), rf"f30k_precomp_vocab.json: {match}", reader_baseline, folder=tmp_path)


def with_tokenized_captions(tmp_path: Path) -> Path:
    """SGRAF's released vocabulary with one key more: a caption's tokens, chosen by the file."""
    data = json.loads(SGRAF_VOCAB.read_text())
    data["tokenized_captions"] = {"a dog runs": "<start> <unk>"}
    path = tmp_path / "f30k_precomp_vocab.json"
    path.write_text(json.dumps(data))
    return path


def test_a_released_vocabulary_never_decides_how_captions_are_read(tmp_path, reader_baseline):
    path = with_tokenized_captions(tmp_path)
    refused(lambda: sgraf.read_vocabulary(path, TOKENIZER, LIMITS),
            r"refused: it holds 'tokenized_captions' beside word2idx, idx2word and idx", reader_baseline)
    refused(lambda: vsrn.read_vocabulary(path, TOKENIZER, LIMITS), r"refused: it holds 'tokenized_captions'",
            reader_baseline)
    cfg = api.experiment_config("sgraf", "flickr")
    payload = DatasetPayload.from_json({"name": "flickr", "paths": {},
               "dataset": {"tokenizer": "nltk_line", "precomp": {"n_regions": 36, "feature_dim": 12}}})
    with pytest.raises(HarnessError, match="tokenized_captions"):
        import_released(payload, cfg, SGRAF, path, tmp_path / "run", limits=LIMITS)
    assert not (tmp_path / "run").exists()


def test_a_configured_vocabulary_gives_its_words_only(tmp_path):
    """A vocabulary from elsewhere (datasets.<name>.vocab) is used for its words: the captions are
    tokenised by the dataset's tokenizer, whatever the file says of them."""
    words = ["<pad>", "<start>", "<end>", "<unk>", "a", "dog", "runs"]
    path = tmp_path / "vocab.json"
    write_json(path, {"word2idx": {w: i for i, w in enumerate(words)}, "idx2word": dict(enumerate(words)),
                      "idx": len(words), "tokenized_captions": {"a dog runs": "<start> <unk>"}})
    vocab = Vocabulary.load(path, TOKENIZER)
    assert vocab.encode("a dog runs") == [1, 1, 3, 2]   # what the file would decide
    assert vocab.words_only().encode("a dog runs") == [1, 4, 5, 6, 2]


# --- the command a user runs ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def import_command(tmp_path_factory):
    """``python -m methods.import_released`` for SGRAF's fixture, with a checkpoint and a vocabulary
    of the caller's."""
    folder = tmp_path_factory.mktemp("import")
    payload = dataset_payload(api.harness_config(), "flickr")
    payload.dataset = {**payload.dataset, "tokenizer": "nltk_line", "precomp": {"n_regions": 36, "feature_dim": 12}}
    write_json(folder / "dataset.json", payload.to_json())
    write_json(folder / "experiment.json", api.experiment_config("sgraf", "flickr"))

    def run(checkpoint: Path, vocab: Path, run_dir: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "methods.import_released", "--dataset-config",
                               str(folder / "dataset.json"), "--experiment", str(folder / "experiment.json"),
                               "--checkpoint", str(checkpoint), "--vocab", str(vocab), "--run-dir", str(run_dir),
                               "--reader-memory-mb", str(LIMITS.memory_mb), "--reader-seconds", str(LIMITS.seconds)],
                              capture_output=True, text=True, timeout=120)
    return run


def test_the_import_command_refuses_each_kind_of_hostile_file_in_one_line(tmp_path, import_command):
    deep = tmp_path / "deep" / "model_best.pth.tar"
    deep.parent.mkdir()
    checkpoint_zip(deep, b"\x80\x02}(X\x01\x00\x00\x00k" + nested_tuple(200_000) + b"u.")
    bomb = sgraf_checkpoint(tmp_path, build_bomb)
    cases = [(deep, SGRAF_VOCAB, "containers nested deeper"), (bomb, SGRAF_VOCAB, "option 'num_layers' is 1000000"),
             (SGRAF, with_tokenized_captions(tmp_path), "'tokenized_captions'")]
    for checkpoint, vocab, said in cases:
        proc = import_command(checkpoint, vocab, tmp_path / "run")
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0], \
            proc.stderr
        assert not (tmp_path / "run").exists()
    proc = import_command(SGRAF, SGRAF_VOCAB, tmp_path / "run")   # the fixture itself imports
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["model.pt", "vocab.json"]


# --- legitimate files: as torch reads them, and imported as before --------------------------------------------

CHECKPOINTS = sorted(p.relative_to(FIXTURES).as_posix() for p in FIXTURES.glob("*/*.pth*"))


def same(a, b) -> bool:
    if isinstance(a, np.generic):   # a numpy scalar reads as the Python number it holds (methods.untrusted.numpy_scalars)
        return type(b) is type(a.item()) and a.item() == b
    if torch.is_tensor(a):
        return torch.is_tensor(b) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, argparse.Namespace):
        return isinstance(b, argparse.Namespace) and same(vars(a), vars(b))
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("name", CHECKPOINTS)
@pytest.mark.parametrize("layout", ["as released", "legacy"])
def test_a_released_checkpoint_reads_as_torch_load_reads_it(tmp_path, name, layout):
    """The bounded reader against torch.load(weights_only=True): the same values, tensors bit for
    bit, in the zip layout and in the legacy stream of PyTorch < 1.6 (the authors' 2017 files)."""
    path = FIXTURES / name
    with torch.serialization.safe_globals([argparse.Namespace, np.dtype, np._core.multiarray.scalar,
                                           *(type(np.dtype(c)) for c in ("f4", "f8"))]):
        theirs = torch.load(path, weights_only=True)
    if layout == "legacy":
        path = tmp_path / "old.pth.tar"
        torch.save(copy.deepcopy(theirs), path, _use_new_zipfile_serialization=False)
    assert same(theirs, load_checkpoint(path, ["argparse.Namespace"], LIMITS))


def state_digest(state: dict) -> str:
    digest = hashlib.sha256()
    for key, tensor in state.items():
        digest.update(key.encode())
        digest.update(str(tensor.dtype).encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


# digests of what each importer made of the fixtures before the bounded reader (commit 4a04307,
# whose loader was torch.load(weights_only=True)): state dicts, model configs, provenance, words
IMPORT_DIGESTS = json.loads((FIXTURES / "import_digests.json").read_text())
IMPORTS = [("sgraf", "sgraf", "flickr", REGIONS), ("vsepp", "vsepp", "flickr", {"features": {"resize": 256, "crop": 224}}),
           ("vsrn", "vsrn", "flickr", REGIONS), ("pvse", "set_embeddings_grid", "coco",
                                                 {"features": {"resize": 256, "crop": 224}})]


@pytest.mark.parametrize("code, method, dataset, dataset_cfg", IMPORTS)
def test_the_fixtures_import_byte_for_byte_as_before(monkeypatch, code, method, dataset, dataset_cfg):
    from methods.features import architectures
    from tests.test_released_vsepp import TINY_CHANNELS, tiny_resnet
    import torchvision

    monkeypatch.setattr(torchvision.models, "resnet152", tiny_resnet)   # the fixtures' tiny CNN (make_*_fixtures.py)
    monkeypatch.setitem(architectures.CHANNELS, "resnet152", TINY_CHANNELS)
    importer = importlib.import_module(f"methods.released.{code}")
    base = api.experiment_config(method, dataset)["model"]
    mine = [k for k in IMPORT_DIGESTS if k.startswith(f"{code}/")]
    assert mine
    for name in mine:
        if name.endswith((".pkl", ".json")):
            vocab = importer.read_vocabulary(FIXTURES / name, TOKENIZER, LIMITS)
            assert hashlib.sha256("\n".join(vocab.idx2word).encode()).hexdigest() == IMPORT_DIGESTS[name]
            continue
        released = importer.import_checkpoint(FIXTURES / name, base, dataset_cfg, LIMITS)
        expected = IMPORT_DIGESTS[name]
        assert state_digest(released.state_dict) == expected["state"], name
        assert hashlib.sha256(json.dumps(released.model_config, sort_keys=True).encode()).hexdigest() == \
            expected["config"]
        assert released.vocab_size == expected["vocab_size"] and released.image_shape == expected["image_shape"]
        assert json.loads(json.dumps(released.provenance, default=str)) == expected["provenance"]


class _Storage:
    """A storage as a 2017 torch.save names it: by a persistent id."""

    def __init__(self, key: str, values):
        self.key, self.values = key, values


class _OldTensor:
    """A tensor as PyTorch <= 0.3 pickled it: ``torch.FloatTensor()`` then BUILD with (storage,
    offset, size, stride)."""

    def __init__(self, storage: _Storage, offset: int, size: tuple, stride: tuple):
        self.state = (storage, offset, size, stride)


class _OldPickler(pickle.Pickler):
    tensor_class = torch.FloatTensor

    def persistent_id(self, obj):
        if isinstance(obj, _Storage):
            return ("storage", torch.FloatStorage, obj.key, "cuda:0", len(obj.values), None)
        return None

    def reducer_override(self, obj):
        if isinstance(obj, _OldTensor):
            return self.tensor_class, (), obj.state
        return NotImplemented


def old_checkpoint(path: Path, obj, storage: _Storage, tensor_class) -> Path:
    """``obj`` in the legacy stream of PyTorch <= 0.3 (torch/serialization.py of that time)."""
    stream = io.BytesIO()
    pickler = _OldPickler(stream, protocol=2)
    pickler.tensor_class = tensor_class
    pickler.dump(obj)
    pickle.dump([storage.key], stream, protocol=2)
    stream.write(struct.pack("<q", len(storage.values)) + struct.pack(f"<{len(storage.values)}f", *storage.values))
    return legacy_stream(path, stream.getvalue())


def test_a_checkpoint_of_pytorch_0_3_reads_as_torch_reads_it(tmp_path):
    """The legacy stream with legacy tensor classes (``torch.FloatTensor`` rebuilt by BUILD,
    storages by persistent ids), as the 2017 VSE++ runs were written: read as torch.load reads it
    (a transposed view and an offset view too). Their GPU runs name ``torch.cuda.FloatTensor``,
    which torch.load cannot rebuild without a GPU; the harness reads the same values."""
    values = [float(i) for i in range(12)]
    storage = _Storage("94117462424048", values)
    obj = {"epoch": 3, "model": [{"w": _OldTensor(storage, 0, (3, 4), (4, 1)), "t": _OldTensor(storage, 0, (4, 3), (1, 4)),
                                  "row": _OldTensor(storage, 8, (4,), (1,))}]}
    path = old_checkpoint(tmp_path / "model_best.pth.tar", obj, storage, torch.FloatTensor)
    theirs = torch.load(path, weights_only=True, map_location="cpu")
    mine = load_checkpoint(path, (), LIMITS)
    assert mine["epoch"] == theirs["epoch"] == 3
    for key in ("w", "t", "row"):
        assert torch.equal(mine["model"][0][key], theirs["model"][0][key]), key
    assert mine["model"][0]["row"].tolist() == [8.0, 9.0, 10.0, 11.0]
    gpu = load_checkpoint(old_checkpoint(tmp_path / "gpu.pth.tar", obj, storage, torch.cuda.FloatTensor), (), LIMITS)
    assert all(torch.equal(gpu["model"][0][k], mine["model"][0][k]) for k in mine["model"][0])
