"""Datasets: synthetic generator, Karpathy splits, precomputed features, vocabulary."""
