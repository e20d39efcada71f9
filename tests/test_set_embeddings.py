"""Set embeddings (Kim, Kim, Kwak, CVPR 2023; methods/models/set_*.py): the registered set
similarities against a per-pair brute force (and smooth-Chamfer against Chamfer as alpha grows),
the slot module's invariances and its padding switch, the regulariser terms against loops,
circular variance against a hand-worked example, evaluation views, and the plan's checks."""
import math

import pytest
import torch
import torch.nn.functional as F

from methods import api
from methods.config import REPO_ROOT, load_harness_config
from methods.errors import HarnessError
from methods.losses.weighted_sum import Loss
from methods.losses.set_regularisers import diversity, mmd, uniformity
from methods.model_kinds import MODEL_KINDS
from methods.model_kinds.element_views import check_elements, parse_view, view_name
from methods.models.set_embedding import SetEmbedding, circular_variance, drop_regions
from methods.models.set_prediction import SlotAggregation
from methods.models.set_similarity import SET_SIMILARITIES, set_score_matrix, set_similarity
from methods.plan import Plan
from methods.training.schedule import lr_at
from tests.conftest import config_with_every_table


def unit_sets(n, k, d, seed):
    x = torch.randn(n, k, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return x / x.norm(dim=-1, keepdim=True)


def brute_force(x, y, kind, **params):
    """One pair at a time, one element pair at a time (the paper's definitions)."""
    out = torch.zeros(len(x), len(y), dtype=torch.float64)
    for i, a in enumerate(x):
        for j, b in enumerate(y):
            c = [[float(a[p] @ b[q]) for q in range(len(b))] for p in range(len(a))]
            if kind == "smooth_chamfer":
                al = params["alpha"]
                xs = sum(math.log(sum(math.exp(al * v) for v in row)) for row in c) / (al * len(a))
                ys = sum(math.log(sum(math.exp(al * c[p][q]) for p in range(len(a)))) for q in range(len(b))) / (al * len(b))
                out[i, j] = (xs + ys) / 2
            elif kind == "chamfer":
                out[i, j] = (sum(max(row) for row in c) / len(a)
                             + sum(max(c[p][q] for p in range(len(a))) for q in range(len(b))) / len(b)) / 2
            elif kind == "mil":
                out[i, j] = max(max(row) for row in c)
            else:
                out[i, j] = sum(1 / (1 + math.exp(-(params["scale"] * v + params["shift"]))) for row in c
                                for v in row) / (len(a) * len(b))
    return out


PARAMS = {"smooth_chamfer": {"alpha": 16.0}, "chamfer": {}, "mil": {}, "mp": {"scale": 3.0, "shift": -1.0}}


@pytest.mark.parametrize("kind", SET_SIMILARITIES.names())
def test_set_similarities_equal_the_per_pair_brute_force_in_any_blocks(kind):
    assert kind in PARAMS, f"set similarity '{kind}' has no brute force here"
    x, y = unit_sets(5, 3, 6, 0), unit_sets(7, 2, 6, 1)    # sets of different sizes
    want = brute_force(x, y, kind, **PARAMS[kind])
    fn = set_similarity(kind, PARAMS[kind])
    torch.testing.assert_close(fn(x, y), want, rtol=1e-12, atol=1e-12)
    for budget in (1, 3 * 7 * 2, 10 ** 6):    # one image with text blocks, two images, everything
        torch.testing.assert_close(set_score_matrix(fn, x, y, budget), want, rtol=1e-12, atol=1e-12)


def test_smooth_chamfer_tends_to_chamfer_and_stays_finite_for_large_alpha():
    x, y = unit_sets(4, 4, 8, 2), unit_sets(6, 4, 8, 3)
    chamfer = SET_SIMILARITIES.get("chamfer")(x, y)
    gaps = [float((SET_SIMILARITIES.get("smooth_chamfer")(x, y, alpha=a) - chamfer).abs().max())
            for a in (16.0, 64.0, 1000.0, 1e5)]
    assert all(b < a for a, b in zip(gaps, gaps[1:])) and gaps[-1] < 1e-4
    # log |Y| / alpha bounds the gap: LSE_alpha lies in [max, max + log(n) / alpha]
    assert gaps[-2] <= math.log(4) / 1000.0 + 1e-12
    # the direct exp form above DIRECT_EXP_MAX_ALPHA would overflow float32: logsumexp takes over
    big = SET_SIMILARITIES.get("smooth_chamfer")(x.float(), y.float(), alpha=500.0)
    assert torch.isfinite(big).all()


def slot_module(padding="leak", competition="slots", positional="sine", seed=0):
    torch.manual_seed(seed)
    return SlotAggregation(4, 8, 6, iterations=3, heads=2, head_dim=4, ff_mult=2, competition=competition,
                           padding=padding, positional=positional).double().eval()


def test_permuting_input_regions_leaves_the_set_unchanged():
    agg = slot_module(positional="none")       # regions carry no position (DivE: no encoding for BUTD)
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    perm = torch.randperm(9)
    lengths = torch.tensor([9, 9])
    with torch.no_grad():
        a, _ = agg(x, lengths)
        b, _ = agg(x[:, perm], lengths)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_permuting_the_slots_permutes_the_elements():
    agg = slot_module()
    x = torch.randn(3, 7, 6, dtype=torch.float64)
    lengths = torch.tensor([7, 5, 2])
    perm = torch.tensor([2, 0, 3, 1])
    with torch.no_grad():
        a, attn_a = agg(x, lengths)
        agg.slots.copy_(agg.slots[perm])
        b, attn_b = agg(x, lengths)
    torch.testing.assert_close(b, a[:, perm], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(attn_b, attn_a[:, :, perm], rtol=1e-12, atol=1e-12)


def test_slot_attention_competes_over_slots_and_the_transformer_over_inputs():
    x = torch.randn(1, 5, 6, dtype=torch.float64)
    with torch.no_grad():
        for competition in ("slots", "inputs"):
            agg = slot_module(competition=competition)
            slots = agg.slots.expand(1, -1, -1)
            keys = agg.to_k(agg.norm_inputs(x)).view(1, 5, 2, 4).transpose(1, 2)
            attn = agg.attention(slots, keys, torch.ones(1, 5, dtype=torch.bool))   # (1, heads, K, N)
            # each slot's weights over the inputs sum to 1 either way (renormalised, or a softmax)
            torch.testing.assert_close(attn.sum(dim=-1), torch.ones(1, 2, 4, dtype=torch.float64), atol=1e-6, rtol=0)
            logits = (agg.to_q(agg.norm_slots(slots)).view(1, 4, 2, 4).transpose(1, 2) @ keys.transpose(-1, -2)) / 2
            if competition == "slots":   # softmax over the slot axis, then renormalised over inputs (eps 1e-7)
                over_slots = logits.softmax(dim=2)
                want = over_slots / (over_slots.sum(dim=-1, keepdim=True) + 1e-7)
            else:
                want = logits.softmax(dim=-1)
            torch.testing.assert_close(attn, want, rtol=1e-12, atol=1e-12)


def test_padding_leaks_as_in_the_public_code_and_masked_padding_ignores_it():
    x = torch.randn(1, 4, 6, dtype=torch.float64)
    padded = torch.cat([x, torch.randn(1, 3, 6, dtype=torch.float64)], dim=1)   # 3 padded positions
    lengths = torch.tensor([4])
    with torch.no_grad():
        masked = slot_module(padding="masked")
        alone, _ = masked(x, lengths)
        with_pad, attn = masked(padded, lengths)
        torch.testing.assert_close(alone, with_pad, rtol=1e-12, atol=1e-12)
        assert float(attn[..., 4:].abs().max()) == 0.0
        leak = slot_module(padding="leak")
        alone, _ = leak(x, lengths)
        with_pad, attn = leak(padded, lengths)
        assert float((alone - with_pad).abs().max()) > 1e-3     # the set depends on the padded length
        # a padded column is uniform over the slots before the renormalisation: every slot gives it weight
        assert float(attn[..., 4:].min()) > 0.0


def test_drop_regions_keeps_regions_first_and_never_drops_all():
    regions = torch.arange(1, 13, dtype=torch.float64).view(2, 6, 1).expand(2, 6, 3).clone()
    kept, lengths = drop_regions(regions, 0.5, torch.Generator().manual_seed(0))
    for b in range(2):
        n = int(lengths[b])
        assert 1 <= n <= 6 and float(kept[b, n:].abs().sum()) == 0.0
        values = kept[b, :n, 0].tolist()
        assert values == sorted(values) and set(values) <= set(regions[b, :, 0].tolist())   # order kept
    kept, lengths = drop_regions(regions, 0.999999, torch.Generator().manual_seed(0))
    assert lengths.tolist() == [6, 6]   # every region dropped: the image keeps them all


# -- regularisers ------------------------------------------------------------------------------

def loop_mmd(x, y, gamma):
    def k(a, b):
        return math.exp(-gamma * float((a - b).norm()))
    xx = sum(k(a, b) for a in x for b in x) / len(x) ** 2
    yy = sum(k(a, b) for a in y for b in y) / len(y) ** 2
    xy = sum(k(a, b) for a in x for b in y) / (len(x) * len(y))
    return xx - 2 * xy + yy


def loop_uniformity(r, t):
    values = []
    for s in r:
        s = s / s.norm(dim=-1, keepdim=True)
        pairs = [math.exp(-t * float((s[i] - s[j]).norm()) ** 2) for i in range(len(s)) for j in range(i + 1, len(s))]
        values.append(sum(pairs) / len(pairs))
    return sum(values) / len(values)


def loop_diversity(r):
    values = []
    for s in r:
        s = s / s.norm(dim=-1, keepdim=True)
        k = len(s)
        values.append(math.sqrt(sum(float(s[i] @ s[j]) ** 2 for i in range(k) for j in range(k) if i != j)) / k ** 2)
    return sum(values) / len(values)


def test_regularisers_equal_loops():
    img, txt = unit_sets(3, 4, 5, 4), unit_sets(6, 4, 5, 5)
    r_img, r_txt = torch.randn(3, 4, 5, dtype=torch.float64), torch.randn(6, 4, 5, dtype=torch.float64)
    assert float(mmd(img.reshape(-1, 5), txt.reshape(-1, 5), 0.5)) == pytest.approx(
        loop_mmd(img.reshape(-1, 5), txt.reshape(-1, 5), 0.5), rel=1e-10)
    assert float(uniformity(r_img, 2.0)) == pytest.approx(loop_uniformity(r_img, 2.0), rel=1e-10)
    assert float(diversity(r_txt)) == pytest.approx(loop_diversity(r_txt), rel=1e-10)
    outputs = {"sets": (img, txt), "residuals": (r_img, r_txt)}
    terms = Loss({"terms": [{"kind": "mmd", "weight": 0.01, "gamma": 0.5}, {"kind": "uniformity", "weight": 0.1, "t": 2.0},
                            {"kind": "diversity", "weight": 0.3}]})
    want = (0.01 * loop_mmd(img.reshape(-1, 5), txt.reshape(-1, 5), 0.5)
            + 0.1 * (loop_uniformity(r_img, 2.0) + loop_uniformity(r_txt, 2.0))
            + 0.3 * (loop_diversity(r_img) + loop_diversity(r_txt)))
    assert float(terms(outputs, {}, epoch=0)) == pytest.approx(want, rel=1e-10)
    assert float(uniformity(r_img[:, :1])) == 0.0 and float(diversity(r_img[:, :1])) == 0.0   # one element


def test_circular_variance_by_hand():
    # a set of two opposite unit vectors: mean 0, variance 1; a set of two equal ones: variance 0;
    # a set of (1, 0) and (0, 1): |mean| = sqrt(2)/2
    sets = torch.tensor([[[1.0, 0.0], [-1.0, 0.0]], [[0.0, 1.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]],
                        dtype=torch.float64)
    torch.testing.assert_close(circular_variance(sets), torch.tensor([1.0, 0.0, 1 - math.sqrt(2) / 2],
                                                                     dtype=torch.float64))
    model = api.build_model(api.experiment_config("set_embeddings", "synthetic"), 20, {"dim": 6, "regions": 3})
    stats = model.evaluation_statistics(sets, sets[:1])
    assert stats["image_log_circular_variance"] == pytest.approx(math.log((2 - math.sqrt(2) / 2) / 3))
    assert stats["text_log_circular_variance"] == pytest.approx(0.0)
    assert stats["log_circular_variance"] == pytest.approx(math.log((3 - math.sqrt(2) / 2) / 4))


# -- evaluation views and the plan ----------------------------------------------------------------

def test_view_names_round_trip_and_bad_ones_are_errors():
    for evaluation in ({"image_elements": [0]}, {"text_elements": [1, 3]}, {"image_elements": [0, 2], "text_elements": [1]}):
        name = view_name(evaluation)
        parsed = parse_view(name)
        assert parsed == {"image_elements": evaluation.get("image_elements"), "text_elements": evaluation.get("text_elements")}
    for bad in ("i0", "x0_tall", "i0_t", "iall_tall_i1", "i-1_tall"):
        with pytest.raises(HarnessError, match="evaluation view"):
            parse_view(bad)
    with pytest.raises(HarnessError, match="0..3"):
        check_elements({"image_elements": [4]}, (4, 4), "here")
    with pytest.raises(HarnessError, match="distinct"):
        check_elements({"text_elements": [1, 1]}, (4, 4), "here")


def test_selecting_elements_scores_the_subsets():
    model = api.build_model(api.experiment_config("set_embeddings", "synthetic"), 20, {"dim": 6, "regions": 3})
    img, txt = unit_sets(3, 4, 64, 6).float(), unit_sets(5, 4, 64, 7).float()
    sub_img, sub_txt = model.select_elements(img, txt, [1], None)
    torch.testing.assert_close(model.score_matrix(sub_img, sub_txt),
                               set_similarity("smooth_chamfer", {"alpha": 16.0})(img[:, [1]], txt))
    assert MODEL_KINDS.get("set_embedding").set_sizes({"set_size": 4}) == (4, 4)


@pytest.fixture(scope="module")
def plan():
    return Plan(config_with_every_table())


def test_view_rows_share_the_trained_run_and_statistics_are_a_column_of_table_3(plan):
    rows = {r.id: r for r in plan.table("set_embeddings_t5", "flickr").rows}
    assert {r.members[0] for r in rows.values()} == {rows["image_all"].members[0]}
    assert rows["image_all"].view is None and rows["image_only_2"].view == "i1_tall"
    assert rows["image_without_2"].view == "i0-2-3_tall" and rows["text_only_4"].view == "iall_t3"
    spec = plan.table_spec("set_embeddings_t3", "flickr").to_json()
    assert spec["protocols"] == ["f30k_1k", "set_statistics"]
    by_id = {r["id"]: r for r in spec["rows"]}
    assert by_id["pie_net"]["reported"]["set_statistics"]["metrics"] == {"log_circular_variance": -7.35}
    assert "set_statistics" not in plan.table_spec("set_embeddings_t4", "flickr").protocols
    # Table 4's rows vary one setting each; the default row is shared by the three blocks
    t4 = {r.id: r for r in plan.table("set_embeddings_t4", "flickr").rows}
    assert t4["k_4"].members == t4["t_4"].members == t4["alpha_16"].members == rows["image_all"].members
    assert plan.experiment("flickr", t4["k_1"].members[0]).config["model"]["set_size"] == 1


def test_the_ensemble_rows_are_two_seeds_of_the_same_config(plan):
    (row,) = [r for r in plan.table("set_embeddings_t2", "flickr").rows if r.id == "ours_ensemble"]
    assert row.members[0] == row.members[1] and row.ensemble_size == 2
    runs = plan.row_runs(row, "flickr")
    assert runs[:2] == [plan.run_dir("flickr", row.members[0], 0), plan.run_dir("flickr", row.members[0], 1000)]


def bad_paper(tmp_path, row_extra, table_extra="", seeds="        seeds: [0]\n"):
    path = tmp_path / "paper.yaml"
    path.write_text(f"""paper: test
key: bad
methods:
  set_embeddings: {REPO_ROOT}/config/methods/set_embeddings.yaml
  scan: {REPO_ROOT}/config/methods/scan.yaml
tables:
  bad:
    title: t
    datasets: [flickr]
{table_extra}    rows:
      - id: r
        label: r
{seeds}{row_extra}""")
    cfg = load_harness_config(REPO_ROOT / "config" / "config.yaml")
    cfg["papers"] = [str(path)]
    cfg["datasets"]["synthetic"].pop("table_seeds")
    return cfg


@pytest.mark.parametrize("row_extra, message", [
    ("        method: scan\n        evaluation: {image_elements: [0]}\n", "do(es)? not embed items as sets|need a model"),
    ("        method: set_embeddings\n        evaluation: {image_elements: [4]}\n", "0..3"),
    ("        ensemble: [{method: set_embeddings}, {method: set_embeddings}]\n        evaluation: {text_elements: [0]}\n",
     "not of an ensemble"),
    ("        method: set_embeddings\n        reported: {flickr: {set_statistics: {source: s, ensemble_size: 1, "
     "metrics: {log_circular_variance: -2.0}}}}\n", "set_statistics"),
])
def test_plan_rejects_bad_views_and_misfiled_statistics(tmp_path, row_extra, message):
    with pytest.raises(HarnessError, match=message):
        Plan(bad_paper(tmp_path, row_extra))


def test_the_coco_rows_run_the_public_recipe(plan):
    """kdwonn/DivE train_eval_coco.sh: AdamW 1e-3 (weight decay 1e-4), a per-iteration cosine over
    80 epochs, 200 images with all their captions per batch, AMP, clip 1, the last epoch kept."""
    (row,) = [r for r in plan.table("set_embeddings_t1", "coco").rows if r.id == "ours"]
    cfg = plan.experiment("coco", row.members[0]).config
    tr = cfg["training"]
    assert (tr["optimizer"], tr["weight_decay"], tr["batch_size"], tr["batching"], tr["amp"], tr["grad_clip"],
            tr["selection_metric"]) == ("adamw", 1e-4, 200, "images", True, 1.0, "last")
    assert tr["stages"] == [{"name": "train", "epochs": 80, "lr": 1e-3, "finetune_backbone": False,
                             "schedule": {"kind": "cosine", "per_step": True}}]
    model = cfg["model"]
    assert (model["set_size"], model["set_module"]["iterations"], model["similarity"]) == (4, 4, {"kind": "smooth_chamfer", "alpha": 16.0})
    assert row.seeds == [0, 1, 2] and not any(ledger["switches"] for ledger in row.ledger)


def test_one_element_sets_report_no_variance():
    cfg = api.experiment_config("set_embeddings", "synthetic", overrides={"model.set_size": 1})
    model = api.build_model(cfg, 20, {"dim": 6, "regions": 3})
    assert model.evaluation_statistics(unit_sets(2, 1, 64, 0), unit_sets(3, 1, 64, 1)) == {}


def test_the_resnet152_rows_run_the_appendix_schedule(plan):
    """Appendix A, ResNet-152 + bi-GRU: 120 epochs, the CNN frozen for the first 50, lr 1e-3 (COCO)
    / 2e-3 (Flickr30K) decayed every 10 epochs, here by 0.5 across both stages."""
    for table, dataset, lr in (("set_embeddings_t1", "coco", 1e-3), ("set_embeddings_t2", "flickr", 2e-3)):
        (row,) = [r for r in plan.table(table, dataset).rows if r.id == "ours_resnet152"]
        exp = plan.experiment(dataset, row.members[0])
        stages = exp.config["training"]["stages"]
        assert [(s["epochs"], s["finetune_backbone"]) for s in stages] == [(50, False), (70, True)]
        assert exp.finetunes and exp.backbone == "resnet152" and exp.image_input.name == "grid"
        # the step schedule continues over the stage boundary: lr x 0.5 every 10 epochs from epoch 0
        rates = [lr_at(s, e) for s in stages for e in range(s["epochs"])]
        assert rates == pytest.approx([lr * 0.5 ** (epoch // 10) for epoch in range(120)], rel=1e-12)
        assert not any(ledger["switches"] for ledger in row.ledger)


def grid_model(cnn=True):
    cfg = api.experiment_config("set_embeddings_grid", "synthetic")
    random_cnn = {"resnet18_synthetic": {"arch": "resnet18", "weights": "none"}}   # no pre-trained file needed
    return api.build_model(cfg, 20, {"scales": {"conv5": [2, 2, 512]}}, random_cnn, cnn=cnn)


def test_the_grid_model_trains_its_cnn_at_the_base_lr_and_the_rest_of_the_image_side_scaled():
    model = grid_model()
    model.set_finetune(True)
    groups = {}
    for params, scale in model.parameter_groups():
        groups.setdefault(scale, set()).update(id(p) for p in params)
    cnn = {id(p) for p in model.backbone.parameters()}
    image = {id(p) for p in [*model.region.parameters(), *model.image_set.parameters()]}
    text_set = {id(p) for p in model.text_set.parameters()}
    assert image | text_set == groups[0.1] and cnn | {id(p) for p in model.text.parameters()} == groups[1.0]
    model.set_finetune(False)
    assert not any(id(p) in cnn for params, _ in model.parameter_groups() for p in params)
    with pytest.raises(HarnessError, match="without its CNN"):
        grid_model(cnn=False).set_finetune(True)


def test_the_grid_model_reads_cached_maps_and_images_alike():
    """The fine-tune stage feeds images through the CNN; its maps give the same sets as cached maps would."""
    model = grid_model().eval()
    images = torch.randn(3, 3, 64, 64)
    with torch.no_grad():
        maps = model.backbone(images, ("conv5",))["conv5"].permute(0, 2, 3, 1)
        from_images = model.encode_images({"images": images})
        from_cache = model.encode_images({"features": {"conv5": maps}})
    assert from_images.shape == (3, 4, 64)
    torch.testing.assert_close(from_images, from_cache, rtol=1e-6, atol=1e-6)


def test_rows_the_harness_does_not_run_are_reported_only(plan):
    """Every printed row of Tables 1-2 is in the paper file; those the harness cannot run carry
    their reported numbers only, and plan no run."""
    rows = {r.id: r for r in plan.table("set_embeddings_t1", "coco").rows}
    assert {"pvse_resnet152", "pcme_resnet152", "vsrn_ensemble", "caan", "imram_ensemble", "vse_infinity",
            "naaf_ensemble"} <= set(rows)
    caan = rows["caan"]
    assert not caan.runs_models and caan.members == [] and caan.seeds == [] and plan.row_runs(caan, "coco") == []
    assert caan.reported["coco_5k"]["metrics"]["rsum"] == 421.1 and "not built" in caan.reported_only
    assert rows["pcme_resnet152"].reported["coco_1k_5fold"]["metrics"] == {"i2t_r1": 68.8, "t2i_r1": 54.6}
    spec = plan.table_spec("set_embeddings_t1", "coco").to_json()
    assert next(r for r in spec["rows"] if r["id"] == "caan")["reported_only"] == caan.reported_only
    assert rows["ours"].runs_models and rows["ours"].reported_only is None


REPORTED = "        reported: {flickr: {f30k_1k: {source: s, ensemble_size: 1, metrics: {rsum: 1.0}}}}\n"


@pytest.mark.parametrize("row_extra, seeds", [
    ("        reported_only: not built\n", ""),                         # no numbers to show
    ("        reported_only: not built\n" + REPORTED, "        seeds: [0]\n"),   # seeds of no run
    ("        reported_only: not built\n        method: set_embeddings\n" + REPORTED, ""),   # and a method
])
def test_a_reported_only_row_has_numbers_and_nothing_to_run(tmp_path, row_extra, seeds):
    with pytest.raises(HarnessError, match="rows.0"):
        Plan(bad_paper(tmp_path, row_extra, seeds=seeds))
    Plan(bad_paper(tmp_path, "        reported_only: not built\n" + REPORTED, seeds=""))   # the valid form


def test_a_row_cannot_be_paired_with_a_reported_only_row(tmp_path):
    extra = ("        method: set_embeddings\n        compare_to: other\n"
             "      - id: other\n        label: o\n        reported_only: not built\n"
             "        reported: {flickr: {f30k_1k: {source: s, ensemble_size: 1, metrics: {rsum: 1.0}}}}\n")
    with pytest.raises(HarnessError, match="reported only"):
        Plan(bad_paper(tmp_path, extra))


def test_cached_maps_of_another_backbone_are_refused():
    """The grid models share one channel check (GridBackbone.init_backbone): ResNet-18's conv5 has 512."""
    cfg = api.experiment_config("set_embeddings_grid", "synthetic")
    with pytest.raises(ValueError, match=r"cached conv5 maps have 2048 channels, but resnet18's conv5 has 512"):
        api.build_model(cfg, 20, {"scales": {"conv5": [2, 2, 2048]}}, cnn=False)


# -- one training step against a transcription of DivE's ------------------------------------------

def _dive_model(global_pass: str, region_padding: str):
    from methods.models.text import GRUTextEncoder
    torch.manual_seed(0)
    text = GRUTextEncoder(20, 6, 8, bidirectional=True, embed_init="normal")
    module = {"kind": "slot", "iterations": 2, "heads": 2, "head_dim": 4, "ff_mult": 2, "competition": "slots",
              "padding": "leak"}
    return SetEmbedding(10, 8, 2, text, module, {"kind": "smooth_chamfer", "alpha": 16.0}, dropout=0.0,
                        region_drop=0.4, image_projection={"init": "pytorch", "global_pass": global_pass},
                        region_padding=region_padding).double().train()


def _dive_batch():
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([5, 3, 4, 2])
    tokens = torch.zeros(4, 5, dtype=torch.long)
    for row, n in enumerate(lengths):
        tokens[row, :n] = torch.randint(1, 20, (int(n),), generator=g)
    return {"features": torch.randn(4, 6, 10, generator=g, dtype=torch.float64), "tokens": tokens,
            "lengths": lengths, "positives": torch.eye(4, dtype=torch.bool)}


DIVE_LOSS = {"terms": [{"kind": "triplet_hardest", "margin": 0.2, "reduction": "mean", "warmup_sum_epochs": 0},
                       {"kind": "mmd", "weight": 0.01, "gamma": 0.5}, {"kind": "uniformity", "weight": 0.01, "t": 2.0}]}


def dive_step(model, batch, loss, seed):
    """kdwonn/DivE's training step, transcribed: data.py draws the region drop per image (kept when a
    uniform draw exceeds --butd_drop_prob) and collate_fn_butd pads the kept regions to the longest
    of the batch; model_spm.py EncoderImage.forward runs spm_fc = dropout(mlp(fc(x)) + fc(x))
    (SequenceBN: BatchNorm1d over every position, padded ones included) on them, and again inside
    residual_connection (--img_res_first_fc) before variable_len_pooling's max. The set module,
    the text side and the loss are the harness's own (checked against DivE elsewhere)."""
    torch.manual_seed(seed)
    keep = torch.rand(4, 6) > model.region_drop
    keep[keep.sum(dim=1) == 0] = True
    kept = [batch["features"][b][keep[b]] for b in range(4)]
    lengths = torch.tensor([len(k) for k in kept])
    x = torch.zeros(4, int(lengths.max()), 10, dtype=torch.float64)
    for b, k in enumerate(kept):
        x[b, :len(k)] = k
    r = model.region

    def spm_fc(v):
        fc = F.linear(v, r.fc.weight, r.fc.bias)
        hidden = r.bn(F.linear(fc, r.mlp_in.weight, r.mlp_in.bias).reshape(-1, r.bn.num_features)).reshape(*v.shape[:2], -1)
        return F.linear(torch.relu(hidden), r.mlp_out.weight, r.mlp_out.bias) + fc

    local = spm_fc(x)
    valid = torch.arange(x.shape[1])[None, :] < lengths[:, None]
    glob = spm_fc(x).masked_fill(~valid[..., None], -torch.finfo(x.dtype).max).max(1)[0]
    elements, residuals, _ = model.image_set(local, glob, lengths)
    img = {"sets": elements / elements.norm(dim=-1, keepdim=True),
           "residuals": residuals}
    txt = model.encode_text_sets(batch["tokens"], batch["lengths"])
    outputs = {"scores": [model.score(img["sets"], txt["sets"])], "sets": (img["sets"], txt["sets"]),
               "residuals": (img["residuals"], txt["residuals"])}
    return loss(outputs, batch, epoch=0)


@pytest.mark.parametrize("global_pass, region_padding, same", [("separate", "batch_longest", True),
                                                               ("shared", "all", False)])
def test_one_training_step_gives_dives_loss_gradients_and_batchnorm_statistics(global_pass, region_padding, same):
    import copy
    from methods.training.step import TrainingStep
    model = _dive_model(global_pass, region_padding)
    reference = copy.deepcopy(model)
    batch, loss = _dive_batch(), Loss(DIVE_LOSS)
    torch.manual_seed(7)   # the region drop's draw
    value, _ = TrainingStep(model, loss, torch.device("cpu"), amp=False)(batch, epoch=0)
    value.backward()
    want = dive_step(reference, batch, loss, seed=7)
    want.backward()
    bn, bn_ref = model.region.bn, reference.region.bn
    if not same:   # the project's older behaviour: other statistics (one pass) and another padding
        assert not torch.equal(bn.running_mean, bn_ref.running_mean)
        return
    assert int(bn.num_batches_tracked) == int(bn_ref.num_batches_tracked) == 2   # twice a step, as DivE
    torch.testing.assert_close(value, want, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(bn.running_mean, bn_ref.running_mean, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(bn.running_var, bn_ref.running_var, rtol=1e-12, atol=1e-14)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        if p.grad is None:
            assert q.grad is None, name
            continue
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-10, atol=1e-13, msg=lambda m: f"{name}: {m}")


def test_the_image_projection_and_word_embeddings_start_as_dives():
    """DivE keeps nn.Linear's default init for fc and the MLP (U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
    biases too; Xavier with zero biases only with --spm_xavier_init) and nn.Embedding's N(0, 1)."""
    from methods.models.set_embedding import RegionMLP
    from methods.models.text import GRUTextEncoder
    torch.manual_seed(0)
    mlp = RegionMLP(400, 256, "pytorch")
    for layer in (mlp.fc, mlp.mlp_in, mlp.mlp_out):
        bound = 1 / math.sqrt(layer.in_features)
        assert float(layer.weight.detach().abs().max()) <= bound and float(layer.bias.detach().abs().max()) <= bound
        assert float(layer.weight.detach().std()) == pytest.approx(bound / math.sqrt(3), rel=0.05)
        assert float(layer.bias.detach().abs().max()) > 0
    xavier = RegionMLP(400, 256, "xavier")
    assert float(xavier.fc.bias.detach().abs().max()) == 0.0
    assert float(xavier.fc.weight.detach().std()) == pytest.approx(math.sqrt(2 / (400 + 256)), rel=0.05)   # Xavier uniform
    vectors = torch.zeros(2000, 50)
    vectors[:1000] = 0.5   # GloVe has the first half of the words
    normal = GRUTextEncoder(2000, 50, 8, word_vectors=vectors, embed_init="normal").embed.weight.detach()[1000:]
    assert float(normal.std()) == pytest.approx(1.0, rel=0.05)
    uniform = GRUTextEncoder(2000, 50, 8, word_vectors=vectors, embed_init="uniform").embed.weight.detach()
    assert float(uniform[1000:].abs().max()) <= 0.1 and torch.equal(uniform[:1000], vectors[:1000])
