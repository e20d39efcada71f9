"""Benchmark (not a test): time whole-split score matrices of the set-embedding similarities
(smooth Chamfer, Chamfer, MIL, match probability) at the papers' evaluation sizes.

    python -m methods.benchmarks.set_similarity                              # CUDA when present, else CPU
    python -m methods.benchmarks.set_similarity --device cpu --threads 2 --cases f30k_val
    python -m methods.benchmarks.set_similarity --device both --cases coco5k --similarities smooth_chamfer
    python -m methods.benchmarks.set_similarity --device cpu --json results/set_similarity_cpu.json

Cases: ``coco5k``, 5,000 image sets x 25,000 caption sets (COCO 5K test); ``f30k_val``, 1,000 x
5,000 (Flickr30K validation). Each set holds K = 4 random unit elements of D = 1024 (l2-normalised
randn, fixed seed; ``--set-size``, ``--dim``), fp32 (no TF32 on CUDA). The timed part is what
evaluation does after encoding: ``set_score_matrix`` with the model's per-device block budget
(``methods.models.set_embedding.BLOCK_ELEMENTS``; ``--block-elements`` overrides it), which
returns the matrix on the CPU. For ``f30k_val`` it also times top-10 retrieval both ways
(``torch.topk`` over the returned matrix and its transpose) after the scores, comparable with
Kim, Kim, Kwak (CVPR 2023, appendix B.1): 168 ms for similarity + top-10 retrieval on Flickr30K
validation on a GPU, SCAN 198,121 ms. Prints seconds and pairs/s (the best of ``--repeats``
timed runs, after ``--warmup`` untimed ones) and peak memory: CUDA's max_memory_allocated per
run, on the CPU the process's peak resident set so far (it never decreases).
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from methods.models.set_embedding import BLOCK_ELEMENTS
from methods.models.set_similarity import set_score_matrix, set_similarity
from methods.runtime import exact_fp32, resolve_device

# name -> (image sets, caption sets, what it stands for)
CASES = {"coco5k": (5000, 25000, "COCO 5K test"), "f30k_val": (1000, 5000, "Flickr30K validation")}
TOPK_CASES = {"f30k_val"}   # score + top-k retrieval both ways is timed as well
# the parameters the set-embedding configs give them (config/methods/set_embeddings.yaml)
SIMILARITIES = {"smooth_chamfer": {"alpha": 16.0}, "chamfer": {}, "mil": {}, "mp": {"scale": 1.0, "shift": 0.0}}
PAPER_REFERENCE = ("paper (Kim, Kim, Kwak, CVPR 2023, app. B.1), Flickr30K val on a GPU: "
                   "similarity + top-10 retrieval 168 ms; SCAN 198,121 ms")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def unit_sets(n: int, k: int, d: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    return F.normalize(torch.randn(n, k, d, generator=generator), dim=-1).to(device)


def with_progress(similarity: Callable, n_blocks: int, label: str, every_s: float) -> Callable:
    """``similarity`` unchanged, printing how many blocks are done every ``every_s`` seconds (0: never)."""
    if every_s <= 0:
        return similarity
    state = {"done": 0, "start": time.perf_counter(), "last": time.perf_counter()}

    def wrapped(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = similarity(x, y)
        state["done"] += 1
        now = time.perf_counter()
        if now - state["last"] >= every_s:
            state["last"] = now
            print(f"      {label}: {state['done']}/{n_blocks} blocks, {now - state['start']:.0f} s", flush=True)
        return out
    return wrapped


def count_blocks(n: int, k: int, m: int, l: int, block_elements: int) -> int:
    """How many ``similarity`` calls ``set_score_matrix`` makes (its blocking, for progress lines)."""
    per_image = k * m * l
    if per_image <= block_elements:
        step = max(1, block_elements // per_image)
        return -(-n // step)
    text_step = max(1, block_elements // (k * l))
    return n * -(-m // text_step)


def peak_memory_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2 ** 30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2 ** 30   # KiB on Linux


@torch.no_grad()
def run(case: str, name: str, img: torch.Tensor, txt: torch.Tensor, device: torch.device, block_elements: int,
        repeats: int, warmup: int, topk: int, progress_s: float) -> dict:
    n, m = img.shape[0], txt.shape[0]
    similarity = set_similarity(name, SIMILARITIES[name])
    n_blocks = count_blocks(n, img.shape[1], m, txt.shape[1], block_elements)
    retrieval = case in TOPK_CASES
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    score_times, topk_times, scores = [], [], None
    for i in range(warmup + repeats):
        timed = i >= warmup
        label = f"{case} {name} {'repeat ' + str(i - warmup + 1) if timed else 'warm-up'}"
        scores = None   # free the previous matrix before the next one is built
        fn = with_progress(similarity, n_blocks, label, progress_s)
        synchronize(device)
        t0 = time.perf_counter()
        scores = set_score_matrix(fn, img, txt, block_elements)
        synchronize(device)
        t1 = time.perf_counter()
        if retrieval:
            i2t = torch.topk(scores, min(topk, m), dim=1).indices
            t2i = torch.topk(scores.t(), min(topk, n), dim=1).indices
            synchronize(scores.device)
            assert i2t.shape == (n, min(topk, m)) and t2i.shape == (m, min(topk, n))
        t2 = time.perf_counter()
        if timed:
            score_times.append(t1 - t0)
            topk_times.append(t2 - t1)
        extra = f", + top-{topk} both ways {t2 - t1:.3f} s" if retrieval else ""
        print(f"    {label}: scores {t1 - t0:.3f} s{extra}", flush=True)
    assert scores.shape == (n, m) and torch.isfinite(scores).all()
    best = min(score_times)
    total = min(s + t for s, t in zip(score_times, topk_times)) if retrieval else None
    return {"case": case, "similarity": name, "params": SIMILARITIES[name], "images": n, "captions": m,
            "set_size": img.shape[1], "dim": img.shape[2], "block_elements": block_elements, "blocks": n_blocks,
            "score_s": best, "score_s_all": score_times, "pairs_per_s": n * m / best,
            "topk": topk if retrieval else None, "topk_s": min(topk_times) if retrieval else None,
            "score_topk_s": total, "peak_gib": peak_memory_gib(device),
            "peak_kind": "cuda max_memory_allocated" if device.type == "cuda" else "process peak RSS",
            "max_abs_diff_vs_cpu": agreement_with_cpu(name, img, txt, scores, device)}


def agreement_with_cpu(name: str, img: torch.Tensor, txt: torch.Tensor, scores: torch.Tensor,
                       device: torch.device, n_images: int = 20, n_captions: int = 200) -> float | None:
    """On CUDA: max |score - CPU fp32 score| on a corner of the matrix (checks the device path)."""
    if device.type == "cpu":
        return None
    reference = set_similarity(name, SIMILARITIES[name])(img[:n_images].cpu(), txt[:n_captions].cpu())
    return (scores[:n_images, :n_captions].float().cpu() - reference).abs().max().item()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU, {torch.get_num_threads()} threads"


def devices(setting: str) -> list[torch.device]:
    if setting != "both":
        return [resolve_device(setting)]
    cuda = resolve_device("auto")   # CUDA when available
    if cuda.type != "cuda":
        print("--device both: no GPU visible, CPU only")
        return [torch.device("cpu")]
    return [torch.device("cpu"), cuda]


def table(results: list[dict]) -> str:
    head = (f"{'case':<9} {'similarity':<15} {'sets (img x txt)':>17} {'scores s':>10} {'pairs/s':>15} "
            f"{'+top-k s':>9} {'score+top-k':>12} {'peak GiB':>9}")
    lines = [head, "-" * len(head)]
    for r in results:
        topk = f"{r['topk_s']:.3f}" if r["topk_s"] is not None else "-"
        total = f"{r['score_topk_s'] * 1000:,.0f} ms" if r["score_topk_s"] is not None else "-"
        lines.append(f"{r['case']:<9} {r['similarity']:<15} {r['images']:>7,} x {r['captions']:>7,} "
                     f"{r['score_s']:>10.3f} {r['pairs_per_s']:>15,.0f} {topk:>9} {total:>12} {r['peak_gib']:>9.2f}")
    return "\n".join(lines)


def arguments() -> argparse.ArgumentParser:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--similarities", nargs="+", choices=list(SIMILARITIES), default=list(SIMILARITIES))
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "both"],
                        help="auto (CUDA when present, else CPU) | cpu | cuda | both (CPU, then CUDA when present)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=2, help="timed repeats (the best is reported)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed runs before the repeats (default: 1 on CUDA, 0 on CPU)")
    parser.add_argument("--block-elements", type=int, default=None,
                        help="override the per-block element budget (default: the model's, BLOCK_ELEMENTS)")
    parser.add_argument("--set-size", type=int, default=4, help="elements per set, K")
    parser.add_argument("--dim", type=int, default=1024, help="element dimension, D")
    parser.add_argument("--topk", type=int, default=10, help="k of the retrieval timed on f30k_val")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress", type=float, default=10.0,
                        help="print blocks done every this many seconds within a run (0: off)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    return parser


def case_results(args, case: str, device: torch.device, name: str, block_elements: int, warmup: int) -> list[dict]:
    """Each similarity timed on one case's random sets on ``device`` (named ``name``), printed as it ends."""
    n, m, what = CASES[case]
    g = torch.Generator().manual_seed(args.seed)
    img = unit_sets(n, args.set_size, args.dim, g, device)
    txt = unit_sets(m, args.set_size, args.dim, g, device)
    print(f"  {case} ({what}): {n:,} image sets x {m:,} caption sets", flush=True)
    results = []
    for sim in args.similarities:
        r = run(case, sim, img, txt, device, block_elements, args.repeats, warmup, args.topk, args.progress)
        r["device"] = name
        results.append(r)
        extra = (f"; scores + top-{args.topk} both ways {r['score_topk_s'] * 1000:,.0f} ms "
                 f"(top-k {r['topk_s'] * 1000:,.0f} ms)" if r["score_topk_s"] is not None else "")
        diff = (f", max |diff| vs CPU fp32 {r['max_abs_diff_vs_cpu']:.1e}"
                if r["max_abs_diff_vs_cpu"] is not None else "")
        print(f"  {case} {sim}: scores {r['score_s']:.3f} s ({r['pairs_per_s']:,.0f} pairs/s){extra}, "
              f"peak {r['peak_gib']:.2f} GiB ({r['peak_kind']}){diff}", flush=True)
    return results


def device_run(args, device: torch.device) -> dict:
    """Every case and similarity on one device, printed as they end and as a table after."""
    block_elements = args.block_elements or BLOCK_ELEMENTS.get(device.type, BLOCK_ELEMENTS["cpu"])
    warmup = args.warmup if args.warmup is not None else (1 if device.type == "cuda" else 0)
    name = device_name(device)
    print(f"device: {name}; torch {torch.__version__}; {torch.get_num_threads()} CPU threads; "
          f"K = {args.set_size}, D = {args.dim}, fp32; block budget {block_elements:,} element cosines; "
          f"{warmup} warm-up + {args.repeats} timed runs (best reported)", flush=True)
    results = []
    for case in args.cases:   # one case's sets at a time: freed before the next case's are drawn
        results += case_results(args, case, device, name, block_elements, warmup)
    print(f"\ndevice: {name}; torch {torch.__version__}; {torch.get_num_threads()} CPU threads")
    print(table(results))
    if any(r["case"] in TOPK_CASES for r in results):
        print(PAPER_REFERENCE)
    print(flush=True)
    return {"device": name, "device_type": device.type, "block_elements": block_elements,
            "warmup": warmup, "repeats": args.repeats, "results": results}


def write_results(args, runs: list[dict]) -> None:
    """The runs of every device, with the torch, Python and benchmark settings, as JSON at ``--json``."""
    args.json.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": "set_similarity", "torch": torch.__version__, "threads": torch.get_num_threads(),
               "python": sys.version.split()[0], "seed": args.seed, "set_size": args.set_size, "dim": args.dim,
               "cuda_available": torch.cuda.is_available(), "runs": runs}
    args.json.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.json}")


def main(argv: list[str] | None = None) -> None:
    parser = arguments()
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    exact_fp32()  # as the harness's compute commands: fp32 means no TF32
    if args.threads:
        torch.set_num_threads(args.threads)
    runs = [device_run(args, device) for device in devices(args.device)]
    if args.json is not None:
        write_results(args, runs)


if __name__ == "__main__":
    main()
