"""SAF attention weights over the words of a caption (SGRAF Fig. 3): for a few test images, the
weights beta of a matched caption (the image's best-scored true caption) and of a mismatched one
(the best-scored caption that does not describe it, i.e. the hardest negative), from a trained
model with a SAF head and the score matrix its evaluation saved.

A true caption is one of the image's own (Karpathy), or on a dataset with extended positives
(synthetic) any caption that describes it: there another image's caption can describe the image
exactly, and would otherwise be drawn as its "mismatch".

Only a run that trained is drawn (``run_check``: its evaluation's training check): the weights of
a model that did not learn look like weights and mean nothing, so the figure then says in words
that the run did not train, with its main metric against chance. Each score is printed with as
many digits as an image's two scores need to print differently (a SAF head near its
hardest-negative plateau scores every pair within ~1e-3 of one value: 3 decimals print them all
alike), with its rank among the image's captions."""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from methods.data.batches import feature_tensors, pad_tokens
from methods.data.text import Vocabulary
from methods.job_records import FigureSpec, RunEvaluation
from methods.metrics.retrieval import chance_recalls, retrieval_metrics
from methods.metrics.training_check import TrainingThresholds, failures, measure
from methods.report.wording import incomparable_note

RSUM_MAX = 600.0   # six recalls in %


@dataclass(frozen=True)
class RunCheck:
    """Whether the figure's run trained, what its checks measured, and why not (empty if it did)."""
    trained: bool
    summary: str     # each checked protocol's main metric against its chance value
    reason: str


def run_check(ev: RunEvaluation, sims: np.ndarray, texts_per_image: int, thresholds: TrainingThresholds) -> RunCheck:
    """The run's verdict from its evaluation ``ev`` (``eval_<split>.json``): each protocol's
    ``training_check``, its ``trained`` and ``reason`` where the evaluation wrote them, else judged
    with ``thresholds`` (``methods.metrics.training_check.failures``); an evaluation written before
    the check is judged on the RSUM of its score matrix ``sims`` against chance (``chance_recalls``).
    The run did not train when any protocol's check says so."""
    checks = [(r["protocol"], r["training_check"]) for r in ev.results if r.get("training_check")]
    if not checks:   # written before the check: the Karpathy RSUM of the saved scores
        rsum = retrieval_metrics(sims, texts_per_image)["rsum"]
        chance = chance_recalls(sims.shape[0], texts_per_image)["rsum"]
        checks = [("score matrix", measure("rsum", rsum, chance, RSUM_MAX, sims))]
    summary, reasons = [], []
    for protocol, check in checks:
        summary.append(f"{protocol} {check['main_metric']} {check['value']:.1f} vs chance {check['chance']:.1f}")
        if "trained" in check:
            if not check["trained"]:
                reasons.append(f"{protocol}: {check.get('reason') or 'did not train'}")
        else:
            reasons += [f"{protocol}: {why}" for why in failures(check, thresholds)]
    return RunCheck(not reasons, "; ".join(summary), "; ".join(reasons))


def pick_pairs(sims: np.ndarray, n_queries: int, texts_per_image: int,
               positives: np.ndarray | None = None) -> list[tuple[int, int, int]]:
    """(image, matched caption, mismatched caption) for the first n_queries images that have both:
    matched, the image's best-scored true caption (its own; with ``positives`` (N, M), any that
    describes it); mismatched, its best-scored other caption. Ties go to the lower index."""
    out = []
    for i in range(sims.shape[0]):
        if len(out) == n_queries:
            break
        if positives is None:
            true = np.zeros(sims.shape[1], dtype=bool)
            true[i * texts_per_image:(i + 1) * texts_per_image] = True
        else:
            true = np.asarray(positives[i], dtype=bool)
        if true.all() or not true.any():
            continue
        row = np.asarray(sims[i], dtype=np.float64)
        out.append((i, int(np.argmax(np.where(true, row, -np.inf))), int(np.argmax(np.where(true, -np.inf, row)))))
    return out


def rank_of(scores: np.ndarray, index: int) -> int:
    """1-based rank of ``scores[index]`` in ``scores``, ties broken by the lower index (as the metrics)."""
    scores = np.asarray(scores)
    return int(np.sum(scores > scores[index]) + np.sum(scores[:index] == scores[index]) + 1)


def score_digits(values) -> int:
    """The fewest decimals, 3 to 8, that print different values differently (a SAF head near its
    plateau scores every pair within ~1e-3 of one value: 3 decimals would print them all alike)."""
    values = [float(v) for v in values]
    for digits in range(3, 9):
        if len({f"{v:.{digits}f}" for v in values}) == len(set(values)):
            return digits
    return 8


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


def _title(spec: FigureSpec, width: int) -> str:
    note = incomparable_note(spec.dataset_kind)
    ran = next((r.ran for r in spec.rows if r.id == spec.row), None)
    return (textwrap.fill(f"{spec.title} ({spec.dataset}, row {spec.row}, {Path(spec.run).name}{note})", width)
            + ("\n" + textwrap.fill(f"ran: {ran}", width) if ran else ""))


def untrained_figure(spec: FigureSpec, check: RunCheck):
    """The figure of a run that did not train: the title and, in words, why no weights are drawn."""
    fig, ax = plt.subplots(figsize=(11, 2.8))
    ax.axis("off")
    text = (f"Row {spec.row} did not train (run {spec.run}, {spec.split} split): its SAF weights would be "
            f"those of a model that did not learn, so none are drawn.\n\nWhy: {check.reason}.")
    ax.text(0.5, 0.5, "\n".join(textwrap.fill(line, 120) for line in text.split("\n")), ha="center", va="center",
            fontsize=10, transform=ax.transAxes)
    fig.suptitle(_title(spec, 120), fontsize=10)
    return fig


def saf_weights_figure(spec: FigureSpec, model, features, captions: list[str], texts_per_image: int, vocab: Vocabulary,
                       sims: np.ndarray, check: RunCheck, n_queries: int = 3, positives: np.ndarray | None = None):
    """``sims``: the run's score matrix of the split; ``check``: its training check (``run_check``):
    a run that did not train gets ``untrained_figure``; ``positives``: the split's extended
    positives (``pick_pairs``). ``model``: an SGRAF model with a SAF head over words (the figure
    kind's check of its config, ``FigureKind.check_model``)."""
    if not check.trained:   # the weights of a model that did not learn would look meaningful
        return untrained_figure(spec, check)
    picks = pick_pairs(sims, n_queries, texts_per_image, positives)
    fig, axes = plt.subplots(len(picks), 2, figsize=(11, 2.6 * len(picks) + 0.6), squeeze=False)
    for row, (image, matched, mismatched) in enumerate(picks):
        caps = [matched, mismatched]
        token_lists = [vocab.encode(captions[c]) for c in caps]
        beta, scores = pair_weights(model, feature_tensors(features.take(np.array([image, image]))), token_lists)
        digits = score_digits(sims[image, caps])
        for col, (c, tokens) in enumerate(zip(caps, token_lists)):
            labels = (["<global>"] if model.nodes_global else []) + [vocab.idx2word[t] for t in tokens]
            weights = beta[col, :len(labels)].numpy()
            ax = axes[row][col]
            ax.bar(range(len(labels)), weights, color="tab:green" if col == 0 else "tab:red", alpha=0.8)
            ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
            ax.set_ylim(0, max(0.05, float(weights.max()) * 1.15))
            owner = c // texts_per_image
            kind = ("matched" + ("" if owner == image else f" (caption of image {owner})") if col == 0
                    else f"mismatched (caption of image {owner})")
            ax.set_title(f"image {image}, {kind}: SAF score {float(scores[col]):.{digits}f}, rank "
                         f"{rank_of(sims[image], c)}/{sims.shape[1]}\n" + textwrap.shorten(f"\"{captions[c]}\"", 80),
                         fontsize=8)
            ax.set_ylabel("SAF weight β")
    true = ("caption that describes it (generator's predicates)" if positives is not None else "own caption")
    lines = [f"matched: the image's best-scored {true}; mismatched: its best-scored other caption; "
             f"rank: of the pair's score in the run's {spec.split} score matrix, among the image's {sims.shape[1]} captions"]
    low, high = float(sims.min()), float(sims.max())
    digits = score_digits([low, high, low + (high - low) / 10])   # the range to a tenth of itself
    lines.append(f"the run trained (training check: {check.summary}); all its {spec.split} scores lie in "
                 f"[{low:.{digits}f}, {high:.{digits}f}] (a range of {high - low:.1e})")
    fig.suptitle(_title(spec, 120) + "".join("\n" + textwrap.fill(line, 120) for line in lines), fontsize=10)
    return fig
