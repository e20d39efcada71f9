"""Makes the VSE++ fixtures in tests/data/released/vsepp/ the way the authors' code writes them
(Faghri, Fleet, Kiros, Fidler, BMVC 2018; github.com/fartashf/vsepp, branch master, the Python 2.7
code the released ``runs.tar`` models were trained with): their model definition (model.py
``VSE`` with ``EncoderImageFull``, ``--cnn_type resnet152``) at tiny widths, every tensor
randomised, saved as their train.py saves a checkpoint (``{'epoch', 'model': [img_enc, txt_enc
state dicts], 'best_rsum', 'opt': Namespace, 'Eiters'}``), their vocabulary pickled by Python 2.7
as their vocab.py pickles it, and the scores their code gives on fixed inputs (``forward_emb`` in
eval mode on a batch sorted by caption length as their ``collate_fn`` sorts it, embeddings kept
in float64 as their ``encode_data`` keeps them, scores ``numpy.dot`` of those as their ``i2t`` /
``t2i`` compute them).

Not part of the harness and not run by the tests: it needs a checkout of the authors' code, which
the project does not copy, and a Python 2.7 interpreter for the vocabulary.

    git clone https://github.com/fartashf/vsepp /tmp/vsepp_src   # or: git archive master | tar -x -C /tmp/vsepp_src
    python tests/data/released/make_vsepp_fixtures.py --source /tmp/vsepp_src --python2 python2.7 \
        --out tests/data/released/vsepp

Their code is run with this environment's torch; what had to change, in a temporary copy of
model.py (the checkout is not touched) or in this process, and why:

- model.py ``get_cnn``: ``nn.DataParallel(model).cuda()`` -> ``nn.DataParallel(model)``; model.py
  ``EncoderText.forward``: ``Variable(...).cuda()`` -> ``Variable(...)``: no GPU is needed (the
  same two edits their branch python3 makes). ``DataParallel`` stays: it is why the released CNN
  weights are named ``cnn.module.*``.
- ``torchvision.models.resnet152`` (what their ``get_cnn`` calls as
  ``models.__dict__['resnet152'](pretrained=True)``) is replaced in this process by ``tiny_resnet``:
  torchvision's own ``ResNet`` class with ``Bottleneck`` blocks, one block per stage, planes / 32
  (stage outputs 8, 16, 32, 64 channels), so that the checkpoint has every kind of tensor a
  ResNet-152 has (stem, bottleneck convs and BNs, downsample) under the same names, at a few
  kilobytes. No ImageNet weights are downloaded: every tensor is randomised afterwards. The test
  (tests/test_released_vsepp.py) gives the project's backbone the same tiny ResNet.
- ``forward_emb(..., volatile=True)`` (their evaluation's call) is run under ``torch.no_grad()``:
  today's torch ignores ``volatile`` with a warning.

The three checkpoints: ``f30k_vse++_resnet_finetune`` as master's train.py saves it under today's
torch (zip file, BatchNorm ``num_batches_tracked`` counters), and ``coco_vse++_resnet_restval`` as
a file of 2017 (the released ``runs.tar``; PyTorch 0.2/0.3): the legacy (non-zip) ``torch.save``
format and no ``num_batches_tracked`` counters, which PyTorch added in 0.4.1. Its text encoder has
two GRU layers (released runs have one) so that the mapping of every layer is checked.
``coco_vse0_resnet_restval_finetune`` is VSE0 as their README trains it (no ``--max_violation``,
``--no_imgnorm``), a 2017 file too: its image embeddings are not normalised, so its scores are
not cosines. Runs are made in this order from one random generator, so adding one at the end
leaves the others' tensors as they were.

The vocabulary: their vocab.py, run as a script, pickles ``__main__.Vocabulary`` with
``pickle.HIGHEST_PROTOCOL`` (2 in Python 2.7); its ``<pad> <start> <end> <unk>`` are Python 2
byte strings, the words ``word_tokenize(caption.lower().decode('utf-8'))`` gives unicode. The
``Vocabulary`` class is taken from their vocab.py (the module itself imports pycocotools and
nltk, which a bare Python 2.7 lacks) and run as ``__main__`` by Python 2.7, as their vocab.py runs.

Tokens: their data.py calls ``nltk.tokenize.word_tokenize(str(caption).lower().decode('utf-8'))``;
the captions here are single sentences with no capital non-ASCII letter, on which that equals
``word_tokenize(caption.lower(), preserve_line=True)`` (no Punkt model needed).
"""
from __future__ import annotations

import argparse
import ast
import json
import shutil
import subprocess
import sys
import tempfile
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
N_IMAGES, IMAGE_SIZE = 4, 40   # 40 px: a 2x2 map out of the last stage, so the average pooling counts
PATCHES = [   # (text of their model.py, replacement, why): each must occur exactly once
    ("model = nn.DataParallel(model).cuda()", "model = nn.DataParallel(model)", "no GPU needed"),
    ("I = Variable(I.expand(x.size(0), 1, self.embed_size)-1).cuda()",
     "I = Variable(I.expand(x.size(0), 1, self.embed_size)-1)", "no GPU needed"),
]
# named as the released runs are (runs.tar: <data>_vse++_<cnn>[_restval][_finetune]); widths tiny
RUNS = {
    "f30k_vse++_resnet_finetune": dict(data_name="f30k", finetune=True, use_restval=False, num_layers=1,
                                       legacy_file=False),
    "coco_vse++_resnet_restval": dict(data_name="coco", finetune=False, use_restval=True, num_layers=2,
                                      legacy_file=True),
    # VSE0 as their README trains it: no --max_violation, --no_imgnorm (unnormalised image embeddings)
    "coco_vse0_resnet_restval_finetune": dict(data_name="coco", finetune=True, use_restval=True, num_layers=1,
                                              legacy_file=True, max_violation=False, no_imgnorm=True),
}
PYTHON2_VOCAB = r"""
import json, pickle, sys
exec(compile(open(sys.argv[1]).read(), 'vocab.py', 'exec'))   # class Vocabulary, in __main__ as vocab.py runs
words = json.loads(open(sys.argv[2]).read())                   # unicode, as word_tokenize(....decode('utf-8'))
vocab = Vocabulary()
for word in words[:4]:
    vocab.add_word(word.encode('ascii'))   # build_vocab's '<pad>', '<start>', '<end>', '<unk>': byte strings
for word in words[4:]:
    vocab.add_word(word)
with open(sys.argv[3], 'wb') as f:
    pickle.dump(vocab, f, pickle.HIGHEST_PROTOCOL)
"""


class TinyResNet(ResNet):
    """torchvision's ResNet, each stage's planes divided by 32 (the stem keeps its 64 channels)."""

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
        return super()._make_layer(block, planes // 32, blocks, stride, dilate)


def tiny_resnet(pretrained=False, weights=None, **kwargs) -> ResNet:
    net = TinyResNet(Bottleneck, [1, 1, 1, 1], num_classes=10)
    net.fc = nn.Linear(16 * Bottleneck.expansion, 10)   # their EncoderImageFull reads fc.in_features
    return net


def options(run: str, spec: dict) -> argparse.Namespace:
    """Their train.py (master) defaults with the run's flags, at tiny widths; ``vocab_size`` as
    train.py sets it (``len(vocab)``)."""
    return argparse.Namespace(
        data_path="/w/31/faghri/vsepp_data/", data_name=spec["data_name"], vocab_path="./vocab/", margin=0.2,
        num_epochs=30, batch_size=128, word_dim=6, embed_size=8, grad_clip=2.0, crop_size=224,
        num_layers=spec["num_layers"], learning_rate=0.0002, lr_update=15, workers=10, log_step=10, val_step=500,
        logger_name="runs/" + run, resume="", max_violation=spec.get("max_violation", True), img_dim=4096,
        finetune=spec["finetune"], cnn_type="resnet152", use_restval=spec["use_restval"], measure="cosine",
        use_abs=False, no_imgnorm=spec.get("no_imgnorm", False),
        reset_train=False, vocab_size=len(WORDS))


def their_model(source: Path, work: Path):
    """Their model.py, patched (PATCHES) in a copy under ``work``, imported."""
    text = (source / "model.py").read_text()
    for old, new, _ in PATCHES:
        if text.count(old) != 1:
            raise SystemExit(f"{source}/model.py: expected one '{old}' (a checkout of fartashf/vsepp master?)")
        text = text.replace(old, new)
    (work / "model.py").write_text(text)
    sys.path.insert(0, str(work))
    import model as vsepp_model   # the authors' model.py, patched
    return vsepp_model


def vocabulary_class_source(source: Path) -> str:
    """The ``class Vocabulary`` block of their vocab.py, as written."""
    text = (source / "vocab.py").read_text()
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "Vocabulary")
    return ast.get_source_segment(text, node) + "\n"


def write_vocabulary(source: Path, python2: str, work: Path, path: Path) -> None:
    (work / "vocabulary_class.py").write_text(vocabulary_class_source(source))
    (work / "words.json").write_text(json.dumps(WORDS))
    (work / "pickle_vocab.py").write_text(PYTHON2_VOCAB)
    version = subprocess.run([python2, "-c", "import sys; print(sys.version_info[0])"], capture_output=True,
                             text=True, check=True).stdout.strip()
    if version != "2":
        raise SystemExit(f"--python2 {python2} is Python {version}; the released vocabularies are Python 2 pickles")
    subprocess.run([python2, str(work / "pickle_vocab.py"), str(work / "vocabulary_class.py"),
                    str(work / "words.json"), str(path)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True, type=Path, help="a checkout of fartashf/vsepp, branch master")
    parser.add_argument("--python2", default="python2.7", help="a Python 2.7 interpreter (the vocabulary pickles)")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    torchvision.models.resnet152 = tiny_resnet   # what their get_cnn builds (see the module doc)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vsepp_fixtures_"))
    try:
        vsepp_model = their_model(args.source, work)
        word2idx = {w: i for i, w in enumerate(WORDS)}
        for data_name in sorted({spec["data_name"] for spec in RUNS.values()}):
            write_vocabulary(args.source, args.python2, work, out / f"{data_name}_vocab.pkl")   # vocab.py's name
        gen = torch.Generator().manual_seed(2018)
        images = torch.randn(N_IMAGES, 3, IMAGE_SIZE, IMAGE_SIZE, generator=gen)
        np.save(out / "images.npy", images.numpy())
        ids = [[word2idx["<start>"], *(word2idx.get(t, word2idx["<unk>"])
                                       for t in word_tokenize(c.lower(), preserve_line=True)), word2idx["<end>"]]
               for c in CAPTIONS]
        order = sorted(range(len(CAPTIONS)), key=lambda i: len(ids[i]), reverse=True)   # their collate_fn's order
        lengths = [len(ids[i]) for i in order]
        tokens = torch.zeros(len(order), max(lengths), dtype=torch.long)
        for row, i in enumerate(order):
            tokens[row, :len(ids[i])] = torch.tensor(ids[i])
        record = {"captions": CAPTIONS, "token_ids": ids, "images": "images.npy", "scores": {}}
        for run, spec in RUNS.items():
            opt = options(run, spec)
            torch.manual_seed(0)
            net = vsepp_model.VSE(opt)
            for part in (net.img_enc, net.txt_enc):
                randomise(part, gen)
            net.val_start()
            with torch.no_grad():
                img_emb, cap_emb = net.forward_emb(images, tokens, lengths)
            img64, cap64 = img_emb.double().numpy(), cap_emb.double().numpy()   # encode_data's float64 arrays
            scores = np.zeros((N_IMAGES, len(CAPTIONS)))
            scores[:, order] = np.dot(img64, cap64.T)   # i2t / t2i: numpy.dot of the float64 embeddings
            record["scores"][run] = scores.tolist()
            state = net.state_dict()
            if spec["legacy_file"]:   # a PyTorch 0.2/0.3 file: no BatchNorm step counters, legacy format
                state = [{k: v for k, v in part.items() if not k.endswith("num_batches_tracked")} for part in state]
            torch.save({"epoch": 17, "model": state, "best_rsum": 412.25, "opt": opt, "Eiters": 3900},
                       out / f"{run}_model_best.pth.tar",
                       _use_new_zipfile_serialization=not spec["legacy_file"])
        (out / "expected.json").write_text(json.dumps(record))
    finally:
        shutil.rmtree(work)
    print(f"wrote {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    main()
