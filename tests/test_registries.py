"""Every registered model, metric and loss term is tested the moment it is registered:
models (forward, backward, block scoring equal to scoring all pairs at once), metrics (against
a brute force or scikit-learn), loss terms (value and gradient against loops over the
definitions). A registration without its independent computation here fails the suite."""
import math

import numpy as np
import pytest
import torch
import yaml

from methods import api
from methods.data.inputs import IMAGE_INPUTS
from methods.losses.ranking import LOSSES
from methods.losses.term_kinds import TERM_KINDS
from methods.losses.terms import LOSS_TERMS
from methods.losses.weighted_sum import Loss
from methods.metrics.declarations import METRICS
from methods.metrics.evaluation import evaluate
from methods.metrics.implementations import IMPLEMENTED_METRICS
from methods.metrics.relevance import CaptionsOfImage, ExtendedPositives, SharedLabels
from methods.model_kinds import MODEL_KINDS
from methods.models import MODELS
from methods.plugins import method_files
from methods.registry import Registry
from tests.test_eccv_metrics import brute_force_eccv, random_positives
from tests.test_metrics import brute_force_metrics

# -- the registry type ------------------------------------------------------------------------


def test_registry_rejects_duplicates_and_names_the_known_entries():
    from methods.errors import HarnessError

    reg = Registry("widget")
    reg.register("a", 1)
    reg.register("b")(2)
    with pytest.raises(ValueError, match="widget 'a' is registered twice"):
        reg.register("a", 3)
    with pytest.raises(HarnessError, match="unknown widget 'c'; known: a, b"):
        reg.get("c")
    assert reg["b"] == 2 and "a" in reg and reg.names() == ["a", "b"]


# -- models -----------------------------------------------------------------------------------

def method_file_of(kind: str):
    for path in method_files():   # the repository's and the plug-in folders'
        if yaml.safe_load(path.read_text())["base"]["model"]["kind"] == kind:
            return path
    raise AssertionError(f"model '{kind}' is registered but no config/methods/*.yaml uses it")


BACKBONES = {"resnet18_synthetic": {"arch": "resnet18", "weights": "none"}}
VOCAB = 40


def image_batch(kind: str, n: int, g: torch.Generator, cfg: dict) -> tuple[dict, dict]:
    """(image shape, a batch of features) for the model's image input kind."""
    if kind == "pooled":
        return {"dim": 512}, {"features": torch.randn(n, 512, generator=g)}
    if kind == "regions" and MODEL_KINDS.get(cfg["kind"]).reads_region_boxes:   # and each region's box (PFAN)
        corner, size = torch.rand(n, 6, 2, generator=g) * 0.6, torch.rand(n, 6, 2, generator=g) * 0.4
        return {"dim": 24, "regions": 6}, {"features": {"regions": torch.randn(n, 6, 24, generator=g),
                                                        "boxes": torch.cat([corner, corner + size], dim=-1)}}
    if kind == "regions":
        return {"dim": 24, "regions": 6}, {"features": torch.randn(n, 6, 24, generator=g)}
    if kind == "grid":
        shapes = {"conv3": (8, 8, 128), "conv4": (4, 4, 256), "conv5": (2, 2, 512)}
        scales = {s: list(shapes[s]) for s in cfg["grid_scales"]}
        return {"scales": scales}, {"features": {s: torch.randn(n, *shapes[s], generator=g) for s in scales}}
    raise AssertionError(f"no test inputs for image input kind '{kind}'")


def text_batch(n: int, g: torch.Generator) -> dict:
    lengths = torch.randint(3, 9, (n,), generator=g)
    tokens = torch.randint(4, VOCAB, (n, 8), generator=g)
    tokens[torch.arange(8)[None, :] >= lengths[:, None]] = 0
    return {"tokens": tokens, "lengths": lengths}


def test_every_declared_model_kind_is_implemented():
    """The DAG build reads the declarations (``MODEL_KINDS``); training builds the implementations."""
    assert MODELS.names() == MODEL_KINDS.names()
    assert all(MODELS.get(k).image_input == MODEL_KINDS.get(k).image_input for k in MODELS.names())


@pytest.mark.parametrize("kind", MODELS.names())
def test_model_forward_backward_and_block_scoring(kind, tmp_path):
    from tests.test_bert_text import bert_folder

    torch.manual_seed(0)
    # each model's built-in dataset: the tag dataset for the label-wise model (tags and labels)
    dataset = {"label_wise": "synthtags", "dscmr": "synthtags"}.get(kind, "synthetic")
    cfg = api.experiment_config(method_file_of(kind), dataset, harness={"backbones": BACKBONES})
    if kind == "pcme":   # its source's a = b = 15 puts every random-init match probability at 0.0 in float32
        cfg["model"].update(init_negative_scale=0.5, init_shift=2.0)
    cls = MODELS.get(kind)
    assert cls.image_input in IMAGE_INPUTS
    text = cfg["model"].get("text") or {}
    encoders = {}
    if text.get("kind") == "bert":   # a tiny BERT folder of the test's vocabulary size, written here
        pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(VOCAB - 5)]
        folder, _ = bert_folder(tmp_path / "bert", pieces=pieces)
        encoders = {text["encoder"]: {"kind": "bert", "path": str(folder)}}
    g = torch.Generator().manual_seed(1)
    shape, images = image_batch(cls.image_input, 7, g, cfg["model"])
    texts = text_batch(11, g)
    model = api.build_model(cfg, VOCAB, shape, BACKBONES, text_encoders=encoders)
    # training: named outputs, scores (images x texts) per head, gradients reach the parameters
    model.train()
    outputs = model.training_outputs(model.encode_images(images), model.encode_texts(texts))
    assert outputs["scores"] and all(s.shape == (7, 11) for s in outputs["scores"])
    sum(s.sum() for s in outputs["scores"]).backward()
    grads = [p.grad for p in model.trainable_parameters() if p.grad is not None]
    assert grads and any(gr.abs().sum() > 0 for gr in grads)
    # evaluation: the blocked score matrix equals scoring every pair in one call
    model.eval()
    with torch.no_grad():
        img, txt = model.encode_images(images), model.encode_texts(texts)
        # a split's scores are float32, or float64 where the source evaluates in float64 (SCAN)
        dtype = torch.float64 if cfg["model"].get("evaluation_dtype") == "float64" else torch.float32
        whole = model.score(img, txt).to(dtype)
        model.block_elements = 64      # cross-attention models: many small blocks
        model.score_chunk = 3          # embedding models: image blocks of 3
        blocked = model.score_matrix(img, txt)
    assert blocked.dtype == dtype and blocked.shape == (7, 11)
    torch.testing.assert_close(blocked, whole, rtol=1e-5, atol=1e-6)
    assert whole.std() > 0  # not a constant


# -- metrics ----------------------------------------------------------------------------------

def bf_captions(name: str, scores: np.ndarray) -> float:
    values = brute_force_metrics(scores)
    values["r1_r5_sum"] = sum(values[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in (1, 5))
    values["r1_r10_sum"] = sum(values[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in (1, 10))
    return values[name]


def bf_shared_labels(name: str, scores: np.ndarray, image_labels: np.ndarray, text_labels: np.ndarray,
                     owners: np.ndarray) -> float:
    from sklearn.metrics import average_precision_score, ndcg_score  # scikit-learn as the oracle

    if METRICS.get(name).components:   # a sum of directions (ndcg500_sum, for model selection)
        return sum(bf_shared_labels(c, scores, image_labels, text_labels, owners) for c in METRICS.get(name).components)
    gains = image_labels.astype(float) @ text_labels.T.astype(float)
    direction, metric = name.split("_", 1)
    s, rel = (scores, gains) if direction == "i2t" else (scores.T, gains.T)
    keep = rel.sum(axis=1) > 0
    if metric == "map":
        return 100 * float(np.mean([average_precision_score(r > 0, q) for r, q in zip(rel[keep], s[keep])]))
    if metric == "map_at_r":   # one query at a time: precision at each relevant rank within the first R
        aps = []
        for r, q in zip(rel[keep], s[keep]):
            ranked = (r > 0)[np.argsort(-q)]
            n = int(ranked.sum())
            aps.append(sum(ranked[:i + 1].sum() / (i + 1) for i in range(n) if ranked[i]) / n)
        return 100 * float(np.mean(aps))
    if metric.startswith("own_r"):   # a hit: the query's own item (its text's image, an image's texts) in the first K
        k = int(metric.removeprefix("own_r"))
        if direction == "i2t":
            return 100 * float(np.mean([any(owners[j] == i for j in np.argsort(-q)[:k]) for i, q in enumerate(s)]))
        return 100 * float(np.mean([owners[t] in np.argsort(-q)[:k] for t, q in enumerate(s)]))
    k = int(metric.removeprefix("ndcg"))
    # every query, those sharing no label with any candidate included (scikit-learn gives them 0)
    return 100 * float(np.mean([ndcg_score(r[None], q[None], k=k) for r, q in zip(rel, s)]))


def test_every_declared_metric_is_implemented():
    """The plan and the tables read the declarations (``METRICS``), evaluation the implementations;
    a sum of metrics (RSUM) is computed from its components."""
    assert IMPLEMENTED_METRICS.names() == [n for n in METRICS.names() if not METRICS.get(n).components]


# metrics computed elsewhere than from a small score matrix have their own oracles: ECCV Caption /
# CxC need the COCO 5K ids (tests/test_eccv_caption.py), embedding statistics the embeddings
# (tests/test_set_embeddings.py), PMRP its folds and dropped items (tests/test_pmrp.py)
OWN_ORACLES = {"coco_ids": "tests/test_eccv_caption.py", "embeddings": "tests/test_set_embeddings.py",
               "label_predictions": "tests/test_label_wise.py", "plausible_matches": "tests/test_pmrp.py"}


@pytest.mark.parametrize("name", [n for n in METRICS.names() if METRICS.get(n).relevance not in OWN_ORACLES])
@pytest.mark.parametrize("seed", range(3))
def test_metric_against_brute_force(name, seed):
    metric = METRICS.get(name)
    rng = np.random.default_rng(seed)
    if metric.relevance == "captions_of_image":
        scores = rng.normal(size=(12, 60))
        got = evaluate(torch.from_numpy(scores), CaptionsOfImage(), [name])[name]
        want = bf_captions(name, scores)
    elif metric.relevance == "shared_labels":
        images, texts = rng.random((15, 6)) < 0.3, rng.random((40, 6)) < 0.3
        images[0], texts[:, 5] = False, False      # an image query without labels; a label no text has
        images[1] = [0, 0, 0, 0, 0, 1]             # ... and one whose only label no text shares
        scores = rng.normal(size=(15, 40))  # continuous: no ties, where tie rules differ
        owners = rng.integers(0, 15, size=40)       # each text's image (some own none, some several)
        got = evaluate(torch.from_numpy(scores), SharedLabels(images, texts, text_owners=owners), [name])[name]
        want = bf_shared_labels(name, scores, images, texts, owners)
    elif metric.relevance == "extended_positives":
        positives = random_positives(rng, 12)
        scores = rng.integers(0, 4, size=(12, 60)).astype(np.float64)  # ties: negatives rank first
        got = evaluate(torch.from_numpy(scores), ExtendedPositives(positives), [name])[name]
        each = brute_force_eccv(scores, positives)   # a sum (map_r_ext_sum, the training check's) from its parts
        want = sum(each[c] for c in metric.components) if metric.components else each[name]
    else:
        raise AssertionError(f"metric {name}: no brute force for relevance '{metric.relevance}'")
    assert got == pytest.approx(want, rel=1e-9, abs=1e-9)
    assert metric.direction in ("higher", "lower") and metric.label


def test_ndcg_and_map_on_a_hand_worked_example():
    # one image query, three texts sharing 2, 0 and 1 labels, ranked text 1, text 0, text 2
    images = np.array([[1, 1, 0]])
    texts = np.array([[1, 1, 0], [0, 0, 1], [1, 0, 0]])
    scores = torch.tensor([[0.5, 0.9, 0.1]])
    got = evaluate(scores, SharedLabels(images, texts), ["i2t_ndcg500", "i2t_map"])
    dcg = 0 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert got["i2t_ndcg500"] == pytest.approx(100 * dcg / idcg)
    assert got["i2t_map"] == pytest.approx(100 * (1 / 2 + 2 / 3) / 2)  # relevant at ranks 2 and 3


# -- loss terms -------------------------------------------------------------------------------

def loop_ranking_loss(kind: str, cfg: dict, s: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """The definitions, one positive pair and one negative at a time (both directions)."""
    def one_direction(s, pos):
        q_idx = range(s.shape[0])
        if kind in ("triplet_sum", "triplet_hardest"):
            terms = []   # per positive pair: its hinges (sum) or its largest hinge (hardest)
            for q in q_idx:
                for p in pos[q].nonzero().flatten().tolist():
                    hinges = [torch.clamp(cfg["margin"] - s[q, p] + s[q, n], min=0)
                              for n in range(s.shape[1]) if not pos[q, n]]
                    if hinges:
                        terms.append(hinges if kind == "triplet_sum" else [torch.stack(hinges).max()])
            if cfg.get("reduction", "sum") == "sum":
                return sum(sum(t) for t in terms)
            return sum(sum(t) for t in terms) / sum(len(t) for t in terms)   # mean over the hinges kept
        if kind == "nt_xent":
            terms = []
            for q in q_idx:
                negatives = [torch.exp(s[q, n] / cfg["tau"]) for n in range(s.shape[1]) if not pos[q, n]]
                for p in pos[q].nonzero().flatten().tolist():
                    e = torch.exp(s[q, p] / cfg["tau"])
                    terms.append(-torch.log(e / (e + sum(negatives))))
            return torch.stack(terms).mean()
        if kind == "smooth_ap":
            def sig(d):
                return torch.sigmoid(d / cfg["tau"])
            aps = []
            for q in q_idx:
                p_list = pos[q].nonzero().flatten().tolist()
                if not p_list:
                    continue
                ap = 0
                for i in p_list:
                    rank_pos = 1 + sum(sig(s[q, j] - s[q, i]) for j in p_list if j != i)
                    rank_all = 1 + sum(sig(s[q, j] - s[q, i]) for j in range(s.shape[1]) if j != i)
                    ap = ap + rank_pos / rank_all
                aps.append(ap / len(p_list))
            return 1 - torch.stack(aps).mean()
        raise AssertionError(f"loss term '{kind}': no loop reference in tests/test_registries.py")

    i2t, t2i = one_direction(s, pos), one_direction(s.t(), pos.t())
    return i2t + t2i if kind.startswith("triplet") else (i2t + t2i) / 2


TERM_CONFIGS = {"triplet_sum": {"margin": 0.2}, "triplet_hardest": {"margin": 0.2}, "nt_xent": {"tau": 0.1},
                "smooth_ap": {"tau": 0.05}, "triplet_sum_mean": {"margin": 0.2, "reduction": "mean"},
                "triplet_hardest_mean": {"margin": 0.2, "reduction": "mean"}}
# terms on element sets, not on score matrices: loop references in tests/test_set_embeddings.py
SET_TERMS = ("mmd", "uniformity", "diversity")
# terms on label vectors and masked predictions: closed forms in tests/test_label_wise.py
LABEL_WISE_TERMS = ("label_logistic", "masked_prediction", "consistency")
# DSCMR's terms: calc_loss transcribed with loops in tests/oracles/dscmr.py, tested in tests/test_dscmr.py
DSCMR_TERMS = ("dscmr_label_regression", "dscmr_label_likelihood", "dscmr_invariance")
# terms on sampled embeddings: loop references written from naver-ai/pcme in tests/test_pcme.py
PROBABILISTIC_TERMS = ("soft_contrastive", "vib")
# VSRN's caption generator: a caption-by-caption reference in tests/oracles/caption_decoder.py
GENERATION_TERMS = ("caption_generation",)


def test_every_loss_term_has_a_loop_reference():
    assert set(LOSS_TERMS.names()) == (set(LOSSES) | set(SET_TERMS) | set(LABEL_WISE_TERMS) | set(DSCMR_TERMS)
                                       | set(PROBABILISTIC_TERMS) | set(GENERATION_TERMS))


def test_every_declared_term_kind_is_implemented():
    """The DAG build reads the declarations (``TERM_KINDS``), training the implementations."""
    assert LOSS_TERMS.names() == TERM_KINDS.names()
    with pytest.raises(ValueError, match="'no_such_term' is implemented but not declared"):
        LOSS_TERMS.register("no_such_term", object)


def random_scores(seed: int, n_img=5, n_cap=12):
    g = torch.Generator().manual_seed(seed)
    scores = (torch.rand(n_img, n_cap, generator=g, dtype=torch.float64) * 2 - 1)
    owner = torch.cat([torch.arange(n_img), torch.randint(0, n_img, (n_cap - n_img,), generator=g)])
    return scores, owner[None, :] == torch.arange(n_img)[:, None]


@pytest.mark.parametrize("case", [*LOSSES, "triplet_sum_mean", "triplet_hardest_mean"])
@pytest.mark.parametrize("seed", range(2))
def test_loss_term_value_and_gradient_match_loops(case, seed):
    assert case in TERM_CONFIGS, f"loss term '{case}' has no test config here"
    kind = case.removesuffix("_mean")
    cfg = {"kind": kind, **TERM_CONFIGS[case]}
    heads = [random_scores(seed)[0].requires_grad_(True), random_scores(seed + 10)[0].requires_grad_(True)]
    positives = random_scores(seed)[1]
    ours = Loss(cfg)({"scores": heads}, {"positives": positives}, epoch=0)
    grads = torch.autograd.grad(ours, heads)
    ref_heads = [h.detach().clone().requires_grad_(True) for h in heads]
    want = sum(loop_ranking_loss(kind, cfg, h, positives) for h in ref_heads)  # a term sums over heads
    want_grads = torch.autograd.grad(want, ref_heads)
    assert ours.item() == pytest.approx(want.item(), rel=1e-9)
    for got, ref in zip(grads, want_grads):
        torch.testing.assert_close(got, ref, rtol=1e-7, atol=1e-10)


def test_terms_are_weighted_and_summed_and_warm_up_belongs_to_the_triplet_term():
    scores, positives = random_scores(3)
    out, batch = {"scores": [scores]}, {"positives": positives}
    loss = Loss({"terms": [{"kind": "triplet_hardest", "margin": 0.2, "warmup_sum_epochs": 1},
                           {"kind": "nt_xent", "tau": 0.1, "weight": 0.5}]})
    hardest = loop_ranking_loss("triplet_hardest", {"margin": 0.2}, scores, positives)
    summed = loop_ranking_loss("triplet_sum", {"margin": 0.2}, scores, positives)
    nt = loop_ranking_loss("nt_xent", {"tau": 0.1}, scores, positives)
    assert loss(out, batch, epoch=0).item() == pytest.approx((summed + 0.5 * nt).item(), rel=1e-9)
    assert loss(out, batch, epoch=1).item() == pytest.approx((hardest + 0.5 * nt).item(), rel=1e-9)
    assert loss.kind_at(0) == "triplet_sum+nt_xent" and loss.kind_at(1) == "triplet_hardest+nt_xent"


def test_gradient_counts_of_several_terms_follow_the_loss_trained():
    """The per-direction function counted over is the loss trained, split by direction."""
    scores, positives = random_scores(4)
    loss = Loss({"terms": [{"kind": "triplet_sum", "margin": 0.2}, {"kind": "nt_xent", "tau": 0.1, "weight": 0.5}]})
    per_direction = loss.one_direction_at(0)
    both = per_direction(scores, positives) + per_direction(scores.t(), positives.t())
    assert both.item() == pytest.approx(loss({"scores": [scores]}, {"positives": positives}, 0).item(), rel=1e-12)
    single = Loss({"kind": "nt_xent", "tau": 0.1}).one_direction_at(0)   # one term: its own function
    want = loop_ranking_loss("nt_xent", {"tau": 0.1}, scores, positives) * 2
    assert (single(scores, positives) + single(scores.t(), positives.t())).item() == pytest.approx(want.item())
