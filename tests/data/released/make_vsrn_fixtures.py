"""Makes the VSRN fixtures in tests/data/released/vsrn/ the way the authors' code writes them
(Li, Zhang, Li, Li, Fu, ICCV 2019; github.com/KunpengLi1994/VSRN): their model definition
(model.py ``VSRN``, GCN_lib/Rs_GCN.py) at tiny widths, its weights randomised, saved as their
train.py saves a checkpoint (``{'epoch', 'model': [img_enc, txt_enc state dicts], 'best_rsum',
'opt': Namespace, 'Eiters'}``, in torch's legacy file format, the one torch 0.4.1 wrote), a
vocabulary pickled as the released ones are (vocab.py run as a script under Python 2: protocol 2,
class ``__main__.Vocabulary``, its byte strings as Python 2 ``str``), and the scores their code gives on fixed inputs (``forward_emb`` in eval mode on
captions sorted by length as their ``collate_fn`` sorts them, embeddings kept in float64 as their
``encode_data`` keeps them, then ``numpy.dot`` as their ``i2t``/``t2i`` score with measure cosine).

Two checkpoints, one per branch of their image encoder: ``model_fliker_1.pth.tar`` (data_name
f30k_precomp: final BatchNorm, no l2norm after fc) and ``model_coco_1.pth.tar`` (coco_precomp: no
final BatchNorm, l2norm after fc; a 2-layer text GRU, to test that option's mapping too). Both read
``precomp_vocab.pkl``.

Not part of the harness and not run by the tests: it needs a checkout of the authors' code,
which the project does not copy. Their code is Python 2.7 / torch 0.4.1; it runs here on the
project's Python and torch with one patch, made in a temporary copy, not in the checkout:

- model.py ``EncoderText.forward``: ``Variable(...).cuda()`` of the gather index, unconditional
  in their code, becomes ``.to(x.device)`` (no GPU needed; the index is the same).

Their ``misc/rewards.py`` (imported by model.py, unused by the embeddings) puts ``coco-caption``
on the path relative to the working directory; the copy's is put on ``sys.path`` instead.

    git clone https://github.com/KunpengLi1994/VSRN /tmp/vsrn_src
    python tests/data/released/make_vsrn_fixtures.py --source /tmp/vsrn_src --out tests/data/released/vsrn

Tokens: their data.py calls ``nltk.tokenize.word_tokenize(str(caption).lower().decode('utf-8'))``;
the captions here are single sentences, on which that equals ``word_tokenize(...,
preserve_line=True)`` (no Punkt model needed).
"""
from __future__ import annotations

import argparse
import json
import pickle
import shutil
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from nltk.tokenize import word_tokenize

from fixture_weights import randomise   # this folder's (the script's path)

WORDS = ["<pad>", "<start>", "<end>", "<unk>", "a", "dog", "runs", "on", "the", "grass", "two", "men", "play",
         "football", "in", "park", "red", "car", "street", "woman", "with", "an", "umbrella", ".", "café"]
CAPTIONS = ["A dog runs on the grass.", "Two men play football in the park", "A red car on the street",
            "A woman with an umbrella", "the dog", "Two dogs play in the grass with a red ball .",
            "A zebra at the café"]   # 'dogs', 'ball', 'zebra', 'at': <unk>
N_IMAGES, N_REGIONS, IMG_DIM = 4, 6, 10   # their GCN and region GRU take any number of regions
PATCHES = [("I = Variable(I.expand(x.size(0), 1, self.embed_size)-1).cuda()",
            "I = Variable(I.expand(x.size(0), 1, self.embed_size)-1).to(x.device)")]


class Py2Str(str):
    """A Python 2 ``str`` (bytes): pickled as SHORT_BINSTRING, as Python 2 pickled the specials and
    attribute names of the released vocabularies (their other words are ``unicode``)."""


class Py2Pickler(pickle._Pickler):   # the pure-Python pickler: its dispatch table can be extended
    dispatch = pickle._Pickler.dispatch.copy()

    def save_py2_str(self, obj: Py2Str) -> None:
        data = obj.encode("ascii")
        self.write(pickle.SHORT_BINSTRING + bytes([len(data)]) + data if len(data) < 256
                   else pickle.BINSTRING + struct.pack("<i", len(data)) + data)
        self.memoize(obj)

    dispatch[Py2Str] = save_py2_str


class Vocabulary:
    """Stands in for their vocab.py ``Vocabulary`` when vocab.py runs as a script: pickled as
    ``__main__.Vocabulary`` (this script is ``__main__``), fields in the released files' order."""

    def __init__(self, words: list[str]):
        self.word2idx = {Py2Str(w) if w.startswith("<") else w: i for i, w in enumerate(words)}
        self.idx2word = {i: w for w, i in self.word2idx.items()}
        self.idx = len(words)

    def __getstate__(self) -> dict:
        return {Py2Str("idx2word"): self.idx2word, Py2Str("word2idx"): self.word2idx, Py2Str("idx"): self.idx}


def options(data_name: str, num_layers: int) -> argparse.Namespace:
    """Their train.py defaults and README flags (--max_violation; Flickr30K --lr_update 10
    --max_len 60), at tiny widths; vocab_size as train.py sets it."""
    flickr = data_name == "f30k_precomp"
    return argparse.Namespace(
        data_path="/data", data_name=data_name, vocab_path="./vocab/", margin=0.2, num_epochs=30,
        batch_size=128, word_dim=6, embed_size=8, grad_clip=2.0, crop_size=224, num_layers=num_layers,
        learning_rate=0.0002, lr_update=10 if flickr else 15, workers=10, log_step=10, val_step=500,
        logger_name="runs/flickr_VSRN" if flickr else "runs/coco_VSRN", resume="", max_violation=True,
        img_dim=IMG_DIM, finetune=False, cnn_type="vgg19", use_restval=False, measure="cosine", use_abs=False,
        no_imgnorm=False, reset_train=False, dim_vid=8, dim_hidden=5, bidirectional=0, input_dropout_p=0.2,
        rnn_type="gru", rnn_dropout_p=0.5, dim_word=6, max_len=60, vocab_size=len(WORDS))


def patched_copy(source: Path, into: Path) -> Path:
    """Their code in ``into``, with ``PATCHES`` applied to model.py (each must match once)."""
    copy = into / "vsrn"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns(".git", "*.jar", "cocoapi-master", "fig", "vocab"))
    text = (copy / "model.py").read_text()
    for old, new in PATCHES:
        assert text.count(old) == 1, f"model.py: patch target not found once: {old}"
        text = text.replace(old, new)
    (copy / "model.py").write_text(text)
    return copy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True, help="a checkout of KunpengLi1994/VSRN")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.TemporaryDirectory()
    code = patched_copy(Path(args.source), Path(tmp.name))
    sys.path[:0] = [str(code), str(code / "coco-caption")]
    import model as vsrn_model   # the authors' model.py

    with open(out / "precomp_vocab.pkl", "wb") as f:
        Py2Pickler(f, protocol=2).dump(Vocabulary(WORDS))
    word2idx = {w: i for i, w in enumerate(WORDS)}
    gen = torch.Generator().manual_seed(2019)
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
    for name, data_name, num_layers in (("model_fliker_1", "f30k_precomp", 1), ("model_coco_1", "coco_precomp", 2)):
        opt = options(data_name, num_layers)
        torch.manual_seed(0)
        net = vsrn_model.VSRN(opt)
        for part in (net.img_enc, net.txt_enc):
            randomise(part, gen)
        net.val_start()
        with torch.no_grad():
            img_emb, cap_emb, _ = net.forward_emb(images, tokens, lengths, volatile=True)
        img64, cap64 = img_emb.numpy().astype(np.float64), cap_emb.numpy().astype(np.float64)   # encode_data's arrays
        scores = np.zeros((N_IMAGES, len(CAPTIONS)))
        scores[:, order] = np.dot(img64, cap64.T)   # i2t/t2i with measure cosine
        record["scores"][name] = scores.tolist()
        # the legacy (non-zip) format, the only one torch 0.4.1 wrote
        torch.save({"epoch": 17, "model": net.state_dict(), "best_rsum": 480.25, "opt": opt, "Eiters": 3100},
                   out / f"{name}.pth.tar", _use_new_zipfile_serialization=False)
    (out / "expected.json").write_text(json.dumps(record))
    tmp.cleanup()
    print(f"wrote {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    main()
