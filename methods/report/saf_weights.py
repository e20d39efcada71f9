"""SAF attention weights over the words of a caption (SGRAF Fig. 3): for a few test images, the
weights beta of a matched caption (the image's best-scored own caption) and of a mismatched one
(the best-scored caption of another image, i.e. the hardest negative), from a trained model
with a SAF head and the score matrix its evaluation saved."""
from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from methods.data.text import Vocabulary, pad_tokens
from methods.errors import HarnessError
from methods.models.sgraf import SGRAF


def pick_pairs(sims: np.ndarray, n_queries: int, texts_per_image: int) -> list[tuple[int, int, int]]:
    """(image, matched caption, mismatched caption) for the first n_queries images."""
    out = []
    for i in range(min(n_queries, sims.shape[0])):
        own = np.arange(i * texts_per_image, (i + 1) * texts_per_image)
        matched = int(own[np.argmax(sims[i, own])])
        others = sims[i].copy()
        others[own] = -np.inf
        out.append((i, matched, int(np.argmax(others))))
    return out


@torch.no_grad()
def pair_weights(model, features: torch.Tensor, token_lists: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """SAF weights (pairs, nodes) and SAF scores (pairs,) of the pairs (features[k], token_lists[k])."""
    tokens, lengths = pad_tokens(token_lists)
    img = model.encode_images({"features": features})
    cap = model.encode_texts({"tokens": tokens, "lengths": lengths})
    diag = torch.arange(len(token_lists))
    beta = model.saf_weights(img, cap)[diag, diag]                       # all (image, caption) pairs -> own pairs
    scores = model.head_scores(img, cap)[model.head_names.index("saf")][diag, diag]
    return beta, scores


def saf_weights_figure(spec: dict, model, features, captions: list[str], texts_per_image: int, vocab: Vocabulary,
                       sims: np.ndarray, n_queries: int = 3):
    if not isinstance(model, SGRAF) or "saf" not in model.head_names:
        raise HarnessError(f"figure {spec['figure']}: row '{spec['row']}' is not a model with a SAF head")
    if model.attention != "t2i" or not model.nodes_local:
        raise HarnessError(f"figure {spec['figure']}: SAF weights over words need t2i attention and local nodes")
    picks = pick_pairs(sims, n_queries, texts_per_image)
    fig, axes = plt.subplots(len(picks), 2, figsize=(11, 2.6 * len(picks)), squeeze=False)
    for row, (image, matched, mismatched) in enumerate(picks):
        caps = [matched, mismatched]
        token_lists = [vocab.encode(captions[c]) for c in caps]
        beta, scores = pair_weights(model, features.take(np.array([image, image])), token_lists)
        for col, (c, tokens) in enumerate(zip(caps, token_lists)):
            labels = (["<global>"] if model.nodes_global else []) + [vocab.idx2word[t] for t in tokens]
            weights = beta[col, :len(labels)].numpy()
            ax = axes[row][col]
            ax.bar(range(len(labels)), weights, color="tab:green" if col == 0 else "tab:red", alpha=0.8)
            ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
            ax.set_ylim(0, max(0.05, float(weights.max()) * 1.15))
            kind = "matched" if col == 0 else f"mismatched (caption of image {c // texts_per_image})"
            ax.set_title(textwrap.shorten(f"image {image}, {kind}: SAF score {float(scores[col]):.3f} — "
                                          f"\"{captions[c]}\"", 88), fontsize=8)
            ax.set_ylabel("SAF weight β")
    note = " — synthetic data, not comparable with the paper" if spec["dataset_kind"] == "synthetic" else ""
    ran = next((r.get("ran") for r in spec["rows"] if r["id"] == spec["row"]), None)
    fig.suptitle(textwrap.fill(f"{spec['title']} ({spec['dataset']}, row {spec['row']}, "
                               f"{Path(spec['run']).name}{note})", 120)
                 + ("\n" + textwrap.fill(f"ran: {ran}", 120) if ran else ""), fontsize=10)
    return fig
