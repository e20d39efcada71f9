"""Train one (experiment, seed): ``python -m methods.train ...`` (called by the Snakemake rule ``train``).

Writes ``<run-dir>/model.pt`` (weights of the best validation-RSUM epoch) and
``<run-dir>/train_log.json``; per-epoch checkpoints live in ``<run-dir>/checkpoints/`` so a
killed job resumes when re-run.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from methods.cli import entry_parser, run_cli
from methods.config import config_hash
from methods.data.precomp import check_npy_header
from methods.data.text import Vocabulary
from methods.errors import HarnessError
from methods.io import read_json, torch_save, write_json
from methods.models import build_model
from methods.runtime import provenance, resolve_device, seed_everything, set_threads
from methods.training.loop import TrainInputs, load_checkpoint, train


def main(argv: list[str] | None = None) -> None:
    from methods.workflow import load_dataset_payload, payload_splits

    parser = entry_parser(__doc__, compute=True)
    parser.add_argument("--experiment", required=True, help="resolved method config JSON")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--features-dir", required=True)
    parser.add_argument("--vocab", required=True)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    def _run() -> None:
        t0 = time.time()
        set_threads(args.threads)
        payload = load_dataset_payload(args.dataset_config)
        ds, paths = payload["dataset"], payload["paths"]
        cfg = read_json(args.experiment)
        device = resolve_device(args.device)
        seed_everything(args.seed)
        splits = payload_splits(payload, ["train", "dev"])
        vocab = Vocabulary.load(args.vocab)
        vocab.check_covers(splits["train"].captions[:5000], args.vocab)
        feats = Path(args.features_dir)
        pooled = {}
        for name in ("train", "dev"):
            path = feats / f"{name}_pooled.npy"
            check_npy_header(path, (len(splits[name]), None))
            pooled[name] = np.load(path, mmap_mode="r")
        word_vectors = None
        if cfg["model"].get("text", {}).get("word_init") == "glove":
            from methods.data.glove import load_word_vectors

            if not paths["glove"]:
                raise HarnessError("word_init: glove needs datasets.<name>.glove (a GloVe text file) in config")
            word_vectors = load_word_vectors(paths["glove"], vocab, cfg["model"]["text"]["word_dim"])
        model = build_model(cfg["model"], len(vocab), payload["backbones"], word_vectors)
        run_dir = Path(args.run_dir)
        inp = TrainInputs(cfg, config_hash(cfg), args.seed, run_dir, device, vocab, splits["train"], splits["dev"],
                          pooled["train"], pooled["dev"], Path(paths["images_dir"]) if paths["images_dir"] else None,
                          ds["features"]["crop"], ds["features"]["resize"], ds["val_max_images"],
                          word_vectors, progress=not args.no_progress)
        result = train(model, inp)
        best = load_checkpoint(result["best_path"])
        state = best["model"]
        if not best["best"]["finetuned"]:  # a frozen CNN is not part of the result (cached features are)
            state = {k: v for k, v in state.items() if not k.startswith("backbone.")}
        torch_save(run_dir / "model.pt", {"format": 1, "config": cfg, "config_hash": config_hash(cfg),
                                          "seed": args.seed, "vocab_size": len(vocab), "best": best["best"],
                                          "state_dict": state})
        write_json(run_dir / "train_log.json", {
            "config": cfg, "config_hash": config_hash(cfg), "seed": args.seed, "best": best["best"],
            "history": result["history"], "provenance": provenance(device),
            "wall_seconds": {"train": result["train_seconds"], "total": time.time() - t0}})
        print(f"best validation rsum {best['best']['rsum']:.2f} at stage {best['best']['stage']} epoch {best['best']['epoch']}")

    run_cli(_run)


if __name__ == "__main__":
    main()
