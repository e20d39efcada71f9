"""Metrics as declarations: each says its name, the relevance it is defined for, its direction, its
table label, its scale and its tolerance key. Tables, model selection, figures, claims and the plan
read these declarations; nothing else lists metric names.

A metric is computed by the implementation a compute module registers for its declared name
(``methods.metrics.implementations``); a sum of metrics (RSUM) is computed from its components.
A metric that is a mean over queries declares which items are its ``queries`` (images or texts):
its implementation gives each query's value, and the claim checks resample test images with their
queries (``methods.metrics.query_units``). A pooled metric (micro-F1) is a ratio of sums over its
queries instead, Σ numerator / Σ denominator: it declares its ``queries`` and ``pooled``, and its
implementation gives each query's (numerator, denominator); the claims resample those alike.

Neither numpy nor torch is imported: building the Snakemake DAG reads these declarations.
"""
from __future__ import annotations

from dataclasses import dataclass

from methods.errors import HarnessError
from methods.registry import Registry


@dataclass(frozen=True)
class Metric:
    name: str
    relevance: str              # the relevance kind it is defined for
    direction: str              # "higher" or "lower" is better
    label: str                  # column label in tables
    tolerance: str | None       # key of config `tolerance` for verdicts; None: never judged
    scale: str                  # "percent" (0-100), "percent_sum", "rank", "unit" (0-1)
    in_table: bool = True       # shown as a table column (else computed, e.g. for selection)
    components: tuple[str, ...] = ()   # a sum of these metrics (RSUM), computable from their values
    # "images" or "texts": the metric is the mean of per-query values over these items (NaN: left
    # out); None: not a mean over queries
    queries: str | None = None
    # with ``queries``: the metric is Σ numerator / Σ denominator over them (micro-averaging), not a
    # mean; each query gives its pair, so the denominators are the row's own, not shared by all rows
    pooled: bool = False

    def better(self, new: float, old: float) -> bool:
        return new > old if self.direction == "higher" else new < old

    @property
    def best(self) -> float | None:
        """The best value the metric can take: 100 for a percentage, 100 per part of a sum of
        percentages, 1 for a rank; None for a unit-scale value (a log variance has no best)."""
        if self.scale == "percent":
            return 100.0
        if self.scale == "percent_sum":
            return 100.0 * len(self.components)
        return 1.0 if self.scale == "rank" else None


METRICS: Registry[Metric] = Registry("metric")


def declare_metric(name: str, *, relevance: str, direction: str, label: str, tolerance: str | None, scale: str,
                   in_table: bool = True, components: tuple[str, ...] = (), queries: str | None = None,
                   pooled: bool = False) -> Metric:
    """Declare a metric; with ``components``: the sum of those metrics. ``queries``: the items whose
    per-query values the metric is the mean of (``pooled``: whose per-query numerators and
    denominators it divides, summed)."""
    if direction not in ("higher", "lower"):
        raise ValueError(f"metric {name}: direction must be 'higher' or 'lower'")
    if queries not in (None, "images", "texts"):
        raise ValueError(f"metric {name}: queries must be 'images' or 'texts'")
    if components and queries is not None:
        raise ValueError(f"metric {name}: a sum of metrics is no mean over queries")
    if pooled and queries is None:
        raise ValueError(f"metric {name}: a pooled metric names the queries it pools")
    return METRICS.register(name, Metric(name, relevance, direction, label, tolerance, scale, in_table,
                                         components, queries, pooled))


# -- captions_of_image: R@K, median and mean rank (methods.metrics.retrieval) ---------------------

RECALL_KS = (1, 5, 10)
DIRECTIONS = ("i2t", "t2i")
ARROW = {"i2t": "i→t", "t2i": "t→i"}   # direction in table labels
QUERIES = {"i2t": "images", "t2i": "texts"}   # the items that query in each direction
RECALLS = tuple(f"{d}_r{k}" for d in DIRECTIONS for k in RECALL_KS)
# What the Karpathy protocols report, in table order.
RETRIEVAL_METRICS = (*RECALLS, "rsum", "i2t_medr", "i2t_meanr", "t2i_medr", "t2i_meanr")

for _d in DIRECTIONS:
    for _k in RECALL_KS:
        declare_metric(f"{_d}_r{_k}", relevance="captions_of_image", direction="higher", label=f"{ARROW[_d]} R@{_k}",
                       tolerance="recall", scale="percent", queries=QUERIES[_d])
declare_metric("rsum", components=RECALLS, relevance="captions_of_image", direction="higher", label="RSUM",
               tolerance="rsum", scale="percent_sum")
for _d in DIRECTIONS:
    declare_metric(f"{_d}_medr", relevance="captions_of_image", direction="lower", label=f"{ARROW[_d]} medr",
                   tolerance="rank", scale="rank")
    declare_metric(f"{_d}_meanr", relevance="captions_of_image", direction="lower", label=f"{ARROW[_d]} meanr",
                   tolerance=None, scale="rank", in_table=False, queries=QUERIES[_d])
# VSRN's train.py keeps the epoch with the best R@1 + R@5 both ways (R@10 left out).
declare_metric("r1_r5_sum", components=tuple(f"{d}_r{k}" for d in DIRECTIONS for k in (1, 5)),
               relevance="captions_of_image", direction="higher", label="R@1+R@5 sum", tolerance=None,
               scale="percent_sum", in_table=False)
# SGRAF's ablation tables (3-5, 7) print R@1 and R@10 both ways, no RSUM: the claims on them compare this sum.
declare_metric("r1_r10_sum", components=tuple(f"{d}_r{k}" for d in DIRECTIONS for k in (1, 10)),
               relevance="captions_of_image", direction="higher", label="R@1+R@10 sum", tolerance=None,
               scale="percent_sum", in_table=False)

# -- extended_positives: ECCV Caption's metrics (methods.metrics.eccv) -----------------------------

ECCV_KINDS = {"map_r": "mAP@R", "rp": "R-P", "r1": "R@1"}   # ECCV Caption's order
ECCV_METRICS = tuple(f"{d}_{k}_ext" for d in DIRECTIONS for k in ECCV_KINDS)

for _d in DIRECTIONS:
    for _k, _label in ECCV_KINDS.items():
        declare_metric(f"{_d}_{_k}_ext", relevance="extended_positives", direction="higher",
                       label=f"{ARROW[_d]} {_label} (ext.)", tolerance="ranking", scale="percent", queries=QUERIES[_d])
# ECCV Caption's headline metric both ways: the main metric of the extended-positives protocol's training check
declare_metric("map_r_ext_sum", components=tuple(f"{d}_map_r_ext" for d in DIRECTIONS),
               relevance="extended_positives", direction="higher", label="mAP@R (ext.) sum", tolerance=None,
               scale="percent_sum", in_table=False)

# -- coco_ids: ECCV Caption and CxC from the eccv_caption package (methods.metrics.eccv_caption) ---

CXC_KS = (1, 5, 10)
ECCV_CAPTION_METRICS = tuple([f"{d}_{k}_eccv" for d in DIRECTIONS for k in ECCV_KINDS]
                             + [f"{d}_r{k}_cxc" for d in DIRECTIONS for k in CXC_KS])

for _d in DIRECTIONS:
    for _k, _label in ECCV_KINDS.items():
        declare_metric(f"{_d}_{_k}_eccv", relevance="coco_ids", direction="higher", label=f"{ARROW[_d]} ECCV {_label}",
                       tolerance="ranking", scale="percent")
    for _k in CXC_KS:
        declare_metric(f"{_d}_r{_k}_cxc", relevance="coco_ids", direction="higher", label=f"{ARROW[_d]} CxC R@{_k}",
                       tolerance="recall", scale="percent")

# -- plausible_matches: PCME's plausible-match R-Precision (methods.metrics.plausible_match) -------

PMRP_METRICS = tuple(f"{d}_pmrp" for d in DIRECTIONS)

for _d in DIRECTIONS:
    declare_metric(f"{_d}_pmrp", relevance="plausible_matches", direction="higher", label=f"{ARROW[_d]} PMRP",
                   tolerance="ranking", scale="percent", queries=QUERIES[_d])

# -- shared_labels: label-wise ranking (methods.metrics.label_ranking) -----------------------------

NDCG_KS = (500,)
OWN_RECALL_KS = (1, 5, 10)
LABEL_RANKING_METRICS = tuple(f"{d}_{m}" for d in DIRECTIONS
                              for m in (*(f"ndcg{k}" for k in NDCG_KS), "map", "map_at_r",
                                        *(f"own_r{k}" for k in OWN_RECALL_KS)))

for _d in DIRECTIONS:
    declare_metric(f"{_d}_map", relevance="shared_labels", direction="higher", label=f"{ARROW[_d]} mAP",
                   tolerance="ranking", scale="percent", queries=QUERIES[_d])
    declare_metric(f"{_d}_map_at_r", relevance="shared_labels", direction="higher", label=f"{ARROW[_d]} mAP@R",
                   tolerance="ranking", scale="percent", queries=QUERIES[_d])
    for _k in NDCG_KS:
        declare_metric(f"{_d}_ndcg{_k}", relevance="shared_labels", direction="higher", label=f"{ARROW[_d]} NDCG@{_k}",
                       tolerance="ranking", scale="percent", queries=QUERIES[_d])
    for _k in OWN_RECALL_KS:
        declare_metric(f"{_d}_own_r{_k}", relevance="shared_labels", direction="higher",
                       label=f"{ARROW[_d]} R@{_k} (own)", tolerance="recall", scale="percent", queries=QUERIES[_d])
# model selection on both directions at once (label-wise retrieval: validation NDCG@500 i2t + t2i)
for _k in NDCG_KS:
    declare_metric(f"ndcg{_k}_sum", components=(f"i2t_ndcg{_k}", f"t2i_ndcg{_k}"), relevance="shared_labels",
                   direction="higher", label=f"NDCG@{_k} sum", tolerance=None, scale="percent_sum", in_table=False)

# -- label_predictions: micro-F1 of a label head (methods.metrics.label_prediction) ----------------

LABEL_PREDICTION_METRICS = ("image_micro_f1", "text_micro_f1")

for _side in ("image", "text"):
    # pooled over the side's items: 2 TP / (2 TP + FP + FN) of each item's labels, summed
    declare_metric(f"{_side}_micro_f1", relevance="label_predictions", direction="higher", label=f"micro-F1 ({_side})",
                   tolerance="f1", scale="unit", queries=f"{_side}s", pooled=True)

# -- embeddings: statistics the model computes from its encodings (methods.metrics.statistics) -----

STATISTICS = {
    "log_circular_variance": "log circ. var.",
    "image_log_circular_variance": "log circ. var. (image)",
    "text_log_circular_variance": "log circ. var. (text)",
}

for _name, _label in STATISTICS.items():
    declare_metric(_name, relevance="embeddings", direction="higher", label=_label, tolerance="variance", scale="unit")


# -- reading declarations --------------------------------------------------------------------------

def value_from(metrics: dict[str, float], name: str) -> float:
    """Metric ``name`` from already computed values: itself, or the sum of its components."""
    metric = METRICS.get(name)
    if metric.components:
        return float(sum(metrics[c] for c in metric.components))
    return float(metrics[name])


def base_metrics(name: str) -> tuple[str, ...]:
    """The metrics ``name`` sums (its components), or itself."""
    return METRICS.get(name).components or (name,)


def is_pooled(name: str) -> bool:
    """``name`` (or a metric it sums) is pooled over its queries: its per-image units have each row's
    own denominators (``Metric.pooled``)."""
    return any(METRICS.get(m).pooled for m in base_metrics(name))


def table_metrics(names: list[str] | tuple[str, ...]) -> list[str]:
    """The metrics among ``names`` that tables show, in that order."""
    return [n for n in names if METRICS.get(n).in_table]


def check_claimable(metric: str, where: str) -> None:
    """``metric`` is registered and a mean over queries, pooled over queries, or a sum of such metrics."""
    if metric not in METRICS:
        raise HarnessError(f"{where}: unknown metric '{metric}' (registered: {', '.join(METRICS.names())})")
    missing = [m for m in base_metrics(metric) if METRICS.get(m).queries is None]
    if missing:
        raise HarnessError(f"{where}: metric '{metric}' is not a mean over test queries ({', '.join(missing)} "
                           f"has no per-query form), so a bootstrap over test images cannot test it")
