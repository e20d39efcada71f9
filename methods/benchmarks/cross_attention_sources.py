"""Benchmark (not a test): a cross-attention model's full score matrix against its public code's own
evaluation loop, side by side in one process, on the same encodings and weights.

    python -m methods.benchmarks.cross_attention_sources --source bfan=/path/to/BFAN --source imram=/path/to/IMRAM
    python -m methods.benchmarks.cross_attention_sources --source bfan=/path/to/BFAN --images 100 --captions 500

``--source NAME=DIR`` names a clone of the model's public repository (the project never contains its
code): ``bfan`` CrossmodalGroup/BFAN (``evaluation.shard_xattn`` over ``model.xattn_score``, BFAN-equal,
lambda 20); ``imram`` HuiChen24/IMRAM (``evaluation.shard_xattn`` of Full-IMRAM, 3 steps, lambda 9,
over its ``SCAN`` model's gated memories, whose weights are copied from the harness's model); ``naaf``
CrossmodalGroup/NAAF (``evaluation.shard_xattn`` over ``model.xattn_score_test``: the intra-modal
relation on, a safe threshold of 0.05, lambda 20); ``pfan`` HaoYang0123/Position-Focused-Attention-Network
(``evaluation.shard_xattn_t2i``, PFAN's t-i scoring, lambda 9; the position feature is part of the
image encoding, not of the scoring).

Both score the same random unit-length encodings at the papers' sizes (36 regions, 1,024-d, caption
lengths uniform in 8-30, padded to the longest as the sources' encode_data stores them), in the
source's evaluation precision (BFAN, NAAF, PFAN: the float64 arrays their encode_data fills; IMRAM: float32). The
harness scores in length-sorted blocks (``score_matrix``), the source its 128 x 128 shards with a loop
over captions. The two matrices must agree (max |difference| printed, ≤ 1e-5 asserted); then each is
timed ``--repeats`` times, interleaved, after one warm-up of each: the median seconds and the ratio,
with the spread of the per-repeat ratios. Interleaved with them, the floor: the region x word cosines
alone in the harness's blocks, the one product every pair needs (``cosine_floor``); the source's time
over it bounds the ratio any scoring could reach on the machine.

The sources are run as they are but for the smallest patches that let them run on this torch and a
CPU, listed in the output: ``.cuda()`` returns the tensor itself on a CPU run (both sources move
each shard to the GPU), and BFAN's Python 2 shard count (``/`` on ints) is an integer division.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from methods.errors import HarnessError
from methods.models.bfan import BFAN
from methods.models.base import CrossAttentionModel
from methods.models.cross_attention import (PackedWordFeatures, RegionFeatures, WordFeatures, region_word_cosines,
                                            score_in_blocks)
from methods.models.imram import IMRAM
from methods.models.naaf import NAAF
from methods.models.pfan import PFAN
from methods.models.text import GRUTextEncoder
from methods.runtime import resolve_device

REGIONS, DIM, MIN_WORDS, MAX_WORDS = 36, 1024, 8, 30
TOLERANCE = 1e-5
# BFAN's and PFAN's shard loops count shards with Python 2's integer '/'
PYTHON2_SHARD_COUNTS = {"n_im_shard = (len(images)-1)/shard_size + 1": "n_im_shard = (len(images)-1)//shard_size + 1",
                        "n_cap_shard = (len(captions)-1)/shard_size + 1": "n_cap_shard = (len(captions)-1)//shard_size + 1"}


@dataclass
class Side:
    """One scorer of the comparison: a callable giving the (images, captions) float64 numpy matrix."""
    name: str
    score: Callable[[], np.ndarray]


def cosine_floor(model: CrossAttentionModel, img: RegionFeatures, txt: PackedWordFeatures) -> Callable[[], None]:
    """The work no scoring of these models avoids: every region x word cosine (one D-deep product per
    region, word and pair), here alone, in the model's own blocks and evaluation dtype. The source's
    time over this one's bounds how much faster than the source any scoring can be on this machine."""
    if model.evaluation_dtype == "float64":
        img, txt = img.double(), txt.double()

    def cosines_only(block: RegionFeatures, cap: WordFeatures) -> torch.Tensor:
        region_word_cosines(block.regions, cap.words)
        return block.regions.new_zeros(len(block), len(cap))

    def run() -> None:
        with torch.no_grad():
            score_in_blocks(cosines_only, img, txt, model.pair_elements, model.block_elements, model.scoring_image_block)
    return run


def load_module(name: str, path: Path, replacements: dict[str, str] | None = None,
                stubs: tuple[str, ...] = ()) -> types.ModuleType:
    """The module at ``path``, importing its own folder's modules (``model``, ``data``, ...) and not
    another source's of the same name, with each listed text replacement applied to its source first
    and the modules named in ``stubs`` replaced by empty ones (the documented patches)."""
    text = path.read_text()
    for old, new in (replacements or {}).items():
        if old not in text:
            raise HarnessError(f"{path}: the patch expects '{old}', which the file does not hold (another commit?)")
        text = text.replace(old, new)
    local = {p.stem for p in path.parent.glob("*.py")}
    for other in local & set(sys.modules):   # a module of that name from another source folder
        del sys.modules[other]
    for stub in stubs:
        sys.modules[stub] = StubModule(stub)
    sys.path.insert(0, str(path.parent))
    try:
        module = types.ModuleType(name)
        module.__file__ = str(path)
        exec(compile(text, str(path), "exec"), module.__dict__)
    finally:
        sys.path.remove(str(path.parent))
        for mine in local & set(sys.modules):   # its functions keep them; the next source imports its own
            del sys.modules[mine]
    return module


class StubModule(types.ModuleType):
    """A module whose every attribute is None: stands in for a source module the scoring never calls."""

    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return None


@contextlib.contextmanager
def cuda_is_the_cpu(device: torch.device):
    """On a CPU run, ``Tensor.cuda()`` returns the tensor (the sources move every shard to the GPU)."""
    if device.type == "cuda":
        yield
        return
    original = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    try:
        yield
    finally:
        torch.Tensor.cuda = original


def encodings(n_images: int, n_captions: int, seed: int, dtype: torch.dtype, device: torch.device):
    """Unit-length regions (I, R, D) and words (C, L, D) zero beyond each caption's length, with lengths."""
    g = torch.Generator().manual_seed(seed)
    regions = torch.nn.functional.normalize(torch.randn(n_images, REGIONS, DIM, generator=g), dim=-1)
    lengths = torch.randint(MIN_WORDS, MAX_WORDS + 1, (n_captions,), generator=g)
    words = torch.nn.functional.normalize(torch.randn(n_captions, int(lengths.max()), DIM, generator=g), dim=-1)
    words = words * (torch.arange(words.shape[1])[None, :] < lengths[:, None])[..., None]
    return regions.to(device, dtype), words.to(device, dtype), lengths


@dataclass
class SharedInputs:
    """The same encodings on both sides: the harness's feature sets and the source's numpy arrays (in
    the dtype its encode_data stores them) with the caption lengths."""
    img: RegionFeatures
    txt: PackedWordFeatures
    images: np.ndarray
    captions: np.ndarray
    lengths: list[int]


def shared_inputs(args, device: torch.device, source_dtype: torch.dtype) -> SharedInputs:
    regions, words, lengths = encodings(args.images, args.captions, args.seed, torch.float32, device)
    return SharedInputs(RegionFeatures(regions, regions.new_zeros(len(regions), 0)),
                        WordFeatures(words, lengths.to(device), words.new_zeros(len(words), 0)).packed(),
                        regions.to(source_dtype).cpu().numpy(), words.to(source_dtype).cpu().numpy(), lengths.tolist())


def bfan_sides(source: Path, args, device: torch.device) -> tuple[Side, Side, Callable[[], None], list[str]]:
    evaluation = load_module("bfan_source_evaluation", source / "evaluation.py", PYTHON2_SHARD_COUNTS)
    model = BFAN(DIM, REGIONS, DIM, GRUTextEncoder(10, 8, DIM, bidirectional=True), focal="equal",
                 lambda_softmax=20.0, evaluation_dtype="float64").to(device).eval()
    opt = types.SimpleNamespace(lambda_softmax=20.0, focal_type="equal")
    x = shared_inputs(args, device, torch.float64)   # encode_data's float64 arrays of the float32 encodings

    def theirs() -> np.ndarray:
        with torch.no_grad(), cuda_is_the_cpu(device), contextlib.redirect_stdout(io.StringIO()):
            return evaluation.shard_xattn(x.images, x.captions, x.lengths, opt, shard_size=128)

    def ours() -> np.ndarray:
        with torch.no_grad():
            return model.score_matrix(x.img, x.txt).double().cpu().numpy()
    return Side("harness", ours), Side("CrossmodalGroup/BFAN", theirs), cosine_floor(model, x.img, x.txt), [
        "evaluation.py shard_xattn: '/' -> '//' in the two shard counts (Python 2 integer division)",
        "Tensor.cuda() is the identity on a CPU run"]


def imram_sides(source: Path, args, device: torch.device) -> tuple[Side, Side, Callable[[], None], list[str]]:
    source_model = load_module("imram_source_model", source / "model.py")
    evaluation = load_module("imram_source_evaluation", source / "evaluation.py")
    steps, lam = 3, 9.0
    torch.manual_seed(args.seed)
    ours_model = IMRAM(DIM, REGIONS, DIM, "full", steps, lam, GRUTextEncoder(10, 8, DIM, bidirectional=True))
    opt = types.SimpleNamespace(data_name="f30k_precomp", img_dim=DIM, embed_size=DIM, precomp_enc_type="basic",
                                no_imgnorm=False, vocab_size=10, word_dim=8, num_layers=1, bi_gru=True,
                                no_txtnorm=False, raw_feature_norm="clipped_l2norm", lambda_softmax=lam,
                                iteration_step=steps, model_mode="full_IMRAM", no_IMRAM_norm=True)
    with contextlib.redirect_stdout(io.StringIO()):
        their_model = source_model.SCAN(opt)
    with torch.no_grad():   # the same gated memories: the only weights the scoring reads
        for direction, memory in ours_model.memory.items():
            for part in ("linear", "gate"):
                getattr(their_model, f"{part}_{direction}").weight.copy_(getattr(memory, part).weight)
                getattr(their_model, f"{part}_{direction}").bias.copy_(getattr(memory, part).bias)
    ours_model.to(device).eval()
    their_model.to(device).eval()
    x = shared_inputs(args, device, torch.float32)
    unused_fc, unused_ht = x.images.mean(axis=1), x.captions.mean(axis=1)   # the shard loop passes them; scoring ignores them

    def theirs() -> np.ndarray:
        with torch.no_grad(), cuda_is_the_cpu(device), contextlib.redirect_stdout(io.StringIO()):
            return evaluation.shard_xattn(their_model, unused_fc, x.images, unused_ht, x.captions, x.lengths, opt,
                                          shard_size=128)

    def ours() -> np.ndarray:
        with torch.no_grad():
            return ours_model.score_matrix(x.img, x.txt).double().cpu().numpy()
    return (Side("harness", ours), Side("HuiChen24/IMRAM", theirs), cosine_floor(ours_model, x.img, x.txt),
            ["Tensor.cuda() is the identity on a CPU run"])


def naaf_sides(source: Path, args, device: torch.device) -> tuple[Side, Side, Callable[[], None], list[str]]:
    evaluation = load_module("naaf_source_evaluation", source / "evaluation.py")
    safe_threshold = 0.05   # a mined safe threshold (the state evaluation scores with)
    model = NAAF(DIM, REGIONS, DIM, GRUTextEncoder(10, 8, DIM, bidirectional=True), lambda_softmax=20.0,
                 evaluation_dtype="float64").to(device).eval()
    model.safe_threshold.fill_(safe_threshold)
    opt = types.SimpleNamespace(lambda_softmax=20.0, thres_safe=safe_threshold, using_intra_info=True)
    x = shared_inputs(args, device, torch.float64)

    def theirs() -> np.ndarray:
        with torch.no_grad(), cuda_is_the_cpu(device), contextlib.redirect_stdout(io.StringIO()):
            return evaluation.shard_xattn(x.images, x.captions, x.lengths, opt, shard_size=128)

    def ours() -> np.ndarray:
        with torch.no_grad():
            return model.score_matrix(x.img, x.txt).double().cpu().numpy()
    return (Side("harness", ours), Side("CrossmodalGroup/NAAF", theirs), cosine_floor(model, x.img, x.txt),
            ["Tensor.cuda() is the identity on a CPU run"])


def pfan_sides(source: Path, args, device: torch.device) -> tuple[Side, Side, Callable[[], None], list[str]]:
    # data.py and vocab.py are Python 2 (print statements); the shard loop calls neither
    evaluation = load_module("pfan_source_evaluation", source / "evaluation.py", PYTHON2_SHARD_COUNTS,
                             stubs=("data", "vocab"))
    similarity = {"direction": "t2i", "aggregation": "avg", "lambda_softmax": 9.0}
    model = PFAN(DIM, REGIONS, DIM, GRUTextEncoder(10, 8, DIM, bidirectional=True), similarity,
                 evaluation_dtype="float64").to(device).eval()
    opt = types.SimpleNamespace(lambda_softmax=9.0, agg_func="Mean", raw_feature_norm="clipped_l2norm",
                                lambda_lse=6.0, cross_attn="t2i")
    x = shared_inputs(args, device, torch.float64)

    def theirs() -> np.ndarray:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            return evaluation.shard_xattn_t2i(x.images, x.captions, x.lengths, opt, shard_size=128)

    def ours() -> np.ndarray:
        with torch.no_grad():
            return model.score_matrix(x.img, x.txt).double().cpu().numpy()
    return Side("harness", ours), Side("HaoYang0123/Position-Focused-Attention-Network", theirs), cosine_floor(
        model, x.img, x.txt), [
        "evaluation.py shard_xattn_t2i: '/' -> '//' in the two shard counts (Python 2 integer division)",
        "data.py and vocab.py (Python 2 print statements) replaced by empty modules: the shard loop uses neither"]


SOURCES = {"bfan": bfan_sides, "imram": imram_sides, "naaf": naaf_sides, "pfan": pfan_sides}


def timed(side: Side) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    scores = side.score()
    return time.perf_counter() - start, scores


def compare(name: str, source: Path, args, device: torch.device) -> dict:
    ours, theirs, floor, patches = SOURCES[name](source, args, device)
    (_, a), (_, b) = timed(ours), timed(theirs)   # warm-up, and the agreement check
    difference = float(np.abs(a - b).max())
    if not difference <= TOLERANCE:
        raise HarnessError(f"{name}: the harness's scores differ from {theirs.name}'s by {difference:.3g} "
                           f"(> {TOLERANCE:g}): not the same function, nothing timed")
    floor()
    times = {"ours": [], "theirs": [], "floor": []}
    for _ in range(args.repeats):   # interleaved, so that a slower spell of the machine hits all three
        times["ours"].append(timed(ours)[0])
        times["theirs"].append(timed(theirs)[0])
        start = time.perf_counter()
        floor()
        times["floor"].append(time.perf_counter() - start)
    ratios = [t / o for o, t in zip(times["ours"], times["theirs"])]
    return {"model": name, "source": theirs.name, "difference": difference, "patches": patches,
            "ours_s": statistics.median(times["ours"]), "theirs_s": statistics.median(times["theirs"]),
            "floor_s": statistics.median(times["floor"]),
            "bound": statistics.median([t / f for f, t in zip(times["floor"], times["theirs"])]),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}


def parse_sources(items: list[str]) -> dict[str, Path]:
    sources = {}
    for item in items:
        name, _, folder = item.partition("=")
        if name not in SOURCES or not folder:
            raise HarnessError(f"--source {item!r}: expected NAME=DIR with NAME one of {', '.join(SOURCES)}")
        if not Path(folder, "evaluation.py").is_file():
            raise HarnessError(f"--source {item!r}: {folder} holds no evaluation.py (a clone of the model's repository?)")
        sources[name] = Path(folder).resolve()
    return sources


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--images", type=int, default=100)
    parser.add_argument("--captions", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    args = parser.parse_args(argv)
    sources = parse_sources(args.source)
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"{args.images} images x {args.captions} captions, {REGIONS} regions x {DIM}-d, lengths "
          f"{MIN_WORDS}-{MAX_WORDS}; {where}; torch {torch.__version__}; median of {args.repeats} interleaved repeats")
    for name, folder in sources.items():
        r = compare(name, folder, args, device)
        print(f"{name}: harness {r['ours_s']:.3f} s, {r['source']} {r['theirs_s']:.3f} s: {r['ratio']:.1f}x faster "
              f"(per-repeat {r['ratio_min']:.1f}-{r['ratio_max']:.1f}x); max |score difference| {r['difference']:.2e}")
        extra = " (IMRAM's per-pair memory products, W_q times each updated memory, come on top)" if name == "imram" else ""
        print(f"  floor: the cosines alone {r['floor_s']:.3f} s, so no scoring is more than {r['bound']:.1f}x the source "
              f"here{extra}")
        for patch in r["patches"]:
            print(f"  patch: {patch}")


if __name__ == "__main__":
    main()
