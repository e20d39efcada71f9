"""IMRAM's oracles: a per-pair float64 reference written from the equations of HuiChen24/IMRAM's
model.py (func_attention, gated_memory_t2i/_i2t, xattn_score_Text_IMRAM/_Image_IMRAM,
forward_score) and its ContrastiveLoss. Beside it, descriptions written by hand
(``DESCRIPTIONS``) and what the public code runs (``SOURCE_BEHAVIOUR``)."""
import torch

from methods.models.imram import IMRAM
from methods.models.text import GRUTextEncoder
from tests.oracles._descriptions import REAL, TOY, run, text
from tests.oracles._float64 import EMBED, N_IMAGES, REGION_DIM, REGIONS, VOCAB, WORD_DIM, build, features
from tests.oracles.scan import caption_words
from tests.test_sgraf import l2, linear

LEAKY_SLOPE, COSINE_EPS = 0.1, 1e-8


def attend(query, context, smooth):
    """func_attention with clipped_l2norm: (n_q, D) query fragments, (n_c, D) context -> (n_q, D).
    s[b, a] = LeakyReLU(context_b . query_a) normalised over the queries a, softmax over b."""
    s = torch.nn.functional.leaky_relu(context @ query.t(), LEAKY_SLOPE)     # (n_c, n_q)
    s = s / ((s * s).sum(dim=1, keepdim=True).sqrt() + 1e-8)                 # over the query fragments
    alpha = torch.softmax(smooth * s.t(), dim=1)                             # (n_q, n_c), over the context
    return alpha @ context


def cosine(x, y):
    """cosine_similarity(x, y, dim=-1): sum(x y) / max(|x| |y|, 1e-8)."""
    return (x * y).sum(-1) / (x.norm(dim=-1) * y.norm(dim=-1)).clamp(min=COSINE_EPS)


def gated_memory(unit, memory, attended):
    """gated_memory_*: z = [q; c], q * sigmoid(W_g z + b_g) + tanh(W_l z + b_l) * (1 - gate)."""
    z = torch.cat([memory, attended], dim=-1)
    gate = torch.sigmoid(linear(unit.gate, z))
    return memory * gate + torch.tanh(linear(unit.linear, z)) * (1 - gate)


def direction_steps(fragments, context, steps, smooth, unit, memory_l2norm):
    """One direction's step scores: the memory starts as the query fragments, attends to the
    context, and each step scores the original fragments against what it attended to."""
    memory, scores = fragments, []
    for _ in range(steps):
        attended = attend(memory, context, smooth)
        scores.append(cosine(fragments, attended).mean())
        memory = gated_memory(unit, memory, attended)
        if memory_l2norm:
            memory = l2(memory)
    return scores


def pair_score(model, regions, words):
    """Full-IMRAM adds Text-IMRAM's steps (words attend to regions) and Image-IMRAM's (regions attend to words)."""
    total = 0.0
    if model.mode in ("full", "text"):
        total = total + sum(direction_steps(words, regions, model.steps, model.lambda_softmax, model.memory["t2i"],
                                            model.memory_l2norm))
    if model.mode in ("full", "image"):
        total = total + sum(direction_steps(regions, words, model.steps, model.lambda_softmax, model.memory["i2t"],
                                            model.memory_l2norm))
    return total


def reference_matrix(model, feats, tokens, lengths):
    """(N_img, N_cap) scores, one unpadded pair at a time (differentiable in the model's parameters)."""
    images = [l2(linear(model.fc, f)) for f in feats]
    captions = [caption_words(model, tokens[c, :int(n)]) for c, n in enumerate(lengths)]
    return torch.stack([torch.stack([pair_score(model, v, t) for t in captions]) for v in images])


def reference(model, images, text_batch):
    return reference_matrix(model, images["features"], text_batch["tokens"], text_batch["lengths"])


def contrastive_loss(scores, margin=0.2):
    """model.py ContrastiveLoss with max_violation on an (images x captions) matrix."""
    diagonal = scores.diag()
    cost_caption = (margin + scores - diagonal[:, None]).clamp(min=0)      # per image row: its captions
    cost_image = (margin + scores - diagonal[None, :]).clamp(min=0)        # per caption column: its images
    eye = torch.eye(scores.shape[0], dtype=torch.bool)
    cost_caption, cost_image = cost_caption.masked_fill(eye, 0), cost_image.masked_fill(eye, 0)
    return cost_caption.max(dim=1).values.sum() + cost_image.max(dim=0).values.sum()


OPTIONS = (dict(mode="full", steps=3, lambda_softmax=9.0),
           dict(mode="text", steps=2, lambda_softmax=11.0, memory_l2norm=True),
           dict(mode="image", steps=3, lambda_softmax=4.0),
           dict(mode="full", steps=1, lambda_softmax=9.0, memory_l2norm=True))


def build_imram(**options):
    """A float64 model in eval mode; its text encoder has no dropout, as the source's."""
    torch.manual_seed(0)
    return build(IMRAM, REGION_DIM, REGIONS, EMBED, text=GRUTextEncoder(VOCAB, WORD_DIM, EMBED, bidirectional=True),
                 **options)


def float64_cases():
    for options in OPTIONS:
        yield (f"imram {options}", build_imram(**options), {"features": features(N_IMAGES, REGIONS, REGION_DIM)},
               reference)


# (run config, dataset config block, the description written by hand)
DESCRIPTIONS = [
    (run({"kind": "imram", "embed_dim": 64, "mode": "full", "steps": 3, "lambda_softmax": 9.0,
          "text": text(32, 64, bidirectional=True)}, [(4, False)]), TOY,
     "12×256 RoIAlign regions of ResNet-18 (toy pre-trained) conv4, embed 64, Full-IMRAM (K 3, λ 9), "
     "bi-GRU 64, word 32; 4 epochs, batch 16"),
    (run({"kind": "imram", "embed_dim": 1024, "mode": "image", "steps": 1, "lambda_softmax": 11.0,
          "memory_l2norm": True, "text": text(300, 1024, bidirectional=True)}, [(20, False)], batch_size=128), REAL,
     "36×2048 precomputed regions, embed 1024, Image-IMRAM (K 1, λ 11, memory l2), bi-GRU 1024, word 300; "
     "20 epochs, batch 128"),
]


# what the public code runs, written from that code (not from config/methods): method file -> keys
SOURCE_BEHAVIOUR = {
    # HuiChen24/IMRAM: opts.py (margin 0.2, embed 1024, word 300, grad_clip 2, batch 128), both
    # scripts (--max_violation --bi_gru --no_IMRAM_norm), model.py (ContrastiveLoss on the diagonal of
    # the summed score; forward_score's full_IMRAM), train_gpus.py (Adam, best dev R-sum); no AMP.
    "imram": {"loss.kind": "triplet_hardest", "loss.margin": 0.2, "model.embed_dim": 1024, "model.mode": "full",
              "model.steps": 3, "model.memory_l2norm": False, "model.text.word_dim": 300,
              "model.text.hidden_dim": 1024, "model.text.bidirectional": True, "training.batch_size": 128,
              "training.batching": "captions", "training.batch_positives": "diagonal", "training.amp": False,
              "training.grad_clip": 2.0, "training.optimizer": "adam", "training.weight_decay": 0.0,
              "training.selection_metric": "rsum"},
}
# script/tune_coco.sh: --lambda_softmax 11 --num_epochs 20 --lr_update 10 --learning_rate .0005; the
# Flickr30K script leaves opts.py's 30 epochs at 2e-4 decayed every 15, with --lambda_softmax 9
PER_DATASET = {
    ("imram", "flickr"): {"model.lambda_softmax": 9.0, "training.stages.0.epochs": 30, "training.stages.0.lr": 2e-4,
                          "training.stages.0.schedule": {"kind": "step", "decay_epochs": [15], "gamma": 0.1}},
    ("imram", "coco"): {"model.lambda_softmax": 11.0, "training.stages.0.epochs": 20, "training.stages.0.lr": 5e-4,
                        "training.stages.0.schedule": {"kind": "step", "decay_epochs": [10], "gamma": 0.1}},
}
