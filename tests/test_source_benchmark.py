"""The side-by-side benchmark's loading of public code (methods/benchmarks/cross_attention_sources.py):
each source's evaluation imports its own folder's modules, not another source's of the same name;
the documented patches apply or name what they expected; stubbed modules give nothing."""
import pytest

from methods.benchmarks.cross_attention_sources import load_module, parse_sources
from methods.errors import HarnessError


def source(folder, score_value: int):
    folder.mkdir()
    (folder / "model.py").write_text(f"def xattn_score():\n    return {score_value}\n")
    (folder / "evaluation.py").write_text("from model import xattn_score\nfrom data import loader\n"
                                          "def shard(n):\n    return xattn_score(), (n-1)/2 + 1\n")
    return folder


def test_each_source_imports_its_own_model_module(tmp_path):
    a, b = source(tmp_path / "a", 1), source(tmp_path / "b", 2)
    patch = {"(n-1)/2 + 1": "(n-1)//2 + 1"}
    first = load_module("a_eval", a / "evaluation.py", patch, stubs=("data",))
    second = load_module("b_eval", b / "evaluation.py", stubs=("data",))
    assert first.shard(4) == (1, 2) and second.shard(4) == (2, 2.5)   # b unpatched: Python 3's / on ints
    assert first.loader is None                                       # the stub gives nothing
    with pytest.raises(HarnessError, match="the patch expects '/3'"):
        load_module("a_eval", a / "evaluation.py", {"/3": "//3"})


def test_a_source_folder_without_its_evaluation_is_one_line(tmp_path):
    with pytest.raises(HarnessError, match="holds no evaluation.py"):
        parse_sources([f"bfan={tmp_path}"])
    with pytest.raises(HarnessError, match="expected NAME=DIR with NAME one of bfan, imram, naaf, pfan"):
        parse_sources([f"scan={tmp_path}"])
