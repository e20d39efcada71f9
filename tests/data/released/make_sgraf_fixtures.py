"""Makes the SGRAF fixtures in tests/data/released/sgraf/ the way the authors' code writes them
(Diao, Zhang, Ma, Lu, AAAI 2021; github.com/Paranioar/SGRAF, branch python3.6): their model
definition at tiny widths, its weights randomised, saved as their train.py saves a checkpoint
(``{'epoch', 'model': [img_enc, txt_enc, sim_enc state dicts], 'best_rsum', 'opt': Namespace,
'Eiters'}``), their vocabulary layout (vocab.py ``serialize_vocab``), and the scores their code
gives on fixed inputs (``forward_emb`` in eval mode on a batch sorted by caption length as their
``collate_fn`` sorts it, embeddings kept in float64 as their ``encode_data`` keeps them, then
``forward_sim`` on float32 as their ``shard_attn_scores`` calls it).

Not part of the harness and not run by the tests: it needs a checkout of the authors' code,
which the project does not copy.

    git clone -b python3.6 https://github.com/Paranioar/SGRAF /tmp/sgraf_src
    python tests/data/released/make_sgraf_fixtures.py --source /tmp/sgraf_src --out tests/data/released/sgraf

Tokens: their data.py calls ``nltk.tokenize.word_tokenize(caption.lower())``; the captions
here are single sentences, on which that equals ``word_tokenize(..., preserve_line=True)``
(no Punkt model needed).
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
N_IMAGES, N_REGIONS, IMG_DIM = 4, 36, 12   # SGRAF's VisualSA has BatchNorm1d(36): 36 regions


def options(module_name: str) -> argparse.Namespace:
    """Their opts.py defaults, at tiny widths."""
    return argparse.Namespace(
        data_path="/data", data_name="f30k_precomp", vocab_path="./vocab/", model_name="./runs/f30k_" + module_name,
        logger_name="./runs/log", batch_size=128, num_epochs=40, lr_update=30, learning_rate=2e-4, workers=10,
        log_step=10, val_step=1000, grad_clip=2.0, margin=0.2, max_violation=True, img_dim=IMG_DIM, word_dim=6,
        embed_size=8, sim_dim=5, num_layers=1, bi_gru=True, no_imgnorm=False, no_txtnorm=False,
        module_name=module_name, sgr_step=2, vocab_size=len(WORDS), resume="")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True, help="a checkout of Paranioar/SGRAF, branch python3.6")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    sys.path.insert(0, args.source)
    import model as sgraf_model   # the authors' model.py

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    word2idx = {w: i for i, w in enumerate(WORDS)}
    (out / "f30k_precomp_vocab.json").write_text(json.dumps(
        {"word2idx": word2idx, "idx2word": {str(i): w for i, w in enumerate(WORDS)}, "idx": len(WORDS)}))
    gen = torch.Generator().manual_seed(2021)
    images = torch.randn(N_IMAGES, N_REGIONS, IMG_DIM, generator=gen)
    ids = [[word2idx["<start>"], *(word2idx.get(t, word2idx["<unk>"]) for t in word_tokenize(c.lower(), preserve_line=True)),
            word2idx["<end>"]] for c in CAPTIONS]
    order = sorted(range(len(CAPTIONS)), key=lambda i: len(ids[i]), reverse=True)   # their collate_fn's order
    lengths = [len(ids[i]) for i in order]
    tokens = torch.zeros(len(order), max(lengths), dtype=torch.long)
    for row, i in enumerate(order):
        tokens[row, :len(ids[i])] = torch.tensor(ids[i])
    record = {"captions": CAPTIONS, "token_ids": ids, "images": images.tolist(), "scores": {}}
    for module_name in ("SGR", "SAF"):
        opt = options(module_name)
        torch.manual_seed(0)
        net = sgraf_model.SGRAF(opt)
        for part in (net.img_enc, net.txt_enc, net.sim_enc):
            randomise(part, gen)
        net.val_start()
        with torch.no_grad():
            img_emb, cap_emb, cap_lens = net.forward_emb(images, tokens, lengths)
            img64, cap64 = img_emb.double().numpy(), cap_emb.double().numpy()   # encode_data's float64 cache
            sims = net.forward_sim(torch.from_numpy(img64).float(), torch.from_numpy(cap64).float(), cap_lens)
        scores = np.zeros((N_IMAGES, len(CAPTIONS)))
        scores[:, order] = sims.numpy()
        record["scores"][module_name] = scores.tolist()
        torch.save({"epoch": 12, "model": net.state_dict(), "best_rsum": 321.5, "opt": opt, "Eiters": 2900},
                   out / f"f30k_{module_name}_model_best.pth.tar")
    (out / "expected.json").write_text(json.dumps(record))
    print(f"wrote {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    main()
