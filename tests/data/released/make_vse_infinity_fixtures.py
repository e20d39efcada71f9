"""Makes the VSE-infinity fixtures in tests/data/released/vse_infinity/ the way the authors' code
writes them (Chen, Deng, Wang, Hong, CVPR 2021; github.com/woodfrog/vse_infty, branch bigru):
their encoders (lib/encoders.py ``EncoderImageAggr`` with precomp_enc_type basic, ``EncoderText``;
lib/modules/aggr/gpo.py ``GPO``, lib/modules/mlp.py ``MLP``) at tiny widths, their weights
randomised, saved as their train.py saves a checkpoint (``{'epoch', 'model': [img_enc, txt_enc
state dicts], 'best_rsum', 'opt': Namespace, 'Eiters'}``, lib/vse.py ``VSEModel.state_dict``),
their vocabulary layout (lib/vocab.py ``serialize_vocab``, SCAN's JSON) with ``vocab_size`` one
more than its words (train.py adds ``<mask>`` after loading it), and the scores their code gives
on fixed inputs (``forward_emb`` in eval mode: every region of an image valid, captions sorted by
length as their ``collate_fn`` sorts them; lib/evaluation.py keeps the embeddings as float32 numpy
arrays and ``compute_sim`` is ``numpy.matmul``).

Not part of the harness and not run by the tests: it needs a checkout of the authors' code,
which the project does not copy. Their encoders run unchanged on the project's Python and torch.

    git clone -b bigru https://github.com/woodfrog/vse_infty /tmp/vse_infty_src
    python tests/data/released/make_vse_infinity_fixtures.py --source /tmp/vse_infty_src \\
        --out tests/data/released/vse_infinity

Tokens: their image_caption.py calls ``nltk.tokenize.word_tokenize(caption.lower())`` between
``<start>`` and ``<end>``; the captions here are single sentences, on which that equals
``word_tokenize(..., preserve_line=True)`` (no Punkt model needed).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from nltk.tokenize import word_tokenize

from fixture_weights import randomise   # this folder's (the script's path)

WORDS = ["<pad>", "<start>", "<end>", "<unk>", "a", "dog", "runs", "on", "the", "grass", "two", "men", "play",
         "football", "in", "park", "red", "car", "street", "woman", "with", "an", "umbrella", "."]
CAPTIONS = ["A dog runs on the grass.", "Two men play football in the park", "A red car on the street",
            "A woman with an umbrella", "the dog", "Two dogs play in the grass with a red ball .",
            "A zebra"]   # 'dogs', 'ball', 'zebra': <unk>
N_IMAGES, N_REGIONS, IMG_DIM = 4, 6, 10   # GPO pools any number of regions


def options(data_name: str) -> argparse.Namespace:
    """Their arguments.py defaults and train_region.sh's flags, at tiny widths; vocab_size as
    train.py sets it (the words and <mask>)."""
    return argparse.Namespace(
        data_path=f"/tmp/data/{data_name}", data_name=data_name, vocab_path="/tmp/data/vocab", margin=0.2,
        num_epochs=25, batch_size=128, word_dim=6, embed_size=8, num_layers=1, grad_clip=2.0, learning_rate=0.0005,
        lr_update=15, optim="adam", workers=10, log_step=200, val_step=500,
        logger_name=f"runs/{data_name}_butd_region_bigru/log", model_name=f"runs/{data_name}_butd_region_bigru",
        resume="", max_violation=True, img_dim=IMG_DIM, no_imgnorm=False, no_txtnorm=False, precomp_enc_type="basic",
        backbone_path="", backbone_source="detector", vse_mean_warmup_epochs=1, reset_start_epoch=False,
        backbone_warmup_epochs=5, embedding_warmup_epochs=2, backbone_lr_factor=0.01, input_scale_factor=1,
        drop=True, vocab_size=len(WORDS) + 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True, help="a checkout of woodfrog/vse_infty, branch bigru")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(Path(args.source).resolve()))
    from lib.encoders import EncoderImageAggr, EncoderText   # the authors' encoders

    word2idx = {w: i for i, w in enumerate(WORDS)}
    (out / "precomp_vocab.json").write_text(json.dumps(
        {"word2idx": word2idx, "idx2word": {str(i): w for i, w in enumerate(WORDS)}, "idx": len(WORDS)}))
    gen = torch.Generator().manual_seed(2021)
    images = torch.randn(N_IMAGES, N_REGIONS, IMG_DIM, generator=gen)
    ids = [[word2idx["<start>"], *(word2idx.get(t, word2idx["<unk>"])
                                   for t in word_tokenize(c.lower(), preserve_line=True)), word2idx["<end>"]]
           for c in CAPTIONS]
    order = sorted(range(len(CAPTIONS)), key=lambda i: len(ids[i]), reverse=True)   # their collate_fn's order
    lengths = [len(ids[i]) for i in order]
    tokens = torch.zeros(len(order), max(lengths), dtype=torch.long)
    for row, i in enumerate(order):
        tokens[row, :len(ids[i])] = torch.tensor(ids[i])
    record = {"captions": CAPTIONS, "token_ids": ids, "images": images.tolist(), "scores": {}}
    for name, data_name in (("f30k_butd_region_bigru", "f30k"), ("coco_butd_region_bigru", "coco")):
        opt = options(data_name)
        torch.manual_seed(0)
        img_enc = EncoderImageAggr(opt.img_dim, opt.embed_size, opt.precomp_enc_type, opt.no_imgnorm)
        txt_enc = EncoderText(opt.vocab_size, opt.embed_size, opt.word_dim, opt.num_layers, use_bi_gru=True,
                              no_txtnorm=opt.no_txtnorm)
        for part in (img_enc, txt_enc):
            randomise(part, gen)
            part.eval()
        with torch.no_grad():   # lib/vse.py forward_emb: every region valid at evaluation
            img_emb = img_enc(images, torch.full((N_IMAGES,), float(N_REGIONS)))
            cap_emb = txt_enc(tokens, torch.tensor(lengths, dtype=torch.float))
        scores = np.zeros((N_IMAGES, len(CAPTIONS)), dtype=np.float32)
        scores[:, order] = np.matmul(img_emb.numpy(), cap_emb.numpy().T)   # compute_sim
        record["scores"][name] = scores.astype(np.float64).tolist()
        torch.save({"epoch": 21, "model": [img_enc.state_dict(), txt_enc.state_dict()], "best_rsum": 501.5,
                    "opt": opt, "Eiters": 5400}, out / f"{name}.pth")
    (out / "expected.json").write_text(json.dumps(record))
    print(f"wrote {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    main()
