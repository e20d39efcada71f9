"""Train one (experiment, seed): ``python -m methods.train ...`` (called by the Snakemake rule ``train``).

Writes ``<run-dir>/model.pt`` (weights of the best validation-RSUM epoch) and
``<run-dir>/train_log.json``; per-epoch checkpoints live in ``<run-dir>/checkpoints/`` so a
killed job resumes when re-run.
"""
from __future__ import annotations

import time
from pathlib import Path

from methods.cli import entry_parser, run_cli
from methods.config import config_hash
from methods.data.inputs import load_split_data
from methods.data.text import Vocabulary
from methods.errors import HarnessError
from methods.io import read_json, torch_save, write_json
from methods.models import build_model, image_input
from methods.runtime import provenance, resolve_device, seed_everything, set_threads
from methods.training.loop import TrainInputs, load_checkpoint, train


def main(argv: list[str] | None = None) -> None:
    from methods.workflow import load_dataset_payload

    parser = entry_parser(__doc__, compute=True)
    parser.add_argument("--experiment", required=True, help="resolved method config JSON")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--features-dir", required=True, help="cached pooled features, or precomputed regions")
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
        source = image_input(cfg["model"])
        splits = {name: load_split_data(payload, name, source, args.features_dir) for name in ("train", "dev")}
        vocab = Vocabulary.load(args.vocab)
        vocab.check_covers(splits["train"].captions[:5000], args.vocab)
        image_dim = splits["train"].features.dim
        n_regions = splits["train"].features.regions  # None for pooled features
        word_vectors = None
        if cfg["model"].get("text", {}).get("word_init") == "glove":
            from methods.data.glove import load_word_vectors

            if not paths["glove"]:
                raise HarnessError("word_init: glove needs datasets.<name>.glove (a GloVe text file) in config")
            word_vectors = load_word_vectors(paths["glove"], vocab, cfg["model"]["text"]["word_dim"])
        model = build_model(cfg["model"], len(vocab), payload["backbones"], word_vectors, image_dim=image_dim,
                            n_regions=n_regions)
        run_dir = Path(args.run_dir)
        inp = TrainInputs(cfg, config_hash(cfg), args.seed, run_dir, device, vocab, splits["train"], splits["dev"],
                          Path(paths["images_dir"]) if paths["images_dir"] else None,
                          ds["features"]["crop"], ds["features"]["resize"], ds["val_max_images"],
                          word_vectors, progress=not args.no_progress)
        result = train(model, inp)
        best = load_checkpoint(result["best_path"])
        state = best["model"]
        if not best["best"]["finetuned"]:  # a frozen CNN is not part of the result (cached features are)
            state = {k: v for k, v in state.items() if not k.startswith("backbone.")}
        torch_save(run_dir / "model.pt", {"format": 1, "config": cfg, "config_hash": config_hash(cfg),
                                          "seed": args.seed, "vocab_size": len(vocab), "image_dim": image_dim,
                                          "n_regions": n_regions,
                                          "best": best["best"],
                                          "state_dict": state})
        write_json(run_dir / "train_log.json", {
            "config": cfg, "config_hash": config_hash(cfg), "seed": args.seed, "best": best["best"],
            "history": result["history"], "provenance": provenance(device),
            "wall_seconds": {"train": result["train_seconds"], "total": time.time() - t0}})
        b = best["best"]
        print(f"best validation {b['metric']} {b['value']:.2f} (rsum {b['rsum']:.2f}) at stage {b['stage']} epoch {b['epoch']}")

    run_cli(_run)


if __name__ == "__main__":
    main()
