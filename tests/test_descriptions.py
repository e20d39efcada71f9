"""What a run config really runs (the ``ran`` column): each declared model kind describes its own
configs (``describe`` in its ``methods.model_kinds`` file), checked here against strings written by hand for small
hand-built configs; a model registered without an entry here fails the suite."""
import re

import pytest

from methods.job_records import RunEvaluation
from methods.metrics.protocols import get_protocol
from methods.model_kinds import MODEL_KINDS, DescribeContext, describe_run
from methods.model_kinds.description import backbone_text
from methods.plan import Plan
from methods.report import table
from methods.report.aggregate import aggregate
from tests.conftest import config_with_every_table
from tests.records import run_evaluation, table_spec

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


def run(model, stages, batch_size=16, batching="captions"):
    return {"model": model, "training": {"batch_size": batch_size, "batching": batching,
                                         "stages": [{"epochs": e, "finetune_backbone": f} for e, f in stages]}}


CASES = {  # model kind -> [(run config, dataset config block, expected description)]
    "vsepp": [
        (run({"kind": "vsepp", "backbone": "r18_toy", "embed_dim": 128, "text": text(32, 128)},
             [(3, False), (1, True)]), TOY,
         "ResNet-18 (toy pre-trained), CNN fine-tuned, 512-d pooled, embed 128, GRU 128, word 32; 3+1 epochs, batch 16"),
        (run({"kind": "vsepp", "backbone": "r152", "embed_dim": 1024, "text": text(300, 1024, word_init="glove")},
             [(30, False)], batch_size=128), REAL,
         "ResNet-152 (weights resnet152-394f9c45.pth), CNN frozen, 2048-d pooled, embed 1024, "
         "GRU 1024, word 300 (GloVe); 30 epochs, batch 128"),
    ],
    "vsrn": [
        (run({"kind": "vsrn", "embed_dim": 64, "gcn_blocks": 2, "text": text(16, 64)}, [(5, False)], batch_size=8),
         TOY, "12×256 RoIAlign regions of ResNet-18 (toy pre-trained) conv4, embed 64, 2 GCN blocks, GRU 64, "
              "word 16; 5 epochs, batch 8"),
        (run({"kind": "vsrn", "embed_dim": 2048, "gcn_blocks": 4, "text": text(300, 2048, num_layers=2)},
             [(150, False)], batch_size=128, batching="images"), REAL,
         "36×2048 precomputed regions, embed 2048, 4 GCN blocks, 2-layer GRU 2048, word 300; "
         "150 epochs, batch 128 images"),
    ],
    "scan": [
        (run({"kind": "scan", "embed_dim": 64, "text": text(32, 64, bidirectional=True), "evaluation_dtype": "float64",
              "similarity": {"direction": "i2t", "aggregation": "lse", "lambda_softmax": 4.0, "lambda_lse": 5.0}},
             [(4, False)]), TOY,
         "12×256 RoIAlign regions of ResNet-18 (toy pre-trained) conv4, embed 64, i-t LSE (λ1 4, λ2 5), "
         "bi-GRU 64, word 32; 4 epochs, batch 16"),
    ],
    "mvsa": [
        (run({"kind": "mvsa", "backbone": "r152", "grid_scales": ["conv4", "conv5"], "fusion_pooling": "max",
              "candidate_dim": 2048, "embed_dim": 1024, "asa": {"blocks": 1, "inter_dim": 1024, "batchnorm": True},
              "similarity": {"direction": "t2i", "aggregation": "avg", "lambda_softmax": 9.0},
              "text": text(300, 1024, bidirectional=True, word_init="glove")}, [(20, False), (15, True)],
             batch_size=128), REAL,
         "ResNet-152 (weights resnet152-394f9c45.pth) conv4 + conv5 (max-pooled to the coarsest), CNN fine-tuned, "
         "1 ASA, C 2048, D 1024, t-i AVG (λ1 9), bi-GRU 1024, word 300 (GloVe); 20+15 epochs, batch 128"),
        (run({"kind": "mvsa", "backbone": "r18_toy", "grid_scales": ["conv5"], "fusion_pooling": None,
              "candidate_dim": 128, "embed_dim": 64, "asa": {"blocks": 0, "inter_dim": 64, "batchnorm": True},
              "similarity": {"direction": "t2i", "aggregation": "lse", "lambda_softmax": 9.0, "lambda_lse": 6.0},
              "text": text(32, 64, bidirectional=True)}, [(3, False)]), TOY,
         "ResNet-18 (toy pre-trained) conv5, CNN frozen, no ASA, C 128, D 64, t-i LSE (λ1 9, λ2 6), "
         "bi-GRU 64, word 32; 3 epochs, batch 16"),
    ],
    "set_embedding": [
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
    ],
    "set_embedding_grid": [
        (run({"kind": "set_embedding_grid", "backbone": "r152", "backbone_bn": "train", "grid_scales": ["conv5"],
              "embed_dim": 1024, "set_size": 4,
              "set_module": {"kind": "slot", "iterations": 4, "heads": 4, "head_dim": 512, "ff_mult": 4,
                             "competition": "slots", "padding": "leak"},
              "similarity": {"kind": "smooth_chamfer", "alpha": 16.0},
              "text": text(300, 1024, bidirectional=True, word_init="glove")}, [(50, False), (70, True)],
             batch_size=200, batching="images"), REAL,
         "ResNet-152 (weights resnet152-394f9c45.pth) conv5 grid, CNN fine-tuned, D 1024, K 4, slot set module "
         "(T 4, padding leak), smooth_chamfer (alpha 16), bi-GRU 1024, word 300 (GloVe); 50+70 epochs, "
         "batch 200 images"),
    ],
    "sgraf": [
        (run({"kind": "sgraf", "embed_dim": 32, "sim_dim": 8, "similarity": "vector", "heads": ["sgr", "saf"],
              "text": text(16, 32, bidirectional=True)}, [(3, False)], batch_size=32), TOY,
         "12×256 RoIAlign regions of ResNet-18 (toy pre-trained) conv4, embed 32, graph dim 8, bi-GRU 32, "
         "word 16; 3 epochs, batch 32"),
        (run({"kind": "sgraf", "embed_dim": 1024, "sim_dim": 256, "similarity": "scalar", "heads": ["avg"],
              "text": text(300, 1024, bidirectional=True)}, [(20, False)], batch_size=128), REAL,
         "36×2048 precomputed regions, embed 1024, bi-GRU 1024, word 300; 20 epochs, batch 128"),  # cosines: no graph
    ],
    "label_wise": [
        (run({"kind": "label_wise", "embed_dim": 1024, "n_classes": 24, "shared_transformer": True,
              "transformer": {"layers": 6, "heads": 8, "ff_dim": 2048}, "retrieval_score": "cosine",
              "text": text(300, 1024, bidirectional=True)}, [(45, False)], batch_size=64), REAL,
         "36×2048 precomputed regions, D 1024, shared 6-layer transformer (8 heads, FF 2048), 24 labels, "
         "bi-GRU 1024, word 300, cosine scores; 45 epochs, batch 64"),
        (run({"kind": "label_wise", "embed_dim": 64, "n_classes": 14, "shared_transformer": False,
              "transformer": {"layers": 2, "heads": 4, "ff_dim": 128}, "retrieval_score": "dot",
              "text": text(32, 64, bidirectional=True)}, [(4, False)], batch_size=64), TOY,
         "12×256 RoIAlign regions of ResNet-18 (toy pre-trained) conv4, D 64, per-modality 2-layer transformer "
         "(4 heads, FF 128), 14 labels, bi-GRU 64, word 32, dot-product scores; 4 epochs, batch 64"),
    ],
}


def test_every_registered_model_has_hand_written_descriptions():
    assert set(CASES) == set(MODEL_KINDS.names())


@pytest.mark.parametrize("kind,case", [(k, i) for k, cases in CASES.items() for i in range(len(cases))])
def test_description_of_a_hand_built_config(kind, case):
    cfg, dataset, expected = CASES[kind][case]
    assert describe_run(cfg, DescribeContext(dataset, BACKBONES)) == expected


def test_backbone_weights_are_named():
    ctx = DescribeContext(REAL, BACKBONES)
    assert backbone_text("r50_random", ctx) == "ResNet-50 (random init)"
    assert backbone_text("r152", ctx) == "ResNet-152 (weights resnet152-394f9c45.pth)"


def test_plan_rows_carry_the_description_of_their_runs():
    plan = Plan(config_with_every_table())
    ctx = DescribeContext(plan.cfg["datasets"]["synthetic"], plan.cfg["backbones"])
    spec = plan.table_spec("table1", "synthetic").to_json()
    for row in spec["rows"]:
        described = [describe_run(plan.experiment("synthetic", e).config, ctx) for e in row["members"]]
        assert row["ran"] == " + ".join(dict.fromkeys(described))
    ft = next(r for r in spec["rows"] if r["id"] == "vsepp_resnet152_ft")
    assert "ResNet-152" in ft["label"] and ft["ran"].startswith("ResNet-18 (synthetic pre-trained), CNN fine-tuned")
    sgraf = next(r for r in spec["rows"] if r["id"] == "sgraf_sgraf")   # SGR + SAF: one description when alike
    assert " + " not in sgraf["ran"] and re.match(r"\d+×\d+ RoIAlign regions of ResNet-18", sgraf["ran"])
    figure = plan.figure_spec("metric_learning", "synthetic").to_json()
    assert all(r["ran"] for r in figure["rows"])


def test_table_shows_what_ran_beside_the_label():
    metrics = {m: 10.0 for m in get_protocol("f30k_1k").metrics}
    evals = [RunEvaluation.from_json(run_evaluation(seed, [{"protocol": "f30k_1k", "metrics": metrics}]), "test")
             for seed in (0, 1)]
    spec = {"table": "t", "dataset": "toy", "dataset_kind": "synthetic", "titles": ["a paper"],
            "protocols": ["f30k_1k"], "tolerance": {"recall": 2.0, "rsum": 6.0, "rank": 1.0},
            "training_check": {"min_gain_share": 0.05, "min_score_spread": 1e-4, "saturated_share": 0.99},
            "rows": [{"id": "a", "label": "A (ResNet-152)", "ran": "ResNet-18 (toy pre-trained), CNN frozen",
                      "paper": "p", "not_reported": None, "ensemble_size": 1, "reported": {}, "compare_to": None,
                      "ledger": [{"code": "org/repo", "switches": [], "deviations": []}]}]}
    spec = table_spec(spec.pop("rows"), **spec)
    rows = table.build_rows(spec, {"a": aggregate(evals)})
    assert list(rows.columns[:5]) == ["table", "dataset", "row", "label", "ran"]
    assert set(rows["ran"]) == {"ResNet-18 (toy pre-trained), CNN frozen"}
    md = table.to_markdown(spec, rows)
    assert "| A (ResNet-152) · ran: ResNet-18 (toy pre-trained), CNN frozen | 0 1 | 1 |" in md
