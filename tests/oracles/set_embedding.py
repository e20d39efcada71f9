"""Set embeddings' oracles (DivE slots, PVSE's PIE-Net; kdwonn/DivE model_spm.py, agg_block/attention.py,
similarity.py; yalesong/pvse model.py PIENet): the float64 per-pair reference, regions -> fc + MLP ->
slots or PIE-Net -> sets; set similarities.
Beside it, descriptions written by hand (``DESCRIPTIONS``) and what the public code runs (``SOURCE_BEHAVIOUR``)."""
import math
from functools import partial

import torch

from methods.models.set_embedding import SetEmbedding
from tests.oracles._descriptions import REAL, TOY, run, text
from tests.oracles._float64 import (EMBED, LENGTHS, N_IMAGES, REGION_DIM, REGIONS, WORD_DIM, batch_norm_eval, build,
                                    features, plain_l2)
from tests.test_sgraf import linear


def layer_norm(ln, x):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def plain_gelu(x):
    return 0.5 * x * (1 + torch.erf(x / 2 ** 0.5))


def sine(n_positions, dim, total):
    """DivE PositionEmbeddingSine1D(normalize=True): t / total * 2 pi, (sin, cos) pairs of t / 10000^(2i/dim)."""
    angles = [[t / (total + 1e-6) * 2 * math.pi / 10000 ** (2 * (i // 2) / dim) for i in range(dim)]
              for t in range(1, n_positions + 1)]
    out = torch.tensor(angles, dtype=torch.float64)
    out[:, 0::2], out[:, 1::2] = out[:, 0::2].sin(), out[:, 1::2].cos()
    return out


def sine_2d(height, width, dim):
    """DivE PositionEmbeddingSine2D(dim // 2, normalize=True), cell by cell in row-major order:
    the row's 1-D encoding on the first half of the channels, the column's on the second."""
    rows, cols = sine(height, dim // 2, height), sine(width, dim // 2, width)
    return torch.stack([torch.cat([rows[i], cols[j]]) for i in range(height) for j in range(width)])


def slot_reference(agg, inputs, n_valid, positions):
    """K slots over one input's (N, C) features, N - n_valid of them padding: per head the logits
    of each slot with each input, softmax over the slots (padded columns at -max, as the public
    code: uniform), each slot's weights renormalised over the inputs, the weighted values; then the
    output projection, the GELU FFN, T times with the same weights; the final LayerNorm.
    ``positions``: the (N, C) encoding added to the keys, or None."""
    context = layer_norm(agg.norm_inputs, inputs)
    keyed = context if positions is None else context + positions
    k, v = keyed @ agg.to_k.weight.t(), context @ agg.to_v.weight.t()
    slots = agg.slots.clone()
    for _ in range(agg.iterations):
        q = layer_norm(agg.norm_slots, slots) @ agg.to_q.weight.t()
        heads = []
        for h in range(agg.heads):
            cols = slice(h * agg.head_dim, (h + 1) * agg.head_dim)
            logits = (q[:, cols] @ k[:, cols].t()) * agg.head_dim ** -0.5          # (K, N)
            if agg.competition == "inputs":
                logits[:, n_valid:] = -torch.inf
                weights = torch.softmax(logits, dim=1)
            else:
                if agg.padding == "leak":
                    logits[:, n_valid:] = -torch.finfo(torch.float64).max
                weights = torch.softmax(logits, dim=0)
                if agg.padding == "masked":
                    weights[:, n_valid:] = 0
                weights = weights / (weights.sum(dim=1, keepdim=True) + 1e-7)
            heads.append(weights @ v[:, cols])
        slots = slots + linear(agg.to_out[0], torch.cat(heads, dim=1))
        ff = agg.ff
        slots = slots + linear(ff[3], plain_gelu(linear(ff[0], layer_norm(agg.norm_ff, slots))))
    return layer_norm(agg.norm_out, slots)


def pie_reference(pie, local, glob):
    logits = torch.tanh(local @ pie.w1.weight.t()) @ pie.w2.weight.t()              # (N, K)
    pooled = torch.softmax(logits, dim=0).t() @ local
    return layer_norm(pie.norm, glob + torch.sigmoid(linear(pie.fc, pooled)))


def set_elements(model, local, glob, module, n_valid, positions):
    if hasattr(module, "aggregation"):
        return plain_l2(layer_norm(module.norm_global, glob) + slot_reference(module.aggregation, local, n_valid,
                                                                              positions))
    return plain_l2(pie_reference(module, local[:n_valid], glob))


def set_pair(x, y, kind, alpha=None, scale=None, shift=None):
    """One pair of sets, element pair by element pair."""
    c = torch.tensor([[float((a * b).sum()) for b in y] for a in x], dtype=torch.float64)
    if kind == "smooth_chamfer":
        x_side = sum(torch.log(sum(torch.exp(alpha * c[i, j]) for j in range(len(y)))) for i in range(len(x)))
        y_side = sum(torch.log(sum(torch.exp(alpha * c[i, j]) for i in range(len(x)))) for j in range(len(y)))
        return float((x_side / (alpha * len(x)) + y_side / (alpha * len(y))) / 2)
    if kind == "chamfer":
        return float((c.max(dim=1).values.mean() + c.max(dim=0).values.mean()) / 2)
    if kind == "mil":
        return float(c.max())
    return float(torch.sigmoid(scale * c + shift).mean())


def gru_text_sets(model, text_batch):
    """DivE EncoderText: the bi-GRU's final states averaged (global), the word embeddings the set module's inputs."""
    text_sets, longest = [], max(LENGTHS)
    for tokens, n in zip(text_batch["tokens"], LENGTHS):
        _, hidden = model.text.gru(model.text.embed(tokens[:n])[None])
        glob = (hidden[-2, 0] + hidden[-1, 0]) / 2
        words = model.text.embed(tokens[:longest])   # padded to the batch's longest, as the model sees it
        # DivE PositionEmbeddingSine1D(normalize=True) scaled by the padded length (leak) or the caption's own
        agg = getattr(model.text_set, "aggregation", None)
        text_positions = None if agg is None else sine(longest, WORD_DIM, longest if agg.padding == "leak" else int(n))
        text_sets.append(set_elements(model, words, glob, model.text_set, int(n), text_positions))
    return text_sets


def set_reference(model, images, text_batch, similarity, text_sets=gru_text_sets):
    image_sets = []
    if isinstance(images["features"], dict):   # a grid: its cells row by row, with 2-D positions on the keys
        (grid,) = images["features"].values()
        inputs = [g.reshape(-1, g.shape[-1]) for g in grid]
        positions = sine_2d(grid.shape[1], grid.shape[2], model.embed_dim)
    else:
        inputs, positions = list(images["features"]), None
    for cells in inputs:
        base = linear(model.region.fc, cells)
        hidden = batch_norm_eval(model.region.bn, linear(model.region.mlp_in, base))
        local = base + linear(model.region.mlp_out, torch.relu(hidden))
        image_positions = positions if hasattr(model.image_set, "aggregation") else None
        image_sets.append(set_elements(model, local, local.max(dim=0).values, model.image_set, len(local),
                                       image_positions))
    params = {k: v for k, v in similarity.items() if k != "kind"}
    return torch.tensor([[set_pair(x, y, similarity["kind"], **params) for y in text_sets(model, text_batch)]
                         for x in image_sets], dtype=torch.float64)


def float64_cases():
    slot = {"kind": "slot", "iterations": 2, "heads": 2, "head_dim": 3, "ff_mult": 2, "competition": "slots"}
    for module, similarity in (({**slot, "padding": "leak"}, {"kind": "smooth_chamfer", "alpha": 16.0}),
                               ({**slot, "padding": "masked"}, {"kind": "chamfer"}),
                               ({**slot, "competition": "inputs", "padding": "leak"}, {"kind": "mil"}),
                               ({"kind": "pie"}, {"kind": "mp", "scale": 2.0, "shift": -0.5})):
        yield (f"set {module} {similarity}",
               build(SetEmbedding, REGION_DIM, EMBED, 3, set_module=module, similarity=similarity, dropout=0.1,
                     region_drop=0.2, bidirectional_text=True),
               {"features": features(N_IMAGES, REGIONS, REGION_DIM)}, partial(set_reference, similarity=similarity))


# (run config, dataset config block, the description written by hand)
DESCRIPTIONS = [
    (run({"kind": "set_embedding", "embed_dim": 1024, "set_size": 4,
          "set_module": {"kind": "slot", "iterations": 4, "heads": 4, "head_dim": 512, "ff_mult": 4,
                         "competition": "slots", "padding": "leak"},
          "similarity": {"kind": "smooth_chamfer", "alpha": 16.0},
          "text": text(300, 1024, bidirectional=True, word_init="glove")}, [(80, False)], batch_size=200,
         batching="images"), REAL,
     "36×2048 precomputed regions, D 1024, K 4, slot set module (T 4, padding leak), smooth_chamfer (alpha 16), "
     "bi-GRU 1024, word 300 (GloVe); 80 epochs, batch 200 images"),
    (run({"kind": "set_embedding", "embed_dim": 64, "set_size": 2, "set_module": {"kind": "pie"},
          "similarity": {"kind": "mp", "scale": 1.0, "shift": 0.0}, "text": text(32, 64, bidirectional=True)},
         [(3, False)], batch_size=16, batching="images"), TOY,
     "12×256 RoIAlign regions of ResNet-18 (toy pre-trained) conv4, D 64, K 2, PIE-Net set module, "
     "mp (scale 1, shift 0), bi-GRU 64, word 32; 3 epochs, batch 16 images"),
]


# what the public code runs, written from that code (not from config/methods): method file -> keys
SOURCE_BEHAVIOUR = {
    # kdwonn/DivE train_eval_coco.sh (embed 1024, word 300, bi-GRU --gpo_rnn, K 4 both sides,
    # --margin 0.2 --max_violation, mean reduction and no --tri_mean_to_max in loss.py/train.py,
    # --mmd_weight 0.01 --unif_weight 0.01, batch 200 images, adamw, weight decay 1e-4, grad_clip 1,
    # --amp, --dropout 0.1, --butd_drop_prob 0.2, --spm_depth 4, padded keys leak in attention.py,
    # eval.py loads the last checkpoint). (Similarity, set module, K, T, alpha are the ablation
    # tables' factors, set per row.)
    "set_embeddings": {"model.embed_dim": 1024, "model.text.word_dim": 300, "model.text.hidden_dim": 1024,
                       "model.text.bidirectional": True, "model.text.word_init": "glove",
                       "loss.terms.0.kind": "triplet_hardest", "loss.terms.0.margin": 0.2,
                       "loss.terms.0.reduction": "mean", "loss.terms.0.warmup_sum_epochs": 0,
                       "loss.terms.1.kind": "mmd", "loss.terms.1.weight": 0.01,
                       "loss.terms.2.kind": "uniformity", "loss.terms.2.weight": 0.01,
                       "training.batch_size": 200, "training.batching": "images", "training.optimizer": "adamw",
                       "training.weight_decay": 1e-4, "training.grad_clip": 1.0, "training.amp": True,
                       "training.selection_metric": "last", "model.dropout": 0.1, "model.region_drop": 0.2,
                       "training.caption_augment": {"prob": 0.2, "mask": 0.5, "replace": 0.1}},
}
# keys a row may set as its own factor, so not declared switches: the Table 4 rows vary K, T and alpha,
# the appendix B.3 rows undo the slot-attention modifications
ROW_FACTORS = {"set_embeddings": {"model.set_size", "model.set_module.iterations", "model.similarity.alpha",
                                  "model.set_module.initial_slots", "model.set_module.slot_update",
                                  "model.set_module.global_residual"}}
