"""Verdicts, seed aggregation, ensembles and the batch positive mask."""
import numpy as np
import pytest
import torch

from methods.scoring import average_similarities
from methods.job_records import RunEvaluation
from methods.report.aggregate import aggregate
from methods.report.verdicts import verdict
from methods.data.inputs import CachedImageFeatures
from methods.training.data import PairCollator, make_train_dataset
from methods.training.schedule import lr_at
from tests.records import run_evaluation


def test_verdicts():
    assert verdict(52.0, 52.9, None, 1, 1, 2.0) == "within"
    assert verdict(50.0, 52.9, None, 1, 1, 2.0) == "outside"
    assert verdict(52.9, 52.9, "synthetic data", 1, 1, 2.0) == "not comparable (synthetic data)"
    assert verdict(52.9, 52.9, "smoke run", 1, 1, 2.0) == "not comparable (smoke run)"
    assert verdict(70.0, 71.3, None, 1, 2, 2.0) == "not comparable (ensemble of 2 vs 1)"
    assert verdict(70.0, None, None, 1, None, 2.0) == "not reported"


def _eval(seed, r1):
    metrics = {k: 0.0 for k in ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum",
                                "i2t_medr", "i2t_meanr", "t2i_medr", "t2i_meanr")}
    metrics["i2t_r1"] = r1
    return RunEvaluation.from_json(run_evaluation(seed, [{"protocol": "f30k_1k", "metrics": metrics}], "abc"), "test")


def test_aggregate_mean_and_population_std():
    agg = aggregate([_eval(0, 40.0), _eval(1, 44.0), _eval(2, 48.0)]).to_json()
    cell = agg["protocols"]["f30k_1k"]["i2t_r1"]
    assert cell["mean"] == 44.0 and cell["std"] == pytest.approx(np.sqrt(32 / 3))
    assert agg["seeds"] == [0, 1, 2] and agg["config_hashes"] == ["abc"]


def test_ensemble_averages_similarity_matrices(tmp_path):
    a, b = np.random.default_rng(0).normal(size=(2, 4, 20)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    np.testing.assert_allclose(average_similarities([tmp_path / "a.npy", tmp_path / "b.npy"]), (a + b) / 2, rtol=1e-6)


def test_collator_same_image_marks_every_caption_of_a_repeated_image_positive():
    items = [(3, [1, 5, 2], None, None), (7, [1, 6, 6, 2], None, None), (3, [1, 2], None, None)]
    pooled = np.arange(40, dtype=np.float32).reshape(10, 4)
    batch = PairCollator(CachedImageFeatures(pooled), "same_image")(items)
    assert batch["image_index"].tolist() == [3, 7]
    assert batch["positives"].tolist() == [[True, False, True], [False, True, False]]
    assert torch.equal(batch["features"], torch.from_numpy(pooled[[3, 7]]))
    assert batch["lengths"].tolist() == [3, 4, 2] and batch["tokens"][2].tolist() == [1, 2, 0, 0]


def test_collator_diagonal_keeps_one_image_row_per_caption_as_the_public_code():
    # captions 0 and 2 share image 3: two identical image rows, each positive only with its own caption
    items = [(3, [1, 5, 2], None, None), (7, [1, 6, 6, 2], None, None), (3, [1, 2], None, None)]
    pooled = np.arange(40, dtype=np.float32).reshape(10, 4)
    batch = PairCollator(CachedImageFeatures(pooled), "diagonal")(items)
    assert batch["image_index"].tolist() == [3, 7, 3]
    assert batch["positives"].tolist() == [[True, False, False], [False, True, False], [False, False, True]]
    assert torch.equal(batch["features"], torch.from_numpy(pooled[[3, 7, 3]]))
    # the hardest-negative triplet then sees the repeated image row as a negative at the positive's score
    from methods.losses.triplet import triplet_hardest
    scores = torch.tensor([[0.9, 0.1, 0.8], [0.2, 0.7, 0.3], [0.9, 0.1, 0.8]])
    # image rows as queries: row 0's hardest negative is caption 2 (0.8): 0.2 - 0.9 + 0.8 = 0.1, and so on
    want = max(0, 0.2 - 0.9 + 0.8) + max(0, 0.2 - 0.7 + 0.3) + max(0, 0.2 - 0.8 + 0.9)
    assert float(triplet_hardest(scores, batch["positives"], margin=0.2)) == pytest.approx(want)
    with pytest.raises(ValueError, match="same_image"):
        PairCollator(CachedImageFeatures(pooled), "diagonal")([[(3, [1, 2], None, None)] * 2])


def test_image_batches_hold_each_image_with_all_five_captions():
    from methods.data.text import Vocabulary
    from methods.data.tokenizers import Tokenizer

    captions = [f"image {i} caption {j}" for i in range(4) for j in range(5)]
    vocab = Vocabulary.build(captions, threshold=1, tokenizer=Tokenizer("nltk_line"))
    regions = np.arange(4 * 5 * 3 * 2, dtype=np.float32).reshape(20, 3, 2)  # one row per caption (old files)
    dataset = make_train_dataset("images", captions, vocab, 5, None)
    assert len(dataset) == 4
    batch = PairCollator(CachedImageFeatures(regions, step=5), "same_image")([dataset[2], dataset[0]])
    assert batch["image_index"].tolist() == [0, 2]
    # image 0 owns the last five captions of the batch, image 2 the first five
    assert batch["positives"].tolist() == [[False] * 5 + [True] * 5, [True] * 5 + [False] * 5]
    assert torch.equal(batch["features"], torch.from_numpy(regions[[0, 10]]))
    assert batch["tokens"].shape[0] == 10


def test_step_and_cosine_schedules():
    step = {"lr": 2e-4, "epochs": 30, "schedule": {"kind": "step", "decay_epochs": [15], "gamma": 0.1}}
    assert lr_at(step, 14) == 2e-4 and lr_at(step, 15) == pytest.approx(2e-5)
    cos = {"lr": 1.0, "epochs": 10, "schedule": {"kind": "cosine"}}
    assert lr_at(cos, 0) == 1.0 and lr_at(cos, 5) == pytest.approx(0.5)


def test_selection_metrics():
    from methods.training.loop import selection_value

    m = {"i2t_r1": 10.0, "i2t_r5": 20.0, "i2t_r10": 30.0, "t2i_r1": 1.0, "t2i_r5": 2.0, "t2i_r10": 3.0}
    assert selection_value(m, "rsum") == 66.0
    assert selection_value(m, "r1_r5_sum") == 33.0  # VSRN: R@10 left out
