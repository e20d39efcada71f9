"""Makes the PCME fixtures in tests/data/released/pcme/ the way the authors' code writes them
(Chun et al., CVPR 2021; github.com/naver-ai/pcme, main): their model definition (models/pcme.py
``PCME``: ``EncoderImage`` on torchvision's ResNet, ``EncoderText``, PIE-Net and the uncertainty
modules) and criterion (criterions/probemb.py ``MCSoftContrastiveLoss``: its shift and
negative_scale) at tiny widths, every tensor randomised (BatchNorm statistics included), saved as
their engine's ``save_models`` saves a run (model, criterion, AdamP optimizer, cosine scheduler,
config, word2idx, metadata with numpy-scalar scores as their evaluator returns them), their
vocabulary pickled as datasets/vocab.py reads it (a dict of idx, word2idx, idx2word), and what
their evaluation computes on fixed inputs: each item's mean and log standard deviation (their
encoders with ``n_samples_inference`` 0), the 7 samples their encoders draw (seeded here), and the
scores evaluate_recall_coco.py ranks by (``MatchingProbModule``: ``criterion.match_prob`` of each
query's samples against all the others', on the same samples).

Not part of the harness and not run by the tests: it needs a checkout of the authors' code.

    git clone https://github.com/naver-ai/pcme /tmp/pcme_src
    python tests/data/released/make_pcme_fixtures.py --source /tmp/pcme_src --out tests/data/released/pcme

What had to change in this process, and why:

- ``torchtext`` (models/caption_encoder.py imports it; only ``wemb_type: glove`` reads it, to copy
  GloVe vectors the randomisation overwrites) is an empty stand-in; the model is built with
  ``wemb_type: null`` while the saved config keeps ``glove``.
- Their config is a ``munch.Munch`` (attribute access and ``.get``); a dict subclass with attribute
  access stands in (their ``save_models`` saves ``munch.unmunchify(config)``, a plain dict).
- ``torchvision.models.resnet152`` (their ``getattr(models, config.cnn_type)(pretrained=True)``)
  is the tiny dilated ResNet of make_pvse_fixtures.py: a 28-px image gives the 7x7 map their
  ``EncoderImage.forward`` views.
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
import types
from pathlib import Path

import numpy as np
import torch
import torchvision
from adamp import AdamP
from nltk.tokenize import word_tokenize

from fixture_weights import randomise   # this folder's (the script's path)
from make_pvse_fixtures import CAPTIONS, IMAGE_SIZE, N_IMAGES, WORDS, tiny_resnet

EMBED_DIM, WORD_DIM, N_SAMPLES = 8, 6, 7


class AttrDict(dict):
    """munch.Munch's attribute access, for their model code."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def their_code(source: Path):
    sys.modules.setdefault("torchtext", types.ModuleType("torchtext"))
    torchvision.models.resnet152 = tiny_resnet
    sys.path.insert(0, str(source))
    from models.pcme import PCME   # the authors' models/pcme.py
    from criterions.probemb import MCSoftContrastiveLoss
    return PCME, MCSoftContrastiveLoss


def run_config() -> dict:
    """config/coco/pcme_coco.yaml at the fixture's widths (as their save_models writes it)."""
    return {"dataloader": {"batch_size": 128, "eval_batch_size": 8, "crop_size": 224, "word_dim": WORD_DIM,
                           "random_erasing_prob": 0.2, "caption_drop_prob": 0.1},
            "model": {"name": "pcme", "embed_dim": EMBED_DIM, "cnn_type": "resnet152", "wemb_type": "glove",
                      "word_dim": WORD_DIM, "cache_dir": None, "img_attention": True, "txt_attention": True,
                      "img_finetune": True, "txt_finetune": True, "img_probemb": True, "txt_probemb": True,
                      "no_sigma_ln": True, "n_samples_inference": N_SAMPLES, "eval_method": "matmul",
                      "pretrained_resnet_model_path": ""},
            "optimizer": {"name": "adamp", "learning_rate": 2e-5, "weight_decay": 0.0},
            "lr_scheduler": {"name": "cosine_annealing", "T_max": 30},
            "criterion": {"name": "pcme", "init_negative_scale": 15, "init_shift": 15, "num_samples": N_SAMPLES,
                          "vib_beta": 1e-5, "criterion__negative_sampling_ratio": -1},
            "train": {"pretrain_epochs": 30, "finetune_epochs": 30, "finetune_lr_decay": 0.1, "grad_clip": 2,
                      "use_fp16": True}}


def to_attr(tree):
    return AttrDict({k: to_attr(v) for k, v in tree.items()}) if isinstance(tree, dict) else tree


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True, type=Path, help="a checkout of naver-ai/pcme")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    PCME, Criterion = their_code(args.source.resolve())
    word2idx = {w: i for i, w in enumerate(WORDS)}
    with open(out / "coco_vocab.pkl", "wb") as f:   # datasets/vocab.py load_from_pickle reads this dict
        pickle.dump({"idx": len(WORDS), "word2idx": word2idx, "idx2word": dict(enumerate(WORDS))}, f)
    config = run_config()
    built = to_attr({**config, "model": {**config["model"], "wemb_type": None}})   # module doc: no GloVe
    gen = torch.Generator().manual_seed(2021)
    images = torch.randn(N_IMAGES, 3, IMAGE_SIZE, IMAGE_SIZE, generator=gen)
    np.save(out / "images.npy", images.numpy())
    ids = [[word2idx["<start>"], *(word2idx.get(t, word2idx["<unk>"])
                                   for t in word_tokenize(c.lower(), preserve_line=True)), word2idx["<end>"]]
           for c in CAPTIONS]
    order = sorted(range(len(CAPTIONS)), key=lambda i: len(ids[i]), reverse=True)   # pack_padded_sequence sorted
    lengths = torch.tensor([len(ids[i]) for i in order])
    tokens = torch.zeros(len(order), int(lengths.max()), dtype=torch.long)
    for row, i in enumerate(order):
        tokens[row, :len(ids[i])] = torch.tensor(ids[i])
    torch.manual_seed(0)
    net = PCME(word2idx, built.model)
    criterion = Criterion(built.criterion)
    randomise(net, gen)
    with torch.no_grad():
        # log standard deviations in a trained model's range (their evaluator reports a mean near -3),
        # not the tens that random weights on the CNN's cells give: samples that spread over the space
        # would score every pair alike
        for name, tensor in net.named_parameters():
            if ".uncertain_net.fc" in name:   # fc and fc2 (images), fc (captions): the log-sigma outputs
                tensor.mul_(0.05)
                if name.endswith("bias"):
                    tensor.add_(-1.5)
        # a trained scale and shift, away from the saturating 15 / 15 of the init
        criterion.negative_scale.fill_(1.7)
        criterion.shift.fill_(2.3)
    net.eval()
    unsorted = torch.empty(len(order), dtype=torch.long)
    unsorted[torch.tensor(order)] = torch.arange(len(order))
    with torch.no_grad():
        net.img_enc.n_samples_inference = net.txt_enc.n_samples_inference = 0
        image_out, text_out = net.image_forward(images), net.text_forward(tokens, lengths)
        net.img_enc.n_samples_inference = net.txt_enc.n_samples_inference = N_SAMPLES
        torch.manual_seed(7)
        image_samples = net.image_forward(images)["embedding"]
        text_samples = net.text_forward(tokens, lengths)["embedding"][unsorted]
        scores = torch.stack([criterion.match_prob(q.unsqueeze(0), text_samples, None, None)
                              for q in image_samples])   # MatchingProbModule, images as queries
    record = {"captions": CAPTIONS, "token_ids": ids, "images": "images.npy",
              "image_mu": image_out["embedding"].tolist(), "image_logsigma": image_out["logsigma"].tolist(),
              "text_mu": text_out["embedding"][unsorted].tolist(),
              "text_logsigma": text_out["logsigma"][unsorted].tolist(),
              "image_samples": image_samples.tolist(), "text_samples": text_samples.tolist(),
              "scores": scores.tolist()}
    params = list(net.parameters()) + list(criterion.parameters())
    optimizer = AdamP(params, lr=2e-5, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=30)
    metadata = {"pretrain_hash": "0" * 40, "cur_epoch": 30, "lr": 2e-5,
                "scores": {"rsum": np.float64(412.25), "mean_log_image_sigma": np.float32(-3.5),
                           "i2t": {"recall_1": 45.0, "medr": np.float64(2.0)}}}
    torch.save({"model": net.state_dict(), "criterion": criterion.state_dict(), "optimizer": optimizer.state_dict(),
                "lr_scheduler": scheduler.state_dict(), "config": config, "word2idx": word2idx, "metadata": metadata},
               out / "pcme_coco.pth")
    (out / "expected.json").write_text(json.dumps(record))
    print(f"wrote {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    main()
