"""What the models' float64 oracles share (``tests/oracles/<kind>.py``, ``float64_cases``): a small
float64 model in eval mode, a batch of captions with ties and padding, features, and the plain
tensor ops the per-pair references write out (no padding, masks, blocks or fused projections)."""
import torch

from methods.models.text import GRUTextEncoder

VOCAB, WORD_DIM, EMBED, SIM = 30, 8, 12, 6   # EMBED: a multiple of 4 (2-D sine positions)
N_IMAGES = 3
LENGTHS = (1, 4, 7, 2, 7)        # a one-word caption, ties, padding up to 7
REGIONS, REGION_DIM = 5, 12
MVSA_SHAPES = {"conv4": [4, 4, 256], "conv5": [2, 2, 512]}   # ResNet-18 channels


def build(model_class, *args, bidirectional_text=False, text=None, **kwargs):
    """A small float64 model in eval mode (``text``: its text encoder, else a GRU), with random BatchNorm statistics and affine parameters,
    so that eval-mode BatchNorm is no identity (VSRN's GCN blocks would be: their BN scale starts at 0),
    and random linear biases (xavier_linear starts them at 0, which would hide a bias left out)."""
    torch.manual_seed(0)
    text = text or GRUTextEncoder(VOCAB, WORD_DIM, EMBED, bidirectional=bidirectional_text, embed_dropout=0.4)
    model = model_class(*args, text=text, **kwargs).double().eval()
    g = torch.Generator().manual_seed(2)

    def uniform_(tensor, low, high):
        tensor.copy_(torch.rand(tensor.shape, generator=g, dtype=tensor.dtype) * (high - low) + low)

    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and m.bias is not None:
                uniform_(m.bias, -0.1, 0.1)
            if getattr(m, "running_mean", None) is not None:      # BatchNorm1d and SGRAF's MaskedBatchNorm
                uniform_(m.running_mean, -0.3, 0.3)
                uniform_(m.running_var, 0.5, 2.0)
                uniform_(m.weight, 0.5, 1.5)
                uniform_(m.bias, -0.3, 0.3)
    return model


def texts():
    g = torch.Generator().manual_seed(1)
    tokens = torch.zeros(len(LENGTHS), max(LENGTHS), dtype=torch.long)
    for row, n in enumerate(LENGTHS):
        tokens[row, :n] = torch.randint(1, VOCAB, (n,), generator=g)
    return {"tokens": tokens, "lengths": torch.tensor(LENGTHS)}


def plain_l2(x, dim=-1):
    """VSE++ and VSRN model.py l2norm: X / sqrt(sum X^2), no epsilon (SGRAF's l2 adds 1e-8)."""
    return x / x.pow(2).sum(dim=dim, keepdim=True).sqrt()


def features(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


def batch_norm_eval(bn, x):
    """Eval-mode BatchNorm over the last dim (the channels) with the running statistics."""
    return (x - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps) * bn.weight + bn.bias


def reference_caption_vector(model, tokens):
    """VSE++/VSRN text: GRU over the caption's words, last state (directions averaged if any) -> l2."""
    _, hidden = model.text.gru(model.text.embed(tokens)[None])
    last = (hidden[-2, 0] + hidden[-1, 0]) / 2 if model.text.bidirectional else hidden[-1, 0]
    return plain_l2(last)


def cosine_matrix(image_vectors, caption_vectors):
    return torch.stack([torch.stack([(v * t).sum() for t in caption_vectors]) for v in image_vectors])


def caption_vectors(model, text_batch):
    return [reference_caption_vector(model, tok[:n]) for tok, n in zip(text_batch["tokens"], text_batch["lengths"])]
