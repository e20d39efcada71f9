"""Evaluate one trained run on one test split under every protocol of the dataset (training jobs
do it for their test splits when they end: ``methods.train --evaluate``; this command re-evaluates
a run by hand).

Writes ``eval_<split>.json`` (metrics per protocol, each with its training check where the protocol
has a main metric: ``methods.metrics.training_check``; config, hash, commit, seed, device, wall
times) and ``sims_<split>.npy`` (the score matrix, used by ensembles). A model that reports
embedding statistics (set models: within-set circular variance) adds them under the protocol
``set_statistics``. ``--views`` evaluates the run's model with only some elements of its sets
(``methods.model_kinds.element_views``): ``eval_<split>@<view>.json`` and ``sims_<split>@<view>.npy``
(for claim checks) per view, no statistics; the split is encoded once for all of them.
"""
from __future__ import annotations

import time
from pathlib import Path

from methods import api
from methods.cli import run_command
from methods.data.caption_augment import extra_tokens
from methods.data.datasets import DatasetPayload, load_dataset_payload
from methods.data.text import Vocabulary, load_vocabulary
from methods.errors import HarnessError
from methods.features.image_transforms import evaluation_images
from methods.features.images import ImageFiles
from methods.io import read_json, save_npy
from methods.job_records import RunEvaluation
from methods.metrics.evaluation import evaluate_split, split_relevances
from methods.metrics.protocols import statistics_result
from methods.model_kinds import MODEL_KINDS, image_input_of
from methods.model_kinds.element_views import check_elements, parse_view
from methods.paths import eval_file, model_file, sims_file, train_log
from methods.runtime import compute_setup, provenance, resolve_device
from methods.scoring import add_block_argument, block_provenance, use_block_budget


def training_environment(run_dir: str | Path) -> dict | None:
    """Where and how the run's weights were trained (its train_log.json: the training job's
    provenance and precision), so that an evaluation says it even when run on another machine;
    None for an imported run of the authors' weights, trained elsewhere."""
    log = Path(train_log(run_dir))
    if not log.is_file():
        return None
    record = read_json(log, "a training log (train_log.json)")
    return {**record["provenance"], "precision": record["precision"]}


def checked_views(views: list[str] | None, model_cfg: dict, model_path: Path, run_dir: Path) -> dict:
    """Evaluation view -> the set elements it selects (``parse_view``), each checked against the
    model's set sizes; a model that does not embed items as sets has none."""
    elements = {view: parse_view(view) for view in views or []}
    if elements:
        sizes = MODEL_KINDS.get(model_cfg["kind"]).set_sizes(model_cfg)
        if sizes is None:
            raise HarnessError(f"{model_path}: evaluation views select set elements, but a "
                               f"{model_cfg['kind']} model does not embed items as sets")
        for view, chosen in elements.items():
            check_elements(chosen, sizes, f"evaluation view '{view}' of {run_dir}")
    return elements


def training_vocabulary(vocab_path: str | Path, ckpt: dict, model_path: Path) -> Vocabulary:
    """The vocabulary file, checked to be the one the model was trained with (its size)."""
    vocab = load_vocabulary(vocab_path)
    extra = extra_tokens(ckpt["config"]["training"], ckpt["config"]["model"].get("text"))   # <mask> of caption augmentation: an id past the vocabulary
    if len(vocab) + extra != ckpt["vocab_size"]:
        raise HarnessError(f"{vocab_path} has {len(vocab)} words{f' (+{extra} training-only token)' if extra else ''} "
                           f"but {model_path} was trained with {ckpt['vocab_size']}: evaluate with the "
                           f"training vocabulary")
    return vocab


def split_inputs(payload: DatasetPayload, split: str, features_dir: str | Path, ckpt: dict):
    """(the split's data, its image features, its image files) for the model: the images when its
    CNN was trained (the kept epoch fine-tuned it), else its image input's cached features."""
    ds, model_cfg = payload.dataset, ckpt["config"]["model"]
    if ckpt["best"]["finetuned"]:
        data = payload.split(split)
        return data, None, ImageFiles(payload.paths["images_dir"], data.filenames,
                                      evaluation_images(ckpt["config"]["training"], ds["features"]["resize"],
                                                        ds["features"]["crop"]))
    data = image_input_of(model_cfg).load(payload, split, features_dir, model_cfg)
    return data, data.features, None


def print_results(split: str, view: str | None, results: list[dict]) -> None:
    for r in results:
        print(f"{split}{'' if view is None else '@' + view} {r['protocol']}: "
              + ", ".join(f"{k} {v:.4g}" for k, v in r["metrics"].items()))
        if "training_check" in r:
            check = r["training_check"]
            print(f"  training check: {check['main_metric']} {check['value']:.4g} vs chance {check['chance']:.4g} "
                  f"(max {check['max']:g}, gain share {check['gain_share']:.3g}), score spread "
                  f"{check['score_spread']:.3g}")


def evaluate_run(run_dir: Path, split: str, payload: DatasetPayload, features_dir: str | Path, vocab_path: str | Path,
                 device, relevances: dict | None = None, views: list[str] | None = None,
                 block_elements: list[tuple[str, int]] = ()) -> list[dict]:
    """Evaluate the trained model ``run_dir/model.pt`` on one test split under every protocol of
    its dataset; writes ``eval_<split>.json`` and ``sims_<split>.npy`` and returns the results.
    ``relevances``: ``split_relevances(payload, split)``, read before training when given.
    ``views``: evaluation views instead (``eval_<split>@<view>.json`` and ``sims_<split>@<view>.npy``
    each): the split is encoded once and scored once per view. ``block_elements``: (device, budget)
    pairs of a cross-attention model's score blocks (config ``scoring.block_elements``)."""
    t0 = time.time()
    ds = payload.dataset
    if relevances is None:
        relevances = split_relevances(payload, split)  # before any encoding: a bad positives file fails fast
    model_path = Path(model_file(run_dir))
    model, ckpt = api.load_model(model_path, device, payload.backbones, payload.text_encoders)
    use_block_budget(model, block_elements, device)
    cfg = ckpt["config"]
    elements = checked_views(views, cfg["model"], model_path, run_dir)
    vocab = training_vocabulary(vocab_path, ckpt, model_path)
    batch_size, amp = cfg["training"]["eval_batch_size"], cfg["training"]["amp"]
    data, features, images = split_inputs(payload, split, features_dir, ckpt)
    t_enc = time.time()
    img = api.encode_images(model, features, images=images, batch_size=batch_size, device=device, amp=amp)
    txt = api.encode_texts(model, data.captions, vocab, batch_size=batch_size, device=device, amp=amp)
    t_encoded = time.time()
    # label prediction (micro-F1) is a protocol of models with a label head; evaluate_split skips it for the others
    predictions = model.label_predictions(img, txt)
    trained_in = training_environment(run_dir)   # read once for every view

    def evaluate_view(view: str | None) -> list[dict]:
        t_view = time.time()
        chosen = elements.get(view)
        sel_img, sel_txt = (img, txt) if chosen is None else model.select_elements(
            img, txt, chosen["image_elements"], chosen["text_elements"])
        scores = api.score(model, sel_img, sel_txt, amp=amp)
        t_score = time.time()
        results = evaluate_split(scores, ds["protocols"], split, relevances, ds, predictions)
        # statistics describe the model's whole sets: a view of some elements reports its metrics only
        statistics = model.evaluation_statistics(img, txt) if view is None else {}
        if statistics:
            results.append(statistics_result(statistics, split, len(data.captions) // data.texts_per_image))
        save_npy(sims_file(run_dir, split, view), scores.numpy())
        RunEvaluation(kind="single", ensemble_size=1, dataset=payload.name, split=split, view=view, config=cfg,
                      config_hash=ckpt["config_hash"], seed=ckpt["seed"], best_epoch=ckpt["best"], results=results,
                      provenance={**provenance(device), **block_provenance(model), "training": trained_in},
                      wall_seconds={"encode_and_score": (t_encoded - t_enc) + (t_score - t_view),
                                    "total": time.time() - t0}).write(eval_file(run_dir, split, view))
        print_results(split, view, results)
        return results

    if not elements:
        return evaluate_view(None)
    return [r for view in elements for r in evaluate_view(view)]


def _evaluate(args) -> None:
    payload = load_dataset_payload(args.dataset_config)
    views = args.views.split(",") if args.views else None
    evaluate_run(Path(args.run_dir), args.split, payload, args.features_dir, args.vocab, resolve_device(args.device),
                 views=views, block_elements=args.block_elements)


def _arguments(parser) -> None:
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--split", required=True)
    parser.add_argument("--features-dir", required=True)
    parser.add_argument("--vocab", required=True)
    parser.add_argument("--views", help="evaluation views of a set model, comma-separated, e.g. i0_tall,iall_t1 "
                                        "(methods.model_kinds.element_views)")
    add_block_argument(parser)


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, _evaluate, argv, compute=compute_setup)


if __name__ == "__main__":
    main()
