"""Import an author's released checkpoint as a run folder: ``model.pt`` (the project's model with
the authors' weights) and ``vocab.json`` (their vocabulary, with the dataset's tokenizer), which
``python -m methods.evaluate --run-dir …`` then evaluates like a trained run. No training.

The experiment config (``--experiment``: a resolved method config JSON, as a training job reads)
names the model kind, and so the importer (``methods.released``); the checkpoint's own options
set the model's widths and switches. Checked before anything is written: the checkpoint is of
that kind and was trained on this dataset, its image features have the dataset's shape, and its
vocabulary has the size its weights were trained with.
"""
from __future__ import annotations

from pathlib import Path

from methods.cli import run_command
from methods.config import config_hash, validate
from methods.data.datasets import load_dataset_payload, payload_tokenizer
from methods.data.inputs import region_shape
from methods.data.text import Vocabulary
from methods.errors import HarnessError
from methods.io import read_json
from methods.models.checkpoint import save_trained_model
from methods.paths import model_file
from methods.plan.datasets import reported_dataset
from methods.released import sgraf

IMPORTERS = {"sgraf": sgraf.import_checkpoint}   # model kind -> importer of its authors' checkpoints
VOCAB_FILE = "vocab.json"


def import_released(payload: dict, cfg: dict, checkpoint: str | Path, vocab_path: str | Path,
                    run_dir: str | Path) -> None:
    kind = cfg["model"]["kind"]
    if kind not in IMPORTERS:
        raise HarnessError(f"no importer of released checkpoints for model kind '{kind}' "
                           f"(importers: {', '.join(sorted(IMPORTERS))})")
    n_regions, dim = region_shape(payload["dataset"])
    released = IMPORTERS[kind](checkpoint, cfg["model"], n_regions)
    dataset = reported_dataset(payload["name"], payload["dataset"])
    if released.source_dataset != dataset:
        raise HarnessError(f"{checkpoint}: trained on {released.source_dataset}, but dataset '{payload['name']}' "
                           f"is {dataset}")
    if dim is not None and dim != released.image_shape["dim"]:
        raise HarnessError(f"{checkpoint}: trained on {released.image_shape['dim']}-d region features, but "
                           f"datasets.{payload['name']}.precomp.feature_dim is {dim}")
    vocab = Vocabulary.load(vocab_path, payload_tokenizer(payload))
    if len(vocab) != released.vocab_size:
        raise HarnessError(f"{vocab_path} has {len(vocab)} words, but {checkpoint} was trained with "
                           f"{released.vocab_size}: give the vocabulary released with it")
    run_cfg = {**cfg, "model": released.model_config}
    run_dir = Path(run_dir)
    vocab.save(run_dir / VOCAB_FILE)
    # seed 0 stands for the authors' one training (no public code sets a seed); ``best`` says whose
    save_trained_model(model_file(run_dir), run_cfg, config_hash(run_cfg), 0, released.vocab_size,
                       released.image_shape, {"finetuned": False, "epoch": released.provenance.get("epoch"),
                                              "released": {**released.provenance, "checkpoint": str(checkpoint)}},
                       released.state_dict)
    print(f"{checkpoint}: {kind} ({released.provenance['code']}, epoch {released.provenance.get('epoch')}) "
          f"-> {model_file(run_dir)}")


def _import(args) -> None:
    payload = load_dataset_payload(args.dataset_config)
    cfg = read_json(args.experiment)
    validate({k: v for k, v in cfg.items() if k != "numerics"}, "method", args.experiment)
    import_released(payload, cfg, args.checkpoint, args.vocab, args.run_dir)


def _arguments(parser) -> None:
    parser.add_argument("--experiment", required=True, help="resolved method config JSON (its model kind)")
    parser.add_argument("--checkpoint", required=True, help="the authors' checkpoint, e.g. model_best.pth.tar")
    parser.add_argument("--vocab", required=True, help="the vocabulary released with it")
    parser.add_argument("--run-dir", required=True)


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, _import, argv)


if __name__ == "__main__":
    main()
