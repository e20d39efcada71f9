"""What each rule's jobs read, for the rules' input functions: pure lookups in the plan, with the
DAG build's checks of the configured files (``InputChecks``, once each) before a job that reads
them is planned. The rules (``workflow/rules/*.smk``) call these with their wildcards; nothing here
needs Snakemake.
"""
from __future__ import annotations

from methods.data.datasets import dataset_paths, dataset_tokenizer
from methods.data.instance_categories import needed_files
from methods.data.multilabel import check_model_labels
from methods.data.multilabel import source_files as multilabel_source_files, source_split as multilabel_source_split
from methods.data.tokenizers import PUNKT_FILES
from methods.data.word_vectors import check_word_vectors
from methods.data.wordpiece import weights_file
from methods.errors import HarnessError
from methods.metrics.protocols import get_protocol, plausible_match_splits
from methods.paths import eval_file, model_file, sims_file, train_log
from methods.plan.dag_checks import InputChecks
from methods.plan.datasets import test_splits
from methods.plan.plan import Plan
from methods.report.figure_kinds import FIGURE_KINDS


class RuleInputs:
    """The inputs of every rule's jobs in one plan; ``checks``: the DAG build's file checks."""

    def __init__(self, plan: Plan, checks: InputChecks):
        self.plan, self.cfg, self.layout, self.checks = plan, plan.cfg, plan.layout, checks

    # -- a dataset's files -------------------------------------------------------------------
    def data(self, dataset: str) -> dict:
        """Karpathy file and image folder of a dataset; real ones are checked first."""
        self.checks.dataset(dataset)
        paths = dataset_paths(self.cfg, dataset)
        images = {"images": str(paths["images_dir"])} if paths["images_dir"] else {}  # multilabel: none
        return {"karpathy": str(paths["karpathy_json"]), **images}

    def configured_vocabulary(self, dataset: str) -> list[str]:
        path = dataset_paths(self.cfg, dataset)["vocab"]
        return [str(path)] if path else []

    def tokenizer(self, dataset: str) -> list[str]:
        """The Punkt model files of a dataset tokenised with nltk: the vocabulary, which holds the
        dataset's tokenised captions, is built again when they change."""
        tokenizer = dataset_tokenizer(self.cfg, dataset)
        return [str(tokenizer.punkt / f) for f in PUNKT_FILES] if tokenizer.punkt else []

    def relevance_files(self, dataset: str) -> dict:
        """What the dataset's protocols read beside the score matrices: the extended-positives file of
        a dataset that has one, with the Karpathy file its sentids and imgids refer to (a protocol
        that needs extended positives on a dataset without them is refused here), and the images'
        COCO instance categories (a DAG output) for plausible-match protocols."""
        paths = dataset_paths(self.cfg, dataset)
        files = {}
        if self.plausible_match_splits(dataset):
            self.checks.dataset(dataset)   # the instance annotations are configured, their files there
            if paths["instance_categories"] is not None:
                files["instance_categories"] = str(paths["instance_categories"])
        if paths["positives"] is None:
            needing = [p for p in self.cfg["datasets"][dataset]["protocols"]
                       if get_protocol(p).relevance == "extended_positives"]
            if needing:
                raise HarnessError(f"datasets.{dataset}.protocols: {', '.join(needing)} need extended positives "
                                   f"(every image each caption describes), which only the synthetic generator writes")
            return files
        return {**files, "positives": str(paths["positives"]), "karpathy": str(paths["karpathy_json"])}

    def plausible_match_splits(self, dataset: str) -> list[str]:
        return plausible_match_splits(self.cfg["datasets"][dataset]["protocols"])

    def instance_annotations(self, dataset: str) -> dict:
        """The instance annotation files the images of a dataset's plausible-match splits are in
        (checked first), and its Karpathy file."""
        paths, index = dataset_paths(self.cfg, dataset), self.checks.split_index(dataset)
        files = sorted({str(f) for s in self.plausible_match_splits(dataset)
                        for f in needed_files(paths["instance_annotations"], index[s],
                                              f"datasets.{dataset}.instance_annotations")})
        return {"karpathy": str(paths["karpathy_json"]), "annotations": files}

    def text_encoder(self, encoder: str, weights: bool = True) -> list[str]:
        """A BERT text encoder's files its jobs read: the folder the DAG pre-trains, or a configured
        folder's vocab.txt, config.json and weights file (the folder checked first); ``weights``
        False: a job whose BERT weights come from elsewhere (a released checkpoint's)."""
        self.checks.text_encoder(encoder, weights)
        path = self.cfg["text_encoders"][encoder]["path"]
        if "pretrain" in self.cfg["text_encoders"][encoder]:
            return [path]
        return [f"{path}/vocab.txt", f"{path}/config.json", *([str(weights_file(path))] if weights else [])]

    def backbone_weights(self, backbone: str) -> list[str]:
        self.checks.backbone(backbone)
        return self.plan.weights_input(backbone)

    def region_grid(self, dataset: str, split: str) -> str:
        region = self.cfg["datasets"][dataset]["features"]["region"]
        return f"{self.layout.features_dir(dataset, region['backbone'])}/{split}_{region['layer']}.npy"

    def synthetic_precomp(self) -> list[str]:
        """The region files of every split of the default synthetic datasets with region features."""
        return [f"{self.layout.precomp_dir(name)}/{split}_ims.npy"
                for name, ds in self.cfg["datasets"].items()
                if ds["kind"] == "synthetic" and name in self.cfg["default_datasets"] and "region" in ds["features"]
                for split in ds["splits"]]

    # -- runs ----------------------------------------------------------------------------------
    def train(self, dataset: str, exp_id: str) -> dict:
        """What a training job reads: the dataset's files, the experiment's config, the vocabulary,
        the train and dev image input and backbone weights, and what the evaluation of the kept
        model on the test splits reads (extended positives; the cached test features when the kept
        epoch may be one with a frozen CNN, or the model reads regions)."""
        exp = self.plan.experiment(dataset, exp_id)
        weights = self.backbone_weights(exp.backbone) if exp.backbone is not None else []
        data = self.data(dataset)  # the dataset's files first (a configured GloVe file exists, its head parses)
        check_word_vectors(self.cfg, dataset, exp.config["model"], exp_id)
        check_model_labels(self.cfg, dataset, exp.config["model"], f"experiment {exp_id} ({exp.config['method']})")
        # a run whose every stage trains the CNN reads images only: no cached features at all
        splits = ["train", "dev", *test_splits(self.cfg, dataset)] if exp.may_evaluate_on_cached_features else []
        encoder = self.plan.text_encoder(exp_id, dataset)
        return {
            **data,
            **self.relevance_files(dataset),
            "cfg": self.layout.dataset_config(dataset),
            "exp": self.layout.experiment_config(dataset, exp_id),
            "vocab": self.plan.text_vocabulary(dataset, exp_id),
            "features": [f for split in splits for f in self.plan.image_feature_files(dataset, exp_id, split)],
            "weights": weights,
            "text_encoder": self.text_encoder(encoder) if encoder else [],
        }

    def train_priority(self, dataset: str, exp_id: str) -> int:
        """A training job's scheduling priority: 1 for a run that fine-tunes its CNN (every step
        runs the backbone: the longest jobs on a CPU, 3x a run on cached features in the default
        job), else 0. Started first, the long jobs no longer end alone while the other cores idle
        (longest-processing-time first); the priority never reaches a result."""
        return int(self.plan.experiment(dataset, exp_id).finetunes)

    def views(self, dataset: str, exp: str, seed: str, split: str) -> dict:
        """What evaluating the views of a trained run reads: its model, the test split's image
        input, the vocabulary and the dataset's relevance files."""
        return {
            **self.relevance_files(dataset),
            "cfg": self.layout.dataset_config(dataset),
            "vocab": self.plan.text_vocabulary(dataset, exp),
            "model": model_file(self.plan.run_dir(dataset, exp, seed)),
            "features": self.plan.image_feature_files(dataset, exp, split),
        }

    def released(self, dataset: str, exp_id: str, checkpoint: str) -> dict:
        """What importing and evaluating an authors' checkpoint reads: the dataset's files, the
        experiment's config, the checkpoint and vocabulary files (config datasets.<name>.released),
        and the test splits' image input (precomputed regions; a model with a CNN reads the images)."""
        member = self.plan.released_member(dataset, exp_id, checkpoint)
        exp = self.plan.experiment(dataset, exp_id)
        features = ([f for split in test_splits(self.cfg, dataset)
                     for f in self.plan.image_feature_files(dataset, exp_id, split)]
                    if exp.backbone is None else [])
        encoder = self.plan.text_encoder(exp_id, dataset)   # a BERT run: its folder's config.json and vocab.txt
        return {
            **self.data(dataset),
            **self.relevance_files(dataset),
            "cfg": self.layout.dataset_config(dataset),
            "exp": self.layout.experiment_config(dataset, exp_id),
            "checkpoint": member.checkpoint_path,
            "vocab": member.vocab_path,
            "features": features,
            "text_encoder": self.text_encoder(encoder, weights=False) if encoder else [],
        }

    def ensemble_members(self, dataset: str, ens: str, seed: str) -> list[str]:
        return self.plan.rows_using(dataset, ens).member_runs(self.layout, dataset, int(seed))

    def row_evals(self, table: str, dataset: str, row_id: str) -> list[str]:
        """The evaluations a row aggregates: its runs' own (or its evaluation view's), or its ensemble's."""
        row = self.plan.row(table, dataset, row_id)
        if not row.runs_models:
            raise HarnessError(f"row '{row_id}' of table {table} is reported only ({row.reported_only}): "
                               f"it has no runs to aggregate")
        splits = test_splits(self.cfg, dataset)
        if row.ensemble_id is None:
            return [eval_file(row.member_runs(self.layout, dataset, s)[0], sp, row.view)
                    for s in row.seeds for sp in splits]
        return [eval_file(self.layout.ensemble_dir(dataset, row.ensemble_id, s), sp)
                for s in row.seeds for sp in splits]

    # -- tables and figures ----------------------------------------------------------------------
    def table(self, table: str, dataset: str) -> dict:
        tbl = self.plan.table(table, dataset)
        self.checks.dataset(dataset)
        return {"spec": self.layout.spec(dataset, "tables", table),
                "rows": [self.layout.row_aggregate(dataset, table, r.id) for r in tbl.rows if r.runs_models]}

    def released_table(self, table: str, dataset: str) -> dict:
        """The released rows of a table: their spec and aggregates (no training run behind them)."""
        tbl = self.plan.table(table, dataset)
        rows = [self.layout.row_aggregate(dataset, table, r.id) for r in tbl.rows if r.released]
        if not rows:
            keys = sorted({k for r in tbl.unconfigured for k in r["keys"]})
            raise HarnessError(f"tables/released/{table}_{dataset}.csv: table {table} has no row of the authors' "
                               f"released weights configured on {dataset}"
                               + (f" (set {', '.join(keys)})" if keys else ""))
        self.checks.dataset(dataset)
        return {"spec": self.layout.spec(dataset, "released_tables", table), "rows": rows}

    def released_tables(self, dataset: str) -> list[str]:
        """Every table's released rows on ``dataset`` (target released_<dataset>); none configured: one line."""
        tables = self.plan.released_tables(dataset)
        if not tables:
            keys = sorted({k for (t, d), tbl in self.plan.tables.items() if d == dataset for r in tbl.unconfigured
                           for k in r["keys"]})
            raise HarnessError(f"target released_{dataset}: no row of the authors' released weights is configured "
                               f"on {dataset}" + (f"; the paper files' released rows read {', '.join(keys)}" if keys
                                                  else " (no paper file declares one for it)"))
        return [f"tables/released/{t}_{dataset}.csv" for t in tables]

    def figure(self, figure: str, dataset: str) -> dict:
        """The spec and row aggregates, plus what the figure's kind needs (FIGURE_KINDS)."""
        fig, spec = self.plan.figure(figure, dataset), self.plan.figure_spec(figure, dataset)
        needs = FIGURE_KINDS.get(fig.kind).needs
        inputs = {"spec": self.layout.spec(dataset, "figures", figure),
                  "rows": [self.layout.row_aggregate(dataset, fig.table, r.id) for r in spec.rows]}
        if "train_logs" in needs:
            inputs["logs"] = [train_log(run) for r in spec.rows for run in r.runs]
        if "trained_runs" in needs:  # the trained models of several rows and their test inputs
            inputs.update(cfg=self.layout.dataset_config(dataset), vocab=self.layout.vocab(dataset),
                          models=[model_file(run) for run in spec.trained.values()],
                          features=sorted({f for r in fig.rows for f in self.plan.image_feature_files(
                              dataset, self.plan.row(fig.table, dataset, r).members[0], spec.split)}))
        if "trained_run" in needs:  # one trained model, its test scores and its inputs
            exp = self.plan.row(fig.table, dataset, fig.row).members[0]
            inputs.update(cfg=self.layout.dataset_config(dataset), vocab=self.layout.vocab(dataset),
                          model=model_file(spec.run), sims=sims_file(spec.run, spec.split),
                          evaluation=eval_file(spec.run, spec.split),   # its model config, its training check
                          features=self.plan.image_feature_files(dataset, exp, spec.split))
        if "positives" in needs:  # what a true match is, where the dataset has extended positives
            inputs.update(self.relevance_files(dataset))
        return inputs

    def figure_arguments(self, figure: str, dataset: str) -> str:
        """Command-line arguments a figure kind needs beyond its spec and row aggregates."""
        fig = self.plan.figure(figure, dataset)
        needs = FIGURE_KINDS.get(fig.kind).needs
        if "trained_run" not in needs and "trained_runs" not in needs:
            return ""
        exp = self.plan.row(fig.table, dataset, fig.row or fig.rows[0]).members[0]
        return (f"--dataset-config {self.layout.dataset_config(dataset)} --vocab {self.layout.vocab(dataset)} "
                f"--features-dir {self.plan.image_feature_dir(dataset, exp)}")

    # -- multi-label sources -------------------------------------------------------------------------
    def multilabel_source(self, dataset: str, split: str | None = None) -> list[str]:
        """The source files an import job of ``dataset`` reads (of ``split``, else of every split),
        checked first; a generated source: its folder, a DAG output."""
        self.checks.dataset(dataset)
        ds, source = self.cfg["datasets"][dataset], dataset_paths(self.cfg, dataset)["source_dir"]
        if "generated_from" in ds:
            return [str(source)]
        return sorted({str(p) for s in ([split] if split else ds["splits"])
                       for p in multilabel_source_files(ds, source, s)})

    def synthetic_tags_from(self, dataset: str) -> dict:
        """The generating synthetic dataset's Karpathy file and region files of this dataset's splits."""
        ds = self.cfg["datasets"][dataset]
        self.checks.dataset(dataset)
        src = ds["generated_from"]["dataset"]
        return {"json": f"{self.layout.data_dir(src)}/dataset_{src}.json",
                "precomp": [f"{self.layout.precomp_dir(src)}/{multilabel_source_split(ds, s)}_{suffix}"
                            for s in ds["splits"] for suffix in ("ims.npy", "boxes.npy", "ids.txt")]}

    def multilabel_classes(self, dataset: str, split: str) -> list[str]:
        """The detector class scores of a split (``{split}_cls.npy``), needed by region-class targets."""
        ds, source = self.cfg["datasets"][dataset], dataset_paths(self.cfg, dataset)["source_dir"]
        self.checks.dataset(dataset)
        if "generated_from" in ds:
            return [str(source)]
        path = source / f"{multilabel_source_split(ds, split)}_cls.npy"
        if not path.is_file():
            raise HarnessError(f"datasets.{dataset}: {path} not found: region-class targets of split "
                               f"'{split}' need its detector class scores (N, regions, classes)")
        return [str(path)]

    # -- claims and reports ----------------------------------------------------------------------------
    def claims(self, paper: str, dataset: str) -> dict:
        if not self.plan.paper_claims(paper, dataset):   # an unknown paper or dataset fails there, in one line
            raise HarnessError(f"target tables/claims_{paper}_{dataset}.csv: paper file '{paper}' states no claim "
                               f"checked on {dataset} (its report, reports/{paper}_{dataset}.md, has its tables)")
        self.checks.dataset(dataset)
        return {"spec": self.layout.spec(dataset, "claims", paper), "cfg": self.layout.dataset_config(dataset),
                **self.relevance_files(dataset), "scores": self.plan.claims_score_files(paper, dataset),
                "rows": self.plan.claims_row_aggregates(paper, dataset)}   # their training checks

    def paper_page(self, paper: str, dataset: str) -> dict:
        """A paper's page: its reproduction report, its tables and claims table (Markdown), and its
        figures on the dataset (those its file declares, then its claims figure)."""
        claims = self.plan.paper_claims(paper, dataset, f"reports/{paper}_{dataset}.html")
        return {"report": f"reports/{paper}_{dataset}.md",
                "tables": [f"tables/{t}_{dataset}.md" for t in self.plan.report_tables(paper, dataset)],
                "claims": [f"tables/claims_{paper}_{dataset}.md"] if claims else [],
                "figures": [f"figures/{name}_{dataset}.png" for (name, d), fig in self.plan.figures.items()
                            if d == dataset and fig.paper == paper]
                           + ([f"figures/claims_{paper}_{dataset}.png"] if claims else [])}

    def report(self, paper: str, dataset: str) -> dict:
        # an unknown paper, or a dataset it has no table on: one line
        claims = self.plan.paper_claims(paper, dataset, f"reports/{paper}_{dataset}.md")
        tables = self.plan.report_tables(paper, dataset)
        return {"spec": self.layout.spec(dataset, "reports", paper),
                "tables": [f"tables/{t}_{dataset}.csv" for t in tables],
                "table_specs": [self.layout.spec(dataset, "tables", t) for t in tables],
                "claims": [f"tables/claims_{paper}_{dataset}.csv"] if claims else []}

    def runtime(self, dataset: str) -> list[str]:
        """What a dataset's runtime table waits for: its default targets (tables, figures, claims,
        reports), and for a synthetic dataset the region files of every split."""
        self.plan.check_target_dataset(dataset, f"tables/runtime_{dataset}")
        regions = [f for f in self.synthetic_precomp() if f.startswith(self.layout.precomp_dir(dataset) + "/")]
        return self.plan.dataset_targets(dataset) + regions
