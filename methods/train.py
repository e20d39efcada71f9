"""Train one (experiment, seed): ``python -m methods.train ...`` (called by the Snakemake rule
``train_<dataset>``), then evaluate the kept model on the test splits named by ``--evaluate``.

Writes ``<run-dir>/model.pt`` (weights of the best validation epoch) and
``<run-dir>/train_log.json``, then per test split ``eval_<split>.json`` and ``sims_<split>.npy``
(``methods.evaluate``); per-epoch checkpoints live in ``<run-dir>/checkpoints/`` so a killed job
resumes when re-run (a finished training resumes straight to its evaluation). Evaluating here
rather than in a job of its own saves a process start per run: torch's import is most of a small
evaluation's time.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from methods import api
from methods.cli import run_command
from methods.config import config_hash
from methods.data.caption_augment import extra_tokens
from methods.data.datasets import load_dataset_payload
from methods.data.text import Vocabulary, load_vocabulary
from methods.data.word_vectors import initial_word_vectors
from methods.evaluate import evaluate_run
from methods.io import write_json
from methods.metrics.evaluation import split_relevances
from methods.features.architectures import cached_shape
from methods.model_kinds import finetunes, image_input_of, reads_cached_features
from methods.model_kinds.method_schema import read_experiment
from methods.models.checkpoint import save_trained_model
from methods.paths import model_file, train_log
from methods.runtime import compute_setup, provenance, resolve_device, seed_everything
from methods.scoring import add_block_argument, use_block_budget
from methods.training.loop import TrainInputs, load_checkpoint, train


def _train(args) -> None:
    t0 = time.time()
    payload = load_dataset_payload(args.dataset_config)
    ds, paths = payload.dataset, payload.paths
    cfg = read_experiment(args.experiment, payload)
    # the test relevances first: a bad positives file fails before training, not after it
    relevances = {split: split_relevances(payload, split) for split in args.evaluate}
    device = resolve_device(args.device)
    seed_everything(args.seed)
    kind = image_input_of(cfg["model"])
    if reads_cached_features(cfg):
        splits = {name: kind.load(payload, name, args.features_dir, cfg["model"]) for name in ("train", "dev")}
        image_shape = splits["train"].features.image_shape()
    else:   # every stage trains the CNN on images: the cached maps are never read, nor computed
        splits = {name: kind.without_cache(payload, name) for name in ("train", "dev")}
        image_shape = cached_shape(kind.name, payload.backbones[cfg["model"]["backbone"]]["arch"], cfg["model"],
                                   ds["features"]["crop"])
    vocab = load_vocabulary(args.vocab)
    vocab.check_covers(splits["train"].captions[:5000], args.vocab)
    vectors = initial_word_vectors(cfg["model"], paths, vocab)
    word_vectors = None if vectors is None else torch.from_numpy(vectors)
    # token ids past the vocabulary (``<mask>`` of caption augmentation) start from the random init
    n_tokens = len(vocab) + extra_tokens(cfg["training"], cfg["model"].get("text"))
    if word_vectors is not None and n_tokens > len(word_vectors):
        word_vectors = torch.cat([word_vectors, word_vectors.new_zeros(n_tokens - len(word_vectors), word_vectors.shape[1])])
    model = api.build_model(cfg, n_tokens, image_shape, payload.backbones, word_vectors, cnn=finetunes(cfg),
                            text_encoders=payload.text_encoders)
    use_block_budget(model, args.block_elements, device)
    run_dir = Path(args.run_dir)
    inp = TrainInputs(cfg, config_hash(cfg), args.seed, run_dir, device, vocab, splits["train"], splits["dev"],
                      Path(paths["images_dir"]) if paths["images_dir"] else None,
                      ds["features"]["crop"], ds["features"]["resize"], ds["val_max_images"],
                      progress=not args.no_progress, loader_workers=loader_workers(cfg["training"], args.threads))
    result = train(model, inp)
    best = load_checkpoint(result["best_path"])
    state = best["model"]
    if not best["best"]["finetuned"]:  # a frozen CNN is not part of the result (cached features are)
        state = {k: v for k, v in state.items() if not k.startswith("backbone.")}
    save_trained_model(Path(model_file(run_dir)), cfg, config_hash(cfg), args.seed, n_tokens, image_shape,
                       best["best"], state)
    write_json(train_log(run_dir), {
        "config": cfg, "config_hash": config_hash(cfg), "seed": args.seed, "best": best["best"],
        "history": result["history"], "precision": result["precision"],
        "provenance": {**provenance(device), "loader_workers": inp.loader_workers},
        "wall_seconds": {"train": result["train_seconds"], "total": time.time() - t0}})
    b = best["best"]
    print(f"best validation {b['metric']} {b['value']:.2f} (rsum {b['rsum']:.2f}) at stage {b['stage']} epoch {b['epoch']}")
    for split in args.evaluate:
        evaluate_run(run_dir, split, payload, args.features_dir, args.vocab, device, relevances[split],
                     block_elements=args.block_elements)


def loader_workers(training_cfg: dict, threads: int) -> int:
    """Loader worker processes: the method config's ``training.num_workers`` (the source's), at
    most the job's threads (8 workers on 2 cores only compete with the step); a run's numbers do
    not depend on it (each item draws from its own seed)."""
    return min(training_cfg["num_workers"], max(1, threads))


def _arguments(parser) -> None:
    parser.add_argument("--experiment", required=True, help="resolved method config JSON")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--features-dir", required=True, help="where the model's image input lives")
    parser.add_argument("--vocab", required=True)
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--evaluate", nargs="*", default=[], metavar="SPLIT",
                        help="test splits to evaluate the kept model on (eval_<split>.json, sims_<split>.npy)")
    add_block_argument(parser)


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, _train, argv, compute=compute_setup)


if __name__ == "__main__":
    main()
