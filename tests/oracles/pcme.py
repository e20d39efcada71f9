"""PCME's oracles: a float64 reference written from naver-ai/pcme's equations (models/image_encoder.py,
models/caption_encoder.py, models/uncertainty_module.py, models/pie_model.py, utils/tensor_utils.py
sample_gaussian_tensors, criterions/probemb.py batchwise_cdist, soft_contrastive_nll, kl_divergence,
match_prob), one image, one caption and one pair of samples at a time, with no padding, masks or
packing; descriptions written by hand; and what its public code runs (config/coco/pcme_coco.yaml,
train_coco.py, engine/trainer.py, evaluate_recall_coco.py, datasets/_dataloader.py)."""
import math

import torch

from methods.models.pcme import PCME
from methods.models.text import GRUTextEncoder
from tests.oracles._descriptions import REAL, run, text
from tests.oracles._float64 import MVSA_SHAPES, N_IMAGES, VOCAB, WORD_DIM, build, features
from tests.test_sgraf import linear

EMBED = 12          # even: the caption bi-GRUs have EMBED / 2 units
SAMPLES = 3


def layer_norm(norm, x):
    mean = x.mean()
    var = ((x - mean) ** 2).mean()
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def attention_pool(w1, w2, x):
    """MultiHeadSelfAttention(1 head) on one unpadded sequence (n, C): softmax_n(w2 tanh(w1 x)) @ x."""
    logits = torch.tanh(x @ w1.weight.t()) @ w2.weight.t()          # (n, 1)
    return (torch.softmax(logits[:, 0], dim=0)[:, None] * x).sum(dim=0)


def unit(x):
    return x / torch.sqrt((x * x).sum())


def image_distribution(model, cells):
    """cells (n, C) of one image -> (mu, logsigma)."""
    pooled = cells.mean(dim=0)
    residual = torch.sigmoid(linear(model.image_pie.fc, attention_pool(model.image_pie.w1, model.image_pie.w2, cells)))
    mu = unit(layer_norm(model.image_pie.norm, linear(model.image_fc, pooled) + residual))
    attended = attention_pool(model.image_sigma_attention.w1, model.image_sigma_attention.w2, cells)
    return mu, linear(model.image_sigma_fc, attended) + linear(model.image_sigma_pooled, pooled)


def caption_distribution(model, tokens):
    """tokens (n,) of one caption -> (mu, logsigma): the bi-GRUs' outputs at the last word."""
    words = model.text.embed(tokens)
    last = model.text.gru(words[None])[0][0, -1]
    residual = torch.sigmoid(linear(model.text_pie.fc, attention_pool(model.text_pie.w1, model.text_pie.w2, words)))
    mu = unit(layer_norm(model.text_pie.norm, last + residual))
    attended = attention_pool(model.text_sigma_attention.w1, model.text_sigma_attention.w2, words)
    return mu, linear(model.text_sigma_fc, attended) + model.text_sigma_gru(words[None])[0][0, -1]


def distributions(model, images, text_batch):
    grid = images["features"]["conv5"]
    img = [image_distribution(model, grid[i].reshape(-1, grid.shape[-1])) for i in range(grid.shape[0])]
    txt = [caption_distribution(model, tok[:n]) for tok, n in zip(text_batch["tokens"], text_batch["lengths"])]
    return img, txt


def evaluation_noise(model, n_items, side):
    """The evaluation draws the model documents: eps of a CPU generator seeded sample_seed (images)
    or sample_seed + 1 (texts), (N, K, D), float32."""
    seed = model.sample_seed + (0 if side == "images" else 1)
    return torch.randn((n_items, model.n_samples, model.embed_dim), generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float32).double()


def samples(dists, eps):
    """sample_gaussian_tensors: mu + eps * exp(logsigma) per item."""
    return [mu[None] + e * torch.exp(logsigma)[None] for (mu, logsigma), e in zip(dists, eps)]


def pair_match_probability(x, y, a, b):
    """match_prob of one pair of sample sets (K, D) x (L, D): the mean over the K x L sample pairs of
    e^s / (e^s + e^-s), s = -a sqrt(|x_k - y_l|^2 + 1e-6) + b."""
    total = 0.0
    for xk in x:
        for yl in y:
            s = -a * torch.sqrt(((xk - yl) ** 2).sum() + 1e-6) + b
            total = total + torch.exp(s) / (torch.exp(s) + torch.exp(-s))
    return total / (len(x) * len(y))


def reference(model, images, text_batch):
    img, txt = distributions(model, images, text_batch)
    zi = samples(img, evaluation_noise(model, len(img), "images"))
    zt = samples(txt, evaluation_noise(model, len(txt), "texts"))
    a, b = model.negative_scale[0], model.shift[0]
    if model.eval_method == "matmul":   # ParallelMatMulModule: the sum of the K x L sample dot products / (K L)
        return torch.stack([torch.stack([sum((xk * yl).sum() for xk in x for yl in y) / (len(x) * len(y))
                                         for y in zt]) for x in zi])
    return torch.stack([torch.stack([pair_match_probability(x, y, a, b) for y in zt]) for x in zi])


def soft_contrastive_loss(zi, zt, positives, a, b):
    """MCSoftContrastiveLoss._compute_loss, i2t plus t2i: for each (anchor, candidate) pair the
    K^2 distances, logits, -(logsumexp(m s - logsumexp(s, -s))) + log K^2, summed over the pairs."""
    def one_direction(anchors, candidates, matched):
        loss = 0.0
        for i, x in enumerate(anchors):
            for j, y in enumerate(candidates):
                m = 1.0 if matched(i, j) else -1.0
                s = torch.stack([-a * torch.sqrt(((yl - xk) ** 2).sum() + 1e-6) + b for xk in x for yl in y])
                inner = s * m - torch.logsumexp(torch.stack([s, -s]), dim=0)
                loss = loss - torch.logsumexp(inner, dim=0) + math.log(len(s))
        return loss
    return (one_direction(zi, zt, lambda i, j: bool(positives[i, j]))
            + one_direction(zt, zi, lambda i, j: bool(positives[j, i])))


def vib_loss(z, logsigmas):
    """kl_divergence(features.mean(dim=1), logsigma) summed over the batch."""
    total = 0.0
    for zk, logsigma in zip(z, logsigmas):
        mean = zk.mean(dim=0)
        total = total - 0.5 * (1 + logsigma - mean ** 2 - torch.exp(logsigma)).sum()
    return total


def tiny_pcme(eval_method="matching_prob", dtype=torch.float64):
    """A small PCME with scale and shift that keep the match probabilities off 0 and 1."""
    torch.manual_seed(0)
    model = build(PCME, "resnet18", MVSA_SHAPES, ["conv5"], "frozen", EMBED,
                  text=GRUTextEncoder(VOCAB, WORD_DIM, EMBED // 2, bidirectional=True, embed_init="normal"),
                  n_samples=SAMPLES, init_negative_scale=0.7, init_shift=1.5, eval_method=eval_method)
    return model.to(dtype)


def float64_cases():
    grid = {"conv5": features(N_IMAGES, *MVSA_SHAPES["conv5"])}
    for method in ("matching_prob", "matmul"):
        yield f"pcme {method}", tiny_pcme(method), {"features": grid}, reference


# (run config, dataset config block, the description written by hand)
DESCRIPTIONS = [
    (run({"kind": "pcme", "backbone": "r152", "backbone_bn": "train", "grid_scales": ["conv5"], "embed_dim": 1024,
          "text": text(300, 512, bidirectional=True, word_init="glove"), "n_samples": 7},
         [(30, False), (30, True)], batch_size=128), REAL,
     "ResNet-152 (weights resnet152-394f9c45.pth) conv5 grid, CNN fine-tuned, D 1024, 7 samples ranked by match "
     "probability, bi-GRU 512, word 300 (GloVe); 30+30 epochs, batch 128"),
    (run({"kind": "pcme", "backbone": "r152", "backbone_bn": "train", "grid_scales": ["conv5"], "embed_dim": 64,
          "text": text(32, 32, bidirectional=True), "n_samples": 3, "eval_method": "matmul"},
         [(2, False)], batch_size=32), REAL,
     "ResNet-152 (weights resnet152-394f9c45.pth) conv5 grid, CNN frozen, D 64, 3 samples ranked by sample-mean "
     "dot, bi-GRU 32, word 32; 2 epochs, batch 32"),
]


# what the public code runs, written from that code (not from config/methods): method file -> keys
SOURCE_BEHAVIOUR = {
    # config/coco/pcme_coco.yaml with train_coco.py (pretrain: img_finetune and txt_finetune false;
    # finetune: both true, learning_rate x finetune_lr_decay), evaluate_recall_coco.py
    # (eval_method matching_prob), datasets/_dataloader.py (a caption with its image per item,
    # RandomResizedCrop + flip + RandomErasing in training), criterions/probemb.py (matched i == j).
    "pcme": {"model.backbone": "resnet152", "model.grid_scales": ["conv5"], "model.embed_dim": 1024,
             "model.text.word_dim": 300, "model.text.hidden_dim": 512, "model.text.bidirectional": True,
             "model.text.word_init": "glove", "model.text.embed_init": "normal", "model.n_samples": 7,
             "model.init_negative_scale": 15.0, "model.init_shift": 15.0, "model.eval_method": "matching_prob",
             "loss.terms.0.kind": "soft_contrastive", "loss.terms.1.kind": "vib", "loss.terms.1.weight": 1e-5,
             "training.batch_size": 128, "training.batching": "captions", "training.batch_positives": "diagonal",
             "training.optimizer": "adamp", "training.weight_decay": 0.0, "training.grad_clip": 2.0,
             "training.finetune_augment": "random_resized_crop_flip", "training.random_erasing": {"prob": 0.2},
             "training.caption_drop": {"prob": 0.1}, "training.selection_metric": "last",
             "training.stages.0.epochs": 30, "training.stages.0.lr": 2e-4,
             "training.stages.0.finetune_backbone": False, "training.stages.0.schedule": {"kind": "cosine"},
             "training.stages.1.epochs": 30, "training.stages.1.lr": 2e-5,
             "training.stages.1.finetune_backbone": True, "training.stages.1.schedule": {"kind": "cosine"}},
}
