"""Figures a paper file declares (``figures:``), from a figure spec, the table's row aggregates
and, for gradient counts, the training logs of every run behind the rows.

- ``rsum_by_loss``: RSUM of each row, grouped by loss (x) and model (bars), one panel per
  protocol; bar = mean over seeds, whisker = std, dots = single seeds.
- ``gradient_counts``: per model (columns) and query direction (rows), the mean number of
  negatives per query whose gradient is at least the configured share of the query's largest,
  per training epoch; line = mean over seeds, band = min..max over seeds.
- ``saf_weights``: SGRAF's SAF weights over the words of matched and mismatched captions
  (``methods.report.saf_weights``), from one trained run of the figure's row; a run that did not
  train (its evaluation's training check) is said so in words instead.
- ``text_retrieval_examples`` / ``image_retrieval_examples``: the top-5 captions of a few image
  queries and the top-5 images of a few caption queries of one trained run's test scores, true
  matches marked (``methods.report.retrieval_examples``); any model whose dataset has image files.
  A match is a shared label on label-wise data, on a dataset with extended positives (synthetic)
  every image a caption describes, else Karpathy's own captions.
- ``asa_attention``: MVSA's adaptive self-attention of a few instance candidates, per scale.
- ``rsum_by_setting``: RSUM against each setting the table's rows vary (one panel per overridden
  key), the paper's values beside (``methods.report.set_figures``).
- ``set_element_projection``: a 2-D PCA of the test set elements of the first run of each of the
  figure's ``rows``, coloured by slot (``methods.report.set_figures``).

A footnote under each says what the rows' runs really ran, per model (the spec rows' ``ran``): on
synthetic data not the paper's backbone and dimensions that the row labels name.

Each kind is declared, with what the DAG must give it (``needs``), in
``methods.report.figure_kinds``; its drawing is registered here in ``DRAWINGS`` under the same name.
"""
from __future__ import annotations

import argparse
import dataclasses
import textwrap
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from methods.cli import run_command  # noqa: E402
from methods.data.batches import feature_tensors  # noqa: E402
from methods.data.datasets import DatasetPayload, load_dataset_payload  # noqa: E402
from methods.data.positives import split_positives  # noqa: E402
from methods.data.text import Vocabulary, load_vocabulary  # noqa: E402
from methods.errors import HarnessError  # noqa: E402
from methods.io import load_npy, read_json  # noqa: E402
from methods.job_records import FigureSpec, RowAggregate, RunEvaluation  # noqa: E402
from methods.metrics.protocols import get_protocol  # noqa: E402
from methods.metrics.training_check import TrainingThresholds  # noqa: E402
from methods.model_kinds import MODEL_KINDS, image_input_of  # noqa: E402
from methods.models.checkpoint import load_trained_model  # noqa: E402
from methods.paths import eval_file, model_file, sims_file, train_log  # noqa: E402
from methods.registry import Registry  # noqa: E402
from methods.report.figure_kinds import FIGURE_KINDS  # noqa: E402
from methods.report.figure_layout import save_figure  # noqa: E402
from methods.features.backbone import eval_transform  # noqa: E402
from methods.features.images import ImageFiles  # noqa: E402
from methods.report.retrieval_examples import (TOP_K, ItemLabels, asa_attention_figure,  # noqa: E402
                                               image_retrieval_figure, spread_queries, text_retrieval_figure)
from methods.report.saf_weights import run_check, saf_weights_figure  # noqa: E402
from methods.report.label_figures import CLASSIFICATION, RETRIEVAL, training_curves  # noqa: E402
from methods.report.label_figures import ndcg_against_weight  # noqa: E402
from methods.report.set_figures import element_projection, setting_panels  # noqa: E402
from methods.report.wording import incomparable_note  # noqa: E402
from methods.scoring import encode_texts  # noqa: E402

LOSS_ORDER = ("triplet_sum", "triplet_hardest", "nt_xent", "smooth_ap")
DIRECTIONS = {"i2t": "image → text (image queries)", "t2i": "text → image (caption queries)"}
# kind -> its drawing: (spec, row aggregates, args) -> figure
DRAWINGS: Registry[Callable[[dict, dict, argparse.Namespace], "plt.Figure"]] = Registry("figure drawing")


def register_figure(name: str):
    """The drawing of a kind declared in ``methods.report.figure_kinds`` (an undeclared name is an error)."""
    FIGURE_KINDS.get(name)
    return DRAWINGS.register(name)


def _ordered(values) -> list:
    seen = list(dict.fromkeys(values))
    return sorted(seen, key=lambda v: (LOSS_ORDER.index(v) if v in LOSS_ORDER else len(LOSS_ORDER), v))


def _title(spec: FigureSpec, width: int) -> str:
    note = incomparable_note(spec.dataset_kind)
    return textwrap.fill(f"{spec.title} ({spec.dataset}{note})", width)


def ran_note(spec: FigureSpec, width: int) -> str:
    """What the rows' runs really ran (the spec rows' ``ran``: model part; schedule), per model:
    its description once, then each schedule with the losses run with it where they differ, e.g.
    ``vsepp ran: ResNet-18 (...), embed 256, ...; 12 epochs, batch 64 (triplet_sum, nt_xent) /
    24 epochs, batch 32 images (smooth_ap)``. Empty for a spec written without ``ran``."""
    notes: dict[tuple[str, str], dict[str, list[str]]] = {}
    for row in spec.rows:
        if row.ran:
            described, _, schedule = row.ran.rpartition("; ")
            notes.setdefault((row.model, described), {}).setdefault(schedule, []).append(row.loss)
    lines = []
    for model in dict.fromkeys(model for model, _ in notes):
        described = {d: schedules for (m, d), schedules in notes.items() if m == model}
        if len(described) > 2:   # rows that differ in a setting or two: what they share once, then what differs
            lines.append(textwrap.fill(condensed(model, described), width))
            continue
        for text, schedules in described.items():
            runs = " / ".join(f"{s} ({', '.join(dict.fromkeys(losses))})" if len(schedules) > 1 else s
                              for s, losses in schedules.items())
            lines.append(textwrap.fill(f"{model} ran: {text + '; ' if text else ''}{runs}", width))
    return "\n".join(lines)


def condensed(model: str, described: dict[str, dict[str, list[str]]]) -> str:
    """One line for a model's rows of several descriptions: the parts (``, ``-separated) every
    description has, then each description's own parts, then the schedules."""
    parts = {text: text.split(", ") for text in described}
    shared = [p for p in next(iter(parts.values())) if all(p in ps for ps in parts.values())]
    own = " / ".join(", ".join(p for p in ps if p not in shared) or "as shared" for ps in parts.values())
    schedules = " / ".join(dict.fromkeys(s for schedules in described.values() for s in schedules))
    return f"{model} ran: {', '.join(shared)}; per row: {own}; {schedules}"


def _ran_footnote(fig, spec: FigureSpec, width: int) -> None:
    note = ran_note(spec, width)
    if note:
        fig.supxlabel(note, fontsize=7)


@register_figure("rsum_by_loss")
def rsum_by_loss(spec: FigureSpec, aggregates: dict[str, RowAggregate], args=None):
    losses = _ordered(r.loss for r in spec.rows)
    models = list(dict.fromkeys(r.model for r in spec.rows))
    protocols = [p for p in spec.protocols if "rsum" in get_protocol(p).metrics]  # RSUM protocols only
    fig, axes = plt.subplots(1, len(protocols), figsize=(4.8 * len(protocols) + 1, 4.2), squeeze=False)
    width = 0.8 / max(1, len(models))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, protocol in zip(axes[0], protocols):
        for m_idx, model in enumerate(models):
            for i, row in enumerate(r for r in spec.rows if r.model == model):
                stats = aggregates[row.id].protocols[protocol]["rsum"]
                x = losses.index(row.loss) + (m_idx - (len(models) - 1) / 2) * width
                ax.bar(x, stats["mean"], width * 0.9, color=colours[m_idx % len(colours)], alpha=0.75,
                       yerr=stats["std"] if len(stats["values"]) > 1 else None, capsize=3,
                       label=model if i == 0 else None)  # one legend entry per model
                ax.scatter(np.full(len(stats["values"]), x), stats["values"], s=10, color="black", zorder=3)
        ax.set_xticks(range(len(losses)), losses, rotation=15)
        ax.set_ylabel("RSUM (six recalls, %)")
        ax.set_title(f"protocol {protocol}", fontsize=10)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))   # beside the panel, off the bars
    fig.suptitle(_title(spec, int(10 * fig.get_figwidth())), fontsize=10)
    _ran_footnote(fig, spec, int(15 * fig.get_figwidth()))
    return fig


@register_figure("gradient_counts")
def gradient_counts(spec: FigureSpec, aggregates: dict | None = None, args=None):
    models = list(dict.fromkeys(r.model for r in spec.rows))
    fig, axes = plt.subplots(2, len(models), figsize=(5.2 * len(models), 7), squeeze=False, sharex="col")
    threshold = None
    for col, model in enumerate(models):
        for row_idx, direction in enumerate(DIRECTIONS):
            ax = axes[row_idx][col]
            rows = {r.loss: r for r in spec.rows if r.model == model}
            for loss in _ordered(rows):
                per_seed = []
                for run in rows[loss].runs:
                    history = read_json(train_log(run))["history"]
                    counts = [h.get("gradient_counts", {}).get(direction) for h in history]
                    if any(c is None for c in counts):
                        raise HarnessError(f"{train_log(run)}: an epoch has no gradient counts "
                                           f"(training.gradient_count.every_n_steps is 0?)")
                    per_seed.append([c["contributing_mean"] for c in counts])
                    threshold = counts[0]["relative_threshold"]
                length = min(len(s) for s in per_seed)
                values = np.array([s[:length] for s in per_seed])
                epochs = np.arange(1, length + 1)
                line, = ax.plot(epochs, values.mean(axis=0), label=loss)
                ax.fill_between(epochs, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.2)
            ax.set_yscale("symlog", linthresh=1.0)
            ax.set_title(f"{model}: {DIRECTIONS[direction]}", fontsize=9)
            ax.set_ylabel("negatives with a gradient / query")
            ax.grid(alpha=0.3)
            if row_idx == 1:
                ax.set_xlabel("training epoch")
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))   # beside the panel, off the curves
    fig.suptitle(f"{_title(spec, int(11 * fig.get_figwidth()))}\ncounted: |∂L/∂s(q,n)| ≥ {threshold} × the query's largest over its negatives",
                 fontsize=9)
    _ran_footnote(fig, spec, int(15 * fig.get_figwidth()))
    return fig


@register_figure("saf_weights")
def saf_weights(spec: FigureSpec, aggregates: dict, args):
    run = Path(spec.run)
    model, ckpt, _ = load_trained_model(Path(model_file(run)), {}, torch.device("cpu"))
    payload = load_dataset_payload(args.dataset_config)
    model_cfg = ckpt["config"]["model"]
    FIGURE_KINDS.get("saf_weights").check_model(model_cfg, f"figure {spec.figure}, row '{spec.row}' ({run})")
    data = image_input_of(model_cfg).load(payload, spec.split, args.features_dir, model_cfg)
    sims = load_npy(sims_file(run, spec.split))
    ev = RunEvaluation.read(eval_file(run, spec.split))
    check = run_check(ev, sims, data.texts_per_image, TrainingThresholds.from_config(spec.training_check))
    return saf_weights_figure(spec, model, data.features, data.captions, data.texts_per_image,
                              load_vocabulary(args.vocab), sims, check, positives=extended_positives(payload, spec, sims))


def shown_crop(img: Image.Image, resize: int, crop: int) -> np.ndarray:
    """The shorter side resized to ``resize``, then the centre ``crop`` x ``crop`` (the evaluation crop)."""
    scale = resize / min(img.size)
    img = img.resize((max(crop, round(img.width * scale)), max(crop, round(img.height * scale))), Image.BILINEAR)
    left, top = (img.width - crop) // 2, (img.height - crop) // 2
    return np.asarray(img.crop((left, top, left + crop, top + crop)))


class ShownImages:
    """Image i of a split as an (H, W, 3) array, resized and centre-cropped as the CNN saw it."""

    def __init__(self, payload: DatasetPayload, split: str, figure: str):
        files = payload.split(split).filenames
        images_dir = payload.paths["images_dir"]
        if not files or images_dir is None:
            raise HarnessError(f"figure {figure}: dataset {payload.name} has no image files to show "
                               f"(datasets.{payload.name}.images_dir)")
        feats = payload.dataset["features"]
        self.files = ImageFiles(images_dir, files, lambda img: shown_crop(img, feats["resize"], feats["crop"]))

    def __getitem__(self, index: int) -> np.ndarray:
        return self.files[index]


def _test_run(spec: FigureSpec, args):
    """(payload, the test split as the run scored it (captions in its order), the run's test score
    matrix) of a figure's row."""
    payload = load_dataset_payload(args.dataset_config)
    run = Path(spec.run)
    model_cfg = RunEvaluation.read(eval_file(run, spec.split)).config["model"]
    data = image_input_of(model_cfg).load(payload, spec.split, args.features_dir, model_cfg)
    sims = load_npy(sims_file(run, spec.split))
    if sims.shape[1] != len(data.captions):
        raise HarnessError(f"{sims_file(run, spec.split)} scores {sims.shape[1]} captions, the split has "
                           f"{len(data.captions)}")
    return payload, data, sims


def extended_positives(payload: DatasetPayload, spec: FigureSpec, sims: np.ndarray) -> np.ndarray | None:
    """The (images x captions) extended positives of the figure's split where the dataset has them
    (the synthetic generator writes every image each caption describes), else None."""
    path = payload.paths.get("positives")
    if not path:
        return None
    split = spec.split
    positives = split_positives(path, payload.split(split), payload.paths["karpathy_json"])
    if positives.shape != sims.shape:
        raise HarnessError(f"{path}: split '{split}' has {positives.shape[0]} images x {positives.shape[1]} captions, "
                           f"{sims_file(spec.run, split)} scores {sims.shape[0]} x {sims.shape[1]}")
    return positives


def item_labels(payload: DatasetPayload, data) -> ItemLabels | None:
    """The split's labels when the dataset ranks by shared labels (label-wise protocols), else None."""
    if data.labels is None or not any(get_protocol(p).relevance == "shared_labels" for p in payload.dataset["protocols"]):
        return None
    names = read_json(payload.paths["karpathy_json"]).get("label_names") or [str(c) for c in range(data.labels.shape[1])]
    return ItemLabels(data.labels, data.text_labels(), names)


def _relevance(payload: DatasetPayload, spec: FigureSpec, data, sims: np.ndarray) -> dict:
    """``labels`` or ``positives`` of the retrieval figures (``Matches``): shared labels on label-wise
    data, else the extended positives where the dataset has them (else neither: own captions)."""
    labels = item_labels(payload, data)
    return {"labels": labels, "positives": extended_positives(payload, spec, sims) if labels is None else None}


@register_figure("text_retrieval_examples")
def text_retrieval_examples(spec: FigureSpec, aggregates: dict, args):
    payload, data, sims = _test_run(spec, args)
    return text_retrieval_figure(spec, sims, data.captions, data.texts_per_image,
                                 ShownImages(payload, spec.split, spec.figure), **_relevance(payload, spec, data, sims))


@register_figure("image_retrieval_examples")
def image_retrieval_examples(spec: FigureSpec, aggregates: dict, args):
    payload, data, sims = _test_run(spec, args)
    relevance = _relevance(payload, spec, data, sims)
    # the label-wise supplement shows the top-3 images of a text query (Figure 2), the caption papers 5
    return image_retrieval_figure(spec, sims, data.captions, data.texts_per_image,
                                  ShownImages(payload, spec.split, spec.figure), **relevance,
                                  top=3 if relevance["labels"] is not None else TOP_K)


@register_figure("asa_attention")
def asa_attention(spec: FigureSpec, aggregates: dict, args, n_images: int = 3):
    run = Path(spec.run)
    payload = load_dataset_payload(args.dataset_config)
    model, ckpt, finetuned = load_trained_model(Path(model_file(run)), payload.backbones, torch.device("cpu"), payload.text_encoders)
    model_cfg = ckpt["config"]["model"]
    FIGURE_KINDS.get("asa_attention").check_model(model_cfg, f"figure {spec.figure}, row '{spec.row}' ({run})")
    data = image_input_of(model_cfg).load(payload, spec.split, args.features_dir, model_cfg)
    image_ids = spread_queries(len(data), n_images)
    if finetuned:  # the trained CNN computes the maps from the images
        feats = payload.dataset["features"]
        files = ImageFiles(payload.paths["images_dir"], data.filenames, eval_transform(feats["resize"], feats["crop"]))
        batch = {"images": torch.stack([files[i] for i in image_ids])}
    else:
        batch = {"features": feature_tensors(data.features.take(np.array(image_ids)))}
    attention = {s: list(a) for s, a in model.asa_attention(batch).items()}
    grids = {s: tuple(g.shape[1:3]) for s, g in model.grids(batch).items()}
    return asa_attention_figure(spec, attention, grids, ShownImages(payload, spec.split, spec.figure), image_ids)


SETTING_LABELS = {"model.set_size": "set size K", "model.set_module.iterations": "iterations T",
                  "model.similarity.alpha": "smooth-Chamfer temperature α"}


@register_figure("rsum_by_setting")
def rsum_by_setting(spec: FigureSpec, aggregates: dict[str, RowAggregate], args=None):
    keys = list(dict.fromkeys(k for r in spec.rows for k in r.details["overrides"]))
    if not keys:
        raise HarnessError(f"figure {spec.figure}: no row of table {spec.table} overrides a setting to plot")
    protocol = next(p for p in spec.protocols if "rsum" in get_protocol(p).metrics)
    fig = setting_panels(keys, spec.rows, aggregates, protocol, SETTING_LABELS)
    fig.suptitle(_title(spec, int(10 * fig.get_figwidth())), fontsize=10)
    _ran_footnote(fig, spec, int(15 * fig.get_figwidth()))
    return fig


@register_figure("set_element_projection")
def set_element_projection(spec: FigureSpec, aggregates: dict, args, n_images: int = 100):
    """``n_images`` test images spread over the split and their captions, per row."""
    payload = load_dataset_payload(args.dataset_config)
    vocab = load_vocabulary(args.vocab)
    labels = {r.id: r.label for r in spec.rows}
    models = {}
    for row_id, run in spec.trained.items():
        model, ckpt, _ = load_trained_model(Path(model_file(run)), payload.backbones, torch.device("cpu"), payload.text_encoders)
        model_cfg = ckpt["config"]["model"]
        if MODEL_KINDS.get(model_cfg["kind"]).set_sizes(model_cfg) is None:
            raise HarnessError(f"figure {spec.figure}: row '{row_id}' is not a set-embedding model")
        data = image_input_of(model_cfg).load(payload, spec.split, args.features_dir, model_cfg)
        images = np.array(spread_queries(len(data), min(n_images, len(data))))
        tokens = [vocab.encode(data.captions[data.texts_per_image * i + j]) for i in images
                  for j in range(data.texts_per_image)]
        model.eval()
        with torch.no_grad():
            img = model.encode_images({"features": feature_tensors(data.features.take(images))})
        txt = encode_texts(model, tokens, torch.device("cpu"), batch_size=100)
        models[labels[row_id]] = (img.numpy(), txt.numpy())
    fig = element_projection(models)
    fig.suptitle(_title(spec, int(10 * fig.get_figwidth())), fontsize=10)
    drawn = dataclasses.replace(spec, rows=[r for r in spec.rows if r.id in spec.trained])   # the panels' rows
    _ran_footnote(fig, drawn, int(15 * fig.get_figwidth()))
    return fig


@register_figure("label_training_curves")
def label_training_curves(spec: FigureSpec, aggregates: dict | None = None, args=None):
    curves = {}
    for row in spec.rows:
        seeds = []
        for run in row.runs:
            history = read_json(train_log(run))["history"]
            missing = [k for k in (*CLASSIFICATION, *RETRIEVAL) if k not in history[0]["val"]]
            if missing:
                raise HarnessError(f"{train_log(run)}: validation logged no {', '.join(missing)} (row "
                                   f"'{row.id}' is not a label-wise model?)")
            seeds.append([h["val"] for h in history])
        curves[row.id] = seeds
    fig = training_curves(curves)
    rows = textwrap.fill("; ".join(f"{r.id}: {r.label}" for r in spec.rows), int(13 * fig.get_figwidth()))
    fig.suptitle(_title(spec, int(10 * fig.get_figwidth())) + "\n" + rows, fontsize=9)   # the rows under the title
    _ran_footnote(fig, spec, int(15 * fig.get_figwidth()))
    return fig


@register_figure("ndcg_by_loss_weight")
def ndcg_by_loss_weight(spec: FigureSpec, aggregates: dict[str, RowAggregate], args=None, term: str = "masked_prediction"):
    protocol = next((p for p in spec.protocols if "t2i_ndcg500" in get_protocol(p).metrics), None)
    if protocol is None:
        raise HarnessError(f"figure {spec.figure}: dataset {spec.dataset} has no protocol with NDCG@500")
    points = [(row.details["loss_weights"].get(term, 0.0), aggregates[row.id].protocols[protocol]) for row in spec.rows]
    fig = ndcg_against_weight(points, term, protocol)
    fig.suptitle(_title(spec, int(10 * fig.get_figwidth())), fontsize=10)
    _ran_footnote(fig, spec, int(15 * fig.get_figwidth()))
    return fig


def draw_figure(args) -> None:
    spec = FigureSpec.read(args.spec)
    draw = DRAWINGS.get(spec.kind)
    fig = draw(spec, {Path(p).stem: RowAggregate.read(p) for p in args.rows}, args)
    fig.tight_layout()
    save_figure(fig, args.out)


def _arguments(parser) -> None:
    parser.add_argument("--spec", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("rows", nargs="+", help="row aggregate JSONs of the figure's table, named <row id>.json")
    parser.add_argument("--dataset-config", help="trained_run figures: the dataset's dataset.json")
    parser.add_argument("--features-dir", help="trained_run figures: the image input of the run's dataset")
    parser.add_argument("--vocab", help="trained_run figures: the vocabulary the run was trained with")


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, draw_figure, argv, dataset_config=False)


if __name__ == "__main__":
    main()
