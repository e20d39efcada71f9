"""Import an author's released checkpoint as a run folder, then evaluate it: ``model.pt`` (the
project's model with the authors' weights) and ``vocab.json`` (their vocabulary, read with the
dataset's tokenizer; for a BERT run, the captions the DAG tokenised with the BERT folder), then ``eval_<split>.json`` and ``sims_<split>.npy`` for each ``--evaluate``
split, as a training job ends. No training.

The experiment config (``--experiment``: a resolved method config JSON, as a training job reads)
names the model kind, and so the importer (``methods.released.importers``); the checkpoint's own
options set the model's widths and switches. Checked before anything is written: the checkpoint is
of that kind and was trained on this dataset, its image features have the dataset's shape, and its
vocabulary has the size its weights were trained with. Both files are read in a child process
within ``--reader-memory-mb`` and ``--reader-seconds`` (config ``untrusted_files``), without running
anything in them (``methods.untrusted.safe_load``); whatever is wrong with them is one line naming
the file. The run folder must be empty or absent:
the model and vocabulary are written in a temporary folder that takes its place at the end, so a
failed import leaves nothing, and no evaluation of another model can stay beside them.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from methods.cli import run_command
from methods.config import config_hash
from methods.data.caption_augment import extra_tokens
from methods.data.datasets import DatasetPayload, load_dataset_payload
from methods.data.text import load_vocabulary
from methods.data.wordpiece import WordPieceVocabulary
from methods.data.inputs import region_shape
from methods.errors import HarnessError, first_line, printable
from methods.evaluate import evaluate_run
from methods.io import new_temp_folder
from methods.metrics.evaluation import split_relevances
from methods.model_kinds.method_schema import read_experiment
from methods.models.checkpoint import save_trained_model
from methods.paths import model_file, run_vocab
from methods.plan.datasets import reported_dataset
from methods.released.importers import get_importer
from methods.untrusted.safe_load import ReaderLimits
from methods.runtime import compute_setup, resolve_device
from methods.scoring import add_block_argument


def check_expected(options: dict, expect: dict, where: str) -> None:
    """The options a paper-file row expects of the checkpoint (``released.expect``), as the file says."""
    for key, value in expect.items():
        if key not in options:
            raise HarnessError(f"{where}: the row expects {key}={value!r}, but the importer reads no option "
                               f"'{key}' from the file (it reads: {', '.join(sorted(options))})")
        if options[key] != value:
            raise HarnessError(f"{where}: trained with {key}={options[key]!r}, but the row expects {key}={value!r}: "
                               f"is the config key pointing at another run?")


def bert_text(released) -> bool:
    return released.model_config.get("text", {}).get("kind") == "bert"


def wordpiece_captions(path: str | Path, encoder: str) -> WordPieceVocabulary:
    """The captions the DAG tokenised with the BERT folder of ``encoder`` (the harness's own file:
    the authors release no vocabulary with a BERT run, the folder's vocab.txt is theirs)."""
    vocab = load_vocabulary(path)
    if not isinstance(vocab, WordPieceVocabulary) or vocab.encoder != encoder:
        found = getattr(vocab, "encoder", "a word vocabulary")
        raise HarnessError(f"{path}: not the captions tokenised for text encoder '{encoder}' ({found})")
    return vocab


def import_released(payload: DatasetPayload, cfg: dict, checkpoint: str | Path, vocab_path: str | Path,
                    run_dir: str | Path, expect: dict | None = None, *, limits: ReaderLimits) -> None:
    """The checkpoint and its vocabulary as the run folder ``run_dir`` (empty or absent), both
    read within ``limits``; ``expect``: options the checkpoint must hold (the row's
    ``released.expect``)."""
    run_dir = Path(run_dir)
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        held = sorted(p.name for p in run_dir.iterdir())[:3] if run_dir.is_dir() else []
        raise HarnessError(f"{run_dir}: not an empty folder{f' (it holds {held})' if held else ''}; an import writes "
                           f"a run folder of its own (delete it to import again)")
    kind = cfg["model"]["kind"]
    importer = get_importer(kind, str(checkpoint))
    try:
        released = importer.import_checkpoint(Path(checkpoint), cfg["model"], payload.dataset, limits,
                                              payload.text_encoders, payload.backbones)
    except HarnessError:
        raise
    except Exception as exc:   # every check passed and still the file does not fit: one line all the same
        raise HarnessError(f"{checkpoint}: cannot be imported ({type(exc).__name__}: {first_line(exc)})") from None
    check_expected(released.provenance.get("options", {}), expect or {}, str(checkpoint))
    dataset = reported_dataset(payload.name, payload.dataset)
    if released.source_dataset != dataset:
        raise HarnessError(f"{checkpoint}: trained on {released.source_dataset}, but dataset '{payload.name}' "
                           f"is {dataset}")
    _, dim = (None, None) if released.runs_cnn else region_shape(payload.dataset)
    if dim is not None and dim != released.image_shape["dim"]:
        raise HarnessError(f"{checkpoint}: trained on {released.image_shape['dim']}-d region features, but "
                           f"datasets.{payload.name}.precomp.feature_dim is {dim}")
    try:
        vocab = (wordpiece_captions(vocab_path, released.model_config["text"]["encoder"]) if bert_text(released)
                 else importer.read_vocabulary(Path(vocab_path), payload.tokenizer(), limits))
    except HarnessError:
        raise
    except Exception as exc:
        raise HarnessError(f"{vocab_path}: cannot be read as a vocabulary ({type(exc).__name__}: "
                           f"{first_line(exc)})") from None
    if len(vocab) + released.extra_tokens != released.vocab_size:
        past = f" ({released.extra_tokens} of its ids past the words)" if released.extra_tokens else ""
        raise HarnessError(f"{vocab_path} has {len(vocab)} words, but {checkpoint} was trained with "
                           f"{released.vocab_size}{past}: give the vocabulary released with it")
    # the authors trained the weights: the method's training-only token (<mask>, methods.data.caption_augment)
    # stays in the run's config only where their embedding has its row (VSE-infinity's), so that the
    # run's ids past the words are the file's
    training = cfg["training"]
    if not released.extra_tokens:
        training = {k: v for k, v in training.items() if k not in ("caption_augment", "masked_prediction")}
    elif extra_tokens(training) != released.extra_tokens:
        raise HarnessError(f"{checkpoint}: its embedding has {released.extra_tokens} token ids past the words, but "
                           f"the method's training adds {extra_tokens(training)}")
    if released.images is not None:   # the image transform their CNN was trained and evaluated with
        training = {**training, "images": released.images}
    run_cfg = {**cfg, "model": released.model_config, "training": training}
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = new_temp_folder(run_dir)
    try:
        vocab.save(run_vocab(staging))
        # seed 0 stands for the authors' one training (no public code sets a seed); ``best`` says whose
        save_trained_model(model_file(staging), run_cfg, config_hash(run_cfg), 0, released.vocab_size,
                           released.image_shape,
                           {"finetuned": released.runs_cnn, "epoch": released.provenance.get("epoch"),
                            "released": {**released.provenance, "checkpoint": str(checkpoint)}},
                           released.state_dict)
        if run_dir.exists():
            run_dir.rmdir()   # empty (checked above): the staging folder takes its place
        os.replace(staging, run_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(printable(f"{checkpoint}: {kind} ({released.provenance['code']}, epoch {released.provenance.get('epoch')}) "
                    f"-> {model_file(run_dir)}"))


def _import(args) -> None:
    payload = load_dataset_payload(args.dataset_config)
    cfg = read_experiment(args.experiment, payload)
    # the test relevances first: a bad positives file fails before the import, not after it
    relevances = {split: split_relevances(payload, split) for split in args.evaluate}
    limits = ReaderLimits(memory_mb=args.reader_memory_mb, seconds=args.reader_seconds)
    import_released(payload, cfg, args.checkpoint, args.vocab, args.run_dir, json.loads(args.expect), limits=limits)
    device = resolve_device(args.device)
    for split in args.evaluate:
        evaluate_run(Path(args.run_dir), split, payload, args.features_dir, run_vocab(args.run_dir), device,
                     relevances[split], block_elements=args.block_elements)


def _arguments(parser) -> None:
    parser.add_argument("--experiment", required=True, help="resolved method config JSON (its model kind)")
    parser.add_argument("--checkpoint", required=True, help="the authors' checkpoint, e.g. model_best.pth.tar")
    parser.add_argument("--vocab", required=True, help="the vocabulary released with it (a BERT run: the captions tokenised for its BERT folder)")
    parser.add_argument("--run-dir", required=True, help="the run folder to write (empty or absent)")
    parser.add_argument("--expect", default="{}", help="JSON object: options the checkpoint must hold, "
                                                       "e.g. '{\"module_name\": \"SAF\"}'")
    parser.add_argument("--evaluate", nargs="*", default=[], metavar="SPLIT",
                        help="test splits to evaluate the imported model on (eval_<split>.json, sims_<split>.npy)")
    parser.add_argument("--features-dir", help="the image input of the evaluated splits (precomputed regions)")
    parser.add_argument("--reader-memory-mb", type=int, required=True,
                        help="memory the child that reads each file may allocate (config untrusted_files.memory_mb)")
    parser.add_argument("--reader-seconds", type=float, required=True,
                        help="CPU and wall-clock seconds of each read (config untrusted_files.seconds)")
    add_block_argument(parser)


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, _import, argv, compute=compute_setup)


if __name__ == "__main__":
    main()
