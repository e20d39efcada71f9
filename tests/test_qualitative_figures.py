"""Qualitative figures mark what is true: a retrieved caption or image is a match under the
dataset's relevance (on synthetic data the generator's extended positives, on real caption data
an image's own captions), and the SAF-weights figure draws a run only when it trained."""
import dataclasses
import json
import re
import shutil

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from methods.data.datasets import DatasetPayload  # noqa: E402
from methods.data.text import SPECIALS, Vocabulary  # noqa: E402
from methods.data.tokenizers import Tokenizer  # noqa: E402
from methods.errors import HarnessError  # noqa: E402
from methods.metrics.training_check import TrainingThresholds  # noqa: E402
from methods.models.sgraf import SGRAF  # noqa: E402
from methods.models.text import GRUTextEncoder  # noqa: E402
from methods.report.paper_figures import extended_positives  # noqa: E402
from methods.report.retrieval_examples import image_retrieval_figure, text_retrieval_figure  # noqa: E402
from methods.report.saf_weights import (pick_pairs, rank_of, run_check, saf_weights_figure,  # noqa: E402
                                        score_digits)
from methods.job_records import FigureSpec, RunEvaluation  # noqa: E402
from tests.conftest import REPO, copy_workflow, snakemake  # noqa: E402
from tests.records import run_evaluation  # noqa: E402

SPEC = FigureSpec.from_json({
    "figure": "fig", "kind": "saf_weights", "title": "T", "dataset": "synthetic", "table": "t", "dataset_kind": "synthetic",
    "protocols": ["synthetic_test"], "row": "r", "run": "results/synthetic/runs/x/seed0", "split": "test",
    "rows": [{"id": "r", "label": "R", "model": "sgraf", "method": "sgraf", "loss": "triplet_hardest", "seeds": [0],
              "ensemble_size": 1, "runs": ["results/synthetic/runs/x/seed0"], "ran": ""}]}, "test")
THRESHOLDS = TrainingThresholds(min_gain_share=0.05, min_score_spread=1e-4, saturated_share=0.99)
GREEN, RED = matplotlib.colors.to_rgba("tab:green"), matplotlib.colors.to_rgba("tab:red")

# Three images, two captions each (caption k of image k // 2). Caption 4, written for image 2, is
# the same sentence as caption 0 of image 0 and true of both images; caption 1 is true of image 0
# only, caption 5 of image 2 only; images 1's captions only of image 1.
CAPTIONS = ["a red disc on the left", "a red disc on a grey background", "a blue square at the top",
            "a big blue square", "a red disc on the left", "a green bar at the bottom"]
POSITIVES = np.array([[1, 1, 0, 0, 1, 0],
                      [0, 0, 1, 1, 0, 0],
                      [1, 0, 0, 0, 1, 1]], dtype=bool)
# image 0 ranks caption 4 first, then 0, 2, 5, 1, 3; caption 0 ranks image 2 first, then 1, 0
SIMS = np.array([[0.8, 0.5, 0.7, 0.1, 0.9, 0.6],
                 [0.9, 0.2, 0.3, 0.4, 0.5, 0.6],
                 [0.95, 0.1, 0.2, 0.3, 0.4, 0.5]])
IMAGE0_ORDER = [4, 0, 2, 5, 1]
CAPTION0_ORDER = [2, 1, 0]
IMAGES = [np.zeros((8, 8, 3), dtype=np.uint8)] * 3


def text_marks(fig, row: int) -> list[tuple[str, tuple]]:
    """(✓ or ✗, colour) of each ranked caption of query row ``row`` (its axes: the second of the row)."""
    texts = sorted(fig.axes[2 * row + 1].texts, key=lambda t: -t.get_position()[1])   # rank 1 on top
    return [(t.get_text().split()[1], matplotlib.colors.to_rgba(t.get_color())) for t in texts]


def test_another_images_caption_that_describes_the_query_is_a_match():
    fig = text_retrieval_figure(SPEC, SIMS, CAPTIONS, 2, IMAGES, positives=POSITIVES)
    expected = [POSITIVES[0, c] for c in IMAGE0_ORDER]   # [True, True, False, False, True]
    assert text_marks(fig, 0) == [("✓", GREEN) if e else ("✗", RED) for e in expected]
    assert "(caption of image 2)" in sorted(fig.axes[1].texts, key=lambda t: -t.get_position()[1])[0].get_text()
    assert "the caption describes the image (generator's predicates" in fig._suptitle.get_text()


def test_on_real_caption_data_only_the_images_own_captions_are_matches():
    fig = text_retrieval_figure(dataclasses.replace(SPEC, dataset="flickr", dataset_kind="karpathy"), SIMS, CAPTIONS, 2, IMAGES)
    expected = [c in (0, 1) for c in IMAGE0_ORDER]   # image 0's own captions: 0 and 1
    assert text_marks(fig, 0) == [("✓", GREEN) if e else ("✗", RED) for e in expected]
    assert "one of the image's own 2 captions" in fig._suptitle.get_text()


@pytest.mark.parametrize("positives, expected", [
    (POSITIVES, [POSITIVES[i, 0] for i in CAPTION0_ORDER]),   # caption 0 describes images 0 and 2
    (None, [i == 0 for i in CAPTION0_ORDER]),                  # Karpathy: its own image 0 only
])
def test_image_figure_outlines_every_image_the_caption_describes(positives, expected):
    fig = image_retrieval_figure(SPEC, SIMS, CAPTIONS, 2, IMAGES, positives=positives, top=3)
    # caption queries spread over the 6 captions: 0 first, its top-3 images in the first row
    outlines = [matplotlib.colors.to_rgba(ax.spines["left"].get_edgecolor()) for ax in fig.axes[:3]]
    assert outlines == [GREEN if e else RED for e in expected]
    assert [ax.get_xlabel().split(":")[1].split()[1] for ax in fig.axes[:3]] == [str(i) for i in CAPTION0_ORDER]


def test_extended_positives_come_from_the_generators_file(tmp_path):
    """The matrix the figures mark with, read from a positives file keyed by sentid, is the
    hand-written one, in the score matrix's order; a split the file does not match fails."""
    images = [{"filename": f"{i}.png", "split": "test", "imgid": 10 + i,
               "sentences": [{"raw": CAPTIONS[2 * i + j], "sentid": 100 + 2 * i + j} for j in range(2)]}
              for i in range(3)]
    images.insert(0, {"filename": "t.png", "split": "train", "imgid": 9, "sentences": [{"raw": "x", "sentid": 99}] * 2})
    (tmp_path / "karpathy.json").write_text(json.dumps({"images": images}))
    caption_images = {str(100 + k): [10 + i for i in range(3) if POSITIVES[i, k]] for k in range(6)}
    (tmp_path / "positives.json").write_text(json.dumps({"dataset": "x", "definition": "d",
                                                         "splits": {"test": {"caption_images": caption_images}}}))
    payload = DatasetPayload("x", {"splits": {"test": ["test"]}, "texts_per_image": 2},
                             {"karpathy_json": str(tmp_path / "karpathy.json"), "positives": str(tmp_path / "positives.json")})
    assert (extended_positives(payload, SPEC, SIMS) == POSITIVES).all()
    with pytest.raises(HarnessError, match=r"3 images x 6 captions, .*sims_test.npy scores 3 x 4"):
        extended_positives(payload, SPEC, SIMS[:, :4])
    assert extended_positives(dataclasses.replace(payload, paths={**payload.paths, "positives": None}), SPEC, SIMS) is None


def figure_inputs(out: str, figure: str) -> list[str]:
    """The inputs a dry run lists for the job writing ``figure``."""
    for block in out.split("\nrule ")[1:]:
        if re.search(rf"^\s+output: {re.escape(figure)}$", block, re.M):
            return re.search(r"^\s+input: (.*)$", block, re.M).group(1).split(", ")
    raise AssertionError(f"no job writes {figure}:\n{out[-3000:]}")


def test_retrieval_figure_jobs_read_the_positives_file_where_the_dataset_has_one(tmp_path):
    work = copy_workflow(tmp_path)
    shutil.copy(REPO / "tests" / "data" / "tiny.yaml", work / "tiny.yaml")
    targets = ["figures/mvsa_text_retrieval_synthetic.png", "figures/sgraf_saf_weights_synthetic.png",
               "figures/label_tiny_texts_synthtags.png"]
    proc = snakemake(work, "-n", "--configfile=tiny.yaml", *targets)
    out = proc.stdout + proc.stderr
    for figure in targets[:2]:
        assert "results/synthetic/data/positives_synthetic.json" in figure_inputs(out, figure)
    assert not any("positives" in f for f in figure_inputs(out, targets[2]))   # synthtags has none


# -- SAF weights -----------------------------------------------------------------------------------

REGIONS, REGION_DIM, EMBED, SIM = 5, 12, 10, 6
# the planted split grown to 12 images (the chance RSUM needs at least 10 captions): images 3-11
# each described by their own two captions only
N = 12
SAF_CAPTIONS = CAPTIONS + [f"a white bar number {i}" for i in range(6, 2 * N)]
SAF_POSITIVES = np.zeros((N, 2 * N), dtype=bool)
SAF_POSITIVES[:3, :6] = POSITIVES
SAF_POSITIVES[np.arange(3, N).repeat(2), np.arange(6, 2 * N)] = True
OWN = np.kron(np.eye(N), np.ones((1, 2)))   # 1 for an image's own captions
WORDS = sorted({w for c in SAF_CAPTIONS for w in c.split()})


class Regions:
    def __init__(self, n: int):
        self.x = torch.randn(n, REGIONS, REGION_DIM, generator=torch.Generator().manual_seed(0))

    def take(self, indices):
        return self.x[torch.as_tensor(indices)].numpy()   # as CachedImageFeatures.take: an array


def saf_model() -> SGRAF:
    torch.manual_seed(0)
    text = GRUTextEncoder(len(SPECIALS) + len(WORDS), 8, EMBED, bidirectional=True, embed_dropout=0.4)
    return SGRAF(REGION_DIM, REGIONS, EMBED, SIM, text, heads=["saf"]).eval()


def draw_saf(sims, ev, positives=None):
    """The SAF figure of a run whose evaluation has ``ev``'s results and whose test scores are ``sims``."""
    check = run_check(RunEvaluation.from_json(run_evaluation(0, ev["results"]), "test"), sims, 2, THRESHOLDS)
    fig = saf_weights_figure(SPEC, saf_model(), Regions(N), SAF_CAPTIONS, 2, Vocabulary([*SPECIALS, *WORDS], Tokenizer("nltk_line")), sims,
                             check, positives=positives)
    return check, fig


def figure_words(fig) -> str:
    return " ".join([fig._suptitle.get_text()] + [t.get_text() for ax in fig.axes for t in ax.texts])


def test_a_run_with_constant_scores_is_said_not_to_have_trained():
    """An evaluation written before the training check: judged on its scores' RSUM against chance."""
    check, fig = draw_saf(np.full((N, 2 * N), 0.43), {"results": [{"protocol": "synthetic_test", "metrics": {}}]})
    assert not check.trained and "near-constant scores" in check.reason
    words = figure_words(fig)
    assert "Row r did not train" in words and "none are drawn" in words
    assert not any(ax.patches for ax in fig.axes)   # no bars


@pytest.mark.parametrize("training_check, reason", [
    ({"main_metric": "rsum", "value": 16.1, "chance": 15.9, "max": 600.0, "trained": False,
      "reason": "rsum 16.1 vs chance 15.9"}, "rsum 16.1 vs chance 15.9"),   # the evaluation's own verdict
    ({"main_metric": "rsum", "value": 20.0, "chance": 15.9, "max": 600.0, "gain_share": (20 - 15.9) / (600 - 15.9),
      "score_spread": 0.5}, "of the way from chance"),                       # judged with the thresholds
])
def test_the_evaluations_training_check_decides(training_check, reason):
    ev = {"results": [{"protocol": "synthetic_test", "metrics": {}, "training_check": training_check}]}
    # scores that rank perfectly: only the check, not the matrix, can say the run did not train
    check, fig = draw_saf(OWN + 0.1, ev)
    assert not check.trained and reason in check.reason and "vs chance 15.9" in check.summary
    assert "did not train" in figure_words(fig) and not any(ax.patches for ax in fig.axes)


def test_a_trained_run_gets_panels_of_its_true_and_hardest_false_caption():
    sims = OWN + np.linspace(0, 0.01, 2 * N * N).reshape(N, 2 * N)
    sims[0] = 0
    sims[0, :6] = SIMS[0]   # image 0: caption 4 (true of it, written for image 2) best, caption 2 best of the rest
    check, fig = draw_saf(sims, {"results": [{"protocol": "synthetic_test", "metrics": {}}]}, positives=SAF_POSITIVES)
    assert check.trained
    bars = [ax for ax in fig.axes if ax.patches]
    assert len(bars) == 6   # three images, a matched and a mismatched caption each
    # the nodes: the global one, then <start>, the caption's words, <end>
    assert [t.get_text() for t in bars[0].get_xticklabels()] == ["<global>", "<start>", *CAPTIONS[4].split(), "<end>"]
    assert bars[0].get_title().startswith("image 0, matched (caption of image 2)")
    assert bars[1].get_title().startswith("image 0, mismatched (caption of image 1)") and "rank 3/24" in bars[1].get_title()
    assert "the run trained" in fig._suptitle.get_text()


def test_pairs_picked_by_relevance():
    # image 0: true captions {0, 1, 4} with positives, {0, 1} without; best true, then best other
    assert pick_pairs(SIMS, 1, 2, POSITIVES) == [(0, 4, 2)]
    assert pick_pairs(SIMS, 1, 2) == [(0, 0, 4)]
    # an image every caption describes has no mismatch: the next image is drawn instead
    assert pick_pairs(SIMS, 1, 2, np.vstack([np.ones(6, dtype=bool), POSITIVES[1:]]))[0][0] == 1


def test_printed_scores_tell_close_scores_apart_and_ranks_break_ties_by_index():
    close = [0.334269, 0.334281]   # a SAF head near its plateau: 3 decimals print both as 0.334
    digits = score_digits(close)
    assert f"{close[0]:.{digits}f}" != f"{close[1]:.{digits}f}" and score_digits([0.2, 0.7]) == 3
    assert rank_of(np.array([0.5, 0.7, 0.5, 0.2]), 2) == 3 and rank_of(np.array([0.5, 0.7, 0.5, 0.2]), 0) == 2
