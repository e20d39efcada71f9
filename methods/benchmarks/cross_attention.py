"""Benchmark (not a test): time full similarity matrices of the cross-attention models at the
papers' sizes: SGRAF's SGR and SAF, and MVSA's SCAN-style scoring (t-i AVG and i-t LSE) of 49
instance candidates (7x7) and of 98 (14x14 pooled to 7x7, fused with 7x7).

    python -m methods.benchmarks.cross_attention                        # 1,000 images x 5,000 captions
    python -m methods.benchmarks.cross_attention --images 100 --captions 500 --device cpu
    python -m methods.benchmarks.cross_attention --models mvsa_t2i_98 mvsa_i2t_98

Random weights and inputs. SGRAF: the BUTD layout, 36 regions x 2048-d per image, 1024-d
embeddings, 256-d similarity vectors, 3 SGR steps. MVSA: 1024-d instance features (random unit
vectors, the scorer's input: the CNN and ASA encoders are not timed). Caption lengths uniform in
8-30 tokens, bi-GRU 1024. The timed part is what evaluation does after encoding: every (image,
caption) pair scored in length-sorted blocks (``score_matrix``); encoding the captions (and
SGRAF's regions) is timed apart. On CUDA it runs under fp16 autocast (the evaluation default,
``training.amp``) and in fp32. Prints seconds and pairs/s per model; reference point: the
public code's per-caption loop needs ~120.8 s (SGR) and ~106.3 s (SAF) for 1K x 5K on an H100
(Paranioar/SGRAF, evaluation.py, run on the same machine).
"""
from __future__ import annotations

import argparse
import copy
import time

import torch

import torch.nn.functional as F

from methods.models.base import CrossAttentionModel
from methods.models.cross_attention import RegionFeatures
from methods.models.mvsa import MVSA
from methods.models.sgraf import SGRAF
from methods.models.text import GRUTextEncoder
from methods.runtime import autocast, exact_fp32, resolve_device
from methods.scoring import stored

# SCAN's similarity blocks as MVSA's model config gives them: t-i AVG, i-t LSE
T2I_AVG = {"direction": "t2i", "aggregation": "avg", "lambda_softmax": 9.0}
I2T_LSE = {"direction": "i2t", "aggregation": "lse", "lambda_softmax": 4.0, "lambda_lse": 5.0}
# name -> (instance candidates of an MVSA model, its similarity block) or SGRAF heads
MODELS = {"sgr": ["sgr"], "saf": ["saf"],
          "mvsa_t2i_49": (49, T2I_AVG), "mvsa_i2t_49": (49, I2T_LSE),
          "mvsa_t2i_98": (98, T2I_AVG), "mvsa_i2t_98": (98, I2T_LSE)}
MVSA_SHAPES = {"conv4": [14, 14, 1024], "conv5": [7, 7, 2048]}
MVSA_ASA = {"blocks": 1, "inter_dim": 1024, "batchnorm": True}   # one non-local block per scale (the paper's)


def build(name: str, vocab: int, device: torch.device) -> CrossAttentionModel:
    torch.manual_seed(0)
    if name in ("sgr", "saf"):
        text = GRUTextEncoder(vocab, 300, 1024, bidirectional=True, embed_dropout=0.4)
        return SGRAF(2048, 36, 1024, 256, text, MODELS[name]).to(device).eval()
    n_instances, similarity = MODELS[name]
    scales = ["conv5"] if n_instances == 49 else ["conv4", "conv5"]
    text = GRUTextEncoder(vocab, 300, 1024, bidirectional=True)
    model = MVSA("resnet152", MVSA_SHAPES, scales, None if n_instances == 49 else "max", 2048, 1024, text,
                 asa=MVSA_ASA, similarity=similarity)
    return model.to(device).eval()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def run(name: str, n_images: int, n_captions: int, device: torch.device, amp: bool,
        block_elements: int | None, repeats: int) -> dict:
    model = build(name, 10_000, device)
    model.block_elements = block_elements
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(8, 31, (n_captions,), generator=g)
    tokens = torch.randint(4, 10_000, (n_captions, 30), generator=g)
    tokens[torch.arange(30)[None, :] >= lengths[:, None]] = 0
    synchronize(device)
    t0 = time.perf_counter()
    with autocast(device, amp):
        if isinstance(model, MVSA):
            instances = F.normalize(torch.randn(n_images, model.n_instances, 1024, generator=g), dim=-1).to(device)
            img = RegionFeatures(instances, instances.new_zeros(n_images, 0))
        else:
            features = torch.randn(n_images, 36, 2048, generator=g)
            img = stored(model.encode_images({"features": features.to(device)}))
        cap = stored(model.encode_texts({"tokens": tokens.to(device), "lengths": lengths}))
    synchronize(device)
    encode = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        scores = model.score_matrix(img, cap, amp=amp)
        synchronize(device)
        times.append(time.perf_counter() - t0)
    assert scores.shape == (n_images, n_captions) and torch.isfinite(scores).all()
    best = min(times)
    return {"model": name, "amp": amp, "encode_s": encode, "score_s": best, "pairs_per_s": n_images * n_captions / best,
            "peak_gib": torch.cuda.max_memory_allocated() / 2 ** 30 if device.type == "cuda" else None,
            "max_abs_diff_vs_cpu": agreement_with_cpu(model, img, cap, scores, device)}


def agreement_with_cpu(model: CrossAttentionModel, img, cap, scores: torch.Tensor, device: torch.device,
                       n_images: int = 20, n_captions: int = 200) -> float | None:
    """Max |score - CPU fp32 score| on a corner of the matrix (the CPU path equals the per-pair
    reference, tests/test_sgraf.py), so the number checks the device and AMP path."""
    if device.type == "cpu":
        return None
    n_images, n_captions = min(n_images, scores.shape[0]), min(n_captions, scores.shape[1])
    cpu_model = copy.deepcopy(model).cpu()
    reference = cpu_model.score_matrix(img[:n_images].to("cpu"), cap[:n_captions].to("cpu"))
    return (scores[:n_images, :n_captions].float().cpu() - reference).abs().max().item()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--captions", type=int, default=5000)
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=2, help="timed repeats (the best is reported; CUDA warms up on the first)")
    parser.add_argument("--block-elements", type=int, default=None, help="override the per-block element budget")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--precision", choices=["both", "amp", "fp32"], default="both",
                        help="on CUDA: fp16 autocast, fp32, or both (CPU always runs fp32)")
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    exact_fp32()  # as the harness's compute commands: fp32 means no TF32
    if args.threads:
        torch.set_num_threads(args.threads)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"device: {name}; torch {torch.__version__}; {args.images} images x {args.captions} captions, "
          f"lengths 8-30; SGRAF 36 regions x 2048-d, MVSA 49 or 98 instances x 1024-d")
    precisions = {"both": [True, False], "amp": [True], "fp32": [False]}[args.precision]
    for amp in (precisions if device.type == "cuda" else [False]):
        for model_name in args.models:
            r = run(model_name, args.images, args.captions, device, amp, args.block_elements, args.repeats)
            peak = f", peak {r['peak_gib']:.2f} GiB" if r["peak_gib"] is not None else ""
            diff = (f", max |diff| vs CPU fp32 {r['max_abs_diff_vs_cpu']:.1e}"
                    if r["max_abs_diff_vs_cpu"] is not None else "")
            print(f"{r['model']:>11} {'fp16 autocast' if amp else 'fp32':>13}: scores {r['score_s']:.2f} s "
                  f"({r['pairs_per_s']:,.0f} pairs/s), encoding {r['encode_s']:.2f} s{peak}{diff}", flush=True)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()


if __name__ == "__main__":
    main()
