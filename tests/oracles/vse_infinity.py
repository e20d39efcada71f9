"""VSE-infinity's oracles: a float64 per-pair reference written from woodfrog/vse_infty's equations
(branch bigru: lib/encoders.py EncoderImageAggr and EncoderText, lib/modules/aggr/gpo.py GPO), one
image and one caption at a time, with no padding, masks or packing; descriptions written by hand;
and what its public code runs (train_region.sh, arguments.py, lib/vse.py, lib/loss.py, train.py)."""
import math
from functools import partial

import torch

from methods.models.bert_text import BertTextEncoder
from methods.models.vse_infinity import VSEInfinity
from tests.oracles._descriptions import REAL, TOY, run, text
from tests.oracles._float64 import (EMBED, N_IMAGES, REGION_DIM, REGIONS, VOCAB, batch_norm_eval, build, cosine_matrix,
                                    features)
from tests.test_sgraf import linear


def scan_l2(x):
    """vse_infty's l2norm: X / (sqrt(sum X^2) + 1e-8)."""
    return x / (x.pow(2).sum().sqrt() + 1e-8)


def rank_encoding(d, n):
    """pe[k, 2i] = sin(k / 10000^(2i/d)), pe[k, 2i+1] = cos(k / 10000^(2i/d)), k = 0..n-1."""
    pe = torch.zeros(n, d, dtype=torch.float64)
    for k in range(n):
        for i in range(0, d, 2):
            pe[k, i] = math.sin(k / 10000 ** (i / d))
            pe[k, i + 1] = math.cos(k / 10000 ** (i / d))
    return pe


def gpo(pool, x):
    """One set (n, D): the ranks' weights from the bi-GRU over the rank encoding (directions averaged,
    w·h / 0.1, softmax over the n ranks), each dimension's values sorted in descending order."""
    n = x.shape[0]
    out, _ = pool.gru(rank_encoding(pool.d_pe, n)[None])        # one unpadded sequence
    half = out.shape[-1] // 2
    h = (out[0, :, :half] + out[0, :, half:]) / 2
    weights = torch.softmax((h @ pool.linear.weight[0]) / 0.1, dim=0)        # (n,)
    ranked = x.sort(dim=0, descending=True).values
    return (weights[:, None] * ranked).sum(dim=0)


POOLS = {"gpo": gpo, "mean": lambda pool, x: x.mean(dim=0), "max": lambda pool, x: x.max(dim=0).values}


def reference(model, images, text_batch, pooling):
    pool = POOLS[pooling]
    image_vectors = []
    for regions in images["features"]:                           # (N, C): every region valid at inference
        mlp = model.region
        hidden = torch.relu(batch_norm_eval(mlp.bn, linear(mlp.mlp_in, regions)))
        projected = linear(mlp.fc, regions) + linear(mlp.mlp_out, hidden)
        image_vectors.append(scan_l2(pool(model.image_pool, projected)))
    caption_vectors = []
    for tokens, n in zip(text_batch["tokens"], text_batch["lengths"]):
        out, _ = model.text.gru(model.text.embed(tokens[:n])[None])
        half = out.shape[-1] // 2
        words = (out[0, :, :half] + out[0, :, half:]) / 2       # (n, D)
        caption_vectors.append(scan_l2(pool(model.text_pool, words)))
    return cosine_matrix(image_vectors, caption_vectors)


def tiny_bert_encoder(vocab: int = VOCAB, out_dim: int = EMBED) -> BertTextEncoder:
    """A BERT of one layer at random weights (no folder: the oracle builds it), projected to ``out_dim``."""
    from transformers import BertConfig, BertModel
    torch.manual_seed(5)
    config = BertConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, attn_implementation="eager")
    return BertTextEncoder(BertModel(config), out_dim)


def reference_bert(model, images, text_batch, pooling):
    """The image side as ``reference``; each caption alone and unpadded (so no attention mask): the
    BERT's last hidden states of its tokens -> the projection -> pooled over every token -> l2
    (master's EncoderText: bert(x, mask)[0] -> linear -> GPO(cap_len) -> l2norm)."""
    pool = POOLS[pooling]
    image_vectors = [scan_l2(pool(model.image_pool, linear(model.region.fc, regions) + linear(
        model.region.mlp_out, torch.relu(batch_norm_eval(model.region.bn, linear(model.region.mlp_in, regions))))))
        for regions in images["features"]]
    caption_vectors = []
    for tokens, n in zip(text_batch["tokens"], text_batch["lengths"]):
        states = model.text.bert(tokens[:n][None]).last_hidden_state[0]        # (n, hidden)
        caption_vectors.append(scan_l2(pool(model.text_pool, linear(model.text.linear, states))))
    return cosine_matrix(image_vectors, caption_vectors)


def float64_cases():
    for pooling in ("gpo", "mean", "max"):
        model = build(VSEInfinity, REGION_DIM, EMBED, pooling=pooling, region_drop=0.2, bidirectional_text=True)
        yield (pooling, model, {"features": features(N_IMAGES, REGIONS, REGION_DIM)}, partial(reference, pooling=pooling))
    model = build(VSEInfinity, REGION_DIM, EMBED, pooling="gpo", region_drop=0.2, text=tiny_bert_encoder())
    yield ("gpo, BERT", model, {"features": features(N_IMAGES, REGIONS, REGION_DIM)},
           partial(reference_bert, pooling="gpo"))


# (run config, dataset config block, the description written by hand)
DESCRIPTIONS = [
    (run({"kind": "vse_infinity", "embed_dim": 64, "region_drop": 0.2, "pooling": "gpo",
          "text": text(32, 64, bidirectional=True)}, [(4, False)]), TOY,
     "12×256 RoIAlign regions of ResNet-18 (toy pre-trained) conv4, embed 64, GPO pooling, bi-GRU 64, word 32; "
     "4 epochs, batch 16"),
    (run({"kind": "vse_infinity", "embed_dim": 1024, "region_drop": 0.2, "pooling": "max",
          "text": text(300, 1024, bidirectional=True)}, [(25, False)], batch_size=128), REAL,
     "36×2048 precomputed regions, embed 1024, MAX pooling, bi-GRU 1024, word 300; 25 epochs, batch 128"),
    (run({"kind": "vse_infinity", "embed_dim": 1024, "region_drop": 0.2, "pooling": "gpo",
          "text": {"kind": "bert", "encoder": "bert_base_uncased", "out_dim": 1024, "lr_factor": 0.1}},
         [(25, False)], batch_size=128), REAL,
     "36×2048 precomputed regions, embed 1024, GPO pooling, BERT bert_base_uncased -> 1024 (lr x0.1); "
     "25 epochs, batch 128"),
]


# what the public code runs, written from that code (not from config/methods): method file -> keys
SOURCE_BEHAVIOUR = {
    # woodfrog/vse_infty, branch bigru: train_region.sh (--num_epochs 25 --lr_update 15 --learning_rate
    # 5e-4 --precomp_enc_type basic --embed_size 1024 --vse_mean_warmup_epochs 1), arguments.py defaults
    # (batch 128, word_dim 300, one GRU layer, margin 0.2, grad_clip 2), lib/vse.py (torch.optim.AdamW
    # with its default weight decay 0.01; the loss on every batch's diagonal pairs), lib/loss.py (the
    # sum of the hinges of both directions, max_violation from epoch vse_mean_warmup_epochs on),
    # train.py (the decay x0.1 at epoch 15; model_best.pth by validation RSUM), lib/encoders.py
    # (GPO on both sides, the bi-GRU of embed_size units), image_caption.py (region drop 0.2; caption
    # words masked / replaced / deleted with probability 0.2: 50 % / 10 % / 40 %).
    "vse_infinity": {"model.embed_dim": 1024, "model.pooling": "gpo", "model.region_drop": 0.2,
                     "model.text.word_dim": 300, "model.text.hidden_dim": 1024, "model.text.num_layers": 1,
                     "model.text.bidirectional": True, "model.text.word_init": "random",
                     "loss.kind": "triplet_hardest", "loss.margin": 0.2, "loss.warmup_sum_epochs": 1,
                     "training.batch_size": 128, "training.optimizer": "adamw", "training.weight_decay": 0.01,
                     "training.grad_clip": 2.0, "training.amp": False, "training.batching": "captions",
                     "training.batch_positives": "diagonal", "training.selection_metric": "rsum",
                     "training.caption_augment": {"prob": 0.2, "mask": 0.5, "replace": 0.1},
                     "training.stages.0.epochs": 25, "training.stages.0.lr": 5.0e-4,
                     "training.stages.0.schedule": {"kind": "step", "decay_epochs": [15], "gamma": 0.1}},
}


# The BERT branch (master), written from its code: train_region.sh (as bigru's, BERT text), lib/vse.py
# (AdamW over three groups for precomp_enc_type basic: the text encoder but BERT at the rate, BERT at
# x0.1, the image encoder at the rate; weight_decay=decay_factor 1e-4), lib/encoders.py EncoderText
# (BertModel.from_pretrained('bert-base-uncased'), nn.Linear(768, embed_size), GPO(32, 32)),
# image_caption.py process_caption (each word's WordPiece pieces masked / replaced / deleted together
# with probability 0.2). Not in SOURCE_BEHAVIOUR: no paper table judges a row of it yet
# (tests/test_fidelity.py compares that dict with the judged rows' methods).
BERT_SOURCE_BEHAVIOUR = {
    "vse_infinity_bert": {**{k: v for k, v in SOURCE_BEHAVIOUR["vse_infinity"].items()
                             if not k.startswith("model.text.") and k != "training.weight_decay"},
                          "model.text.kind": "bert", "model.text.encoder": "bert_base_uncased",
                          "model.text.out_dim": 1024, "model.text.lr_factor": 0.1,
                          "training.weight_decay": 1.0e-4},
}
