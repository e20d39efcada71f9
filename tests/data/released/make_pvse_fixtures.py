"""Makes the PVSE fixtures in tests/data/released/pvse/ the way the authors' code writes them
(Song and Soleymani, CVPR 2019; github.com/yalesong/pvse, master): their model definition (model.py
``PVSE``: ``EncoderImage`` on torchvision's ResNet, ``EncoderText``, ``PIENet``) at tiny widths, every
tensor randomised (BatchNorm statistics included), saved as their files are, their vocabulary
pickled as their vocab.py pickles it, and the scores their evaluation gives on fixed inputs
(``PVSE.forward`` in eval mode on a batch sorted by caption length as their ``collate_fn`` sorts
it, embeddings kept in float64 as their ``encode_data`` keeps them, scores as their ``i2t`` /
``t2i`` compute them: ``np.tensordot(img, txt, axes=[2, 2])`` maximised over the K x K element
pairs for K > 1, ``np.dot`` for K = 1).

Not part of the harness and not run by the tests: it needs a checkout of the authors' code, which
the project does not copy.

    git clone https://github.com/yalesong/pvse /tmp/pvse_src   # or: git archive HEAD | tar -x -C /tmp/pvse_src
    python tests/data/released/make_pvse_fixtures.py --source /tmp/pvse_src --out tests/data/released/pvse

Their model.py and option.py are imported as they are (the checkout is not touched); what had to
change in this process, and why:

- ``torchtext`` (model.py imports it; only ``--wemb_type glove|fasttext`` reads it, to copy GloVe
  vectors that the randomisation below overwrites anyway) is an empty stand-in module, and the
  train.py run's model is built with ``wemb_type=None`` while its saved ``args`` keep ``glove``.
- ``torch.cuda.is_available`` returns False: their ``get_pad_mask`` moves the mask to a GPU when
  one exists; everything here runs on the CPU.
- ``torchvision.models.resnet152`` (what their ``get_cnn`` calls as ``torchvision.models.__dict__
  ['resnet152'](pretrained=True)``) is ``tiny_resnet``: torchvision's own ``ResNet`` with one
  ``Bottleneck`` block per stage, planes / 32 (stage outputs 8, 16, 32, 64 channels), and the strides
  of stages 2-4 replaced by dilation (``replace_stride_with_dilation``), so that a 28-px image gives
  the 7x7 map their ``EncoderImage.forward`` views (``.view(-1, cnn_dim, 7, 7)``) at a few
  kilobytes. The checkpoint has every kind of tensor a ResNet-152 has under the same names. The
  test (tests/test_released_pvse.py) gives the project's backbone the same tiny ResNet.

The files, named as the README names them (``--ckpt ./ckpt/coco_pvse.pth``):

- ``coco_pvse.pth`` (K = 2) and ``coco_pvse_k1.pth`` (K = 1): as released and as eval.py loads them
  (``model.load_state_dict(torch.load(ckpt))``): the model's state dict alone, in the legacy (non-zip)
  ``torch.save`` format of the 2019 PyTorch they were written with; the scores are eval.py's with
  the README's command (``--data_name coco --num_embeds K --img_attention --txt_attention --legacy``).
- ``coco_pvse_train_model_best.pth.tar``: as master's train.py saves a run of the README's training
  command (``{'args', 'epoch', 'best_score', 'model'}``, zip format), without ``--legacy``: its text
  feature is the two final GRU states; the scores are its own evaluation's.

The vocabulary ``coco_vocab.pkl``: their vocab.py, run as a script by Python 3 (the README's
``python3``), pickles ``__main__.Vocabulary`` with ``pickle.HIGHEST_PROTOCOL``; its class is taken from
their vocab.py (the module imports pycocotools and nltk) and run as ``__main__`` in a child process.

Tokens: their data.py calls ``nltk.tokenize.word_tokenize(str(caption).lower())``; the captions here
are single sentences, on which that equals ``word_tokenize(caption.lower(), preserve_line=True)``
(no Punkt model needed).
"""
from __future__ import annotations

import argparse
import ast
import json
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import torch
import torchvision
from nltk.tokenize import word_tokenize
from torch import nn
from torchvision.models.resnet import Bottleneck, ResNet

from fixture_weights import randomise   # this folder's (the script's path)

WORDS = ["<pad>", "<start>", "<end>", "<unk>", "a", "dog", "runs", "on", "the", "grass", "two", "men", "play",
         "football", "in", "park", "red", "car", "street", "woman", "with", "an", "umbrella", "café", "."]
CAPTIONS = ["A dog runs on the grass.", "Two men play football in the park", "A red car on the street",
            "A woman with an umbrella", "the dog", "Two dogs play in the grass with a red ball .",
            "A zebra", "a café on the street"]   # 'dogs', 'ball', 'zebra': <unk>
N_IMAGES, IMAGE_SIZE = 4, 28   # 28 px: the tiny dilated ResNet's 7x7 map, as EncoderImage views it
EMBED_SIZE, WORD_DIM = 8, 6
# file name -> (their command line flags, how the file is saved)
RUNS = {
    "coco_pvse.pth": (["--data_name", "coco", "--num_embeds", "2", "--img_attention", "--txt_attention",
                       "--legacy"], "released"),
    "coco_pvse_k1.pth": (["--data_name", "coco", "--num_embeds", "1", "--img_attention", "--txt_attention",
                          "--legacy"], "released"),
    "coco_pvse_train_model_best.pth.tar": (
        ["--data_name", "coco", "--cnn_type", "resnet152", "--wemb_type", "glove", "--margin", "0.1",
         "--max_violation", "--num_embeds", "2", "--img_attention", "--txt_attention", "--mmd_weight", "0.01",
         "--div_weight", "0.1", "--batch_size", "256", "--logger_name", "runs/coco_pvse"], "train.py"),
}
WIDTHS = ["--embed_size", str(EMBED_SIZE), "--word_dim", str(WORD_DIM)]
PYTHON3_VOCAB = r"""
import json, pickle, sys
exec(compile(open(sys.argv[1]).read(), 'vocab.py', 'exec'))   # class Vocabulary, in __main__ as vocab.py runs
words = json.loads(open(sys.argv[2]).read())
vocab = Vocabulary()
for word in words:
    vocab.add_word(word)   # build_vocab: '<pad>', '<start>', '<end>', '<unk>', then the words
with open(sys.argv[3], 'wb') as f:
    pickle.dump(vocab, f, pickle.HIGHEST_PROTOCOL)
"""


class TinyResNet(ResNet):
    """torchvision's ResNet, each stage's planes divided by 32 (the stem keeps its 64 channels)."""

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
        return super()._make_layer(block, planes // 32, blocks, stride, dilate)


def tiny_resnet(pretrained=False, weights=None, **kwargs) -> ResNet:
    net = TinyResNet(Bottleneck, [1, 1, 1, 1], num_classes=10, replace_stride_with_dilation=[True, True, True])
    net.fc = nn.Linear(16 * Bottleneck.expansion, 10)   # their EncoderImage reads fc.in_features
    return net


def their_code(source: Path):
    """Their model.py and option.py, imported from the checkout with the stand-ins above."""
    sys.modules.setdefault("torchtext", types.ModuleType("torchtext"))
    torch.cuda.is_available = lambda: False
    torchvision.models.resnet152 = tiny_resnet
    sys.path.insert(0, str(source))
    import model as pvse_model   # the authors' model.py
    import option as pvse_option   # the authors' option.py (its parser and defaults)
    return pvse_model, pvse_option


def vocabulary_class_source(source: Path) -> str:
    text = (source / "vocab.py").read_text()
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "Vocabulary")
    return ast.get_source_segment(text, node) + "\n"


def write_vocabulary(source: Path, work: Path, path: Path) -> None:
    (work / "vocabulary_class.py").write_text(vocabulary_class_source(source))
    (work / "words.json").write_text(json.dumps(WORDS))
    (work / "pickle_vocab.py").write_text(PYTHON3_VOCAB)
    subprocess.run([sys.executable, str(work / "pickle_vocab.py"), str(work / "vocabulary_class.py"),
                    str(work / "words.json"), str(path)], check=True)


def their_scores(img: np.ndarray, txt: np.ndarray) -> np.ndarray:
    """(N images, M captions) as eval.py i2t / t2i score them (CPU path)."""
    if img.ndim == 3:   # use_mil: (N, K, D) x (M, K, D) -> max over the K x K pairs
        return np.tensordot(img, txt, axes=[2, 2]).max(axis=(1, 3))
    return np.dot(img, txt.T)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True, type=Path, help="a checkout of yalesong/pvse, master")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="pvse_fixtures_"))
    try:
        pvse_model, pvse_option = their_code(args.source.resolve())
        word2idx = {w: i for i, w in enumerate(WORDS)}
        write_vocabulary(args.source, work, out / "coco_vocab.pkl")   # vocab.py's ./vocab/coco_vocab.pkl
        gen = torch.Generator().manual_seed(2019)
        images = torch.randn(N_IMAGES, 3, IMAGE_SIZE, IMAGE_SIZE, generator=gen)
        np.save(out / "images.npy", images.numpy())
        ids = [[word2idx["<start>"], *(word2idx.get(t, word2idx["<unk>"])
                                       for t in word_tokenize(c.lower(), preserve_line=True)), word2idx["<end>"]]
               for c in CAPTIONS]
        order = sorted(range(len(CAPTIONS)), key=lambda i: len(ids[i]), reverse=True)   # their collate_fn's order
        lengths = torch.tensor([len(ids[i]) for i in order])
        tokens = torch.zeros(len(order), int(lengths.max()), dtype=torch.long)
        for row, i in enumerate(order):
            tokens[row, :len(ids[i])] = torch.tensor(ids[i])
        record = {"captions": CAPTIONS, "token_ids": ids, "images": "images.npy", "scores": {}}
        for name, (flags, kind) in RUNS.items():
            opt = pvse_option.parser.parse_args(flags + WIDTHS)
            built = argparse.Namespace(**{**vars(opt), "wemb_type": None})   # see the module doc: no GloVe
            torch.manual_seed(0)
            net = pvse_model.PVSE(word2idx, built)
            randomise(net, gen)
            net.eval()
            with torch.no_grad():
                img_emb, txt_emb, *_ = net.forward(images, tokens, lengths)
            img64, txt64 = img_emb.double().numpy(), txt_emb.double().numpy()   # encode_data's float64 arrays
            scores = np.zeros((N_IMAGES, len(CAPTIONS)))
            scores[:, order] = their_scores(img64, txt64)
            record["scores"][name] = scores.tolist()
            if kind == "released":   # eval.py: model.load_state_dict(torch.load(ckpt)); a 2019 file
                torch.save(net.state_dict(), out / name, _use_new_zipfile_serialization=False)
            else:                    # train.py save_ckpt
                torch.save({"args": opt, "epoch": 17, "best_score": 412.25, "model": net.state_dict()}, out / name)
        (out / "expected.json").write_text(json.dumps(record))
    finally:
        shutil.rmtree(work)
    print(f"wrote {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    main()
