"""Convolutions for portable numerics on the CPU: im2col as one strided copy, GEMMs run by numpy's
OpenBLAS, whose code path portable mode pins (``OPENBLAS_CORETYPE=Haswell``, one BLAS thread),
and col2im as one add per kernel offset in a fixed order: the same kernels, blockings and so bits
on every x86-64 host with AVX2.

Why not torch's own: oneDNN's convolutions pick their blocking from the host's cache sizes (an
Intel and an AMD host gave other bits, ``methods.numerics``), and without oneDNN ATen's im2col
convolution runs MKL's ``COMPATIBLE`` (SSE2) GEMM one sample at a time, about 5x slower than
oneDNN for a ResNet-18 training step at 64 px (3.9 s against 0.8 s; this path 1.3 s;
``methods.benchmarks.portable_conv``). Here each convolution is three whole-batch GEMMs
(forward, weight gradient, input gradient), each split into fixed row blocks over the process's
compute threads (``torch.get_num_threads()``, which portable mode fixes): every output row is one
single-threaded OpenBLAS call of a fixed shape, so the result depends on the thread count
portable mode records, never on the host or the scheduling.

Only ``PortableConv2d`` layers on CPU tensors of float32/float64 take this path (groups 1, zero
padding); anything else (CUDA, other dtypes) runs ``nn.Conv2d``'s own.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ROW_BLOCK = 64   # thread blocks start at multiples of this many rows (OpenBLAS' tiles divide it)


def _gemm(a: np.ndarray, b: np.ndarray, threads: int) -> np.ndarray:
    """``a @ b`` with the rows of ``a`` split into ``threads`` fixed blocks run side by side
    (numpy releases the GIL inside BLAS)."""
    out = np.empty((a.shape[0], b.shape[1]), dtype=np.result_type(a, b))
    rows = a.shape[0]
    step = -(-rows // threads)
    step = -(-step // ROW_BLOCK) * ROW_BLOCK
    bounds = [(r, min(r + step, rows)) for r in range(0, rows, step)]
    if len(bounds) == 1:
        np.matmul(a, b, out=out)
        return out
    with ThreadPoolExecutor(len(bounds)) as pool:
        list(pool.map(lambda rb: np.matmul(a[rb[0]:rb[1]], b, out=out[rb[0]:rb[1]]), bounds))
    return out


def _geometry(x_shape, w_shape, stride, padding, dilation):
    (n, c, h, w), (o, _, kh, kw) = x_shape, w_shape
    ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    return n, c, h, w, o, kh, kw, ho, wo


def _windows(padded: torch.Tensor, kh: int, kw: int, ho: int, wo: int, stride, dilation) -> torch.Tensor:
    """The (C, kh, kw, N, Ho, Wo) view of every receptive field of an NCHW tensor."""
    sn, sc, sh, sw = padded.stride()
    n, c = padded.shape[:2]
    return padded.as_strided((c, kh, kw, n, ho, wo),
                             (sc, sh * dilation[0], sw * dilation[1], sn, sh * stride[0], sw * stride[1]))


class _BlasConv2d(torch.autograd.Function):
    """Columns are laid out (K, N·L), K in the weight's (C, kh, kw) order and L the output
    positions: the whole batch is one GEMM per direction, and each kernel offset's slice of the
    input gradient is contiguous over (N, Ho, Wo)."""

    @staticmethod
    def forward(ctx, x, weight, bias, stride, padding, dilation):
        n, c, h, w, o, kh, kw, ho, wo = _geometry(x.shape, weight.shape, stride, padding, dilation)
        padded = F.pad(x, (padding[1], padding[1], padding[0], padding[0])) if any(padding) else x
        # im2col as one strided copy (ATen's unfold is about 3x slower here)
        cols = _windows(padded, kh, kw, ho, wo, stride, dilation).reshape(c * kh * kw, n * ho * wo)
        threads = torch.get_num_threads()
        out = torch.from_numpy(_gemm(weight.detach().reshape(o, -1).numpy(), cols.numpy(), threads))
        out = out.reshape(o, n, ho, wo).transpose(0, 1).contiguous()
        if bias is not None:
            out += bias.detach().reshape(1, o, 1, 1)
        ctx.save_for_backward(cols, weight)
        ctx.conv = (tuple(x.shape), stride, padding, dilation, bias is not None, threads)
        return out

    @staticmethod
    def backward(ctx, grad):
        cols, weight = ctx.saved_tensors
        x_shape, stride, padding, dilation, has_bias, threads = ctx.conv
        n, c, h, w, o, kh, kw, ho, wo = _geometry(x_shape, weight.shape, stride, padding, dilation)
        g = grad.transpose(0, 1).reshape(o, n * ho * wo).numpy()   # (O, N·L), a copy
        grad_weight = torch.from_numpy(_gemm(g, cols.numpy().T, threads)).reshape(weight.shape)
        grad_cols = torch.from_numpy(_gemm(weight.detach().reshape(o, -1).numpy().T, g, threads))
        grad_cols = grad_cols.reshape(c, kh, kw, n, ho, wo)
        # col2im: each kernel offset's slice added into its strided window, offsets in a fixed
        # order (one rounding per add, so every host sums alike)
        grad_padded = grad.new_zeros((c, n, h + 2 * padding[0], w + 2 * padding[1]))
        for i in range(kh):
            for j in range(kw):
                top, left = i * dilation[0], j * dilation[1]
                grad_padded[:, :, top:top + stride[0] * (ho - 1) + 1:stride[0],
                            left:left + stride[1] * (wo - 1) + 1:stride[1]] += grad_cols[:, i, j]
        grad_x = grad_padded[:, :, padding[0]:padding[0] + h, padding[1]:padding[1] + w].transpose(0, 1).contiguous()
        grad_bias = grad.sum(dim=(0, 2, 3)) if has_bias else None
        return grad_x, grad_weight, grad_bias, None, None, None


class PortableConv2d(nn.Conv2d):
    """``nn.Conv2d`` (same parameters and state dict) computing through ``_BlasConv2d`` where it
    can (module doc)."""

    def _conv_forward(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if (x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64) or weight.dtype != x.dtype
                or self.groups != 1 or self.padding_mode != "zeros" or isinstance(self.padding, str)):
            return super()._conv_forward(x, weight, bias)
        return _BlasConv2d.apply(x, weight, bias, self.stride, self.padding, self.dilation)


def portable_convolutions(net: nn.Module) -> nn.Module:
    """``net`` with every ``nn.Conv2d`` computing as ``PortableConv2d`` (in place; parameters,
    hooks and state dict unchanged)."""
    for module in net.modules():
        if type(module) is nn.Conv2d:
            module.__class__ = PortableConv2d
    return net
