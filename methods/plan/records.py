"""The plan's records, frozen once built: an experiment (one resolved config), a table row (its
runs, reported numbers and ledger), a table, a figure and a claim, as the paper files declare them."""
from __future__ import annotations

from dataclasses import dataclass, field

from methods.config import config_hash
from methods.data.inputs import ImageInput
from methods.model_kinds import finetunes, image_input_of, reads_cached_features
from methods.paths import ResultsLayout
from methods.report.claim_form import Comparison

ENSEMBLE_SEED_STRIDE = 1000  # a repeated ensemble member trains with seed s + 1000 * (earlier repeats)


@dataclass(frozen=True)
class Experiment:
    id: str
    dataset: str
    method: str
    config: dict

    @property
    def backbone(self) -> str | None:
        return self.config["model"].get("backbone")  # None: the model reads precomputed regions

    @property
    def image_input(self) -> ImageInput:
        """The kind of image input the experiment's model reads (``methods.data.inputs``)."""
        return image_input_of(self.config["model"])

    @property
    def finetunes(self) -> bool:
        return finetunes(self.config)

    @property
    def may_evaluate_on_cached_features(self) -> bool:
        """A stage with a frozen CNN (or none at all): its epoch may be the best one, and a model
        selected there is evaluated on cached features."""
        return reads_cached_features(self.config)


@dataclass(frozen=True)
class ReleasedMember:
    """One authors' checkpoint a released row evaluates: the experiment whose method config it is
    imported into, and its files (config keys of ``datasets.<name>.released`` and their paths)."""
    exp: str
    checkpoint: str               # config key
    vocab: str | None             # config key (None: a BERT run, whose vocabulary is its folder's)
    checkpoint_path: str
    vocab_path: str               # the released file, or the captions the DAG tokenised for the BERT
    expect: tuple[tuple[str, object], ...] = ()   # options the checkpoint must hold (sorted pairs)


@dataclass(frozen=True)
class Row:
    table: str
    id: str
    label: str
    paper: str
    seeds: list[int]
    members: list[str]            # experiment ids (one for a single model)
    reported: dict = field(default_factory=dict)   # protocol -> {source, ensemble_size, metrics, note}
    not_reported: str | None = None
    ledger: list[dict] = field(default_factory=list)  # per distinct member: source code, switches off source, deviations
    compare_to: str | None = None  # a row of the same table: paired differences over seeds
    ran: str = ""                  # what its runs really run (backbone / image input, dimensions, schedule)
    view: str | None = None        # an evaluation view of a set model (methods.model_kinds.element_views)
    overrides: dict = field(default_factory=dict)  # a single-model row's dotted overrides (figures of settings)
    reported_only: str | None = None  # why the harness does not run it: no members, seeds or runs
    # the authors' checkpoints it evaluates (no training: ``members`` is empty, ``seeds`` [0])
    released: tuple[ReleasedMember, ...] = ()

    @property
    def runs_models(self) -> bool:
        return self.reported_only is None

    @property
    def ensemble_size(self) -> int:
        return len(self.released) or len(self.members)

    @property
    def ensemble_id(self) -> str | None:
        if self.ensemble_size <= 1:
            return None
        return "ens-" + config_hash(self.members or [f"released/{m.exp}/{m.checkpoint}" for m in self.released])

    @property
    def experiments(self) -> list[str]:
        """The experiment of each member: trained, or the method config a checkpoint is imported into."""
        return list(self.members) or [m.exp for m in self.released]

    def member_seed(self, seed: int, member: int) -> int:
        """Members with different configs train with the row's seed (SGRAF = the SGR and SAF runs of
        that seed); a member repeating an earlier member's config gets +1000 per earlier repeat."""
        return seed + ENSEMBLE_SEED_STRIDE * self.members[:member].count(self.members[member])

    def member_runs(self, layout: ResultsLayout, dataset: str, seed: int) -> list[str]:
        """The run directory of each member for one seed of the row (a released member's: its import)."""
        if self.released:
            return [layout.released_dir(dataset, m.exp, m.checkpoint) for m in self.released]
        return [layout.run_dir(dataset, exp, self.member_seed(seed, i)) for i, exp in enumerate(self.members)]

    def run_dirs(self, layout: ResultsLayout, dataset: str) -> list[str]:
        """Run directories behind the row: every seed of every ensemble member."""
        return [run for s in self.seeds for run in self.member_runs(layout, dataset, s)]


@dataclass(frozen=True)
class Table:
    name: str
    dataset: str
    titles: list[str]
    rows: list[Row]
    statistics: bool = False      # also shows the set models' embedding statistics (protocol set_statistics)
    # released rows left out: no checkpoint configured here ({id, label, keys: the unset config keys})
    unconfigured: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class Figure:
    name: str
    dataset: str
    kind: str
    table: str
    title: str
    row: str | None = None        # saf_weights: the row whose first run is inspected
    rows: list[str] | None = None  # the rows a figure compares (set_element_projection)
    paper: str | None = None      # the key of the paper file that declares it


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str                    # the key of the paper file that states it
    words: str
    paraphrased: bool
    where: str
    table: str
    comparison: Comparison        # left rows above right rows on one metric
    margin: float
    protocols: list[str]          # the dataset's protocols that report the metric
    # a best-of-set or rank claim's rows compared on their printed numbers only (reported only, or files
    # not configured), or every row of a claim with a side reported only: row id -> its reported numbers
    # (protocol -> source, metrics, ...)
    printed: dict[str, dict] = field(default_factory=dict)
    reported_only: list[str] = field(default_factory=list)   # compared rows the harness does not run: undetermined
    bound_reason: str = ""        # an equivalence claim: why its bound, from the paper's words

    @property
    def form(self) -> str:
        return self.comparison.text() + (f" + {self.margin:g}" if self.margin else "")

    @property
    def runs(self) -> bool:
        """Whether the claims job tests it on runs (no compared row is reported only)."""
        return not self.reported_only
