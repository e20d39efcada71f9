"""The label-wise protocols, tables and figures: labels of a split (texts carry their image's),
micro-F1 through a protocol's folds against scikit-learn, micro-F1 cells shown to three decimals,
a synthetic stand-in showing several protocols' reported numbers, and the figures' data."""
import csv
import dataclasses
import json

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score, ndcg_score

from methods.data.datasets import DatasetPayload
from methods.data.multilabel import check_model_labels, image_filenames, label_count
from methods.errors import HarnessError
from methods.io import write_json
from methods.metrics.declarations import LABEL_PREDICTION_METRICS, LABEL_RANKING_METRICS
from methods.metrics.evaluation import evaluate_protocol, label_prediction_relevance, split_labels
from methods.metrics.protocols import Protocol, get_protocol
from methods.metrics.relevance import SharedLabels
from methods.plan import data_kind, reported_shown, stand_in_protocols
from methods.report import aggregate, table
from methods.report.label_figures import ndcg_against_weight, training_curves
from tests.records import run_evaluation, table_row


def labelled_payload(tmp_path, labels, texts_per_image):
    images = [{"filename": f"im{i}.jpg", "split": "test", "labels": row,
               "sentences": [{"raw": f"text {i} {k}"} for k in range(texts_per_image)]} for i, row in enumerate(labels)]
    write_json(tmp_path / "d.json", {"images": images})
    return DatasetPayload.from_json({"name": "d", "paths": {"karpathy_json": str(tmp_path / "d.json")},
            "dataset": {"splits": {"test": ["test"]}, "texts_per_image": texts_per_image}})


def test_split_labels_give_each_text_its_images_labels(tmp_path):
    labels = [[1, 0, 1], [0, 0, 0], [0, 1, 0]]
    shared = split_labels(labelled_payload(tmp_path, labels, 2), "test", get_protocol("labelwise_coco_5k"))
    np.testing.assert_array_equal(shared.image_labels, labels)
    np.testing.assert_array_equal(shared.text_labels, [labels[0], labels[0], labels[1], labels[1], labels[2], labels[2]])
    # a text shares as many labels with an image as its own image does
    assert shared.graded()[0].tolist() == [2, 2, 0, 0, 0, 0]


def test_identical_tag_sets_are_ranked_once_with_their_first_images_labels(tmp_path):
    # images 0, 2 and 3 have the same tag set (text), with different labels; 1 and 4 their own
    texts = ["dog park", "cat", "dog park", "dog park", ""]
    labels = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [0, 0, 0]]
    images = [{"filename": f"im{i}.jpg", "split": "test", "labels": row, "sentences": [{"raw": t}]}
              for i, (t, row) in enumerate(zip(texts, labels))]
    write_json(tmp_path / "d.json", {"images": images})
    payload = DatasetPayload.from_json({"name": "d", "paths": {"karpathy_json": str(tmp_path / "d.json")},
               "dataset": {"splits": {"test": ["test"]}, "texts_per_image": 1}})
    unique = split_labels(payload, "test", get_protocol("labelwise_test"))
    assert unique.text_columns.tolist() == [0, 1, 4] and unique.image_texts.ravel().tolist() == [0, 1, 0, 0, 2]
    np.testing.assert_array_equal(unique.text_labels, [labels[0], labels[1], labels[4]])
    scores = np.random.default_rng(0).normal(size=(5, 5))
    got = evaluate_protocol(scores, get_protocol("labelwise_test"), unique)["metrics"]
    gains = np.array(labels) @ np.array([labels[0], labels[1], labels[4]]).T
    kept = scores[:, [0, 1, 4]]
    for direction, (s, g) in {"i2t": (kept, gains), "t2i": (kept.T, gains.T)}.items():
        want = 100 * np.mean([ndcg_score(gi[None], si[None], k=500) for gi, si in zip(g, s)])
        assert got[f"{direction}_ndcg500"] == pytest.approx(want, rel=1e-12)


# -- the label-wise code's evaluation (njustkmg/IJCAI21... utils/evaluation.py), transcribed per query --

def code_ndcg(scores, relmatrix, offsets=None, threshold=500):
    """i2t_one / i2t / t2i's NDCG loop for each query row, with np.argsort(d, kind='stable')[::-1]
    (``offsets``: t2i's caption index i in log2(5 t + i + 2); None: log2(t + 2))."""
    out = []
    for q, d in enumerate(scores):
        inds = np.argsort(d, kind="stable")[::-1]
        rel, ideal = relmatrix[q][inds[:threshold]], np.sort(relmatrix[q])[::-1][:threshold]
        dcg = idcg = 0.0
        for t in range(min(threshold, len(d))):
            disc = np.log2(t + 2) if offsets is None else np.log2(5 * t + offsets[q] + 2)
            dcg += rel[t] / disc
            idcg += ideal[t] / disc
        out.append(dcg / idcg if dcg > 0 else 0.0)
    return 100 * np.mean(out)


def code_own_recall(scores, own, k):
    """R@K as the code's loops: the best rank of any of the query's own items (``own``: per query the set)."""
    ranks = [min(int(np.where(np.argsort(d, kind="stable")[::-1] == j)[0][0]) for j in own[q])
             for q, d in enumerate(scores)]
    return 100 * np.mean(np.array(ranks) < k)


def tied_tag_payload(tmp_path):
    rng = np.random.default_rng(3)
    texts = [str(t) for t in rng.integers(0, 6, 24)]          # 24 images, 6 tag sets, repeated
    labels = (rng.random((24, 4)) < 0.4).astype(int).tolist()
    images = [{"filename": f"im{i}.jpg", "split": "test", "labels": row, "sentences": [{"raw": f"tag{t}"}]}
              for i, (t, row) in enumerate(zip(texts, labels))]
    write_json(tmp_path / "d.json", {"images": images})
    return (DatasetPayload.from_json({"name": "d", "paths": {"karpathy_json": str(tmp_path / "d.json")},
             "dataset": {"splits": {"test": ["test"]}, "texts_per_image": 1}}), texts, np.array(labels))


def test_tag_protocol_equals_the_code_on_tied_scores(tmp_path):
    """NDCG@500 and R@K of labelwise_test against a per-query transcription of i2t_one: unique tag
    sets, the image's own tag set for R@K, every image with that tag set for text queries, equal
    scores ordered as np.argsort(kind='stable')[::-1]."""
    payload, texts, labels = tied_tag_payload(tmp_path)
    unique = split_labels(payload, "test", get_protocol("labelwise_test"))
    scores = np.round(np.random.default_rng(4).random((24, 24)), 1)   # many exact ties
    got = evaluate_protocol(scores, get_protocol("labelwise_test"), unique)["metrics"]
    columns = unique.text_columns
    kept, unique_texts = scores[:, columns], [texts[c] for c in columns]
    relmatrix = labels @ labels[columns].T
    assert got["i2t_ndcg500"] == pytest.approx(code_ndcg(kept, relmatrix), rel=1e-12)
    assert got["t2i_ndcg500"] == pytest.approx(code_ndcg(kept.T, relmatrix.T), rel=1e-12)
    own_text = [[unique_texts.index(t)] for t in texts]
    own_images = [[i for i, t in enumerate(texts) if t == u] for u in unique_texts]
    for k in (1, 5, 10):
        assert got[f"i2t_own_r{k}"] == pytest.approx(code_own_recall(kept, own_text, k))
        assert got[f"t2i_own_r{k}"] == pytest.approx(code_own_recall(kept.T, own_images, k))
    # the harness's own rule (ties against the model) differs on these ties
    protocol = Protocol("against", "test", 1, None, "", relevance="shared_labels", metrics=LABEL_RANKING_METRICS,
                        unique_texts=True)
    with pytest.raises(HarnessError, match="tie order against_model"):
        evaluate_protocol(scores, protocol, unique)
    against = evaluate_protocol(scores, protocol, dataclasses.replace(unique, tie_order="against_model"))["metrics"]
    assert against["i2t_ndcg500"] < got["i2t_ndcg500"] and against["t2i_ndcg500"] < got["t2i_ndcg500"]


def test_coco_protocols_equal_the_code_and_its_t2i_discount(tmp_path):
    """labelwise_coco_*: NDCG as i2t / t2i of the code; the *_code protocol's text queries with the
    discount log2(5 t + i + 2); R@K (own) equals the caption protocols' R@K on untied scores."""
    rng = np.random.default_rng(5)
    n, fold_size = 200, 40   # the COCO protocols' conventions on 5 folds of 40 images (not 1,000)
    labels = (rng.random((n, 6)) < 0.3).astype(int)
    scores = rng.random((n, 5 * n))

    def small(name):
        return dataclasses.replace(get_protocol(name), n_images=None)

    shared = SharedLabels(labels, np.repeat(labels, 5, axis=0), tie_order="argsort_reversed")
    code = SharedLabels(labels, np.repeat(labels, 5, axis=0), tie_order="argsort_reversed",
                        ndcg_discount="coco_t2i_code")
    plain = evaluate_protocol(scores, small("labelwise_coco_1k_5fold"), shared)
    coded = evaluate_protocol(scores, small("labelwise_coco_1k_5fold_code"), code)
    for f in range(5):
        rows, cols = slice(f * fold_size, (f + 1) * fold_size), slice(5 * f * fold_size, 5 * (f + 1) * fold_size)
        s, rel = scores[rows, cols], labels[rows] @ np.repeat(labels[rows], 5, axis=0).T
        assert plain["folds"][f]["i2t_ndcg500"] == pytest.approx(code_ndcg(s, rel), rel=1e-12)
        assert plain["folds"][f]["t2i_ndcg500"] == pytest.approx(code_ndcg(s.T, rel.T), rel=1e-12)
        assert coded["folds"][f]["i2t_ndcg500"] == plain["folds"][f]["i2t_ndcg500"]
        assert coded["folds"][f]["t2i_ndcg500"] == pytest.approx(
            code_ndcg(s.T, rel.T, offsets=np.arange(5 * fold_size) % 5), rel=1e-12)
    assert coded["metrics"]["t2i_ndcg500"] != pytest.approx(plain["metrics"]["t2i_ndcg500"])
    captions = evaluate_protocol(scores, small("coco_1k_5fold"))["metrics"]
    for d in ("i2t", "t2i"):
        for k in (1, 5, 10):
            assert plain["metrics"][f"{d}_own_r{k}"] == pytest.approx(captions[f"{d}_r{k}"], rel=1e-12)


def test_split_labels_of_a_split_without_labels_is_one_line(tmp_path):
    payload = labelled_payload(tmp_path, [[1, 0]], 1)
    data = json.loads((tmp_path / "d.json").read_text())
    del data["images"][0]["labels"]
    write_json(tmp_path / "d.json", data)
    with pytest.raises(HarnessError, match=r"protocol labelwise_test needs labels.*no 'labels'"):
        split_labels(payload, "test", get_protocol("labelwise_test"))


def test_micro_f1_of_a_two_fold_protocol_is_the_mean_of_sklearn_per_fold(tmp_path):
    rng = np.random.default_rng(0)
    labels = (rng.random((8, 5)) < 0.4).astype(int).tolist()
    shared = split_labels(labelled_payload(tmp_path, labels, 3), "test", get_protocol("label_prediction"))
    image_scores, text_scores = rng.random((8, 5)), rng.random((24, 5))
    relevance = label_prediction_relevance(shared, (image_scores, text_scores))
    protocol = Protocol("two_folds", "test", 2, None, "two folds", relevance="label_predictions",
                        metrics=LABEL_PREDICTION_METRICS)
    result = evaluate_protocol(torch.zeros(8, 24), protocol, relevance)
    truth_images, truth_texts = np.array(labels), np.repeat(np.array(labels), 3, axis=0)
    for side, scores, truth, per_fold in (("image", image_scores, truth_images, 4), ("text", text_scores, truth_texts, 12)):
        want = np.mean([f1_score(truth[f * per_fold:(f + 1) * per_fold], scores[f * per_fold:(f + 1) * per_fold] >= 0.5,
                                 average="micro", zero_division=0) for f in range(2)])
        assert result["metrics"][f"{side}_micro_f1"] == pytest.approx(want, rel=1e-12)
    assert len(result["folds"]) == 2


def _label_eval(tmp_path, seed, image_f1, ndcg):
    path = tmp_path / "evals" / f"eval_{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run_evaluation(seed, [
        {"protocol": "label_prediction", "metrics": {"image_micro_f1": image_f1, "text_micro_f1": 0.5}},
        {"protocol": "labelwise_test", "metrics": {m: ndcg for m in LABEL_RANKING_METRICS}}], f"cfg{seed}")))
    return str(path)


def test_micro_f1_cells_keep_three_decimals_and_the_tolerance_line_names_each_family(tmp_path):
    rows = tmp_path / "rows" / "ours.json"
    aggregate.main(["--out", str(rows), _label_eval(tmp_path, 0, 0.6813, 88.0), _label_eval(tmp_path, 1, 0.6925, 90.0)])
    spec = tmp_path / "t.spec.json"
    reported = {"label_prediction": {"ensemble_size": 1, "source": "paper", "metrics": {"image_micro_f1": 0.690}}}
    spec.write_text(json.dumps({
        "table": "t", "dataset": "mirflickr", "dataset_kind": "multilabel", "titles": ["a paper"],
        "protocols": ["labelwise_test", "label_prediction"],
        "tolerance": {"recall": 2.0, "rsum": 6.0, "rank": 1.0, "ranking": 2.0, "f1": 0.02},
        "training_check": {"min_gain_share": 0.05, "min_score_spread": 1e-4, "saturated_share": 0.99},
        "rows": [table_row(id="ours", label="OURS", paper="p", not_reported=None, ensemble_size=1, reported=reported,
                           ledger=[{"code": "c", "switches": [], "deviations": []}], compare_to=None)]}))
    out_csv, out_md = tmp_path / "t.csv", tmp_path / "t.md"
    table.main(["--spec", str(spec), "--out-csv", str(out_csv), "--out-md", str(out_md), str(rows)])
    with open(out_csv) as f:
        cell = next(r for r in csv.DictReader(f) if r["metric"] == "image_micro_f1")
    # mean 0.6869, population std 0.0056; |0.6869 - 0.690| = 0.0031 <= 0.02
    assert (cell["reproduced"], cell["reproduced_std"], cell["verdict"]) == ("0.6869", "0.0056", "within")
    md = out_md.read_text()
    assert "0.687 ± 0.006 / 0.69 |" in md and "89.0 ± 1.0" in md
    assert "Verdict of every reproduced cell with a reported number: **within**." in md   # the only judged cell
    assert "Tolerance: mAP/NDCG ±2.0, R@K ±2.0, micro-F1 ±0.02." in md


def test_a_stand_in_shows_the_reported_numbers_of_each_protocol_it_stands_in_for():
    ds = {"kind": "multilabel", "generated_from": {"dataset": "synthetic"}, "protocols": ["labelwise_test", "label_prediction"],
          "stands_in_for": {"dataset": "mirflickr", "protocol": ["labelwise_test", "label_prediction"]}}
    assert stand_in_protocols(ds) == ["labelwise_test", "label_prediction"]
    assert stand_in_protocols({**ds, "stands_in_for": {"dataset": "flickr", "protocol": "f30k_1k"}}) == ["f30k_1k"]
    assert data_kind(ds) == "synthetic" and data_kind({"kind": "multilabel"}) == "multilabel"
    f1 = {"ensemble_size": 1, "source": "s", "metrics": {"image_micro_f1": 0.69}}
    ndcg = {"ensemble_size": 1, "source": "s", "metrics": {"i2t_ndcg500": 70.0}}
    shown = reported_shown({"label_prediction": f1, "labelwise_test": ndcg}, ds)
    assert shown == {"labelwise_test": ndcg, "label_prediction": f1}


def test_training_curves_plot_the_seed_mean_of_each_quantity_per_epoch():
    epoch = lambda f1, ndcg: {"image_micro_f1": f1, "text_micro_f1": f1 / 2, "i2t_ndcg500": ndcg, "t2i_ndcg500": ndcg + 1}  # noqa: E731
    curves = {"with": [[epoch(0.2, 10), epoch(0.4, 20)], [epoch(0.4, 30), epoch(0.6, 40), epoch(0.9, 50)]],
              "without": [[epoch(0.1, 5), epoch(0.3, 6)]]}
    fig = training_curves(curves)
    classification, retrieval = fig.axes[:2]
    lines = {(line.get_label(), line.get_linestyle()): list(line.get_ydata()) for line in classification.lines}
    assert lines[("image: with", "-")] == pytest.approx([0.3, 0.5])       # two epochs: the shorter seed's
    assert lines[("text: without", ":")] == pytest.approx([0.05, 0.15])
    t2i = {line.get_label(): list(line.get_ydata()) for line in retrieval.lines}["T2I: with"]
    assert t2i == pytest.approx([21, 31])


def test_ndcg_against_weight_orders_the_rows_by_weight():
    cell = lambda v: {"t2i_ndcg500": {"mean": v, "std": 0.0, "values": [v]}, "i2t_ndcg500": {"mean": v - 1, "std": 0.0, "values": [v - 1]}}  # noqa: E731
    fig = ndcg_against_weight([(10.0, cell(70)), (0.0, cell(80)), (0.01, cell(90))], "masked_prediction", "labelwise_test")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "0.01", "10"]
    t2i = next(line for line in ax.lines if line.get_linestyle() == "-")
    assert list(t2i.get_ydata()) == [80, 90, 70]


def test_image_names_come_from_the_sources_image_paths(tmp_path):
    assert image_filenames(tmp_path, "test", 2) == ["test_000000", "test_000001"]
    (tmp_path / "test_image_path.txt").write_text("/home/authors/mirflickr/im10.jpg\n/home/authors/mirflickr/im7.jpg\n")
    assert image_filenames(tmp_path, "test", 2) == ["im10.jpg", "im7.jpg"]
    assert image_filenames(tmp_path, "test", 3) == ["test_000000", "test_000001", "test_000002"]   # a mismatch


def test_a_model_predicting_another_label_count_fails_when_the_dag_is_built():
    cfg = {"results_dir": "results", "datasets": {
        "synthtags": {"kind": "multilabel", "generated_from": {"dataset": "synthetic", "seed": 0, "tag_drop": 0.2,
                                                                "label_groups": ["shape", "colour"]}},
        "picked": {"kind": "multilabel", "source_dir": None, "label_columns": [0, 3, 5]}}}
    assert label_count(cfg, "synthtags") == 6 + 8      # the generator's shapes and colours
    assert label_count(cfg, "picked") == 3
    check_model_labels(cfg, "synthtags", {"n_classes": 14}, "experiment e")
    with pytest.raises(HarnessError, match=r"experiment e: model.n_classes is 24, but dataset picked has 3 labels"):
        check_model_labels(cfg, "picked", {"n_classes": 24}, "experiment e")


@pytest.mark.parametrize("dataset, lam", [("mirflickr", 0.1), ("nuswide", 0.1), ("cocolabelwise", 0.01)])
def test_real_datasets_run_the_supplements_recipe(dataset, lam):
    from methods import api

    cfg = api.experiment_config("label_wise", dataset)
    (stage,) = cfg["training"]["stages"]
    assert (stage["epochs"], stage["lr"], stage["schedule"]["kind"], cfg["training"]["optimizer"]) == (45, 1e-4, "constant", "adam")
    assert cfg["training"]["batch_size"] == 64 and cfg["model"]["transformer"]["layers"] == 6
    assert cfg["model"]["transformer"]["heads"] == 8 and cfg["model"]["shared_transformer"] is True
    weights = {t["kind"]: t.get("weight", 1.0) for t in cfg["loss"]["terms"]}
    assert weights == {"label_logistic": 1.0, "masked_prediction": lam}
    con = api.experiment_config("label_wise", dataset, variants=["consistency"])
    assert {t["kind"]: t.get("weight", 1.0) for t in con["loss"]["terms"]} == {**weights, "consistency": 0.1}


def test_validation_runs_the_protocols_its_selection_and_label_head_need():
    """Every epoch's validation: retrieval for every model, the shared-label ranking when the
    selection metric ranks by shared labels or the model has a label head, micro-F1 with a label head."""
    from methods.config import load_schema
    from methods.metrics.declarations import RETRIEVAL_METRICS
    from methods.metrics.protocols import validation_protocols

    def names(selection, predicts_labels):
        return [p.name for p in validation_protocols(selection, predicts_labels)]

    assert names("rsum", False) == names("r1_r5_sum", False) == names("last", False) == ["validation_retrieval"]
    assert names("ndcg500_sum", False) == ["validation_retrieval", "validation_label_ranking"]
    assert names("rsum", True) == names("ndcg500_sum", True) == \
        ["validation_retrieval", "validation_label_ranking", "validation_label_prediction"]
    # what train_log.json records per epoch for a label-wise model, in this order
    assert [m for p in validation_protocols("ndcg500_sum", True) for m in p.metrics] == \
        [*RETRIEVAL_METRICS, *LABEL_RANKING_METRICS, "ndcg500_sum", *LABEL_PREDICTION_METRICS]
    schema = load_schema("method")["properties"]["training"]["properties"]["selection_metric"]["enum"]
    for selection in schema:              # each selection metric the schema accepts is computed
        validation_protocols(selection, False)
    with pytest.raises(HarnessError, match="training.selection_metric: no validation protocol computes map_r_ext_sum"):
        validation_protocols("map_r_ext_sum", False)


def test_validation_gives_each_caption_its_images_labels_and_joins_the_label_predictions():
    from methods.metrics.evaluation import evaluate_split, label_prediction_relevance
    from methods.metrics.protocols import VALIDATION_PROTOCOLS
    from methods.metrics.relevance_builders import ItemsInOrder, build_relevances

    def relevance(protocol, tpi, labels=None):
        return build_relevances([protocol], ItemsInOrder(tpi, labels))[protocol.relevance_key]

    retrieval, ranking, prediction = (v.protocol for v in VALIDATION_PROTOCOLS)
    labels = np.array([[1, 0, 1], [0, 0, 0], [0, 1, 0]], dtype=np.uint8)
    assert relevance(retrieval, 5).captions_per_image == 5
    shared = relevance(ranking, 2, labels)
    np.testing.assert_array_equal(shared.text_labels, [[1, 0, 1], [1, 0, 1], [0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 1, 0]])
    assert (shared.tie_order, shared.ndcg_discount) == ("against_model", "rank")
    image_scores, text_scores = np.full((3, 3), 0.9), np.full((6, 3), 0.1)
    joined = label_prediction_relevance(relevance(prediction, 2, labels), (image_scores, text_scores))
    assert joined.kind == "label_predictions"
    with pytest.raises(HarnessError, match="protocol validation_label_ranking needs labels, but the images have none"):
        relevance(ranking, 2, None)
    # a model without label predictions: its evaluation leaves the label-prediction protocol out
    relevances = build_relevances([ranking, prediction], ItemsInOrder(2, labels))
    scores = np.random.default_rng(0).random((3, 6))
    assert [r["protocol"] for r in evaluate_split(scores, [ranking, prediction], "dev", relevances)] == [ranking.name]
    assert [r["protocol"] for r in evaluate_split(scores, [ranking, prediction], "dev", relevances,
                                                  predictions=(image_scores, text_scores))] == [ranking.name,
                                                                                               prediction.name]
