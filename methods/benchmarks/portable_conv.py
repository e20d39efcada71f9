"""Benchmark (not a test): ResNet-18 training steps as the synthetic backbone pre-training runs
them (batch 64 at 64 px, 14 labels, AdamW), with one of three convolution paths.

    python -m methods.benchmarks.portable_conv --conv portable     # methods.features.portable_conv
    python -m methods.benchmarks.portable_conv --conv aten         # oneDNN off: ATen's im2col + MKL
    python -m methods.benchmarks.portable_conv --conv onednn       # torch's default CPU convolutions

Run it in portable mode's environment (``methods.numerics.shell_prefix("portable", 2)`` before the
command) to time what a portable job pays; the environment pins MKL's COMPATIBLE branch, which
the ``aten`` path's GEMMs run on. Prints the median seconds of ``--steps`` timed steps after one
untimed step; time whole processes from outside for figures to quote.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
import torchvision

from methods.features.portable_conv import portable_convolutions


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conv", choices=["portable", "aten", "onednn"], required=True)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.backends.mkldnn.enabled = args.conv == "onednn"
    torch.manual_seed(0)
    net = torchvision.models.resnet18(weights=None, num_classes=14)
    if args.conv == "portable":
        portable_convolutions(net)
    opt = torch.optim.AdamW(net.parameters(), lr=2e-3)
    x, y = torch.randn(64, 3, 64, 64), (torch.rand(64, 14) < 0.3).float()
    times = []
    for _ in range(args.steps + 1):
        start = time.perf_counter()
        loss = F.binary_cross_entropy_with_logits(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    print(f"{args.conv}: {statistics.median(times[1:]):.3f} s per training step (median of {args.steps}, "
          f"{args.threads} threads)")


if __name__ == "__main__":
    main()
