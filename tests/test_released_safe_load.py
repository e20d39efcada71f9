"""Released files are loaded without running code (methods.untrusted.safe_load): a pickle or a
checkpoint that names a callable is refused by name before anything in it runs; the classes an
importer allows become plain data, whatever pickle protocol (Python 2's too) wrote them; a
checkpoint reads as torch.load(weights_only=True) reads it; numpy scalars as the numbers they hold. Attacks on memory, time and the
process itself: tests/test_hostile_files.py."""
import argparse
import io
import os
import pickle
import re
import sys
import types

import numpy as np
import pytest
import torch

from methods.errors import HarnessError
from methods.untrusted.pickle_scan import MAX_NESTING
from methods.untrusted.safe_load import PickledObject, load_checkpoint, load_pickle
from methods.untrusted.unpickler import RestrictedUnpickler
from tests.records import READER_LIMITS as LIMITS


class Planted:
    """What an attacker ships: unpickling it would run a shell command that leaves a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture
def vocab_class(monkeypatch):
    """A stand-in for the authors' ``vocab.Vocabulary`` (VSE++ vocab.py), importable as they pickled it."""
    module = types.ModuleType("vocab")

    class Vocabulary:
        def __init__(self, words):
            self.word2idx = {w: i for i, w in enumerate(words)}
            self.idx2word = dict(enumerate(words))
            self.idx = len(words)

    Vocabulary.__module__, Vocabulary.__qualname__ = "vocab", "Vocabulary"
    module.Vocabulary = Vocabulary
    monkeypatch.setitem(sys.modules, "vocab", module)
    return Vocabulary


def test_a_planted_pickle_is_refused_by_name_and_never_runs(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "coco_vocab.pkl"
    path.write_bytes(pickle.dumps({"vocab": Planted(marker)}))
    with pytest.raises(HarnessError, match=r"coco_vocab.pkl: refused to load \(refused global (posix|nt).system") as err:
        load_pickle(path, {"vocab.Vocabulary"}, LIMITS)
    assert "nothing in it was run" in str(err.value) and not marker.exists()


def test_a_planted_checkpoint_is_refused_by_name_and_never_runs(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "model_best.pth.tar"
    torch.save({"model": [{"w": torch.zeros(2)}], "opt": Planted(marker)}, path)
    with pytest.raises(HarnessError, match="model_best.pth.tar: refused to load: it names (posix|nt).system"):
        load_checkpoint(path, [argparse.Namespace], LIMITS)
    assert not marker.exists()


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_an_allowed_vocabulary_object_becomes_plain_data(tmp_path, vocab_class, protocol):
    """Protocols 0-2 name copy_reg and __builtin__ as Python 2 wrote them; 3-5 Python 3's names."""
    words = ["<pad>", "<start>", "<end>", "<unk>", "café", "dog"]
    path = tmp_path / "vocab.pkl"
    path.write_bytes(pickle.dumps(vocab_class(words), protocol=protocol))
    loaded = load_pickle(path, {"vocab.Vocabulary"}, LIMITS)
    assert type(loaded) is not vocab_class and isinstance(loaded, PickledObject)
    assert loaded.cls == "vocab.Vocabulary"
    assert loaded.state == {"word2idx": {w: i for i, w in enumerate(words)}, "idx2word": dict(enumerate(words)),
                            "idx": len(words)}


def test_a_class_the_importer_did_not_allow_is_refused_even_if_harmless(tmp_path, vocab_class):
    path = tmp_path / "vocab.pkl"
    path.write_bytes(pickle.dumps(vocab_class(["a"])))
    with pytest.raises(HarnessError, match="refused global vocab.Vocabulary; allowed: plain data only"):
        load_pickle(path, set(), LIMITS)


def test_a_checkpoints_options_load_only_when_allowed(tmp_path):
    path = tmp_path / "model_best.pth.tar"
    torch.save({"epoch": 3, "model": [{"fc.weight": torch.ones(2, 3)}], "opt": argparse.Namespace(embed_size=2)}, path)
    with pytest.raises(HarnessError, match="it names argparse.Namespace"):
        load_checkpoint(path, (), LIMITS)
    ckpt = load_checkpoint(path, [argparse.Namespace], LIMITS)
    assert ckpt["opt"].embed_size == 2 and torch.equal(ckpt["model"][0]["fc.weight"], torch.ones(2, 3))


def test_a_legacy_format_checkpoint_loads_and_junk_is_one_line(tmp_path):
    legacy = tmp_path / "old.pth.tar"   # torch < 1.6 wrote this format (VSE++'s era)
    torch.save({"model": [{"w": torch.arange(3.0)}]}, legacy, _use_new_zipfile_serialization=False)
    assert torch.equal(load_checkpoint(legacy, (), LIMITS)["model"][0]["w"], torch.arange(3.0))
    junk = tmp_path / "junk.pth.tar"
    junk.write_bytes(b"<html>404</html>")
    with pytest.raises(HarnessError, match=r"junk.pth.tar: not a readable PyTorch checkpoint \(") as err:
        load_checkpoint(junk, (), LIMITS)
    assert "\n" not in str(err.value)
    with pytest.raises(HarnessError, match="released checkpoint not found"):
        load_checkpoint(tmp_path / "missing.pth.tar", (), LIMITS)


# Crafted pickles, one per way pickle can reach an object: every one is refused or unreadable, in
# one line, and the module's stand-ins are left as they were.
VOCAB = b"cvocab\nVocabulary\n"


@pytest.mark.parametrize("data, opcode", [
    (b"\x80\x02\x82\x01.", "EXT1"), (b"\x80\x02\x83\x01\x00.", "EXT2"), (b"\x80\x02\x84\x01\x00\x00\x00.", "EXT4"),
    (b"P1\n.", "PERSID"), (b"\x80\x02K\x01Q.", "BINPERSID"),
])
def test_opcodes_that_fetch_objects_without_naming_them_are_refused(tmp_path, data, opcode):
    """EXT* read copyreg's process-wide extension cache and PERSID a persistent id: neither goes
    through find_class, so both are refused before unpickling (even with an extension registered)."""
    import copyreg
    copyreg.add_extension("posix", "system", 1)
    try:
        path = tmp_path / "vocab.pkl"
        path.write_bytes(data)
        with pytest.raises(HarnessError, match=rf"refused to load \(refused opcode {opcode} at byte \d+;"):
            load_pickle(path, {"vocab.Vocabulary"}, LIMITS)
    finally:
        copyreg.remove_extension("posix", "system", 1)


@pytest.mark.parametrize("data, said", [
    (VOCAB + b".", r"it holds a _Sealed"),           # the allowed class itself, not an object of it
    (b"cbuiltins\nobject\n.", r"it holds a type"),
    (b"ccopyreg\n__newobj__\n.", r"it holds a StandIn"),
    (b"\x80\x02cbuiltins\nobject\n)\x81.", r"it holds an object"),   # NEWOBJ of object: not data
    (pickle.dumps({"a": bytearray(3)}, protocol=5), r"it holds a bytearray"),   # BYTEARRAY8: no global named
    (pickle.dumps([1j]), r"refused global builtins.complex"),
    (pickle.dumps({frozenset([1])}), r"it holds a set"),
])
def test_a_result_that_is_not_plain_data_is_refused(tmp_path, data, said):
    path = tmp_path / "vocab.pkl"
    path.write_bytes(data)
    with pytest.raises(HarnessError, match=rf"refused to load \({said}"):
        load_pickle(path, {"vocab.Vocabulary"}, LIMITS)


@pytest.mark.parametrize("data", [
    VOCAB + b"(N}X\x03\x00\x00\x00clsX\x01\x00\x00\x00xstb.",                   # BUILD sets an attribute of the class
    b"ccopyreg\n__newobj__\n(N}X\x08\x00\x00\x00__call__K\x01stb.",           # ... of a stand-in (slot state)
    b"ccopyreg\n__newobj__\n}X\x05\x00\x00\x00_callK\x01sb.",                 # ... of a stand-in (dict state)
    b"ccopyreg\n__newobj__\n(cbuiltins\nobject\ntR.",                          # __newobj__ of a class not allowed
    pickle.dumps({"a": [1, 2, 3]})[:-4],                                        # truncated
    b"\xff\xfe junk",
])
def test_a_pickle_that_misuses_what_it_may_name_is_unreadable_and_changes_nothing(tmp_path, data):
    """In the reader's process the stand-ins stay as they were (the unpickler itself, run here);
    through the bounded reader the file is one line."""
    before = {k: (type(v), getattr(v, "_call", None)) for k, v in RestrictedUnpickler.SAFE.items()}
    with pytest.raises((pickle.UnpicklingError, ValueError, EOFError, TypeError, AttributeError)):
        RestrictedUnpickler(io.BytesIO(data), {"vocab.Vocabulary"}).load()
    assert {k: (type(v), getattr(v, "_call", None)) for k, v in RestrictedUnpickler.SAFE.items()} == before
    path = tmp_path / "vocab.pkl"
    path.write_bytes(data)
    with pytest.raises(HarnessError, match=r"vocab.pkl: not a readable pickle \(") as err:
        load_pickle(path, {"vocab.Vocabulary"}, LIMITS)
    assert "\n" not in str(err.value)


def test_nesting_beyond_the_limit_is_refused_before_unpickling_and_shared_values_load(tmp_path):
    path = tmp_path / "deep.pkl"
    for depth, refused in ((MAX_NESTING, False), (MAX_NESTING + 1, True), (50_000, True)):
        path.write_bytes(b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b".")
        if refused:
            with pytest.raises(HarnessError, match=rf"refused to load \(containers nested deeper than {MAX_NESTING} "
                                                   rf"levels at byte \d+"):
                load_pickle(path, (), LIMITS)
            continue
        item, levels = load_pickle(path, (), LIMITS), 1
        while item:
            item, levels = item[0], levels + 1
        assert levels == depth
    shared = ["w"]
    path.write_bytes(pickle.dumps({"a": shared, "b": shared}))
    assert load_pickle(path, (), LIMITS) == {"a": ["w"], "b": ["w"]}
    cyclic = []
    cyclic.append(cyclic)
    path.write_bytes(pickle.dumps({"c": cyclic}))
    with pytest.raises(HarnessError, match=r"refused to load \(it holds a structure that contains itself"):
        load_pickle(path, (), LIMITS)


def test_a_checkpoint_that_is_not_one_is_one_line(tmp_path):
    path = tmp_path / "model_best.pth.tar"
    torch.save({"w": torch.zeros(3)}, path)
    path.write_bytes(path.read_bytes()[:200])   # a cut download
    with pytest.raises(HarnessError, match=r"model_best.pth.tar: not a readable PyTorch checkpoint \(") as err:
        load_checkpoint(path, (), LIMITS)
    assert "\n" not in str(err.value)


def test_one_module_saved_under_two_names_loads_once_and_distinct_views_may_not_amplify(tmp_path):
    """A module registered twice (VSE-infinity's ResnetFeatureExtractor: its CNN as ``resnet`` and
    again as ``base`` / ``top``) is stored once and viewed twice: it reads as torch.load reads it,
    each tensor once. Distinct views of one storage that together read more than the file are refused."""
    conv = torch.nn.Conv2d(3, 4, 3)
    twice = torch.nn.Module()
    twice.resnet, twice.base = torch.nn.Sequential(conv), torch.nn.Sequential(conv)
    path = tmp_path / "shared.pth"
    torch.save({"model": [twice.state_dict()]}, path)
    loaded = load_checkpoint(path, (), LIMITS)["model"][0]
    theirs = torch.load(path, weights_only=True)["model"][0]
    assert list(loaded) == list(theirs) == ["resnet.0.weight", "resnet.0.bias", "base.0.weight", "base.0.bias"]
    assert all(torch.equal(loaded[k], theirs[k]) for k in theirs)
    assert loaded["resnet.0.weight"] is loaded["base.0.weight"]   # read once, one tensor: no memory doubled
    storage = torch.arange(20_000, dtype=torch.float32)
    torch.save({f"v{i}": storage[i:] for i in range(40)}, path)   # 40 different views of one 80 kB storage
    with pytest.raises(HarnessError, match=r"its 40 distinct tensors would read 3196880 bytes, more than the file's"):
        load_checkpoint(path, (), LIMITS)


NUMPY_SCALARS = {"f8": np.float64(0.1), "f4": np.float32(-2.5e-3), "f2": np.float16(3.5), "i8": np.int64(-2 ** 40),
                 "i4": np.int32(7), "i2": np.int16(-9), "i1": np.int8(-128), "u8": np.uint64(2 ** 62 + 5),
                 "u4": np.uint32(4_000_000_000), "u2": np.uint16(65535), "u1": np.uint8(200),
                 "b1": np.bool_(True), "f8 big-endian": np.array([1e300], dtype=">f8")[0],
                 "mean": np.mean([1.0, 2.0, 4.0])}


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_numpy_scalars_read_as_the_python_numbers_numpy_holds(tmp_path, protocol):
    """A checkpoint's scores of np.mean and friends (PCME saves its evaluator's): numpy's own .item() is the oracle."""
    path = tmp_path / "scores.pkl"
    path.write_bytes(pickle.dumps({"scores": NUMPY_SCALARS}, protocol=protocol))
    loaded = load_pickle(path, (), LIMITS)["scores"]
    assert loaded == {k: v.item() for k, v in NUMPY_SCALARS.items()}
    assert all(type(loaded[k]) is type(v.item()) for k, v in NUMPY_SCALARS.items())


def test_a_checkpoint_with_numpy_scalars_in_its_metadata_loads(tmp_path):
    path = tmp_path / "model_last.pth"
    torch.save({"model": {"w": torch.arange(3.0)}, "metadata": {"scores": {"rsum": np.float64(412.5)},
                                                                "epoch": np.int64(30)}}, path)
    loaded = load_checkpoint(path, (), LIMITS)
    assert loaded["metadata"] == {"scores": {"rsum": 412.5}, "epoch": 30}
    assert type(loaded["metadata"]["epoch"]) is int and torch.equal(loaded["model"]["w"], torch.arange(3.0))


def _scalar_pickle(dtype_args: bytes, state: bytes, data: bytes, codec: bytes = b"latin1") -> bytes:
    """A protocol-2 pickle of numpy.core.multiarray.scalar(numpy.dtype(...) BUILD state, _codecs.encode(data, codec))."""
    return (b"\x80\x02cnumpy.core.multiarray\nscalar\ncnumpy\ndtype\n" + dtype_args + b"\x87R" + state + b"b"
            b"c_codecs\nencode\nX" + len(data).to_bytes(4, "little") + data
            + b"X" + len(codec).to_bytes(4, "little") + codec + b"\x86R\x86R.")


PLAIN_STATE = b"(K\x03X\x01\x00\x00\x00<NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00t"


def test_the_hand_written_scalar_pickle_reads_as_numpy_reads_it(tmp_path):
    """The crafted layout of the refusals below, checked against numpy itself first."""
    good = _scalar_pickle(b"X\x02\x00\x00\x00f8\x89\x88", PLAIN_STATE, np.float64(0.75).tobytes().decode("latin1")
                          .encode("utf-8"))
    assert pickle.loads(good) == np.float64(0.75)
    path = tmp_path / "good.pkl"
    path.write_bytes(good)
    assert load_pickle(path, (), LIMITS) == 0.75


@pytest.mark.parametrize("what, content, refusal", [
    ("array", pickle.dumps(np.arange(3), protocol=2), "refused global numpy._core.multiarray._reconstruct"),
    ("string dtype", pickle.dumps(np.str_("ab"), protocol=2), "refused numpy dtype 'U2'"),
    ("object dtype", _scalar_pickle(b"X\x02\x00\x00\x00O8\x89\x88", PLAIN_STATE, b"\x00" * 8),
     "refused numpy dtype 'O8'"),
    ("structured dtype", _scalar_pickle(b"X\x02\x00\x00\x00f8\x89\x88",
                                        b"(K\x03X\x01\x00\x00\x00<N(X\x01\x00\x00\x00atNJ\xff\xff\xff\xffJ\xff\xff"
                                        b"\xff\xffK\x00t", b"\x00" * 8), "a structured or sub-array dtype"),
    ("bytes of another length", _scalar_pickle(b"X\x02\x00\x00\x00f8\x89\x88", PLAIN_STATE, b"\x00" * 4),
     "refused numpy scalar of dtype f8 with 4 bytes"),
    ("another codec", _scalar_pickle(b"X\x02\x00\x00\x00f8\x89\x88", PLAIN_STATE, b"\x00" * 8, b"rot13"),
     "refused _codecs.encode of str to 'rot13'"),
])
def test_numpy_content_other_than_scalars_of_numbers_is_refused_by_name(tmp_path, what, content, refusal):
    path = tmp_path / "scores.pkl"
    path.write_bytes(content)
    with pytest.raises(HarnessError, match=re.escape(refusal)):
        load_pickle(path, (), LIMITS)
