"""Evaluate one trained run on one test split under every protocol of the dataset.

Writes ``eval_<split>.json`` (metrics per protocol, config, hash, commit, seed, device, wall
times) and ``sims_<split>.npy`` (the score matrix, used by ensembles).
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from methods.cli import entry_parser, run_cli
from methods.data.inputs import load_split_data
from methods.data.text import Vocabulary
from methods.errors import HarnessError, first_line
from methods.evaluation import encode_split, score_matrix
from methods.features.backbone import eval_transform
from methods.features.images import ImageFiles
from methods.io import save_npy, write_json
from methods.metrics.protocols import evaluate_protocol, get_protocol
from methods.models import build_model, image_input
from methods.runtime import provenance, resolve_device, set_threads


def load_model(path: Path, backbones: dict, device: torch.device):
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        cfg = ckpt["config"]
    except Exception as exc:
        raise HarnessError(f"model file {path} is corrupt or unreadable ({type(exc).__name__}: {first_line(exc)}); "
                           f"delete it and re-run its training job") from None
    finetuned = ckpt["best"]["finetuned"]
    # The trained weights overwrite whatever the backbone is built with; never load ImageNet here.
    backbones = {k: {**v, "weights": "none"} for k, v in backbones.items()}
    model = build_model(cfg["model"], ckpt["vocab_size"], backbones, image_dim=ckpt.get("image_dim"),
                        n_regions=ckpt.get("n_regions"))
    missing, unexpected = model.load_state_dict(ckpt["state_dict"], strict=False)
    if unexpected or any(not k.startswith("backbone.") or finetuned for k in missing):
        raise HarnessError(f"{path}: weights do not match the model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    return model.to(device).eval(), ckpt, finetuned


def main(argv: list[str] | None = None) -> None:
    from methods.workflow import load_dataset_payload, payload_splits

    parser = entry_parser(__doc__, compute=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--split", required=True)
    parser.add_argument("--features-dir", required=True)
    parser.add_argument("--vocab", required=True)
    args = parser.parse_args(argv)

    def _run() -> None:
        t0 = time.time()
        set_threads(args.threads)
        payload = load_dataset_payload(args.dataset_config)
        ds, paths = payload["dataset"], payload["paths"]
        device = resolve_device(args.device)
        run_dir = Path(args.run_dir)
        model, ckpt, finetuned = load_model(run_dir / "model.pt", payload["backbones"], device)
        vocab = Vocabulary.load(args.vocab)
        if len(vocab) != ckpt["vocab_size"]:
            raise HarnessError(f"{args.vocab} has {len(vocab)} words but {run_dir / 'model.pt'} was trained with "
                               f"{ckpt['vocab_size']}: evaluate with the training vocabulary")
        images = None
        if finetuned:  # the CNN was trained: run it on the images
            split = payload_splits(payload, [args.split])[args.split]
            captions, n_images = split.captions, len(split)
            images = ImageFiles(paths["images_dir"], split.filenames,
                                eval_transform(ds["features"]["resize"], ds["features"]["crop"]))
            features = None
        else:
            data = load_split_data(payload, args.split, image_input(ckpt["config"]["model"]), args.features_dir)
            captions, n_images, features = data.captions, len(data), data.features
        tokens = [vocab.encode(c) for c in captions]
        t_enc = time.time()
        img, cap = encode_split(model, tokens, n_images, device, ckpt["config"]["training"]["eval_batch_size"],
                                features=features, images=images, amp=ckpt["config"]["training"]["amp"])
        scores = score_matrix(model, img, cap, amp=ckpt["config"]["training"]["amp"])
        t_score = time.time()
        results = [evaluate_protocol(scores, get_protocol(p)) for p in ds["protocols"]
                   if get_protocol(p).split == args.split]
        save_npy(run_dir / f"sims_{args.split}.npy", scores.numpy())
        write_json(run_dir / f"eval_{args.split}.json", {
            "kind": "single", "ensemble_size": 1, "dataset": payload["name"], "split": args.split,
            "config": ckpt["config"], "config_hash": ckpt["config_hash"], "seed": ckpt["seed"],
            "best_epoch": ckpt["best"], "results": results, "provenance": provenance(device),
            "wall_seconds": {"encode_and_score": t_score - t_enc, "total": time.time() - t0}})
        for r in results:
            m = r["metrics"]
            print(f"{r['protocol']}: i2t {m['i2t_r1']:.1f}/{m['i2t_r5']:.1f}/{m['i2t_r10']:.1f} "
                  f"t2i {m['t2i_r1']:.1f}/{m['t2i_r5']:.1f}/{m['t2i_r10']:.1f} rsum {m['rsum']:.1f}")

    run_cli(_run)


if __name__ == "__main__":
    main()
