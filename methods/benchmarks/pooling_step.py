"""Benchmark (not a test): training steps of VSE-infinity (``vse_infinity``) with a given pooling, to
measure what GPO adds over a plain pooling at the source's widths (Chen et al., CVPR 2021, call its
extra computation negligible). Time two of these as whole processes, in turn, several times
(docs/benchmarks.md), and take the median of the paired ratios:

    /usr/bin/time -v python -m methods.benchmarks.pooling_step --pooling gpo --steps 6
    /usr/bin/time -v python -m methods.benchmarks.pooling_step --pooling mean --steps 6

A step is what the trainer does for one batch: both encoders in training mode (region drop 0.2),
the scores, the hardest-negative triplet loss of both directions, backward, gradient clipping at
2 and an AdamW step. The batch is ``--batch`` captions with their images: 36 x 2048 random region
features, captions of 8 to 18 tokens (COCO's captions with <start> and <end>: median 13) over a
vocabulary of 10,000, embed 1024, word 300, as train_region.sh. Random inputs, a fixed seed.
"""
from __future__ import annotations

import argparse

import torch

from methods.losses.ranking import build_loss
from methods.models.base import BuildContext, build_model
from methods.runtime import resolve_device

WIDTHS = {"regions": 36, "region_dim": 2048, "embed_dim": 1024, "word_dim": 300, "vocab": 10_000}


def model_config(pooling: str) -> dict:
    return {"kind": "vse_infinity", "embed_dim": WIDTHS["embed_dim"], "region_drop": 0.2, "pooling": pooling,
            "text": {"word_dim": WIDTHS["word_dim"], "hidden_dim": WIDTHS["embed_dim"], "num_layers": 1,
                     "bidirectional": True, "word_init": "random"}}


def batch(size: int, generator: torch.Generator, device: torch.device) -> dict:
    lengths = torch.randint(8, 19, (size,), generator=generator)
    tokens = torch.randint(1, WIDTHS["vocab"], (size, int(lengths.max())), generator=generator)
    tokens = tokens * (torch.arange(tokens.shape[1])[None, :] < lengths[:, None])
    features = torch.randn(size, WIDTHS["regions"], WIDTHS["region_dim"], generator=generator)
    return {"features": features.to(device), "tokens": tokens.to(device), "lengths": lengths}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pooling", choices=["gpo", "mean", "max"], required=True)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (torch.set_num_threads)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    model = build_model(model_config(args.pooling),
                        BuildContext(WIDTHS["vocab"], {"dim": WIDTHS["region_dim"], "regions": WIDTHS["regions"]},
                                     cnn=False)).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
    loss_fn = build_loss({"kind": "triplet_hardest", "margin": 0.2}, epoch=1)
    positives = torch.eye(args.batch, dtype=torch.bool, device=device)
    for _ in range(args.steps):
        data = batch(args.batch, generator, device)
        scores = model.score(model.encode_images(data), model.encode_texts(data))
        loss = loss_fn(scores, positives)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"{args.pooling}: {args.steps} steps of batch {args.batch} on {device}, last loss {float(loss.detach()):.4f}")


if __name__ == "__main__":
    main()
