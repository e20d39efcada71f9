"""What one job writes for another, as typed records: a run's or an ensemble's evaluation of a
split (``eval_<split>.json``), a row's aggregate over its seeds, and the specs the plan writes for
the table, figure, summary, report, claims and runtime jobs.

Each is a frozen dataclass with one ``to_json`` and one ``from_json``, used by the job that writes
the file and by every job that reads it. ``to_json`` writes the fields in their declared order (the
files' key order, so a spec's bytes, and the rules' parameters, stay as they were); ``from_json``
refuses a document with a missing or an unknown key, naming the file and the key: a file written
by another version of the harness stops the reading job with one line instead of a KeyError deep
in a report. Leaf data (metric values, reported numbers, ledgers, training checks, an evaluation's
per-protocol results) stay plain JSON.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from methods.errors import HarnessError
from methods.io import read_json, write_json

R = TypeVar("R", bound="JobRecord")


@dataclass(frozen=True)
class JobRecord:
    """A record one job writes as JSON and others read. ``nested``: fields holding a list of
    records (their class); ``optional``: fields left out of the JSON when None (a key some files
    of the record do not have)."""
    nested: ClassVar[dict[str, type["JobRecord"]]] = {}
    optional: ClassVar[frozenset[str]] = frozenset()
    what: ClassVar[str] = "a job record"

    def to_json(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.name in self.optional:
                continue
            out[f.name] = [v.to_json() for v in value] if f.name in self.nested else value
        return out

    @classmethod
    def from_json(cls: type[R], data: Any, where: str) -> R:
        if not isinstance(data, dict):
            raise HarnessError(f"{where}: expected {cls.what} (a JSON object), found {type(data).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        missing = [n for n in names if n not in data and n not in cls.optional]
        if unknown or missing:
            raise HarnessError(f"{where}: not {cls.what} of this harness version ("
                               + "; ".join(([f"unknown keys {unknown}"] if unknown else [])
                                           + ([f"missing keys {missing}"] if missing else []))
                               + "): re-run the job that writes it")
        values = {}
        for name in names:
            value = data.get(name)
            if name in cls.nested:
                if not isinstance(value, list):
                    raise HarnessError(f"{where}: {name}: expected a list, found {type(value).__name__}")
                value = [cls.nested[name].from_json(v, f"{where}: {name}[{i}]") for i, v in enumerate(value)]
            values[name] = value
        return cls(**values)

    @classmethod
    def read(cls: type[R], path: str | Path) -> R:
        return cls.from_json(read_json(path, cls.what), str(path))

    def write(self, path: str | Path) -> None:
        write_json(path, self.to_json())


# -- evaluations (methods.evaluate, methods.ensemble) -> row aggregates ------------------------

@dataclass(frozen=True)
class RunEvaluation(JobRecord):
    """``eval_<split>.json`` of one trained run (or of one evaluation view of it)."""
    what: ClassVar[str] = "an evaluation of a run (eval_<split>.json)"
    kind: str                    # "single"
    ensemble_size: int
    dataset: str
    split: str
    view: str | None             # an evaluation view of a set model (methods.model_kinds.element_views)
    config: dict                 # the run's resolved config
    config_hash: str
    seed: int
    best_epoch: int
    results: list[dict]          # per protocol: metrics, folds, training check
    provenance: dict
    wall_seconds: dict

    @property
    def config_hashes(self) -> list[str]:
        return [self.config_hash]

    def member_checks(self, protocol: str) -> None:
        return None


@dataclass(frozen=True)
class EnsembleEvaluation(JobRecord):
    """``eval_<split>.json`` of an ensemble: its members' averaged score matrices."""
    what: ClassVar[str] = "an evaluation of an ensemble (eval_<split>.json)"
    kind: str                    # "ensemble"
    ensemble_size: int
    dataset: str
    split: str
    members: list[dict]          # run_dir, config_hash, seed, training_checks (per protocol)
    seed: int
    results: list[dict]
    provenance: dict
    wall_seconds: dict

    @property
    def config_hashes(self) -> list[str]:
        return [m["config_hash"] for m in self.members]

    def member_checks(self, protocol: str) -> list[dict]:
        """Each member's run, seed and training check under ``protocol`` (None: it has none)."""
        return [{"run_dir": m["run_dir"], "seed": m["seed"], "check": (m.get("training_checks") or {}).get(protocol)}
                for m in self.members]


Evaluation = RunEvaluation | EnsembleEvaluation
EVALUATION_KINDS: dict[str, type[Evaluation]] = {"single": RunEvaluation, "ensemble": EnsembleEvaluation}


def read_evaluation(path: str | Path) -> Evaluation:
    """A run's or an ensemble's ``eval_<split>.json``, by its ``kind``."""
    data = read_json(path, "an evaluation (eval_<split>.json)")
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in EVALUATION_KINDS:
        raise HarnessError(f"{path}: not an evaluation of this harness version (kind {kind!r}; known: "
                           f"{', '.join(EVALUATION_KINDS)}): re-run the job that writes it")
    return EVALUATION_KINDS[kind].from_json(data, str(path))


@dataclass(frozen=True)
class RowAggregate(JobRecord):
    """A table row over its seeds (``methods.report.aggregate``): per protocol and metric the mean,
    population std, each seed's value and its seed; and every run's training check."""
    what: ClassVar[str] = "a row aggregate"
    # None: written before the training check, before the environments
    optional: ClassVar[frozenset[str]] = frozenset({"training_checks", "environments"})
    seeds: list[int]
    ensemble_size: int
    config_hashes: list[str]
    protocols: dict[str, dict[str, dict]]   # protocol -> metric -> {mean, std, values, seeds}
    training_checks: list[dict] | None      # per run and protocol: seed, split, protocol, check (members)
    environments: list[dict] | None = None   # each distinct environment of its models, with their seeds


# -- the specs the plan writes for the report jobs (methods.plan.Plan) --------------------------

@dataclass(frozen=True)
class TableRowSpec(JobRecord):
    what: ClassVar[str] = "a table row"
    id: str
    label: str
    paper: str
    seeds: list[int]
    ensemble_size: int
    members: list[str]
    reported: dict                # protocol -> {source, ensemble_size, metrics, metrics_std, note}
    not_reported: str | None
    ledger: list[dict]
    compare_to: str | None
    ran: str
    view: str | None
    reported_only: str | None


@dataclass(frozen=True)
class TableSpec(JobRecord):
    """What the table job of a table on a dataset reads."""
    nested: ClassVar[dict[str, type[JobRecord]]] = {"rows": TableRowSpec}
    what: ClassVar[str] = "a table spec"
    optional: ClassVar[frozenset[str]] = frozenset({"unconfigured"})
    table: str
    dataset: str
    dataset_kind: str
    titles: list[str]
    tolerance: dict
    training_check: dict
    protocols: list[str]
    rows: list[TableRowSpec]
    # released rows left out here: {id, label, keys (the unset config keys)}; None: none declared
    unconfigured: list[dict] | None = None


@dataclass(frozen=True)
class SummaryRowSpec(JobRecord):
    what: ClassVar[str] = "a summary row"
    id: str
    label: str
    seeds: list[int]
    ensemble_size: int
    aggregate: str                # its RowAggregate file


@dataclass(frozen=True)
class SummaryTableSpec(JobRecord):
    nested: ClassVar[dict[str, type[JobRecord]]] = {"rows": SummaryRowSpec}
    what: ClassVar[str] = "a summary table"
    table: str
    rows: list[SummaryRowSpec]      # the rows this paper's file declares (a shared table's others are under theirs)
    shared_with: list[str]          # the names of the other papers whose files hold rows of the table


@dataclass(frozen=True)
class SummaryPaperSpec(JobRecord):
    nested: ClassVar[dict[str, type[JobRecord]]] = {"tables": SummaryTableSpec}
    what: ClassVar[str] = "a summary paper"
    paper: str
    paper_name: str
    tables: list[SummaryTableSpec]
    claims: str | None            # its claims table, where it states claims on the dataset


@dataclass(frozen=True)
class SummarySpec(JobRecord):
    """What the summary of a dataset reads (``methods.report.summary``)."""
    nested: ClassVar[dict[str, type[JobRecord]]] = {"papers": SummaryPaperSpec}
    what: ClassVar[str] = "a summary spec"
    dataset: str
    dataset_kind: str
    reported_dataset: str
    protocol: str                 # the first protocol with a training check: the main metric's
    checked_protocols: list[str]
    training_check: dict
    papers: list[SummaryPaperSpec]


@dataclass(frozen=True)
class ReportSpec(JobRecord):
    """What a paper's reproduction report on a dataset shows beyond its tables and claims."""
    what: ClassVar[str] = "a report spec"
    paper: str
    paper_name: str
    notes: str
    dataset: str
    dataset_kind: str
    reported_dataset: str
    tables: list[str]
    has_claims: bool
    skipped_tables: list[str]
    all_tables_config: str
    bootstrap: dict
    tolerance: dict
    training_check: dict


@dataclass(frozen=True)
class ClaimsRowSpec(JobRecord):
    what: ClassVar[str] = "a compared row"
    table: str
    id: str
    label: str
    seeds: list[int]
    ensemble_size: int
    view: str | None
    reported: dict
    scores: dict[str, list[list[str]]]   # protocol -> per seed, the score files it averages
    evaluations: dict[str, list[str]]    # protocol of pooled metrics -> per seed, the evaluation holding its units
    aggregate: str


@dataclass(frozen=True)
class ClaimSpec(JobRecord):
    what: ClassVar[str] = "a claim"
    id: str
    words: str
    paraphrased: bool
    where: str
    table: str
    form: str
    left: list[str]
    right: list[str]
    left_reduce: str      # how a side's rows give its value: mean, or the best of them (max / min)
    right_reduce: str
    best: str | None      # a best-of-set or rank claim's row claimed best (or within the rank)
    rank: int | None      # ... the rank claimed (1: best of the set)
    bound: float | None   # an equivalence claim: |left - right| <= bound
    bound_reason: str     # ... why that bound
    printed: dict         # the rows compared on printed numbers only: row id -> reported numbers
    reported_only: list[str]   # compared rows the harness does not run: the claim is undetermined
    metric: str
    margin: float
    protocols: list[str]


@dataclass(frozen=True)
class ClaimsSpec(JobRecord):
    """What the claims job of a paper on a dataset reads."""
    nested: ClassVar[dict[str, type[JobRecord]]] = {"claims": ClaimSpec}
    what: ClassVar[str] = "a claims spec"
    paper: str
    paper_name: str
    dataset: str
    dataset_kind: str
    reported_dataset: str
    bootstrap: dict
    training_check: dict
    rows: dict[str, ClaimsRowSpec]       # "<table>/<row id>" -> the row
    claims: list[ClaimSpec]

    def to_json(self) -> dict:
        out = super().to_json()
        out["rows"] = {key: row.to_json() for key, row in self.rows.items()}
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> "ClaimsSpec":
        spec = super().from_json(data, where)
        if not isinstance(spec.rows, dict):
            raise HarnessError(f"{where}: rows: expected a JSON object, found {type(spec.rows).__name__}")
        return dataclasses.replace(spec, rows={key: ClaimsRowSpec.from_json(row, f"{where}: rows.{key}")
                                              for key, row in spec.rows.items()})


@dataclass(frozen=True)
class FigureRowSpec(JobRecord):
    """A row of a figure's table that runs models; ``details``: what the figure's kind adds to it
    (``methods.report.figure_kinds``: the setting the rows vary, the loss weights), written beside
    the row's own keys."""
    what: ClassVar[str] = "a figure row"
    id: str
    label: str
    model: str
    method: str
    loss: str
    seeds: list[int]
    ensemble_size: int
    runs: list[str]
    ran: str
    details: dict

    def to_json(self) -> dict:
        out = super().to_json()
        details = out.pop("details")
        return {**out, **details}

    @classmethod
    def from_json(cls, data: Any, where: str) -> "FigureRowSpec":
        own = [f.name for f in dataclasses.fields(cls) if f.name != "details"]
        if not isinstance(data, dict):
            raise HarnessError(f"{where}: expected {cls.what} (a JSON object), found {type(data).__name__}")
        details = {k: v for k, v in data.items() if k not in own}
        return super().from_json({**{k: v for k, v in data.items() if k in own}, "details": details}, where)


@dataclass(frozen=True)
class FigureSpec(JobRecord):
    """What the drawing job of a paper file's figure reads: the table's rows that run models; a
    figure of several trained models adds each one's first run (``trained``) and the ``split`` it
    is shown on; a figure of one trained model adds the ``row``, its first ``run``, the ``split``
    and the thresholds that say whether it trained (``training_check``)."""
    nested: ClassVar[dict[str, type[JobRecord]]] = {"rows": FigureRowSpec}
    optional: ClassVar[frozenset[str]] = frozenset({"trained", "row", "run", "split", "training_check"})
    what: ClassVar[str] = "a figure spec"
    figure: str
    kind: str
    title: str
    dataset: str
    table: str
    dataset_kind: str
    protocols: list[str]
    rows: list[FigureRowSpec]
    trained: dict[str, str] | None = None   # row id -> its first run
    row: str | None = None
    run: str | None = None
    split: str | None = None
    training_check: dict | None = None


# -- the runtime table (workflow/rules/runtime_jobs.smk -> methods.report.runtime) ----------------

@dataclass(frozen=True)
class RuntimeJobSpec(JobRecord):
    what: ClassVar[str] = "a job of the runtime table"
    rule: str
    file: str            # its Snakemake benchmark file
    papers: list[str]    # keys of the papers whose rows, tables or figures need it; none: the dataset's own


@dataclass(frozen=True)
class RuntimeSpec(JobRecord):
    """What the runtime table of a dataset reads: the jobs behind its default targets, the rules in
    pipeline order and the papers as [key, name] pairs in the config's order."""
    nested: ClassVar[dict[str, type[JobRecord]]] = {"jobs": RuntimeJobSpec}
    what: ClassVar[str] = "a runtime spec"
    dataset: str
    rules: list[str]
    papers: list[list[str]]
    jobs: list[RuntimeJobSpec]
