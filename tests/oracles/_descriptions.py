"""What the models' description oracles share (``tests/oracles/<kind>.py``, ``DESCRIPTIONS``): the
backbones and datasets the hand-built configs name, and builders of a run config."""

BACKBONES = {
    "r18_toy": {"arch": "resnet18", "weights": "results/toy/backbones/r18_toy.pt",
                "pretrain": {"dataset": "toy", "epochs": 1, "lr": 1e-3, "batch_size": 8, "seed": 0}},
    "r152": {"arch": "resnet152", "weights": "/ckpt/resnet152-394f9c45.pth"},
    "r50_random": {"arch": "resnet50", "weights": "none"},
}
# a synthetic dataset: RoIAlign regions from the conv4 map (256 channels) of ResNet-18
TOY = {"kind": "synthetic", "features": {"grid_layers": ["conv4"],
                                         "region": {"backbone": "r18_toy", "layer": "conv4", "n_regions": 12,
                                                    "output_size": 2, "seed": 0}}}
# a real dataset: precomputed BUTD regions
REAL = {"kind": "karpathy", "precomp": {"n_regions": 36, "feature_dim": 2048}, "features": {"grid_layers": ["conv5"]}}


def text(word_dim, hidden_dim, bidirectional=False, word_init="random", num_layers=1):
    return {"word_dim": word_dim, "hidden_dim": hidden_dim, "num_layers": num_layers,
            "bidirectional": bidirectional, "word_init": word_init}


def run(model, stages, batch_size=16, batching="captions", images=None):
    training = {"batch_size": batch_size, "batching": batching,
                "stages": [{"epochs": e, "finetune_backbone": f} for e, f in stages]}
    return {"model": model, "training": {**training, "images": images} if images else training}
