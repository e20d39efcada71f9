"""The plan: harness config + paper files -> datasets, experiments, runs, ensembles, tables, figures.

The Snakefile builds its DAG from this plan; entry points use it to find paths. Everything
is computed from declarative files; an experiment is named ``<method>-<hash of its resolved
config>`` so a changed hyper-parameter gives a new run directory, never a stale result.
"""
from __future__ import annotations

from methods.errors import HarnessError
from methods.job_records import (ClaimSpec, ClaimsRowSpec, ClaimsSpec, FigureRowSpec, FigureSpec, ReportSpec,
                                  SummaryPaperSpec, SummaryRowSpec, SummarySpec, SummaryTableSpec, TableRowSpec,
                                  TableSpec)
from methods.losses.term_kinds import term_configs
from methods.metrics.declarations import is_pooled
from methods.metrics.protocols import CHECKED_PROTOCOLS, STATISTICS_PROTOCOL, get_protocol
from methods.paths import ResultsLayout, eval_file, sims_file
from methods.plan.datasets import data_kind, reported_dataset, test_splits, unconfigured_smoke, with_smoke_datasets
from methods.plan.papers import ALL_TABLES_CONFIG, PaperCatalogue
from methods.plan.method_files import bert_encoder
from methods.plan.records import Claim, Experiment, Figure, ReleasedMember, Row, Table
from methods.plugins import check_loaded
from methods.report.figure_kinds import FIGURE_KINDS


class Plan:
    """What the DAG builds from a harness config: the paper files' records (``PaperCatalogue``),
    looked up by table, row and dataset; the runs behind each row in the results layout; and the
    spec each report job reads."""

    def __init__(self, cfg: dict):
        """``cfg``: the validated harness config; the plan's ``cfg`` adds each real dataset's smoke run."""
        check_loaded(cfg.get("plugins", []), "methods.model_kinds")   # the models its method files may name
        self.cfg = cfg = with_smoke_datasets(cfg)
        self.layout = ResultsLayout(cfg["results_dir"])
        catalogue = PaperCatalogue(cfg, self.layout)
        self.experiments: dict[tuple[str, str], Experiment] = catalogue.experiments
        self.tables: dict[tuple[str, str], Table] = catalogue.tables
        self.figures: dict[tuple[str, str], Figure] = catalogue.figures
        self.claims: dict[tuple[str, str], list[Claim]] = catalogue.claims
        self.untested_claims = catalogue.untested_claims
        self.papers, self.paper_notes, self.paper_tables = catalogue.papers, catalogue.paper_notes, catalogue.paper_tables
        self.skipped = catalogue.skipped

    # -- queries --------------------------------------------------------------------------
    def check_target_dataset(self, dataset: str, target: str) -> None:
        smoke = unconfigured_smoke(self.cfg, dataset)
        if smoke:
            raise HarnessError(f"target {target}: {smoke}")
        if dataset not in self.cfg["datasets"]:
            raise HarnessError(f"unknown dataset '{dataset}' in target {target}; "
                               f"configured: {', '.join(sorted(self.cfg['datasets']))}")

    def dataset_tables(self, dataset: str, target: str) -> list[str]:
        """The tables declared for a dataset, for a target that reads all of them (none: an error)."""
        self.check_target_dataset(dataset, target)
        names = sorted(t for t, d in self.tables if d == dataset)
        if not names:
            raise HarnessError(f"target {target}: no table is declared for dataset '{dataset}' (tables are declared "
                               f"for: {', '.join(sorted({d for _, d in self.tables}))})")
        return names

    def table(self, name: str, dataset: str) -> Table:
        self.check_target_dataset(dataset, f"{name}_{dataset}")
        if self.skipped(name, dataset):
            raise HarnessError(f"table '{name}' is declared for dataset '{dataset}', but datasets.{dataset}.skip_tables "
                               f"leaves it out; build every table with --configfile {ALL_TABLES_CONFIG}")
        if (name, dataset) not in self.tables:
            known = sorted(f"{t}_{d}" for t, d in self.tables)
            raise HarnessError(f"no table '{name}' is declared for dataset '{dataset}'; declared: {', '.join(known)}")
        return self.tables[(name, dataset)]

    def experiment(self, dataset: str, exp_id: str) -> Experiment:
        try:
            return self.experiments[(dataset, exp_id)]
        except KeyError:
            raise HarnessError(f"unknown experiment '{exp_id}' for dataset '{dataset}'") from None

    def default_targets(self) -> list[str]:
        return [t for dataset in self.cfg["default_datasets"] for t in self.dataset_targets(dataset)]

    def dataset_targets(self, dataset: str) -> list[str]:
        """A dataset's tables, figures, claims, reports and summary (its share of the default targets)."""
        names = sorted(t for t, d in self.tables if d == dataset)
        targets = [f"tables/{t}_{dataset}.{ext}" for t in names for ext in ("csv", "html")]
        if names:
            targets.append(f"figures/reproduced_vs_reported_{dataset}.png")
        targets += sorted(f"figures/{f}_{dataset}.png" for f, d in self.figures if d == dataset)
        for paper in self.papers:
            if dataset in self.paper_datasets(paper):
                targets += [f"reports/{paper}_{dataset}.md", f"reports/{paper}_{dataset}.html"]
            if (paper, dataset) in self.claims:
                targets += [f"tables/claims_{paper}_{dataset}.csv", f"figures/claims_{paper}_{dataset}.png"]
        if names:
            targets += [f"tables/summary_{dataset}.md", f"tables/summary_{dataset}.html"]
        return targets

    # -- claims and reports ---------------------------------------------------------------
    def paper_datasets(self, paper: str) -> list[str]:
        """The datasets a paper file's tables are built for (its reports), in config order."""
        if paper not in self.papers:
            raise HarnessError(f"no paper file has key '{paper}' (config papers give: {', '.join(self.papers)})")
        return [d for d in self.cfg["datasets"] if any((t, d) in self.tables for t in self.paper_tables[paper])]

    def paper_claims(self, paper: str, dataset: str, target: str | None = None) -> list[Claim]:
        """The claims of a paper checked on a dataset (an unknown paper or dataset is an error that
        names ``target``, by default the claims table)."""
        self.check_target_dataset(dataset, target or f"tables/claims_{paper}_{dataset}.csv")
        if dataset not in self.paper_datasets(paper):
            raise HarnessError(f"paper '{paper}' has no table on dataset '{dataset}' (its datasets: "
                               f"{', '.join(self.paper_datasets(paper)) or 'none'})")
        return self.claims.get((paper, dataset), [])

    def _claim_rows(self, paper: str, dataset: str) -> dict[tuple[str, str], Row]:
        """(table, row id) of every row the paper's claims on ``dataset`` compare -> its Row."""
        return {(c.table, r): self.row(c.table, dataset, r) for c in self.paper_claims(paper, dataset) if c.runs
                for r in c.comparison.rows}

    def score_files(self, row: Row, dataset: str, split: str) -> list[list[str]]:
        """Per seed of a row, the score matrices of ``split`` it averages (one per ensemble member;
        an evaluation view's own matrix)."""
        return [[sims_file(run, split, row.view) for run in row.member_runs(self.layout, dataset, s)]
                for s in row.seeds]

    def evaluation_files(self, row: Row, dataset: str, split: str) -> list[str]:
        """Per seed of a single-model row, its run's evaluation of ``split`` (the units of pooled
        metrics; an ensemble has no label predictions, which the paper-file check refuses)."""
        return [eval_file(run, split, row.view) for s in row.seeds for run in row.member_runs(self.layout, dataset, s)]

    def row_aggregate(self, dataset: str, table: str, row_id: str) -> str:
        """The aggregate of a run row's seeds (rule aggregate_row): its metrics and training checks."""
        return self.layout.row_aggregate(dataset, table, row_id)

    def claims_spec(self, paper: str, dataset: str) -> ClaimsSpec:
        """What the claims job of a paper on a dataset reads: each claim, and each compared row's
        seeds, score files per protocol, reported numbers and aggregate (its training checks)."""
        claims = self.paper_claims(paper, dataset)
        ds_cfg = self.cfg["datasets"][dataset]
        rows = {}
        for (table, row_id), row in self._claim_rows(paper, dataset).items():
            compared = [c for c in claims if c.runs and c.table == table and row_id in c.comparison.rows]
            # a pooled metric (micro-F1) is a label head's: its units are in the evaluation, not the score matrix
            pooled = sorted({p for c in compared if is_pooled(c.comparison.metric) for p in c.protocols})
            protocols = sorted({p for c in compared if not is_pooled(c.comparison.metric) for p in c.protocols})
            rows[f"{table}/{row_id}"] = ClaimsRowSpec(
                table=table, id=row_id, label=row.label, seeds=row.seeds, ensemble_size=row.ensemble_size,
                view=row.view, reported=row.reported,
                scores={p: self.score_files(row, dataset, get_protocol(p).split) for p in protocols},
                evaluations={p: self.evaluation_files(row, dataset, get_protocol(p).split) for p in pooled},
                aggregate=self.row_aggregate(dataset, table, row_id))
        return ClaimsSpec(paper=paper, paper_name=self.papers[paper], dataset=dataset, dataset_kind=data_kind(ds_cfg),
                          reported_dataset=reported_dataset(dataset, ds_cfg), bootstrap=self.cfg["claims"],
                          training_check=self.cfg["training_check"], rows=rows,
                          claims=[ClaimSpec(id=c.id, words=c.words, paraphrased=c.paraphrased, where=c.where,
                                            table=c.table, form=c.form, left=list(c.comparison.left),
                                            right=list(c.comparison.right), left_reduce=c.comparison.left_reduce,
                                            right_reduce=c.comparison.right_reduce, best=c.comparison.best,
                                            rank=c.comparison.rank, bound=c.comparison.bound,
                                            bound_reason=c.bound_reason, printed=c.printed,
                                            reported_only=c.reported_only,
                                            metric=c.comparison.metric,
                                            margin=c.margin, protocols=c.protocols) for c in claims])

    def claims_score_files(self, paper: str, dataset: str) -> list[str]:
        spec = self.claims_spec(paper, dataset)
        return sorted({f for row in spec.rows.values() for per_seed in row.scores.values()
                       for files in per_seed for f in files}
                      | {f for row in spec.rows.values() for files in row.evaluations.values() for f in files})

    def claims_row_aggregates(self, paper: str, dataset: str) -> list[str]:
        """The aggregates of the rows the claims compare (their training checks; built for the tables anyway)."""
        return sorted(row.aggregate for row in self.claims_spec(paper, dataset).rows.values())

    def report_spec(self, paper: str, dataset: str) -> ReportSpec:
        """What a paper's reproduction report on a dataset shows beyond its tables and claims."""
        ds_cfg = self.cfg["datasets"][dataset]
        return ReportSpec(paper=paper, paper_name=self.papers[paper], notes=self.paper_notes[paper], dataset=dataset,
                          dataset_kind=data_kind(ds_cfg), reported_dataset=reported_dataset(dataset, ds_cfg),
                          tables=self.report_tables(paper, dataset), has_claims=bool(self.paper_claims(paper, dataset)),
                          skipped_tables=[t for t in self.paper_tables[paper] if self.skipped(t, dataset)],
                          all_tables_config=ALL_TABLES_CONFIG, bootstrap=self.cfg["claims"],
                          tolerance=self.cfg["tolerance"], training_check=self.cfg["training_check"])

    def summary_spec(self, dataset: str) -> SummarySpec:
        """What the summary of a dataset reads (``methods.report.summary``): per paper with a table
        on it, each table's run rows that its file declares (a table several papers' files share
        lists each row once, under its own paper, and names the others) with their aggregates, and
        its claims table where it states claims; the dataset's first protocol with a training check
        gives the main metric."""
        self.check_target_dataset(dataset, f"tables/summary_{dataset}.md")
        ds_cfg = self.cfg["datasets"][dataset]
        papers = []
        holders = {}   # table -> the papers whose files hold rows of it (table1: VSE++, SCAN, MVSA, SGRAF)
        for paper in self.papers:
            if dataset in self.paper_datasets(paper):
                for t in self.report_tables(paper, dataset):
                    holders.setdefault(t, []).append(paper)
        for paper in self.papers:
            if dataset not in self.paper_datasets(paper):
                continue
            tables = [SummaryTableSpec(table=t, rows=[SummaryRowSpec(id=r.id, label=r.label, seeds=r.seeds,
                                                                     ensemble_size=r.ensemble_size,
                                                                     aggregate=self.row_aggregate(dataset, t, r.id))
                                                      for r in self.table(t, dataset).rows
                                                      if r.runs_models and r.paper == paper],
                                       shared_with=[self.papers[p] for p in holders[t] if p != paper])
                      for t in self.report_tables(paper, dataset)]
            papers.append(SummaryPaperSpec(paper=paper, paper_name=self.papers[paper], tables=tables,
                                           claims=(f"tables/claims_{paper}_{dataset}.csv" if (paper, dataset) in self.claims
                                                   else None)))
        checked = [p for p in ds_cfg["protocols"] if get_protocol(p).main_metric is not None]
        if not checked:
            raise HarnessError(f"tables/summary_{dataset}.md: no protocol of datasets.{dataset}.protocols has a main "
                               f"metric to summarise ({', '.join(ds_cfg['protocols'])})")
        return SummarySpec(dataset=dataset, dataset_kind=data_kind(ds_cfg),
                           reported_dataset=reported_dataset(dataset, ds_cfg), protocol=checked[0],
                           checked_protocols=sorted(CHECKED_PROTOCOLS), training_check=self.cfg["training_check"],
                           papers=papers)

    def summary_inputs(self, dataset: str) -> list[str]:
        spec = self.summary_spec(dataset)
        return sorted({row.aggregate for p in spec.papers for t in p.tables for row in t.rows}
                      | {p.claims for p in spec.papers if p.claims})

    def report_tables(self, paper: str, dataset: str) -> list[str]:
        """The paper file's tables built for ``dataset``, in its order."""
        return [t for t in self.paper_tables[paper] if (t, dataset) in self.tables]

    def image_feature_dir(self, dataset: str, exp_id: str) -> str:
        """Where the experiment's image input lives on this dataset (cached features, precomputed regions)."""
        exp = self.experiment(dataset, exp_id)
        return exp.image_input.directory(self.cfg, dataset, exp.config["model"])

    def image_feature_files(self, dataset: str, exp_id: str, split: str) -> list[str]:
        """The files of one split that the experiment's jobs read (checked to be providable first)."""
        exp = self.experiment(dataset, exp_id)
        exp.image_input.check(self.cfg, dataset, exp.config["model"])
        return exp.image_input.files(self.image_feature_dir(dataset, exp_id), split, exp.config["model"])

    def text_encoder(self, exp_id: str, dataset: str) -> str | None:
        """The BERT text encoder (config text_encoders) the experiment's text block reads, or None."""
        return bert_encoder(self.experiment(dataset, exp_id).config["model"])

    def text_vocabulary(self, dataset: str, exp_id: str) -> str:
        """The vocabulary file the experiment's jobs read: the dataset's words (vocab.json), or its
        captions tokenised for the experiment's BERT (``methods.data.wordpiece``)."""
        encoder = self.text_encoder(exp_id, dataset)
        return self.layout.vocab(dataset) if encoder is None else self.layout.wordpiece_captions(dataset, encoder)

    def run_dir(self, dataset: str, exp_id: str, seed: int) -> str:
        return self.layout.run_dir(dataset, exp_id, seed)

    def experiment_views(self, dataset: str) -> dict[str, list[str]]:
        """Experiment id -> the evaluation views its rows declare on ``dataset`` (sorted), for the
        experiments that have any: one job per run evaluates them all."""
        views: dict[str, set[str]] = {}
        for (_, d), tbl in sorted(self.tables.items()):
            for row in tbl.rows:
                if d == dataset and row.view is not None:
                    views.setdefault(row.members[0], set()).add(row.view)
        return {exp: sorted(v) for exp, v in views.items()}

    def row_runs(self, row: Row, dataset: str) -> list[str]:
        """Run directories behind a row: every seed of every ensemble member."""
        return row.run_dirs(self.layout, dataset)

    def figure(self, name: str, dataset: str) -> Figure:
        self.check_target_dataset(dataset, f"{name}_{dataset}")
        if (name, dataset) not in self.figures:
            known = sorted(f"{f}_{d}" for f, d in self.figures)
            raise HarnessError(f"no figure '{name}' is declared for dataset '{dataset}'; declared: {', '.join(known)}")
        return self.figures[(name, dataset)]

    def figure_spec(self, name: str, dataset: str) -> FigureSpec:
        fig = self.figure(name, dataset)
        kind = FIGURE_KINDS.get(fig.kind)
        # trained rows only: reported-only rows have no runs, released rows no training (figures name neither)
        run_rows = [r for r in self.table(fig.table, dataset).rows if r.runs_models and not r.released]
        configs = [self.experiment(dataset, row.members[0]).config for row in run_rows]
        # what the drawing compares across the rows (the kind's), beside each row's own
        details = (kind.row_details(run_rows, configs, f"figure {name}") if kind.row_details is not None
                   else [{} for _ in run_rows])
        rows = [FigureRowSpec(id=row.id, label=row.label, model=cfg["model"]["kind"], method=cfg["method"],
                              loss="+".join(t["kind"] for t in term_configs(cfg["loss"])), seeds=row.seeds,
                              ensemble_size=row.ensemble_size, runs=self.row_runs(row, dataset), ran=row.ran,
                              details=extra)
                for row, cfg, extra in zip(run_rows, configs, details, strict=True)]
        extra = {}
        if fig.rows is not None and kind.ordered_rows:   # e.g. curves from the rows' training logs,
            by_id = {r.id: r for r in rows}              # in the figure's order (first: solid)
            rows = [by_id[r] for r in fig.rows]
        elif fig.rows is not None:  # several trained models: each row's first run
            extra.update(trained={r: self.first_run(fig.table, dataset, r) for r in fig.rows},
                         split=test_splits(self.cfg, dataset)[0])
        if fig.row is not None:  # one trained model: the row's first member, first seed, first test split,
            # and the thresholds that say whether it trained (a figure of an untrained one says so)
            kind.check_model(self.experiment(dataset, self.row(fig.table, dataset, fig.row).members[0]).config["model"],
                             f"figure {name}, row '{fig.row}'")
            extra.update(row=fig.row, run=self.first_run(fig.table, dataset, fig.row),
                         split=test_splits(self.cfg, dataset)[0], training_check=self.cfg["training_check"])
        return FigureSpec(figure=name, kind=fig.kind, title=fig.title, dataset=dataset, table=fig.table,
                          dataset_kind=data_kind(self.cfg["datasets"][dataset]),
                          protocols=self.cfg["datasets"][dataset]["protocols"], rows=rows, **extra)

    def first_run(self, table: str, dataset: str, row_id: str) -> str:
        """The run a figure inspects for a row: its first member's run of its first seed."""
        row = self.row(table, dataset, row_id)
        return row.member_runs(self.layout, dataset, row.seeds[0])[0]

    def row(self, table: str, dataset: str, row_id: str) -> Row:
        for row in self.table(table, dataset).rows:
            if row.id == row_id:
                return row
        raise HarnessError(f"table {table}_{dataset} has no row '{row_id}'")

    def released_tables(self, dataset: str) -> list[str]:
        """The tables with rows of the authors' released weights configured on ``dataset``."""
        self.check_target_dataset(dataset, f"released_{dataset}")
        return sorted(t for (t, d), tbl in self.tables.items() if d == dataset and any(r.released for r in tbl.rows))

    def table_spec(self, table: str, dataset: str, released_only: bool = False) -> TableSpec:
        """A table's spec; ``released_only``: its rows of the authors' released weights alone
        (tables/released/<table>_<dataset>: those rows need no training run)."""
        tbl = self.table(table, dataset)
        rows = [r for r in tbl.rows if r.released or not released_only]
        return TableSpec(
            table=table, dataset=dataset, dataset_kind=data_kind(self.cfg["datasets"][dataset]), titles=tbl.titles,
            tolerance=self.cfg["tolerance"], training_check=self.cfg["training_check"],
            protocols=self.cfg["datasets"][dataset]["protocols"] + ([STATISTICS_PROTOCOL] if tbl.statistics else []),
            unconfigured=tbl.unconfigured or None,
            rows=[TableRowSpec(id=r.id, label=r.label, paper=r.paper, seeds=r.seeds, ensemble_size=r.ensemble_size,
                               members=r.experiments, reported=r.reported, not_reported=r.not_reported, ledger=r.ledger,
                               compare_to=r.compare_to, ran=r.ran, view=r.view, reported_only=r.reported_only)
                  for r in rows])

    def weights_input(self, backbone: str) -> list[str]:
        """The weights file a job needs as input: a DAG output, a configured file, or nothing ('none')."""
        weights = self.cfg["backbones"][backbone]["weights"]
        return [] if weights in (None, "none") else [weights]

    def released_members(self, dataset: str) -> dict[tuple[str, str], ReleasedMember]:
        """(experiment, checkpoint key) -> the released member, over every table's rows on ``dataset``
        (one import and evaluation each, whichever rows share it)."""
        return {(m.exp, m.checkpoint): m for (_, d), tbl in sorted(self.tables.items()) if d == dataset
                for row in tbl.rows for m in row.released}

    def released_member(self, dataset: str, exp: str, checkpoint: str) -> ReleasedMember:
        try:
            return self.released_members(dataset)[(exp, checkpoint)]
        except KeyError:
            raise HarnessError(f"no released row on dataset '{dataset}' imports checkpoint '{checkpoint}' into "
                               f"experiment '{exp}'") from None

    def rows_using(self, dataset: str, ensemble_id: str) -> Row:
        for (t, d), tbl in self.tables.items():
            for row in tbl.rows:
                if d == dataset and row.ensemble_id == ensemble_id:
                    return row
        raise HarnessError(f"unknown ensemble '{ensemble_id}' for dataset '{dataset}'")
