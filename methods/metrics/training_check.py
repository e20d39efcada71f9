"""Did a run's model learn? A check per evaluated protocol, and the verdicts drawn from it.

Evaluation measures, per protocol that declares a main metric (``Protocol.main_metric``), and
writes into the protocol's result of ``eval_<split>.json`` as ``training_check``:

- ``main_metric``, its ``value``, its ``chance`` (its expected value under random scores, in
  closed form: ``methods.metrics.evaluation.MAIN_METRIC_CHANCE``) and its ``max``;
- ``gain_share`` = (value − chance) / (max − chance): the share of the way from chance to perfect;
- ``score_spread``: the median over queries (each image over its texts, each text over its images)
  of the range of the query's scores, relative to the largest |score| of the matrix: how far the
  matrix is from constant, whatever the scale of the model's scores.

No threshold enters the measurement: the verdicts are drawn where the thresholds are passed
(``training_check`` of the harness config, in the table and claims specs), so a change of threshold
rebuilds tables, claims and reports, not the runs. A run did not train when its gain share is below
``min_gain_share`` or its score spread below ``min_score_spread``. A row did not train when one of
its runs did (an ensemble: its own matrix, or one of its members); its check is unknown when an
evaluation carries none (written before the check), which is never read as trained.

A metric value is saturated when it is within ``saturated_share`` of the metric's best value (at
least 99 % of 100 for a percentage): a column or a claim whose every compared value is saturated
cannot tell the rows apart.

numpy only (no torch): tables, claims and reports draw the verdicts from JSON.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

TRAINED, NOT_TRAINED, UNKNOWN = "trained", "did not train", "unknown"


def score_spread(scores: np.ndarray) -> float:
    """Median over the queries (rows and columns) of each one's score range, relative to the
    largest |score| of the matrix; 0 for an all-zero matrix."""
    scores = np.asarray(scores)
    scale = float(max(scores.max(), -scores.min()))   # max |s| without an |s| copy of a COCO-sized matrix
    if scale == 0.0:
        return 0.0
    ranges = np.concatenate([np.ptp(scores, axis=1), np.ptp(scores, axis=0)]).astype(np.float64)
    return float(np.median(ranges) / scale)


def gain_share(value: float, chance: float, maximum: float) -> float:
    """(value − chance) / (maximum − chance): 0 at chance, 1 at the maximum, negative below chance."""
    return (value - chance) / (maximum - chance)


def measure(main_metric: str, value: float, chance: float, maximum: float, scores: np.ndarray) -> dict:
    """The ``training_check`` entry of one protocol's result."""
    return {"main_metric": main_metric, "value": float(value), "chance": float(chance), "max": float(maximum),
            "gain_share": float(gain_share(value, chance, maximum)), "score_spread": score_spread(scores)}


@dataclass(frozen=True)
class TrainingThresholds:
    """``training_check`` of the harness config."""
    min_gain_share: float       # a run below this share of the way from chance to perfect did not train
    min_score_spread: float     # a run whose score spread is below this did not train (near-constant scores)
    saturated_share: float      # a value within this share of its metric's best is saturated

    @classmethod
    def from_config(cls, section: dict) -> "TrainingThresholds":
        return cls(float(section["min_gain_share"]), float(section["min_score_spread"]),
                   float(section["saturated_share"]))


def failures(check: dict, thresholds: TrainingThresholds) -> list[str]:
    """Why a protocol's check says the run did not train (empty: it trained)."""
    out = []
    if check["gain_share"] < thresholds.min_gain_share:
        out.append(f"{check['main_metric']} {check['value']:.1f} vs chance {check['chance']:.1f} (max {check['max']:g}): "
                   f"{check['gain_share']:.1%} of the way from chance to the max, below {thresholds.min_gain_share:.0%}")
    if check["score_spread"] < thresholds.min_score_spread:
        out.append(f"near-constant scores (relative spread {check['score_spread']:.1e}, below "
                   f"{thresholds.min_score_spread:.0e})")
    return out


@dataclass(frozen=True)
class RowTraining:
    status: str     # TRAINED, NOT_TRAINED or UNKNOWN
    reason: str     # what did not train (seed, protocol, member, main metric vs chance), or why unknown; "" if trained


def row_training(entries: list[dict] | None, checked_protocols: set[str], thresholds: TrainingThresholds) -> RowTraining:
    """A row's verdict from its aggregate's ``training_checks`` (``methods.report.aggregate``: one
    entry per run and protocol, an ensemble's with its members' checks), over the protocols that
    have a check (``checked_protocols``): did not train when any run or member did not; unknown
    when none did not and some check is missing; None: an aggregate written before the check."""
    if entries is None:
        return RowTraining(UNKNOWN, "its aggregate was written before the training check: re-aggregate it")
    failed, missing = [], []
    for entry in entries:
        if entry["protocol"] not in checked_protocols:
            continue
        runs = [(f"seed {entry['seed']} {entry['protocol']}", entry["check"])]
        runs += [(f"seed {entry['seed']} member {Path(m['run_dir']).parent.name} (seed {m['seed']}) {entry['protocol']}",
                  m["check"]) for m in entry.get("members") or []]
        for where, check in runs:
            if check is None:
                missing.append(where)
            else:
                failed += [f"{where}: {why}" for why in failures(check, thresholds)]
    if failed:
        return RowTraining(NOT_TRAINED, "; ".join(failed))
    if missing:
        return RowTraining(UNKNOWN, "no training check in the evaluation of " + ", ".join(missing)
                           + " (written before the check: re-evaluate)")
    return RowTraining(TRAINED, "")


def saturated(value: float, best: float | None, direction: str, share: float) -> bool:
    """``value`` within ``share`` of the metric's best: at least share × best (higher is better,
    e.g. R@10 >= 99 of 100), at most best / share (lower is better: a median rank of 1)."""
    if best is None:
        return False
    return value >= share * best if direction == "higher" else value <= best / share
