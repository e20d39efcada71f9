"""DSCMR's oracles, written from penghu-cs/DSCMR's model.py (IDCM_NN.forward) and train_model.py
(calc_loss), not from methods/models/dscmr.py: one item at a time, plain tensor ops, loops over the
pairs of the loss. The harness's inputs (the mean of an image's regions, a text's bag of words)
are built here per item from their definition. Beside them, descriptions written by hand."""
import torch

from methods.models.dscmr import DSCMR
from tests.oracles._descriptions import REAL, TOY, run
from tests.oracles._float64 import N_IMAGES, REGION_DIM, REGIONS, VOCAB, cosine_matrix, features, plain_l2

HIDDEN, COMMON, N_CLASSES = 10, 6, 5


def build(dtype=torch.float64, seed=0, **settings) -> DSCMR:
    """A small DSCMR with random biases (torch's default init would draw them too; random here on
    purpose so that a bias left out shows)."""
    torch.manual_seed(seed)
    model = DSCMR(REGION_DIM, VOCAB, HIDDEN, COMMON, N_CLASSES, **settings).double().eval()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                m.bias.copy_((torch.rand(m.bias.shape, generator=g, dtype=torch.float64) - 0.5) * 0.4)
    return model.to(dtype)   # the same weights in every dtype (drawn in float64)


def image_input(regions):
    """One image: the mean of its (R, D) regions, summed region by region."""
    total = torch.zeros(regions.shape[1], dtype=regions.dtype)
    for r in regions:
        total = total + r
    return total / regions.shape[0]


def text_input(tokens, length, vocab=VOCAB, dtype=torch.float64):
    """One text: 1 at each id among its first ``length`` tokens, but <pad> 0, <start> 1, <end> 2."""
    bow = torch.zeros(vocab, dtype=dtype)
    for t in tokens[:length].tolist():
        if t not in (0, 1, 2):
            bow[t] = 1.0
    return bow


def linear(layer, x):
    return layer.weight @ x + layer.bias


def forward_one(model, x, net):
    """IDCM_NN.forward for one item: relu(denseL1(x)) -> linearLayer -> (feature, linearLayer2(feature))."""
    feature = linear(model.common, torch.relu(linear(net, x)))
    return feature, linear(model.classifier, feature)


def reference_image(model, regions):
    return forward_one(model, image_input(regions), model.img_net)


def reference_text(model, tokens, length):
    return forward_one(model, text_input(tokens, length, model.text_vocab, model.text_net.weight.dtype), model.text_net)


def reference_scores(model, images, text_batch):
    """fx_calc_map_label's cosine of the common features, pair by pair."""
    image_vectors = [plain_l2(reference_image(model, r)[0]) for r in images["features"]]
    text_vectors = [plain_l2(reference_text(model, tok, int(n))[0])
                    for tok, n in zip(text_batch["tokens"], text_batch["lengths"])]
    return cosine_matrix(image_vectors, text_vectors)


def reference_loss(f1, f2, p1, p2, y1, y2, alpha, beta):
    """train_model.py calc_loss with loops: f (N, d) common features, p (N, C) label outputs, y labels
    (pair i is image i with text i)."""
    def norm(v):
        return torch.sqrt((v * v).sum())

    n = len(f1)
    term1 = sum(norm(p1[i] - y1[i]) for i in range(n)) / n + sum(norm(p2[i] - y2[i]) for i in range(n)) / len(f2)

    def block(a, b, ya, yb):
        total = 0.0
        for i in range(len(a)):
            for j in range(len(b)):
                theta = (a[i] * b[j]).sum() / torch.clamp(norm(a[i]) * norm(b[j]), min=1e-6) / 2.0
                s = (ya[i] * yb[j]).sum()
                total = total + torch.log(1 + torch.exp(theta)) - s * theta
        return total / (len(a) * len(b))

    term2 = block(f1, f1, y1, y1) + block(f1, f2, y1, y2) + block(f2, f2, y2, y2)
    term3 = sum(norm(f1[i] - f2[i]) for i in range(n)) / n
    return term1 + alpha * term2 + beta * term3


def float64_cases():
    yield ("dscmr", build(), {"features": features(N_IMAGES, REGIONS, REGION_DIM)}, reference_scores)


# (run config, dataset config block, the description written by hand)
DESCRIPTIONS = [
    (run({"kind": "dscmr", "hidden_dim": 2048, "embed_dim": 1024, "n_classes": 24}, [(500, False)], batch_size=100),
     REAL, "36×2048 precomputed regions averaged, text bag of words, hidden 2048, shared common space 1024, "
     "24 labels, cosine scores; 500 epochs, batch 100"),
    (run({"kind": "dscmr", "hidden_dim": 256, "embed_dim": 64, "n_classes": 14}, [(40, False)], batch_size=100),
     TOY, "12×256 RoIAlign regions of ResNet-18 (toy pre-trained) conv4 averaged, text bag of words, hidden 256, "
     "shared common space 64, 14 labels, cosine scores; 40 epochs, batch 100"),
]
