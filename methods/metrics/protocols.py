"""Named evaluation protocols: the split, the folds, the relevance and the metrics reported.
The protocol name is written into every result row.

A protocol scored from the score matrix declares its main metric: evaluation writes its training
check beside the metrics (``methods.metrics.training_check``: the main metric against its chance
value, ``methods.metrics.evaluation.MAIN_METRIC_CHANCE``, and the spread of the scores).

Declarations only, torch-free: building the Snakemake DAG reads the protocols and checks the
splits against them (``check_split_sizes``, ``check_coco_ids``); ``methods.metrics.evaluation``
evaluates them."""
from __future__ import annotations

from dataclasses import dataclass, replace

from methods.errors import HarnessError
from methods.metrics.coco_ids import split_coco_id_arrays
from methods.metrics.declarations import (ECCV_CAPTION_METRICS, ECCV_METRICS, LABEL_PREDICTION_METRICS,
                                          LABEL_RANKING_METRICS, METRICS, PMRP_METRICS, RETRIEVAL_METRICS, STATISTICS,
                                          base_metrics)
from methods.registry import Registry

# The metrics a protocol may check training on: those whose expected value under random scores
# has a closed form (``methods.metrics.evaluation.MAIN_METRIC_CHANCE``, checked to cover exactly these).
MAIN_METRICS = ("rsum", "map_r_ext_sum", "ndcg500_sum")


@dataclass(frozen=True)
class Protocol:
    name: str
    split: str
    n_folds: int
    n_images: int | None  # asserted on the split when set
    description: str
    relevance: str = "captions_of_image"
    metrics: tuple[str, ...] = RETRIEVAL_METRICS
    # shared-label protocols of tag datasets: identical texts (tag sets) are ranked once, each with
    # the labels of its first image, as the label-wise code evaluates MIRFlickr and NUS-WIDE
    # (njustkmg/IJCAI21... utils/evaluation.py ``validate``: np.unique over the tag vectors)
    unique_texts: bool = False
    # the metric whose gain over chance says whether the model learned (one of ``MAIN_METRICS``);
    # None: no training check (label predictions, package metrics, embedding statistics)
    main_metric: str | None = None
    # shared-label protocols: the order of equal scores and the NDCG discount
    # (``methods.metrics.relevance.TIE_ORDERS`` / ``NDCG_DISCOUNTS``)
    tie_order: str = "against_model"
    ndcg_discount: str = "rank"
    # plausible-match protocols: whether each query's last-ranked item of the whole split stays
    # ranked (``methods.metrics.relevance.LAST_RANKED``)
    last_ranked: str = "kept"

    def __post_init__(self) -> None:
        for m in self.metrics:
            if METRICS.get(m).relevance != self.relevance:
                raise ValueError(f"protocol {self.name}: metric {m} is not defined for {self.relevance} relevance")
        if self.main_metric is not None and (self.main_metric not in MAIN_METRICS or not set(
                base_metrics(self.main_metric)) <= set(self.metrics)):
            raise ValueError(f"protocol {self.name}: main metric {self.main_metric} needs a chance value "
                             f"({', '.join(MAIN_METRICS)}) and the protocol's metrics to compute it")
        if self.unique_texts and (self.relevance != "shared_labels" or self.n_folds != 1):
            raise ValueError(f"protocol {self.name}: unique texts are a shared-label protocol of one fold")
        if (self.tie_order, self.ndcg_discount) != ("against_model", "rank") and self.relevance != "shared_labels":
            raise ValueError(f"protocol {self.name}: tie order and NDCG discount are shared-label conventions")
        if self.last_ranked != "kept" and self.relevance != "plausible_matches":
            raise ValueError(f"protocol {self.name}: dropping the last-ranked item is a plausible-match convention")

    @property
    def relevance_key(self) -> str:
        """Which relevance object of a split the protocol reads (``methods.metrics.evaluation.split_relevances``)."""
        if self.relevance == "plausible_matches":
            return f"{self.relevance}:{self.last_ranked}"
        if self.relevance != "shared_labels":
            return self.relevance
        return ":".join((self.relevance, *(["unique_texts"] if self.unique_texts else []),
                         self.tie_order, self.ndcg_discount))


PROTOCOLS: Registry[Protocol] = Registry("protocol")
for _p in (
    Protocol("f30k_1k", "test", 1, 1000, "Flickr30K Karpathy test, 1,000 images / 5,000 captions",
             main_metric="rsum"),
    Protocol("coco_1k_5fold", "testall", 5, 5000,
             "COCO 5K testall in 5 consecutive folds of 1,000 images; every metric averaged over folds",
             main_metric="rsum"),
    Protocol("coco_5k", "testall", 1, 5000, "COCO Karpathy test, all 5,000 images / 25,000 captions",
             main_metric="rsum"),
    # no training check: the package scores the matrix coco_5k checks, against associations it holds
    Protocol("coco_5k_eccv", "testall", 1, 5000,
             "COCO 5K testall against ECCV Caption's and CxC's verified associations (the eccv_caption "
             "package: mAP@R, R-Precision, R@1; CxC R@K)", relevance="coco_ids", metrics=ECCV_CAPTION_METRICS),
    # no training check: PMRP reads annotations beside the Karpathy pairs that coco_1k_5fold checks
    Protocol("coco_1k_5fold_pmrp", "testall", 5, 5000,
             "COCO 5K testall in 5 consecutive folds of 1,000 images: plausible-match R-Precision (PCME) over the "
             "images' COCO instance categories at thresholds 0-2, each ranking without its last item of the 5K "
             "ranking as naver-ai/pcme's evaluate_pmrp_coco.py computes it; averaged over folds",
             relevance="plausible_matches", metrics=PMRP_METRICS, last_ranked="dropped"),
    Protocol("coco_1k_5fold_pmrp_whole", "testall", 5, 5000,
             "coco_1k_5fold_pmrp with every item ranked (the paper's definition: no item dropped)",
             relevance="plausible_matches", metrics=PMRP_METRICS),
    Protocol("coco_5k_pmrp", "testall", 1, 5000,
             "COCO 5K testall, all 5,000 images / 25,000 captions: plausible-match R-Precision (PCME) over the "
             "images' COCO instance categories at thresholds 0-2, each ranking without its last item as "
             "naver-ai/pcme's evaluate_pmrp_coco.py computes it", relevance="plausible_matches",
             metrics=PMRP_METRICS, last_ranked="dropped"),
    Protocol("synthetic_test", "test", 1, None, "synthetic test split, all images at once", main_metric="rsum"),
    Protocol("synthetic_eccv", "test", 1, None,
             "synthetic test split, all images at once, against every image a caption truly describes "
             "(extended positives; ECCV Caption's mAP@R, R-Precision and R@1)",
             relevance="extended_positives", metrics=ECCV_METRICS, main_metric="map_r_ext_sum"),
    # the label-wise code's evaluation (njustkmg/IJCAI21... utils/evaluation.py): equal scores in
    # reversed argsort order; on COCO also its t2i discount (the *_code protocols)
    Protocol("labelwise_test", "test", 1, None,
             "label-wise retrieval on the test split of a tag dataset, all items at once: an item is relevant "
             "when it shares a label with the query, graded by the number of shared labels (NDCG@500, mAP, "
             "mAP@R; R@K counts the query's own tag set); identical tag sets are one text, with its first "
             "image's labels, as the label-wise code ranks them", relevance="shared_labels",
             metrics=LABEL_RANKING_METRICS, unique_texts=True, main_metric="ndcg500_sum",
             tie_order="argsort_reversed"),
    Protocol("labelwise_coco_1k_5fold", "testall", 5, 5000,
             "label-wise retrieval on COCO 5K testall (80 object labels) in 5 consecutive folds of 1,000 images "
             "and their captions; every metric averaged over folds", relevance="shared_labels",
             metrics=LABEL_RANKING_METRICS, main_metric="ndcg500_sum", tie_order="argsort_reversed"),
    Protocol("labelwise_coco_5k", "testall", 1, 5000,
             "label-wise retrieval on COCO 5K testall (80 object labels), all 5,000 images / 25,000 captions",
             relevance="shared_labels", metrics=LABEL_RANKING_METRICS, main_metric="ndcg500_sum",
             tie_order="argsort_reversed"),
    Protocol("labelwise_coco_1k_5fold_code", "testall", 5, 5000,
             "labelwise_coco_1k_5fold with the label-wise code's COCO t2i NDCG discount, log2(5 (rank - 1) + c + 2) "
             "for the c-th caption of an image (utils/evaluation.py t2i)", relevance="shared_labels",
             metrics=LABEL_RANKING_METRICS, main_metric="ndcg500_sum", tie_order="argsort_reversed",
             ndcg_discount="coco_t2i_code"),
    Protocol("labelwise_coco_5k_code", "testall", 1, 5000,
             "labelwise_coco_5k with the label-wise code's COCO t2i NDCG discount, log2(5 (rank - 1) + c + 2) "
             "for the c-th caption of an image (utils/evaluation.py t2i)", relevance="shared_labels",
             metrics=LABEL_RANKING_METRICS, main_metric="ndcg500_sum", tie_order="argsort_reversed",
             ndcg_discount="coco_t2i_code"),
    # no training check: micro-F1 scores a label head, not the score matrix (whose ranking protocols
    # check the same model); a head predicting every label has no single chance value to compare with
    Protocol("label_prediction", "test", 1, None,
             "micro-F1 of each modality's label prediction on the test split (models with a label head)",
             relevance="label_predictions", metrics=LABEL_PREDICTION_METRICS),
    Protocol("label_prediction_coco_1k_5fold", "testall", 5, 5000,
             "micro-F1 of each modality's label prediction on COCO 5K testall in 5 consecutive folds of 1,000 "
             "images and their captions, averaged over folds (models with a label head)",
             relevance="label_predictions", metrics=LABEL_PREDICTION_METRICS),
    Protocol("label_prediction_coco_5k", "testall", 1, 5000,
             "micro-F1 of each modality's label prediction on COCO 5K testall (models with a label head)",
             relevance="label_predictions", metrics=LABEL_PREDICTION_METRICS),
    Protocol("set_statistics", "each test split", 1, None,
             "statistics of the test embeddings of set models (within-set circular variance); not a protocol a "
             "dataset lists: evaluation adds it for models that report statistics",
             relevance="embeddings", metrics=tuple(STATISTICS)),
):
    PROTOCOLS.register(_p.name, _p)
STATISTICS_PROTOCOL = "set_statistics"
# the protocols whose results carry a training check (``methods.metrics.evaluation.evaluate_protocol``)
CHECKED_PROTOCOLS = frozenset(name for name, p in PROTOCOLS.items() if p.main_metric is not None)


@dataclass(frozen=True)
class ValidationProtocol:
    """A protocol validation runs every epoch (``methods.training.loop.validate``) on the first
    ``val_max_images`` images of the dev split, all at once, and when: ``always``, for a
    ``selection`` metric of its relevance, or for a model that makes ``label_predictions``."""
    protocol: Protocol
    when: frozenset[str]

    WHEN = frozenset({"always", "selection", "label_predictions"})

    def __post_init__(self) -> None:
        if self.protocol.split != "dev" or self.protocol.n_folds != 1 or not self.when or self.when - self.WHEN:
            raise ValueError(f"validation protocol {self.protocol.name}: the dev split in one fold, run when "
                             f"{' / '.join(sorted(self.WHEN))}")

    def runs_for(self, selection: str, predicts_labels: bool) -> bool:
        """Whether it runs for a model selected on metric ``selection`` that does (not) predict labels."""
        return ("always" in self.when
                or ("selection" in self.when and METRICS.get(selection).relevance == self.protocol.relevance)
                or ("label_predictions" in self.when and predicts_labels))


# The validation logs (``train_log.json``): the six recalls, RSUM and the ranks for every model;
# label-wise models (a label head, selected on NDCG@500) also the shared-label ranking metrics with
# their selection sum and each side's micro-F1. Shared-label validation ranks every caption with the
# default tie order and discount. In this order: the log's keys follow it.
VALIDATION_PROTOCOLS: tuple[ValidationProtocol, ...] = (
    ValidationProtocol(Protocol("validation_retrieval", "dev", 1, None,
                                "the dev split's first val_max_images images and their captions: recalls, RSUM, ranks"),
                       frozenset({"always"})),
    ValidationProtocol(Protocol("validation_label_ranking", "dev", 1, None,
                                "the dev split's first val_max_images images and their captions, relevant when they "
                                "share a label: the label ranking metrics and NDCG@500's sum",
                                relevance="shared_labels", metrics=(*LABEL_RANKING_METRICS, "ndcg500_sum")),
                       frozenset({"selection", "label_predictions"})),
    ValidationProtocol(Protocol("validation_label_prediction", "dev", 1, None,
                                "micro-F1 of each modality's label prediction on the dev split's first val_max_images "
                                "images and their captions", relevance="label_predictions",
                                metrics=LABEL_PREDICTION_METRICS),
                       frozenset({"label_predictions"})),
)


def selected_metric(selection: str) -> str:
    """The metric validation computes for ``training.selection_metric``: itself, or RSUM for ``last``
    (the final epoch is kept, what DivE's eval.py loads; RSUM is logged)."""
    return "rsum" if selection == "last" else selection


def validation_protocols(selection: str, predicts_labels: bool) -> list[Protocol]:
    """The protocols validation runs for a model selected on ``selection`` (``training.selection_metric``:
    a registered metric, or ``last``) that does (not) predict labels; one of them computes the
    selected metric, else an error naming it."""
    selection = selected_metric(selection)
    chosen = [v.protocol for v in VALIDATION_PROTOCOLS if v.runs_for(selection, predicts_labels)]
    if not any(set(base_metrics(selection)) <= set(p.metrics) for p in chosen):
        raise HarnessError(f"training.selection_metric: no validation protocol computes {selection} "
                           f"(methods.metrics.protocols.VALIDATION_PROTOCOLS)")
    return chosen


def statistics_result(statistics: dict[str, float], split: str, n_images: int) -> dict:
    """The result entry of a model's embedding statistics on one split (``evaluate_run``)."""
    return {"protocol": STATISTICS_PROTOCOL, "split": split, "n_images": n_images, "n_folds": 1,
            "metrics": {k: statistics[k] for k in STATISTICS}, "folds": None}


def get_protocol(name: str) -> Protocol:
    return PROTOCOLS.get(name)


def dataset_protocol(name: str, ds_cfg: dict) -> Protocol:
    """Protocol ``name`` as a dataset evaluates it: a smoke run (``ds_cfg['smoke']``) evaluates it on
    the first images of its split, however many, in its folds."""
    protocol = get_protocol(name)
    return replace(protocol, n_images=None) if "smoke" in ds_cfg else protocol


def check_split_sizes(dataset: str, protocols: list[str], split_sizes: dict[str, int], where: str) -> None:
    """Each protocol's split has the image count the protocol is defined on (and splits into its
    folds), checked when the DAG is built: evaluation would find out only after training.
    ``split_sizes``: harness split -> images; ``where``: the file the splits come from."""
    for name in protocols:
        protocol = get_protocol(name)
        n = split_sizes.get(protocol.split)
        if n is None:
            continue  # a protocol whose split is not defined is named by methods.plan.test_splits
        if protocol.n_images is not None and n != protocol.n_images:
            raise HarnessError(f"datasets.{dataset}.splits.{protocol.split}: {n} images in {where}, but protocol "
                               f"{name} (datasets.{dataset}.protocols) needs {protocol.n_images} "
                               f"({protocol.description})")
        if n % protocol.n_folds:
            raise HarnessError(f"datasets.{dataset}.splits.{protocol.split}: {n} images in {where} do not split "
                               f"into the {protocol.n_folds} folds of protocol {name}")


def check_coco_ids(protocols: list[str], splits: dict, karpathy_json) -> None:
    """Protocols scored by COCO ids (ECCV Caption / CxC): the split's images are the COCO 5K test
    images in eccv_caption's order, checked when the DAG is built (the first differing row is
    named); evaluation would find out only after training. ``splits``: harness split -> Split or
    SplitIndex."""
    for name in protocols:
        protocol = get_protocol(name)
        if protocol.relevance == "coco_ids" and protocol.split in splits:
            split_coco_id_arrays(karpathy_json, splits[protocol.split])


def plausible_match_splits(protocols: list[str]) -> list[str]:
    """The splits the plausible-match protocols among ``protocols`` test, in order: those whose
    images' COCO instance categories the DAG reads (``methods.data.instance_categories``)."""
    return list(dict.fromkeys(get_protocol(p).split for p in protocols
                              if get_protocol(p).relevance == "plausible_matches"))
