"""PFAN's oracles: the float64 per-pair similarity of HaoYang0123/Position-Focused-Attention-Network's
model_attention.py (``EncoderImagePrecomp``, ``func_attention``, ``xattn_score_t2i``,
``xattn_score_i2t``), written from its equations one region and one (image, caption) pair at a
time, with the block rule of the released position files written out block by block, and its
ContrastiveLoss. Beside them, descriptions written by hand (``DESCRIPTIONS``) and what the public
code runs (``SOURCE_BEHAVIOUR``)."""
import torch

from methods.models.pfan import PFAN
from tests.oracles._descriptions import REAL, TOY, run, text
from tests.oracles._float64 import EMBED, N_IMAGES, REGION_DIM, REGIONS, build, features
from tests.oracles.bfan import contrastive_loss, cosine, leaky_relu   # noqa: F401 (the loss: the same ContrastiveLoss)
from tests.oracles.scan import caption_words
from tests.test_sgraf import l2, linear


def region_blocks(box, grid, kept):
    """One box (x0, y0, x1, y1 fractions) -> its ``kept`` blocks as (index, weight) lists: every
    block's overlap area, block (row, col) numbered row * grid + col; the largest first (equal
    areas: the lower index), the zero ones replaced by the padding index grid^2 with weight 0; the
    weights are the areas over the kept total. No area at all: the block of the corner (x0, y0)."""
    x0, y0, x1, y1 = (float(v) for v in box)
    areas = []
    for row in range(grid):
        for col in range(grid):
            w = max(0.0, min(x1, (col + 1) / grid) - max(x0, col / grid))
            h = max(0.0, min(y1, (row + 1) / grid) - max(y0, row / grid))
            areas.append((w * h, row * grid + col))
    if sum(a for a, _ in areas) == 0:
        corner = min(int(y0 * grid), grid - 1) * grid + min(int(x0 * grid), grid - 1)
        areas = [(1.0 if i == corner else 0.0, i) for _, i in areas]
    best = sorted(areas, key=lambda item: (-item[0], item[1]))[:kept]
    total = sum(a for a, _ in best)
    return ([i if a > 0 else grid * grid for a, i in best], [a / total for a, _ in best])


def position_feature(model, v, box):
    """EncoderImagePrecomp for one region v (C,): attention over its blocks' embeddings, weighted
    by the block weights, softmaxed again, the embeddings' weighted sum."""
    index, weights = region_blocks(box, model.grid, model.region_blocks)
    slots = [k for k, i in enumerate(index) if model.padding_blocks == "attend" or i < model.grid ** 2]
    e = torch.stack([model.position_embedding.weight[index[k]] for k in slots])       # (L, P)
    w = torch.tensor([weights[k] for k in slots], dtype=v.dtype)
    query = linear(model.fc_att, v)
    attention = torch.softmax(torch.tanh(e @ query), dim=0)
    combined = torch.softmax(w * attention, dim=0)
    return combined @ e


def image_regions(model, regions, boxes):
    """(R, D) embedded regions of one image: l2(fc([v; p]))."""
    return torch.stack([l2(linear(model.fc, torch.cat([v, position_feature(model, v, b)])))
                        for v, b in zip(regions, boxes)])


def aggregate(values, aggregation, lambda_lse):
    if aggregation == "avg":
        return values.mean()
    return torch.log(torch.exp(lambda_lse * values).sum()) / lambda_lse


def reference_pair(regions, words, direction, aggregation, lambda_softmax, lambda_lse=None):
    """One pair's score. t-i: each word attends to the regions (SCAN's attention: LeakyReLU cosines
    l2-normalised over the words, softmax over the regions); the aggregate of the words' cosines
    with what they attended to, plus 0.5 times the aggregate of each word's largest attention
    weight. i-t: SCAN's, regions attending to the words, no second term."""
    if direction == "t2i":
        sim = l2(leaky_relu(regions @ words.t()), dim=1)              # (R, W), each region over the words
        alpha = torch.softmax(lambda_softmax * sim, dim=0)            # over the regions, per word
        attended = alpha.t() @ regions                                # (W, D)
        return (aggregate(cosine(words, attended), aggregation, lambda_lse)
                + 0.5 * aggregate(alpha.max(dim=0).values, aggregation, lambda_lse))
    sim = l2(leaky_relu(words @ regions.t()), dim=1)                  # (W, R), each word over the regions
    alpha = torch.softmax(lambda_softmax * sim, dim=0)                # over the words, per region
    attended = alpha.t() @ words                                      # (R, D)
    return aggregate(cosine(regions, attended), aggregation, lambda_lse)


def score_matrix(model, images, text_batch):
    """Every pair, one at a time, from the model's weights; differentiable."""
    feats = images["features"]
    regions = [image_regions(model, r, b) for r, b in zip(feats["regions"], feats["boxes"])]
    words = [caption_words(model, text_batch["tokens"][c, :int(n)]) for c, n in enumerate(text_batch["lengths"])]
    return torch.stack([torch.stack([reference_pair(r, w, model.direction, model.aggregation, model.lambda_softmax,
                                                    model.lambda_lse) for w in words]) for r in regions])


def reference(model, images, text_batch):
    return score_matrix(model, images, text_batch)


def boxes(n_images, n_regions, seed=4):
    """(N, R, 4) boxes as fractions: random ones, and per image a whole-image box (equal areas at
    the last slot), a box inside one block (padding slots) and one of no area (its corner's block)."""
    g = torch.Generator().manual_seed(seed)
    corner = torch.rand(n_images, n_regions, 2, generator=g, dtype=torch.float64) * 0.7
    size = torch.rand(n_images, n_regions, 2, generator=g, dtype=torch.float64) * 0.3 + 0.02
    out = torch.cat([corner, corner + size], dim=-1)
    out[:, 0] = torch.tensor([0.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    out[:, 1] = torch.tensor([0.51, 0.27, 0.55, 0.30], dtype=torch.float64)
    out[:, 2] = torch.tensor([0.4, 0.6, 0.4, 0.9], dtype=torch.float64)
    return out


def image_features(n_images=N_IMAGES):
    return {"regions": features(n_images, REGIONS, REGION_DIM), "boxes": boxes(n_images, REGIONS)}


def float64_cases():
    for direction, aggregation, lambda_softmax, lse, grid, kept, padding in (
            ("t2i", "avg", 9.0, None, 16, 15, "attend"), ("i2t", "avg", 4.0, None, 16, 15, "attend"),
            ("t2i", "lse", 9.0, 6.0, 4, 5, "attend"), ("t2i", "avg", 9.0, None, 4, 5, "masked")):
        similarity = {"direction": direction, "aggregation": aggregation, "lambda_softmax": lambda_softmax}
        if lse is not None:
            similarity["lambda_lse"] = lse
        yield (f"pfan {direction} {aggregation} grid {grid} kept {kept} padding {padding}",
               build(PFAN, REGION_DIM, REGIONS, EMBED, bidirectional_text=True, similarity=similarity,
                     grid=grid, region_blocks=kept, position_dim=6, padding_blocks=padding),
               {"features": image_features()}, reference)


# (run config, dataset config block, the description written by hand)
DESCRIPTIONS = [
    (run({"kind": "pfan", "embed_dim": 64, "text": text(32, 64, bidirectional=True), "grid": 16, "region_blocks": 15,
          "position_dim": 32, "similarity": {"direction": "t2i", "aggregation": "avg", "lambda_softmax": 9.0}},
         [(4, False)]), TOY,
     "12×256 RoIAlign regions of ResNet-18 (toy pre-trained) conv4 with box positions (16×16 blocks, 15 per "
     "region), embed 64, t-i AVG (λ1 9), bi-GRU 64, word 32; 4 epochs, batch 16"),
    (run({"kind": "pfan", "embed_dim": 1024, "text": text(300, 1024, bidirectional=True), "grid": 16,
          "region_blocks": 15, "position_dim": 200,
          "similarity": {"direction": "i2t", "aggregation": "avg", "lambda_softmax": 4.0}}, [(30, False)],
         batch_size=128), REAL,
     "36×2048 precomputed regions with box positions (16×16 blocks, 15 per region), embed 1024, i-t AVG (λ1 4), "
     "bi-GRU 1024, word 300; 30 epochs, batch 128"),
]


# what the public code runs, written from that code (not from config/methods): method file -> keys
SOURCE_BEHAVIOUR = {
    # HaoYang0123/Position-Focused-Attention-Network: run_train.sh and the README's Flickr30K t-i
    # arguments (--max_violation --bi_gru --agg_func=Mean --cross_attn=t2i --lambda_softmax=9
    # --embed_size=1024 --batch_size=128), train_attention.py defaults (margin 0.2, word_dim 300,
    # grad_clip 2, Adam, clipped_l2norm), model_attention.py (split_size 16, position_embed_size 200,
    # softmaxes over every slot, ContrastiveLoss on the diagonal), evaluation.py (float64 scoring);
    # the released position files' 15 blocks per region; no AMP
    "pfan": {"loss.kind": "triplet_hardest", "loss.margin": 0.2, "model.embed_dim": 1024,
             "model.similarity.direction": "t2i", "model.similarity.aggregation": "avg",
             "model.similarity.lambda_softmax": 9.0, "model.grid": 16, "model.region_blocks": 15,
             "model.position_dim": 200, "model.padding_blocks": "attend",
             "model.text.word_dim": 300, "model.text.hidden_dim": 1024, "model.text.bidirectional": True,
             "training.batch_size": 128, "training.batching": "captions", "training.batch_positives": "diagonal",
             "training.amp": False, "training.grad_clip": 2.0, "training.optimizer": "adam",
             "model.evaluation_dtype": "float64"},
}
