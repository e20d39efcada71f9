"""Check a paper's claims on one dataset: ``tables/claims_<paper>_<dataset>.csv`` (+ ``.md``).

A claim (``claims`` in a paper file, ``methods.report.claim_form``) says that one row, or the mean
of several rows, of a table is above another on one metric; or that one row is the best of a set,
or within the k best (above the best, or k-th best, of the others, named in ``rival``; ``p_holds``:
the share of resamples in which it is; the paper's printed numbers of the set, its ``printed_rows``
included, judged apart in ``printed_verdict``); or that two sides are equivalent within a bound
(``|a.m - b.m| <= d``: supported when the interval lies inside ±d, the two one-sided tests of TOST
at the level of the other verdicts; contradicted when it lies wholly outside). A claim with a
compared row that the harness does not run is ``undetermined: <row> is reported only``, with the
paper's own difference, and is never judged on printed numbers. For every protocol of the dataset
that reports the metric, this job

- scores each compared row on the test split from its runs' score matrices (``sims_<split>.npy``;
  an ensemble averages its members' matrices for each seed, as its table row does; an evaluation
  view reads its own ``sims_<split>@<view>.npy``), as per-image units
  (``methods.metrics.query_units``), averaged over the row's seeds;
- takes the difference (left − right) of the seed-mean metric, its spread over seeds (the rows'
  per-seed differences, when the rows share their seeds), and its interval from a paired
  bootstrap over the test images, each resampled with all its texts (``methods.report.bootstrap``:
  scipy, BCa by default, seeded; ``claims`` in the harness config);
- gives the verdict: ``supported`` when the interval lies above the claimed margin (0 unless the
  claim sets one), ``contradicted`` when below, else ``inconclusive`` (``undetermined``: no
  interval); ``undetermined: <rows> did not train`` whatever the interval when a compared row did
  not train (its aggregate's training checks, judged with the spec's ``training_check`` thresholds:
  ``methods.metrics.training_check``), and ``undetermined: saturated`` when every compared row's
  value is within ``saturated_share`` of the metric's best; on synthetic data the verdict says so (a
  claim about Flickr30K is not tested by a synthetic stand-in). The seeds' spread is shown, not part
  of the verdict; a row whose training was not checked (evaluations written before the check) is
  named in ``training_check``;
- puts the paper's own difference beside it where the rows' reported numbers give both sides
  (on a stand-in dataset, those of the dataset it stands in for).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from methods.cli import run_command
from methods.data.datasets import DatasetPayload, load_dataset_payload
from methods.errors import HarnessError
from methods.io import load_npy, write_text
from methods.job_records import ClaimSpec, ClaimsRowSpec, ClaimsSpec, RowAggregate, RunEvaluation
from methods.metrics import evaluation  # noqa: F401  (registers every metric's implementation)
from methods.metrics.declarations import METRICS, base_metrics, is_pooled, value_from
from methods.metrics.relevance_builders import KarpathySplitItems, build_relevances
from methods.metrics.protocols import CHECKED_PROTOCOLS, dataset_protocol, get_protocol
from methods.metrics.query_units import QueryUnits, protocol_units, units_from_record
from methods.metrics.training_check import (NOT_TRAINED, UNKNOWN, RowTraining, TrainingThresholds, row_training,
                                            saturated)
from methods.report.bootstrap import claim_verdict, mean_over_seeds, paired_difference_interval, reduce_rows
from methods.report.claim_form import parse_reduction
from methods.report.cells import escape_cell, number, ours_difference
from methods.report.wording import INCOMPARABLE_DATA, data_caveat
from methods.scoring import average_similarities

COLUMNS = ("paper", "dataset", "data", "claim", "words", "paraphrased", "where", "table", "compare", "margin",
           "bound", "rank", "protocol", "metric", "left_rows", "right_rows", "left_reproduced", "right_reproduced",
           "reproduced_difference", "difference_seed_std", "seeds_above_margin", "p_holds", "rival", "n_seeds", "seeds", "ci_low",
           "ci_high", "confidence", "interval_method", "n_resamples", "bootstrap_seed", "n_images", "reported_dataset",
           "left_reported", "right_reported", "reported_difference", "reported_sources", "printed_rows", "printed_verdict",
           "untrained_rows", "saturated",
           "training_check", "verdict")
DIGITS = 4


class RowScores:
    """The per-image units of the compared rows, per protocol and seed (each score matrix loaded once)."""

    def __init__(self, spec: ClaimsSpec, payload: DatasetPayload):
        self.spec, self.payload = spec, payload
        self._relevances: dict[tuple[str, str], object] = {}   # (split, relevance key) -> relevance
        self.units: dict[tuple[str, str], list[QueryUnits]] = {}   # (row key, protocol) -> one per seed
        for key, row in spec.rows.items():
            metrics = sorted({c.metric for c in spec.claims if c.table == row.table and not c.reported_only
                              and row.id in c.left + c.right})
            by_split: dict[str, list[str]] = {}
            for protocol in row.scores:
                by_split.setdefault(get_protocol(protocol).split, []).append(protocol)
            for split, protocols in by_split.items():
                for seed_index in range(len(row.seeds)):
                    scores = self._scores(row.scores[protocols[0]][seed_index])
                    for protocol in protocols:
                        wanted = [m for m in metrics if set(base_metrics(m)) <= set(get_protocol(protocol).metrics)]
                        self.units.setdefault((key, protocol), []).append(protocol_units(
                            scores, dataset_protocol(protocol, payload.dataset), self._relevance(split, protocol),
                            wanted))
            for protocol, files in row.evaluations.items():   # pooled metrics: the units evaluation stored
                wanted = [m for m in metrics if set(base_metrics(m)) <= set(get_protocol(protocol).metrics)]
                self.units[(key, protocol)] = [stored_units(f, protocol, wanted, row.id) for f in files]

    def _relevance(self, split: str, protocol: str):
        """The protocol's relevance on its split (built once per kind: only those the claims need)."""
        kind = get_protocol(protocol).relevance_key
        if (split, kind) not in self._relevances:
            items = KarpathySplitItems(self.payload, split)
            self._relevances[(split, kind)] = build_relevances([get_protocol(protocol)], items)[kind]
        return self._relevances[(split, kind)]

    @staticmethod
    def _scores(files: list[str]) -> np.ndarray:
        """One seed's score matrix: the run's, or the mean of an ensemble's members' (as ``methods.ensemble``)."""
        return np.array(load_npy(files[0])) if len(files) == 1 else average_similarities([Path(f) for f in files])


def stored_units(path: str, protocol: str, metrics: list[str], row_id: str) -> QueryUnits:
    """The per-image units of ``metrics`` that a run's evaluation (``eval_<split>.json``) stored
    under ``protocol``: a label head's micro-F1 (``methods.metrics.query_units.units_record``)."""
    results = [r for r in RunEvaluation.read(path).results if r["protocol"] == protocol]
    if not results:
        raise HarnessError(f"{path}: row {row_id} has no {protocol} result: its model makes no label predictions, "
                           f"so a claim on {', '.join(metrics)} cannot compare it")
    return units_from_record(results[0].get("units"), metrics, f"{path}: {protocol}")


def reported_value(numbers: dict, protocol: str, metric: str) -> tuple[float | None, str | None]:
    """A row's reported metric under a protocol (a sum such as RSUM from its parts) from its reported
    ``numbers`` (protocol -> source, metrics), and its source."""
    reported = numbers.get(protocol)
    if not reported:
        return None, None
    metrics = reported["metrics"]
    if metric in metrics:   # as printed (a printed RSUM may differ from the sum of the printed recalls)
        return float(metrics[metric]), reported["source"]
    try:
        return value_from(metrics, metric), reported["source"]
    except KeyError:
        return None, reported["source"]


def rows_training(spec: ClaimsSpec) -> dict[str, RowTraining]:
    """Whether each compared row trained, from its aggregate's training checks (``methods.report.aggregate``)."""
    thresholds = TrainingThresholds.from_config(spec.training_check)
    return {key: row_training(RowAggregate.read(row.aggregate).training_checks, CHECKED_PROTOCOLS, thresholds)
            for key, row in spec.rows.items()}


def printed_verdict(claim: ClaimSpec, protocol: str, rows: dict[str, ClaimsRowSpec]) -> str:
    """A best-of-set or rank claim on the paper's printed numbers of every row of its set, those it
    compares on printed numbers only included: whether the claimed row is printed above the best (or
    k-th best) of the others; empty for other claims."""
    if claim.best is None:
        return ""
    numbers = {**{r: rows[f"{claim.table}/{r}"].reported for r in claim.left + claim.right}, **claim.printed}
    values = {r: reported_value(n, protocol, claim.metric)[0] for r, n in numbers.items()}
    missing = sorted(r for r, v in values.items() if v is None)
    if len(missing) == len(values):   # e.g. a COCO 5K table on a stand-in for Flickr30K
        return f"not stated: no row has a printed {claim.metric} under {protocol}"
    if missing:
        return f"not stated: no printed {claim.metric} under {protocol} for {', '.join(missing)}"
    others = {r: v for r, v in values.items() if r != claim.best}
    higher = METRICS.get(claim.metric).direction == "higher"
    k = claim.rank or 1
    rival = sorted(others, key=others.get, reverse=higher)[k - 1]
    holds = values[claim.best] > others[rival] if higher else values[claim.best] < others[rival]
    which = "best of the others" if k == 1 else f"{ordinal(k)} best of the others"
    return (f"{'holds' if holds else 'does not hold'} on the printed numbers of {len(values)} rows: "
            f"{claim.best} {values[claim.best]:g}, {which} {rival} {others[rival]:g}")


def ordinal(k: int) -> str:
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def reported_only_record(claim: ClaimSpec, spec: ClaimsSpec, protocol: str) -> dict:
    """A claim with a side the harness does not run: no interval, no verdict but ``undetermined``
    with the reason; the paper's own difference from the printed numbers."""
    values = {r: reported_value(claim.printed.get(r, {}), protocol, claim.metric) for r in claim.left + claim.right}
    means = {side: (float(reduce_rows(np.array([values[r][0] for r in rows]), reduce))
                    if all(values[r][0] is not None for r in rows) else None)
             for side, rows, reduce in (("left", claim.left, claim.left_reduce),
                                        ("right", claim.right, claim.right_reduce))}
    only = claim.reported_only
    return {**{c: None for c in COLUMNS}, **claim_columns(claim, spec, protocol), "left_reported": means["left"],
            "right_reported": means["right"],
            "reported_difference": None if None in means.values() else means["left"] - means["right"],
            "reported_sources": "; ".join(dict.fromkeys(s for _, s in values.values() if s)),
            "printed_rows": "", "printed_verdict": "", "untrained_rows": "", "training_check": "",
            "verdict": f"undetermined: {', '.join(only)} {'is' if len(only) == 1 else 'are'} reported only"}


def claim_columns(claim: ClaimSpec, spec: ClaimsSpec, protocol: str) -> dict:
    """The columns that say what the claim is."""
    return {"paper": spec.paper, "dataset": spec.dataset, "data": spec.dataset_kind, "claim": claim.id,
            "words": claim.words, "paraphrased": claim.paraphrased, "where": claim.where, "table": claim.table,
            "compare": claim.form, "margin": claim.margin, "bound": claim.bound, "rank": claim.rank, "protocol": protocol,
            "metric": claim.metric, "left_rows": "; ".join(claim.left), "right_rows": "; ".join(claim.right),
            "reported_dataset": spec.reported_dataset}


def claim_interval(claim: ClaimSpec, protocol: str, sides: dict[str, list[str]],
                   per_seed: dict[str, list[QueryUnits]], bootstrap: dict) -> dict:
    """The paired bootstrap interval of a claim's difference under one protocol. A mean over
    queries: each row's seed-mean sums over the counts the rows share (the same test queries). A
    pooled metric (micro-F1): each (row, seed) with its own denominators, weighted to each row's
    seed mean, so that the estimate is the difference of the rows' seed-mean metric."""
    picked = {key: units[0].rows(claim.metric) for key, units in per_seed.items()}
    shapes = {key: units[0].counts[picked[key]].shape for key, units in per_seed.items()}
    if len(set(shapes.values())) != 1:
        raise HarnessError(f"claim {claim.id}: rows {list(shapes)} are not scored on the same test images under "
                           f"{protocol}")
    b = {"n_resamples": bootstrap["n_resamples"], "seed": bootstrap["seed"], "confidence": bootstrap["confidence"],
         "method": bootstrap["method"]}
    if is_pooled(claim.metric):
        def side(keys):   # (row, seed) members: sums, counts, weights
            members = [(k, u) for k in keys for u in per_seed[k]]
            return (np.stack([u.sums[picked[k]] for k, u in members]),
                    np.stack([u.counts[picked[k]] for k, u in members]),
                    np.array([1.0 / (len(keys) * len(per_seed[k])) for k, _ in members]))
        (sa, ca, wa), (sb, cb, wb) = side(sides["left"]), side(sides["right"])
        return paired_difference_interval(sa, sb, ca, counts_b=cb, weights_a=wa, weights_b=wb, **b)
    counts = {key: units[0].counts[picked[key]] for key, units in per_seed.items()}
    reference = next(iter(counts.values()))
    for key, c in counts.items():
        if not np.array_equal(c, reference):
            raise HarnessError(f"claim {claim.id}: rows {list(counts)} are not scored on the same test queries "
                               f"under {protocol}")
    seed_mean = {key: mean_over_seeds([u.sums[picked[key]] for u in units]) for key, units in per_seed.items()}
    return paired_difference_interval(np.stack([seed_mean[k] for k in sides["left"]]),
                                      np.stack([seed_mean[k] for k in sides["right"]]), reference, margin=claim.margin,
                                      reduce_a=claim.left_reduce, reduce_b=claim.right_reduce, **b)


def check_claim(claim: ClaimSpec, protocol: str, spec: ClaimsSpec, scores: RowScores,
                training: dict[str, RowTraining]) -> dict:
    if claim.reported_only:
        return reported_only_record(claim, spec, protocol)
    rows = spec.rows
    sides = {"left": [f"{claim.table}/{r}" for r in claim.left], "right": [f"{claim.table}/{r}" for r in claim.right]}
    per_seed = {key: scores.units[(key, protocol)] for keys in sides.values() for key in keys}
    interval = claim_interval(claim, protocol, sides, per_seed, spec.bootstrap)
    reduce = {"left": claim.left_reduce, "right": claim.right_reduce}
    seed_values = {key: [u.value(claim.metric) for u in units] for key, units in per_seed.items()}
    side_means = {side: float(reduce_rows(np.array([np.mean(seed_values[k]) for k in keys]), reduce[side]))
                  for side, keys in sides.items()}
    rival = None
    if claim.best is not None:   # the row to beat, ours: the best (k-th best) of the others by the seed-mean
        side = "right" if claim.right_reduce != "mean" else "left"
        order, k = parse_reduction(reduce[side])   # max: the k-th highest; min: the k-th lowest
        ranked = sorted(sides[side], key=lambda key: np.mean(seed_values[key]), reverse=order == "max")
        rival = rows[ranked[k - 1]].id
    seed_lists = {tuple(rows[k].seeds) for k in per_seed}
    seed_std, above = None, None
    if len(seed_lists) == 1 and len(next(iter(seed_lists))) > 1:   # shared seeds: the spread of the per-seed differences
        differences = (reduce_rows(np.array([seed_values[k] for k in sides["left"]]), reduce["left"])
                       - reduce_rows(np.array([seed_values[k] for k in sides["right"]]), reduce["right"]))
        seed_std = float(np.std(differences))
        above = None if claim.bound is not None else int(np.sum(differences > claim.margin))
    reported = {side: [reported_value(rows[k].reported, protocol, claim.metric) for k in keys]
                for side, keys in sides.items()}
    reported_means = {side: (float(reduce_rows(np.array([v for v, _ in values]), reduce[side]))
                             if all(v is not None for v, _ in values) else None) for side, values in reported.items()}
    reported_difference = (None if None in reported_means.values()
                           else reported_means["left"] - reported_means["right"])
    compared = [k for keys in sides.values() for k in keys]
    untrained = [rows[k].id for k in compared if training[k].status == NOT_TRAINED]
    metric = METRICS.get(claim.metric)
    at_best = all(saturated(float(np.mean(seed_values[k])), metric.best, metric.direction,
                            spec.training_check["saturated_share"]) for k in compared)
    said = claim_verdict(interval["low"], interval["high"], claim.margin, untrained, at_best, claim.bound)
    if spec.dataset_kind in INCOMPARABLE_DATA:
        said += f" ({INCOMPARABLE_DATA[spec.dataset_kind]})"
    return {
        **claim_columns(claim, spec, protocol),
        "left_reproduced": side_means["left"], "right_reproduced": side_means["right"],
        "reproduced_difference": interval["estimate"], "difference_seed_std": seed_std, "seeds_above_margin": above,
        "p_holds": interval["share_above"] if claim.best is not None else None, "rival": rival,
        "printed_rows": "; ".join(r for r in claim.printed), "printed_verdict": printed_verdict(claim, protocol, rows),
        "n_seeds": len(rows[sides["left"][0]].seeds) if len(seed_lists) == 1 else None,
        "seeds": " ".join(map(str, sorted(seed_lists)[0])) if len(seed_lists) == 1 else "per row",
        "ci_low": interval["low"], "ci_high": interval["high"], "confidence": interval["confidence"],
        "interval_method": interval["method"], "n_resamples": interval["n_resamples"],
        "bootstrap_seed": interval["seed"], "n_images": interval["n_images"],
        "left_reported": reported_means["left"],
        "right_reported": reported_means["right"], "reported_difference": reported_difference,
        "reported_sources": "; ".join(dict.fromkeys(s for values in reported.values() for _, s in values if s)),
        "untrained_rows": "; ".join(untrained), "saturated": at_best,
        "training_check": "; ".join(f"{rows[k].id} {training[k].status}: {training[k].reason}" for k in compared
                                    if training[k].status in (NOT_TRAINED, UNKNOWN)),
        "verdict": said}


def claims_frame(spec: ClaimsSpec, payload: DatasetPayload) -> pd.DataFrame:
    scores = RowScores(spec, payload)
    training = rows_training(spec)
    records = [check_claim(claim, protocol, spec, scores, training)
               for claim in spec.claims for protocol in claim.protocols]
    frame = pd.DataFrame(records, columns=list(COLUMNS))
    floats = [c for c in COLUMNS if c.endswith(("_reproduced", "_reported", "_difference", "_std", "ci_low", "ci_high", "p_holds"))]
    frame[floats] = frame[floats].astype(float).round(DIGITS)
    frame[["seeds_above_margin", "n_seeds", "rank"]] = frame[["seeds_above_margin", "n_seeds", "rank"]].astype("Int64")
    return frame


def markdown(frame: pd.DataFrame, spec: ClaimsSpec) -> str:
    caveat = data_caveat(spec.dataset_kind, spec.reported_dataset)
    kind = "" if not caveat else (
        f" {caveat}: the verdicts test the harness's "
        f"runs of each method on it, not the paper's claim on its data; the paper's differences are its "
        f"{spec.reported_dataset} numbers.")
    b = spec.bootstrap
    lines = [f"# Claims of {spec.paper_name} on {spec.dataset}", "",
             f"Ours: the difference of the seed-mean metric (left − right) over the test split, its spread over "
             f"seeds, and its {b['confidence']:.0%} {b['method']} interval from {b['n_resamples']} paired resamples of "
             f"the test images, each with all its texts (bootstrap seed {b['seed']}). Supported: the interval lies "
             f"above the claimed margin; contradicted: below it; undetermined whatever the interval when a compared "
             f"row did not train (its main metric near chance, or near-constant scores) or when every compared "
             f"value is saturated (within {1 - spec.training_check['saturated_share']:.0%} of the metric's "
             f"best).{kind}", "",
             "| claim | paper's words | where | compared | protocol | paper Δ | ours Δ (± seeds) | interval | verdict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in frame.itertuples():
        words = f"{escape_cell(r.words)} (paraphrase)" if r.paraphrased else f"“{escape_cell(r.words)}”"
        said = r.verdict if pd.isna(r.p_holds) else f"{r.verdict}; {order_words(r)}"
        lines.append(f"| {r.claim} | {words} | {escape_cell(r.where)} | `{r.compare}` | {r.protocol} | "
                     f"{number(r.reported_difference, signed=True)} | {ours_difference(r)} | "
                     f"[{number(r.ci_low, signed=True)}, {number(r.ci_high, signed=True)}] | {said} |")
    bounds = {c.id: c for c in spec.claims if c.bound is not None}
    if bounds:
        lines += ["", "Equivalence claims (two one-sided tests on the same interval: supported when it lies inside "
                      "±bound, contradicted when wholly outside):", ""]
        lines += [f"- `{c.id}`: bound {c.bound:g} {c.metric}: {escape_cell(c.bound_reason)}" for c in bounds.values()]
    printed = [r for r in frame.itertuples() if isinstance(r.printed_verdict, str) and r.printed_verdict]
    if printed:
        lines += ["", "Best-of-set and rank claims: ours compares the rows the harness runs (P: the share of resamples "
                      "in which the claimed row is the best of them, or within its rank); on the paper's printed "
                      "numbers, with the rows it only prints, apart from our verdict:", ""]
        lines += [f"- `{r.claim}` ({r.protocol}): {escape_cell(r.printed_verdict)}"
                  + (f"; printed only: {escape_cell(r.printed_rows)}" if isinstance(r.printed_rows, str)
                     and r.printed_rows else "") for r in printed]
    named = {key: state for key, state in rows_training(spec).items() if state.status in (NOT_TRAINED, UNKNOWN)}
    if named:
        lines += ["", "Compared rows that did not train, or whose training was not checked (evaluations written "
                      "before the check; not taken as trained):", ""]
        lines += [f"- `{key}` {state.status}: {escape_cell(state.reason)}" for key, state in named.items()]
    return "\n".join(lines) + "\n"


def order_words(r) -> str:
    """P(best) and the best of the others, or P(rank <= k) and the k-th best of the others."""
    rank = int(r.rank)
    if rank == 1:
        return f"P(best) {r.p_holds:.2f}, best of the others {r.rival}"
    return f"P(rank ≤ {rank}) {r.p_holds:.2f}, {ordinal(rank)} best of the others {r.rival}"


def _claims(args) -> None:
    spec = ClaimsSpec.read(args.spec)
    if not spec.claims:
        raise HarnessError(f"{args.spec}: paper {spec.paper} states no claim on {spec.dataset}")
    frame = claims_frame(spec, load_dataset_payload(args.dataset_config))
    write_text(args.out_csv, frame.to_csv(index=False))
    write_text(args.out_md, markdown(frame, spec))
    print(frame[["claim", "protocol", "reproduced_difference", "ci_low", "ci_high", "verdict"]].to_string(index=False))


def _arguments(parser) -> None:
    parser.add_argument("--spec", required=True, help="the claims spec of the paper on the dataset (methods.plan)")
    parser.add_argument("--out-csv", required=True)
    parser.add_argument("--out-md", required=True)


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, _claims, argv)


if __name__ == "__main__":
    main()
