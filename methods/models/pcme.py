"""Probabilistic cross-modal embeddings (PCME; Chun et al., CVPR 2021), as naver-ai/pcme computes
them (``models/image_encoder.py``, ``models/caption_encoder.py``, ``models/uncertainty_module.py``,
``criterions/probemb.py``, ``engine/eval_coco.py``).

Each image and caption is a Gaussian N(mu, diag(exp(logsigma))^2) in a D-dimensional space:

- image, from a CNN grid's last map (7x7 cells at 224 px; C channels): pooled = mean of the
  cells; mu = l2(LayerNorm(fc(pooled) + sigmoid(fc'(attention-pool(cells))))) (PIE-Net with one
  embedding over the raw cells, attention hidden C/2); logsigma = fc2(pooled) + fc_u(attention-
  pool_u(cells)), a second attention of its own, no LayerNorm and no sigmoid. The fc of pooled
  keeps nn.Linear's default init: the source's ``EncoderImage.init_weights`` is never called;
- caption: word embeddings (GloVe where known, N(0, 1) elsewhere) -> bi-GRU of D/2 units, its
  output at the last word ([forward final, backward after the last word alone]); mu =
  l2(LayerNorm(that + sigmoid(fc(attention-pool(words))))); logsigma = the last-word output of
  a second bi-GRU of D/2 units over the words + fc_u(attention-pool_u(words)).

``n_samples`` embeddings per item, z = mu + eps * exp(logsigma) with eps ~ N(0, I) (not
normalised), are drawn in training and evaluation alike (the source's ``n_samples_inference``):
in training from torch's generator on the model's device, in evaluation from CPU generators
seeded with ``sample_seed`` whenever the model is put in eval mode (one per modality), so that
a split's embeddings, and its metrics, are the same on every machine; the source draws them
unseeded.

The match probability of an image i and a caption j is the mean over the n_samples^2 pairs of
samples of sigmoid(2 s), s = -a |z_i - z_j| + b, |.| = sqrt(squared distance + 1e-6) (the
source's ``batchwise_cdist``), its e^s / (e^s + e^-s); a = ``negative_scale`` and b = ``shift``
are learned (initialised at ``init_negative_scale`` / ``init_shift``, 15 and 15 in the source).
``eval_method``: ``matching_prob`` ranks by it (evaluate_recall_coco.py and extract_rankings_
coco.py, which produced PCME's reported R@K and PMRP); ``matmul`` by the dot product of the
sample means, the source's ``ParallelMatMulModule`` (its sum of the n_samples^2 sample dot
products is n_samples^2 times it), with which its training validates.

A training step's outputs are the s of every batch pair and sample pair (``match_logits``, (B_img,
B_txt, K, K)), the samples and the logsigmas, for the soft contrastive loss and the VIB
regulariser (``methods.losses.probabilistic``). ``a`` and ``b`` are the source's criterion
parameters: the optimizer holds them, its gradient clipping does not (``clipped_parameters``).

While a stage does not fine-tune the CNN (PCME's 30 pre-training epochs), neither do the word
embeddings train (train_coco.py ``pretrain``: ``img_finetune`` and ``txt_finetune`` False); a
fine-tune stage trains both (``set_finetune``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from methods.features.backbone import ResNetBackbone
from methods.models.base import EmbeddingModel, register_model
from methods.models.grid_backbone import GridBackbone
from methods.models.set_prediction import PIENet
from methods.models.set_similarity import set_score_matrix
from methods.models.text import GRUTextEncoder

EVAL_METHODS = ("matching_prob", "matmul")
DISTANCE_EPS = 1e-6          # batchwise_cdist: sqrt(sum of squares + eps)
BLOCK_ELEMENTS = {"cuda": 2 ** 27, "cpu": 2 ** 22}   # sample-pair distances per scoring block


class AttentionPool(nn.Module):
    """One-head structured self-attention (Lin et al., ICLR 2017; the source's MultiHeadSelfAttention
    with n_head 1): softmax over the valid positions of w2 tanh(w1 x), both Xavier-uniform, no bias."""

    def __init__(self, input_dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(input_dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, 1, bias=False)
        nn.init.xavier_uniform_(self.w1.weight)
        nn.init.xavier_uniform_(self.w2.weight)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """x (B, N, C), valid (B, N) -> (B, C)."""
        logits = self.w2(torch.tanh(self.w1(x))).masked_fill(~valid[..., None], float("-inf"))
        return (logits.softmax(dim=1).transpose(1, 2) @ x).squeeze(1)


def xavier_linear(input_dim: int, output_dim: int) -> nn.Linear:
    """The uncertainty modules' fc (init_weights: Xavier uniform, zero bias)."""
    layer = nn.Linear(input_dim, output_dim)
    nn.init.xavier_uniform_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


def last_outputs(gru: nn.GRU, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """A bi-GRU's padded output at each sequence's last valid step: [forward final, backward after
    the last step alone] (the source's gather at lengths - 1)."""
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    padded, _ = pad_packed_sequence(gru(packed)[0], batch_first=True)
    return padded[torch.arange(len(lengths), device=padded.device), lengths.to(padded.device) - 1]


def sample_gaussians(mu: torch.Tensor, logsigma: torch.Tensor, n_samples: int,
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """(B, D) means and log standard deviations -> (B, n_samples, D) draws mu + eps exp(logsigma);
    with ``generator`` (a CPU one) eps is drawn on the CPU and moved."""
    shape = (mu.shape[0], n_samples, mu.shape[1])
    if generator is None:
        eps = torch.randn(shape, dtype=mu.dtype, device=mu.device)
    else:
        eps = torch.randn(shape, generator=generator, dtype=torch.float32).to(mu.device, mu.dtype)
    return mu[:, None] + eps * torch.exp(logsigma)[:, None]


def sample_distances(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(N, K, D) x (M, L, D) samples -> (N, M, K, L) sqrt(|x_k - y_l|^2 + 1e-6), from one matrix product."""
    n, k, d = x.shape
    m, l, _ = y.shape
    dots = (x.reshape(n * k, d) @ y.reshape(m * l, d).t()).view(n, k, m, l).permute(0, 2, 1, 3)
    squared = (x * x).sum(-1)[:, None, :, None] + (y * y).sum(-1)[None, :, None, :] - 2 * dots
    return torch.sqrt(squared.clamp_min(0) + DISTANCE_EPS)


def match_logits(x: torch.Tensor, y: torch.Tensor, negative_scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """(N, M, K, L) s = -a |x_k - y_l| + b."""
    return -negative_scale * sample_distances(x, y) + shift


def match_probability(x: torch.Tensor, y: torch.Tensor, negative_scale: torch.Tensor,
                      shift: torch.Tensor) -> torch.Tensor:
    """(N, M): the mean over sample pairs of e^s / (e^s + e^-s) = sigmoid(2 s)."""
    return torch.sigmoid(2 * match_logits(x, y, negative_scale, shift)).mean(dim=(2, 3))


def sample_mean_dots(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(N, M) dot products of the sample means (``eval_method: matmul``)."""
    return x.mean(dim=1) @ y.mean(dim=1).t()


@register_model("pcme")
class PCME(GridBackbone, EmbeddingModel):
    def __init__(self, backbone: ResNetBackbone | str, scale_shapes: dict[str, list[int]], grid_scales: list[str],
                 backbone_bn: str, embed_dim: int, text: GRUTextEncoder, n_samples: int = 7,
                 init_negative_scale: float = 15.0, init_shift: float = 15.0, eval_method: str = "matching_prob",
                 sample_seed: int = 0):
        super().__init__()
        if len(grid_scales) != 1 or grid_scales[0] not in scale_shapes:
            raise ValueError(f"grid_scales must name one scale of the grid input ({sorted(scale_shapes)}), "
                             f"not {grid_scales}")
        if eval_method not in EVAL_METHODS:
            raise ValueError(f"eval_method must be one of {EVAL_METHODS}, not {eval_method!r}")
        if n_samples < 1:
            raise ValueError(f"n_samples must be >= 1, not {n_samples}")
        if not text.bidirectional or 2 * text.gru.hidden_size != embed_dim or text.gru.num_layers != 1:
            raise ValueError(f"PCME's caption encoder is a one-layer bi-GRU of embed_dim / 2 units: text.hidden_dim "
                             f"must be {embed_dim // 2} with bidirectional true and num_layers 1")
        channels = scale_shapes[grid_scales[0]][2]
        word_dim = text.embed.embedding_dim
        self.embed_dim, self.n_samples, self.eval_method, self.sample_seed = embed_dim, n_samples, eval_method, sample_seed
        self.image_fc = nn.Linear(channels, embed_dim)                      # default init (see the module doc)
        self.image_pie = PIENet(1, channels, embed_dim, channels // 2)
        self.image_sigma_attention = AttentionPool(channels, channels // 2)
        self.image_sigma_fc = xavier_linear(channels, embed_dim)
        self.image_sigma_pooled = nn.Linear(channels, embed_dim)            # UncertaintyModuleImage.fc2
        self.text = text
        self.text_pie = PIENet(1, word_dim, embed_dim, word_dim // 2)
        self.text_sigma_attention = AttentionPool(word_dim, word_dim // 2)
        self.text_sigma_fc = xavier_linear(word_dim, embed_dim)
        self.text_sigma_gru = nn.GRU(word_dim, embed_dim // 2, batch_first=True, bidirectional=True)
        self.negative_scale = nn.Parameter(torch.tensor([float(init_negative_scale)]))
        self.shift = nn.Parameter(torch.tensor([float(init_shift)]))
        self.init_backbone(backbone, backbone_bn, list(grid_scales), scale_shapes)
        self.set_finetune(False)
        self._generators: dict[str, torch.Generator] = {}

    # -- stages: the CNN and the word embeddings train together (train_coco.py) --
    def set_finetune(self, finetune: bool) -> None:
        super().set_finetune(finetune)
        self.text.embed.weight.requires_grad_(finetune)

    def match_parameters(self) -> list[nn.Parameter]:
        return [self.negative_scale, self.shift]

    def clipped_parameters(self) -> list[nn.Parameter]:
        """The source clips the model's gradients, not its criterion's (a and b)."""
        match = {id(p) for p in self.match_parameters()}
        return [p for p in self.trainable_parameters() if id(p) not in match]

    def train(self, mode: bool = True):
        super().train(mode)
        if not mode:   # every evaluation draws the same samples
            self._generators = {side: torch.Generator().manual_seed(self.sample_seed + offset)
                                for offset, side in enumerate(("images", "texts"))}
        return self

    def grid_dtype(self) -> torch.dtype:
        return self.image_fc.weight.dtype

    def _samples(self, mu: torch.Tensor, logsigma: torch.Tensor, side: str) -> torch.Tensor:
        generator = None if self.training else self._generators.get(side)
        if not self.training and generator is None:   # eval mode set without train(False) (a fresh model)
            self.train(False)
            generator = self._generators[side]
        return sample_gaussians(mu, logsigma, self.n_samples, generator)

    def image_distributions(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, D) unit means and (B, D) log standard deviations of a batch of images."""
        grid = self.grids(batch)[self.scales[0]]
        cells = grid.reshape(grid.shape[0], -1, grid.shape[-1]).to(self.grid_dtype())
        valid = torch.ones(cells.shape[:2], dtype=torch.bool, device=cells.device)
        pooled = cells.mean(dim=1)
        mean, _, _ = self.image_pie(cells, self.image_fc(pooled), valid.sum(dim=1))
        logsigma = self.image_sigma_fc(self.image_sigma_attention(cells, valid)) + self.image_sigma_pooled(pooled)
        return F.normalize(mean.squeeze(1), dim=-1), logsigma

    def text_distributions(self, tokens: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        words = self.text.embed(tokens)
        lengths = lengths.to(words.device)
        valid = torch.arange(words.shape[1], device=words.device)[None, :] < lengths[:, None]
        mean, _, _ = self.text_pie(words, last_outputs(self.text.gru, words, lengths), lengths)
        logsigma = (self.text_sigma_fc(self.text_sigma_attention(words, valid))
                    + last_outputs(self.text_sigma_gru, words, lengths))
        return F.normalize(mean.squeeze(1), dim=-1), logsigma

    def encode_images(self, batch: dict):
        mu, logsigma = self.image_distributions(batch)
        samples = self._samples(mu, logsigma, "images")
        return {"samples": samples, "logsigma": logsigma} if self.training else samples

    def encode_texts(self, batch: dict):
        mu, logsigma = self.text_distributions(batch["tokens"], batch["lengths"])
        samples = self._samples(mu, logsigma, "texts")
        return {"samples": samples, "logsigma": logsigma} if self.training else samples

    def score(self, img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
        if self.eval_method == "matmul":
            return sample_mean_dots(img, txt)
        return match_probability(img, txt, self.negative_scale, self.shift)

    def score_matrix(self, img: torch.Tensor, txt: torch.Tensor, amp: bool = False) -> torch.Tensor:
        with torch.no_grad():
            if self.eval_method == "matmul":
                return torch.cat([sample_mean_dots(img[s:s + self.score_chunk], txt).cpu()
                                  for s in range(0, img.shape[0], self.score_chunk)])
            budget = BLOCK_ELEMENTS.get(img.device.type, BLOCK_ELEMENTS["cpu"])
            return set_score_matrix(self.score, img, txt, budget)

    def training_outputs(self, img: dict, txt: dict) -> dict:
        logits = match_logits(img["samples"], txt["samples"], self.negative_scale, self.shift)
        return {"scores": [torch.sigmoid(2 * logits).mean(dim=(2, 3))], "match_logits": logits,
                "samples": (img["samples"], txt["samples"]), "logsigma": (img["logsigma"], txt["logsigma"])}
