"""Makes the VSE-infinity BERT fixtures in tests/data/released/vse_infinity_bert/ the way the
authors' code writes them (Chen, Deng, Wang, Hong, CVPR 2021; github.com/woodfrog/vse_infty, branch
master): their encoders (lib/encoders.py ``EncoderImageAggr`` with precomp_enc_type basic,
``EncoderText``; lib/modules/aggr/gpo.py ``GPO``, lib/modules/mlp.py ``MLP``) at tiny widths, their
weights randomised, saved as their train.py saves a checkpoint (``{'epoch', 'model': [img_enc,
txt_enc state dicts], 'best_rsum', 'opt': Namespace, 'Eiters'}``), and the scores and caption
embeddings their code gives on fixed inputs (``forward_emb`` in eval mode, every region valid;
lib/evaluation.py keeps float32 numpy arrays, ``compute_sim`` is ``numpy.matmul``).

BERT at a tiny width: their ``EncoderText`` calls ``BertModel.from_pretrained('bert-base-uncased')``
and ``nn.Linear(768, embed_size)``; here ``from_pretrained`` hands it a ``BertModel`` of the
folder ``bert/`` written beside the checkpoints (its config.json and a vocab.txt of a few pieces,
the vocabulary of a BERT folder a user configures; eager attention, as transformers 2.1, their
version, computes it), and the linear layer is rebuilt at that BERT's width. Their captions are
tokenised as lib/datasets/image_caption.py does at evaluation: ``BertTokenizer`` of that
vocabulary, ``basic_tokenizer.tokenize``, then ``process_caption(..., train=False)``
(``[CLS]`` + each word's pieces + ``[SEP]``); that module imports cv2 and imageio, which
``process_caption`` does not use: stand-in modules are registered for them.

Not part of the harness and not run by the tests: it needs a checkout of the authors' code,
which the project does not copy.

    git clone -b master https://github.com/woodfrog/vse_infty /tmp/vse_infty_master
    python tests/data/released/make_vse_infinity_bert_fixtures.py --source /tmp/vse_infty_master \\
        --out tests/data/released/vse_infinity_bert
"""
from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import numpy as np
import torch
from torch import nn

from fixture_weights import randomise   # this folder's (the script's path)

PIECES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "dog", "runs", "on", "the", "grass", "two", "men",
          "play", "football", "in", "park", "red", "car", "street", "woman", "with", "umbrella", "ball", ".",
          "##s", "##ing", "an"]
CAPTIONS = ["A dog runs on the grass.", "Two men play football in the park", "A red car on the street",
            "A woman with an umbrella", "the dog", "Two dogs playing in the grass with a red ball .",
            "A zebra"]   # 'dogs', 'playing': two pieces each; 'zebra': [UNK]
BERT = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32,
        "max_position_embeddings": 32, "type_vocab_size": 2, "vocab_size": len(PIECES), "model_type": "bert",
        "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "layer_norm_eps": 1e-12, "initializer_range": 0.02, "pad_token_id": 0}
N_IMAGES, N_REGIONS, IMG_DIM, EMBED = 4, 6, 10, 8


def options(data_name: str) -> argparse.Namespace:
    """Their arguments.py defaults (branch master: no num_layers) and train_region.sh's flags, at
    tiny widths; vocab_size as train.py sets it (``len(tokenizer.vocab)``)."""
    return argparse.Namespace(
        data_path=f"/tmp/data/{data_name}", data_name=data_name, vocab_path="./vocab/", margin=0.2, num_epochs=25,
        batch_size=128, word_dim=300, embed_size=EMBED, grad_clip=2.0, learning_rate=0.0005, lr_update=15,
        optim="adam", workers=10, log_step=200, val_step=500, logger_name=f"runs/{data_name}_butd_region_bert/log",
        model_name=f"runs/{data_name}_butd_region_bert", resume="", max_violation=True, img_dim=IMG_DIM,
        no_imgnorm=False, no_txtnorm=False, precomp_enc_type="basic", backbone_path="", backbone_source="detector",
        vse_mean_warmup_epochs=1, reset_start_epoch=False, backbone_warmup_epochs=5, embedding_warmup_epochs=2,
        backbone_lr_factor=0.01, input_scale_factor=1, vocab_size=len(PIECES))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True, help="a checkout of woodfrog/vse_infty, branch master")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out).resolve()
    folder = out / "bert"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("".join(f"{p}\n" for p in PIECES))
    (folder / "config.json").write_text(json.dumps(BERT, indent=1))
    from transformers import BertConfig, BertModel, BertTokenizer   # before the stand-ins: it probes for cv2

    sys.path.insert(0, str(Path(args.source).resolve()))
    for name in ("cv2", "imageio"):   # imported by image_caption.py, unused by process_caption
        stand_in = types.ModuleType(name)
        stand_in.imread = None
        sys.modules.setdefault(name, stand_in)
    import lib.encoders as encoders   # the authors' encoders
    from lib.datasets.image_caption import process_caption

    class TinyBert:
        @staticmethod
        def from_pretrained(_name):
            return BertModel(BertConfig.from_dict(BERT, attn_implementation="eager"))

    encoders.BertModel = TinyBert
    tokenizer = BertTokenizer(str(folder / "vocab.txt"))
    ids = [process_caption(tokenizer, tokenizer.basic_tokenizer.tokenize(c), train=False).long().tolist()
           for c in CAPTIONS]
    lengths = [len(t) for t in ids]
    tokens = torch.zeros(len(ids), max(lengths), dtype=torch.long)
    for row, t in enumerate(ids):
        tokens[row, :len(t)] = torch.tensor(t)
    gen = torch.Generator().manual_seed(2021)
    images = torch.randn(N_IMAGES, N_REGIONS, IMG_DIM, generator=gen)
    record = {"captions": CAPTIONS, "token_ids": ids, "images": images.tolist(), "scores": {}, "caption_embeddings": {}}
    for name, data_name in (("f30k_butd_region_bert", "f30k"), ("coco_butd_region_bert", "coco")):
        opt = options(data_name)
        torch.manual_seed(0)
        img_enc = encoders.EncoderImageAggr(opt.img_dim, opt.embed_size, opt.precomp_enc_type, opt.no_imgnorm)
        txt_enc = encoders.EncoderText(opt.embed_size, no_txtnorm=opt.no_txtnorm)
        txt_enc.linear = nn.Linear(BERT["hidden_size"], opt.embed_size)   # their nn.Linear(768, ...) at this width
        for part in (img_enc, txt_enc):
            randomise(part, gen)
            part.eval()
        with torch.no_grad():   # lib/vse.py forward_emb: every region valid at evaluation
            img_emb = img_enc(images, torch.full((N_IMAGES,), float(N_REGIONS)))
            cap_emb = txt_enc(tokens, torch.tensor(lengths))
        record["scores"][name] = np.matmul(img_emb.numpy(), cap_emb.numpy().T).astype(np.float64).tolist()
        record["caption_embeddings"][name] = cap_emb.numpy().astype(np.float64).tolist()
        torch.save({"epoch": 19, "model": [img_enc.state_dict(), txt_enc.state_dict()], "best_rsum": 512.25,
                    "opt": opt, "Eiters": 5200}, out / f"{name}.pth")
    (out / "expected.json").write_text(json.dumps(record))
    print(f"wrote {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    main()
