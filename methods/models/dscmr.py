"""DSCMR, Deep Supervised Cross-Modal Retrieval (Zhen, Hu, Wang, Peng, CVPR 2019), as its public
code computes it (penghu-cs/DSCMR: model.py IDCM_NN, train_model.py calc_loss, evaluate.py
fx_calc_map_label), fitted to the label-wise datasets' inputs (config/methods/dscmr.yaml lists
each choice and deviation).

Inputs. The code takes one fixed vector per item (load_data.py: ``train_img`` VGG-19 fc7 4096-d,
``train_txt`` a precomputed text vector). Here an image is the mean of its precomputed regions
(the BUTD region features the label-wise rows read), a text the binary bag of words of its token
ids over the run's vocabulary (``<pad>``, ``<start>``, ``<end>`` left out: every text has them):
on the tag datasets that is the item's tag vector, the customary MIRFlickr / NUS-WIDE text input.

Model (IDCM_NN). ImgNN: relu(Linear(image_dim, hidden)); TextNN: relu(Linear(vocab, hidden)); then
ONE ``linearLayer`` (hidden -> d, the common space) applied to both, and ONE ``linearLayer2``
(d -> C, the label space) applied to both common features. Every Linear keeps torch's default
initialisation, as the code; no dropout, no normalisation inside the network.

Retrieval. fx_calc_map_label ranks by scipy's cosine distance of the common features: the
embedding is the l2-normalised common feature (no epsilon) and the scores are their dot products.

Label predictions (micro-F1; the code computes none: its training loop logs the single-label
argmax accuracy, which it does not use). linearLayer2 regresses onto the 0/1 label vector (loss
term 1, ||p - y||), so its outputs sit in the targets' units: ``label_rule: threshold`` clamps
them to [0, 1] and the metric predicts a label at >= 0.5, the midpoint of the two targets (the
label-wise rows' rule, ``relative_to_largest``, is for outputs whose scale the loss leaves free;
it is a setting here too).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from methods.data.text import END, PAD, SPECIALS, START
from methods.models.base import BuildContext, EmbeddingModel, register_model
from methods.models.label_wise import relative_to_largest
from methods.models.layers import PLAIN_L2NORM_EPS, ItemTensors, l2norm

# token ids every text holds (the vocabulary's first ids, methods.data.text): left out of the bag of words
CONSTANT_IDS = tuple(SPECIALS.index(s) for s in (PAD, START, END))
LABEL_RULES = ("threshold", "relative_to_largest")


def bag_of_words(tokens: torch.Tensor, vocab_size: int, dtype: torch.dtype) -> torch.Tensor:
    """(B, L) token ids (0-padded) -> (B, vocab_size) binary bag of words, without CONSTANT_IDS."""
    bow = torch.zeros(tokens.shape[0], vocab_size, dtype=dtype, device=tokens.device)
    bow.scatter_(1, tokens, 1.0)
    bow[:, list(CONSTANT_IDS)] = 0.0
    return bow


@dataclass
class DSCMREncoding(ItemTensors):
    """A split's encodings: unit common-space features (N, d) and label scores (N, C) in [0, 1]."""
    embedding: torch.Tensor
    label_scores: torch.Tensor


@register_model("dscmr")
class DSCMR(EmbeddingModel):
    similarity = "cosine"
    image_arguments = {"image_dim": "dim"}

    def __init__(self, image_dim: int, vocab_size: int, hidden_dim: int, embed_dim: int, n_classes: int,
                 label_rule: str = "threshold"):
        super().__init__()
        if label_rule not in LABEL_RULES:
            raise ValueError(f"label_rule must be one of {LABEL_RULES}, got {label_rule!r}")
        self.text_vocab = vocab_size
        self.label_rule = label_rule
        self.img_net = nn.Linear(image_dim, hidden_dim)      # ImgNN.denseL1
        self.text_net = nn.Linear(vocab_size, hidden_dim)    # TextNN.denseL1
        self.common = nn.Linear(hidden_dim, embed_dim)       # IDCM_NN.linearLayer (shared)
        self.classifier = nn.Linear(embed_dim, n_classes)    # IDCM_NN.linearLayer2 (shared)

    @classmethod
    def context_arguments(cls, cfg: dict, ctx: BuildContext) -> dict:
        """Adds the vocabulary's size: the bag of words' length."""
        return {**super().context_arguments(cfg, ctx), "vocab_size": ctx.vocab_size}

    def image_vectors(self, batch: dict) -> torch.Tensor:
        return batch["features"].to(self.img_net.weight.dtype).mean(dim=1)

    def text_vectors(self, batch: dict) -> torch.Tensor:
        return bag_of_words(batch["tokens"].to(self.text_net.weight.device), self.text_vocab, self.text_net.weight.dtype)

    def _forward(self, x: torch.Tensor, net: nn.Linear) -> dict:
        feature = self.common(torch.relu(net(x)))
        return {"features": feature, "predictions": self.classifier(feature)}

    def label_scores(self, predictions: torch.Tensor) -> torch.Tensor:
        if self.label_rule == "threshold":
            return predictions.clamp(0.0, 1.0)
        return relative_to_largest(predictions.clamp_min(0.0))

    def encoding(self, out: dict) -> DSCMREncoding:
        return DSCMREncoding(l2norm(out["features"], eps=PLAIN_L2NORM_EPS), self.label_scores(out["predictions"]))

    # training reads the common features and the label-space outputs; evaluation the unit features and label scores
    def encode_images(self, batch: dict):
        out = self._forward(self.image_vectors(batch), self.img_net)
        return out if self.training else self.encoding(out)

    def encode_texts(self, batch: dict):
        out = self._forward(self.text_vectors(batch), self.text_net)
        return out if self.training else self.encoding(out)

    @staticmethod
    def _embedding(x) -> torch.Tensor:
        if isinstance(x, DSCMREncoding):
            return x.embedding
        if isinstance(x, dict):
            return l2norm(x["features"], eps=PLAIN_L2NORM_EPS)
        return x

    def score(self, img, txt) -> torch.Tensor:
        return super().score(self._embedding(img), self._embedding(txt))

    def score_matrix(self, img, txt, amp: bool = False) -> torch.Tensor:
        return super().score_matrix(self._embedding(img), self._embedding(txt), amp)

    def training_outputs(self, img: dict, txt: dict) -> dict:
        return {"scores": [self.score(img, txt)],
                "image_features": img["features"], "text_features": txt["features"],
                "image_predictions": img["predictions"], "text_predictions": txt["predictions"]}

    def label_predictions(self, img: DSCMREncoding, txt: DSCMREncoding) -> tuple[np.ndarray, np.ndarray]:
        return img.label_scores.double().cpu().numpy(), txt.label_scores.double().cpu().numpy()
