"""Paper files, loaded and checked into the plan's records: every table a paper file declares, its
rows (each member's experiment resolved, its ledger and what it runs), its figures and its claims,
with each name checked against the harness config (datasets, backbones, protocols, seeds)."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from methods import numerics
from methods.config import REPO_ROOT, config_hash, dotted_to_nested, load_yaml, validate
from methods.data.region_boxes import missing_box_files
from methods.errors import HarnessError
from methods.fidelity import (merge_ledgers, row_ledger, smoke_deviation, source_ledger, stand_in_deviation,
                              tokenizer_deviation)
from methods.metrics.declarations import base_metrics, check_claimable, is_pooled
from methods.metrics.protocols import STATISTICS_PROTOCOL, get_protocol
from methods.model_kinds import MODEL_KINDS, DescribeContext, describe_run
from methods.model_kinds.element_views import check_elements, view_name
from methods.model_kinds.method_schema import validate_layer, validate_method
from methods.paths import ResultsLayout
from methods.plan.datasets import data_kind, reported_dataset, reported_shown, source_dataset, stand_in_protocols
from methods.plan.method_files import (bert_encoder, check_method_file, load_method_file, model_kind,
                                       resolve_method_config)
from methods.plan.records import ENSEMBLE_SEED_STRIDE, Claim, Experiment, Figure, ReleasedMember, Row, Table
from methods.plugins import file_root
from methods.released.importers import RELEASED_NOTES, released_code
from methods.report.claim_form import best_of, parse_comparison


def smoke_training(cfg: dict, smoke: dict, where: str) -> dict:
    """An experiment's config on a smoke run (``datasets.<name>.smoke``): every training stage at
    most ``smoke.epochs`` epochs, each of at most ``smoke.batches_per_epoch`` batches."""
    training = cfg["training"]
    stages = [{**stage, "epochs": min(stage["epochs"], smoke["epochs"])} for stage in training["stages"]]
    out = {**cfg, "training": {**training, "stages": stages, "max_batches_per_epoch": smoke["batches_per_epoch"]}}
    return validate_method(out, where)


def check_reported(by_protocol: dict, where: str) -> None:
    """Reported numbers name registered protocols, and metrics those protocols report."""
    for protocol, reported in by_protocol.items():
        known = get_protocol(protocol).metrics
        for block in ("metrics", "metrics_std"):
            unknown = sorted(set(reported.get(block) or {}) - set(known))
            if unknown:
                raise HarnessError(f"{where}: reported {block} {unknown} under protocol {protocol}, which reports "
                                   f"{', '.join(known)}")


# A config file that builds every declared table on the synthetic datasets (datasets.<name>.skip_tables: [])
ALL_TABLES_CONFIG = "config/synthetic_all_tables.yaml"


def repository_tables() -> dict[str, set[str]]:
    """Dataset -> the tables the harness's own paper files (methods/papers) declare for it."""
    names: dict[str, set[str]] = {}
    for path in sorted((REPO_ROOT / "methods" / "papers").glob("*.yaml")):
        for name, table in (load_yaml(path).get("tables") or {}).items():
            for dataset in table.get("datasets") or []:
                names.setdefault(dataset, set()).add(name)
    return names


class PaperCatalogue:
    """The paper files of a harness config, loaded and checked: ``experiments``, ``tables``,
    ``figures`` and ``claims`` (frozen records), the papers' names, notes and tables."""

    def __init__(self, cfg: dict, layout: ResultsLayout):
        self.cfg = cfg
        self.layout = layout
        self._check_config_names()
        self.experiments: dict[tuple[str, str], Experiment] = {}
        self.tables: dict[tuple[str, str], Table] = {}
        self.figures: dict[tuple[str, str], Figure] = {}
        self.papers: dict[str, str] = {}   # paper key -> paper (as its file names it), in config order
        self.paper_notes: dict[str, str] = {}
        self.paper_tables: dict[str, list[str]] = {}   # paper key -> the tables its file declares
        self.claims: dict[tuple[str, str], list[Claim]] = {}   # (paper key, dataset) -> claims checked there
        # (paper key, dataset) -> (claim id, config keys) of claims not tested there: a compared row is left out
        self.untested_claims: dict[tuple[str, str], list[tuple[str, list[str]]]] = {}
        # (table, dataset) of every table a paper file declares, built or left out by datasets.<name>.skip_tables
        self.declared_tables: set[tuple[str, str]] = set()
        self._method_files: dict[Path, dict] = {}
        self._released: dict[tuple[str, str, str], tuple[ReleasedMember, str]] = {}   # one import per checkpoint
        stated = []
        for paper_file in cfg["papers"]:
            path = REPO_ROOT / paper_file if not Path(paper_file).is_absolute() else Path(paper_file)
            stated.append((path, self._add_paper(path)))
        for path, paper in stated:   # after every paper: a claim may compare with another file's row of its table
            self._add_claims(path, paper)
        repository = None   # read once, where a name is not declared by the configured papers
        for dataset, ds_cfg in cfg["datasets"].items():
            declared = {name for name, ds in self.declared_tables if ds == dataset}
            named = [(f"table_seeds.{name}", name) for name in ds_cfg.get("table_seeds", {})]
            named += [(f"skip_tables.{i}", name) for i, name in enumerate(ds_cfg.get("skip_tables", []))]
            unknown = [(key, name) for key, name in named if name not in declared]
            if unknown:  # a table of one of the harness's own paper files left out of `papers` is no typo
                repository = repository_tables() if repository is None else repository
                unknown = [(key, name) for key, name in unknown if name not in repository.get(dataset, set())]
            for key, name in unknown:
                raise HarnessError(f"datasets.{dataset}.{key}: no table '{name}' is declared for "
                                   f"{dataset} (declared: {', '.join(sorted(declared)) or 'none'})")

    def _check_config_names(self) -> None:
        """Every dataset or backbone the harness config names is one it configures: a misspelled
        name would build nothing (default_datasets) or show no reported numbers (stands_in_for)."""
        datasets, backbones = self.cfg["datasets"], self.cfg["backbones"]
        named = [(f"default_datasets.{i}", name) for i, name in enumerate(self.cfg["default_datasets"])]
        named += [(f"backbones.{b}.pretrain.dataset", bb["pretrain"]["dataset"])
                  for b, bb in backbones.items() if "pretrain" in bb]
        named += [(f"datasets.{d}.stands_in_for.dataset", ds["stands_in_for"]["dataset"])
                  for d, ds in datasets.items() if "stands_in_for" in ds]
        for key, name in named:
            if name not in datasets:
                raise HarnessError(f"{key}: no dataset '{name}' is configured (datasets: {', '.join(sorted(datasets))})")
        for d, ds in datasets.items():
            feats = ds["features"]
            if feats["crop"] > feats["resize"]:  # torchvision's CenterCrop pads what it cannot cut
                raise HarnessError(f"datasets.{d}.features.crop: {feats['crop']} is larger than resize "
                                   f"{feats['resize']} (the shorter image side after resizing), so the centre crop "
                                   f"would pad the images with black; set crop <= resize")
            region = ds["features"].get("region")
            if region is not None and region["backbone"] not in backbones:
                raise HarnessError(f"datasets.{d}.features.region.backbone: no backbone '{region['backbone']}' is "
                                   f"configured (backbones: {', '.join(sorted(backbones))})")
            stand_in = ds.get("stands_in_for")
            for protocol in stand_in_protocols(ds):
                if protocol not in datasets[stand_in["dataset"]]["protocols"]:
                    raise HarnessError(f"datasets.{d}.stands_in_for.protocol: {protocol} is not a protocol of "
                                       f"{stand_in['dataset']} (datasets.{stand_in['dataset']}.protocols: "
                                       f"{', '.join(datasets[stand_in['dataset']]['protocols'])})")

    def method_file(self, path: Path) -> dict:
        """A method file, loaded and validated once per plan."""
        if path not in self._method_files:
            raw = load_method_file(path)
            check_method_file(raw, path, list(self.cfg["datasets"]))
            self._method_files[path] = raw
        return self._method_files[path]

    def resolve_experiment(self, method_file: Path, dataset: str, overrides: dict,
                           variants: list[str] | None = None) -> Experiment:
        """An experiment on ``dataset``: the method's config with the preset of the dataset (a smoke
        run: of the dataset it samples, then its caps, ``smoke_training``)."""
        ds_cfg = self.cfg["datasets"][dataset]
        cfg = resolve_method_config(method_file, source_dataset(dataset, ds_cfg), overrides, variants,
                                    self.cfg["backbones"], self.method_file(method_file))
        if "smoke" in ds_cfg:
            cfg = smoke_training(cfg, ds_cfg["smoke"], f"{method_file} (dataset {dataset})")
        cfg = numerics.experiment_config(cfg, ds_cfg)
        exp = Experiment(f"{cfg['method']}-{config_hash(cfg)}", dataset, cfg["method"], cfg)
        self.experiments.setdefault((dataset, exp.id), exp)
        return exp

    def _add_paper(self, path: Path) -> dict:
        """A paper file, loaded and checked: its name, notes and tables recorded, each of its tables
        built on every dataset that builds it, then its figures."""
        paper = validate(load_yaml(path), "paper", str(path))
        if paper["key"] in self.papers:
            raise HarnessError(f"{path}: key '{paper['key']}' is the key of another paper file in config papers")
        self.papers[paper["key"]] = paper["paper"]
        self.paper_notes[paper["key"]] = paper.get("notes", "")
        self.paper_tables[paper["key"]] = list(paper["tables"])
        for table_name, table in paper["tables"].items():
            self._add_table(path, paper, table_name, table)
        for fig_name, fig in (paper.get("figures") or {}).items():
            self._add_figure(path, paper, fig_name, fig)
        return paper

    def _add_table(self, path: Path, paper: dict, table_name: str, table: dict) -> None:
        """A paper file's table: its name and datasets checked, its rows checked, declared on its
        datasets (and their smoke runs) and built on those that build it."""
        if table_name in ("runtime", "summary"):
            raise HarnessError(f"{path}: table name '{table_name}' is taken by the {table_name} tables "
                               f"(tables/{table_name}_<dataset>)")
        if table_name == "claims" or table_name.startswith("claims_"):
            raise HarnessError(f"{path}: table name '{table_name}': 'claims' and names starting 'claims_' are taken "
                               f"by the claim tables (tables/claims_<paper>_<dataset>)")
        for dataset in table["datasets"]:
            if dataset not in self.cfg["datasets"]:
                raise HarnessError(f"{path}: tables.{table_name}.datasets: no dataset '{dataset}' is configured "
                                   f"(datasets: {', '.join(sorted(self.cfg['datasets']))})")
        for row in table["rows"]:
            self._check_row(path, table_name, table["datasets"], row, paper)
        datasets = self._with_smoke(table["datasets"])
        self.declared_tables.update((table_name, dataset) for dataset in datasets)
        for dataset in self._built_on(table_name, datasets):
            self._build_table(path, paper, table_name, table, dataset)

    def _build_table(self, path: Path, paper: dict, table_name: str, table: dict, dataset: str) -> None:
        """A paper file's table on ``dataset``, each row by its kind (reported only, the authors'
        released weights, trained here); a table another paper file declares too gets these rows
        after that file's."""
        ds_cfg = self.cfg["datasets"][dataset]
        reported_key = reported_dataset(dataset, ds_cfg)
        key = (table_name, dataset)
        known = self.tables.get(key)   # a table two paper files declare: one table, both files' rows
        rows = list(known.rows) if known else []
        unconfigured = list(known.unconfigured) if known else []
        for row in table["rows"]:
            if row["id"] in [*(r.id for r in rows), *(r["id"] for r in unconfigured)]:
                raise HarnessError(f"{path}: row id '{row['id']}' appears twice in table {table_name}")
            reported = reported_shown(row.get("reported", {}).get(reported_key, {}), ds_cfg)
            if "reported_only" in row:   # the paper's numbers beside ours: nothing to run
                rows.append(Row(table_name, row["id"], row["label"], paper["key"], seeds=[], members=[],
                                reported=reported, not_reported=row.get("not_reported"),
                                reported_only=row["reported_only"]))
            elif "released" in row:   # the authors' checkpoints: imported and evaluated, not trained
                released = self._released_row(path, table_name, row, paper, dataset, reported)
                if isinstance(released, Row):
                    rows.append(released)
                elif released:
                    unconfigured.append(released)
            else:
                trained = self._trained_row(path, table_name, row, paper, dataset, reported)
                unset, needs = self._unset_inputs(trained, dataset)
                if unset:   # a BERT folder or optional CNN weights not configured: left out, naming the keys
                    unconfigured.append({"id": row["id"], "label": row["label"], "keys": unset, "needs": needs})
                    continue
                rows.append(trained)
                self._check_distinct_runs(path, rows[-1], dataset)
        self.tables[key] = Table(table_name, dataset,
                                 titles=[*(known.titles if known else []), f"{paper['paper']}: {table['title']}"],
                                 rows=rows, statistics=bool(known and known.statistics)
                                 or table.get("embedding_statistics", False), unconfigured=unconfigured)
        self._check_comparisons(path, self.tables[key])

    def _trained_row(self, path: Path, table_name: str, row: dict, paper: dict, dataset: str, reported: dict) -> Row:
        """A row the harness trains on ``dataset``: its members' experiments (one, or an
        ensemble's), what they ran, their merged ledger, its evaluation view and its seeds."""
        ds_cfg = self.cfg["datasets"][dataset]
        members = row.get("ensemble") or [{"method": row["method"], "overrides": row.get("overrides", {}),
                                           "variants": row.get("variants", [])}]
        exp_ids, ledgers, ran = [], [], []
        for m in members:
            exp_id, member_ran, ledger = self._row_member(path, row, m, paper, dataset)
            exp_ids.append(exp_id)
            ran.append(member_ran)
            ledgers.append(ledger)
        view = self._row_view(path, table_name, row, dataset, exp_ids)
        seeds = ds_cfg.get("table_seeds", {}).get(table_name, ds_cfg.get("seeds", row["seeds"]))
        seeds = seeds[:1] if "smoke" in ds_cfg else seeds   # a smoke run: one seed per row
        return Row(table_name, row["id"], row["label"], paper["key"], seeds=seeds, members=exp_ids,
                   reported=reported, not_reported=row.get("not_reported"),
                   ledger=merge_ledgers(ledgers), compare_to=row.get("compare_to"),
                   ran=" + ".join(dict.fromkeys(ran)), view=view,
                   overrides=dict(row.get("overrides") or {}))

    def _unset_inputs(self, row: Row, dataset: str) -> tuple[list[str], str]:
        """The keys of what a trained row's members need and the config leaves unset: BERT folders
        (``text_encoders.<name>.path``) and the weights of backbones marked ``optional``; and what
        those are, in words. A required backbone's unset weights stay a DAG-build error."""
        bert = self._unset_text_encoders(row, dataset)
        cnn = sorted({f"backbones.{name}.weights" for exp_id in row.members
                      for name in [self.experiments[(dataset, exp_id)].config["model"].get("backbone")]
                      if name and self.cfg["backbones"][name].get("optional")
                      and self.cfg["backbones"][name].get("weights") is None})
        boxes = self._missing_region_boxes(row, dataset)
        needs = " and ".join((["a BERT folder"] if bert else []) + (["the CNN's weights"] if cnn else [])
                             + (["each region's box"] if boxes else []))
        return [*bert, *cnn, *boxes], needs

    def _missing_region_boxes(self, row: Row, dataset: str) -> list[str]:
        """For a row whose model reads its regions' boxes (PFAN): the dataset's box files missing
        beside its region features, as one entry naming the key and the files."""
        if not any(MODEL_KINDS.get(self.experiments[(dataset, exp_id)].config["model"]["kind"]).reads_region_boxes
                   for exp_id in row.members):
            return []
        missing = missing_box_files(self.cfg, dataset)
        return [f"datasets.{dataset}.precomp_dir (missing there: {', '.join(p.name for p in missing)}, "
                f"docs/real-data.md)"] if missing else []

    def _unset_text_encoders(self, row: Row, dataset: str) -> list[str]:
        """The ``text_encoders.<name>.path`` keys a trained row's members need and the config leaves unset."""
        keys = set()
        for exp_id in row.members:
            text = self.experiments[(dataset, exp_id)].config["model"].get("text") or {}
            if text.get("kind") != "bert":
                continue
            encoders = self.cfg.get("text_encoders") or {}
            if text["encoder"] not in encoders:
                raise HarnessError(f"row '{row.id}' of table {row.table}: model.text.encoder '{text['encoder']}' is "
                                   f"not configured under text_encoders (configured: {', '.join(sorted(encoders)) or 'none'})")
            if not encoders[text["encoder"]].get("path"):
                keys.add(f"text_encoders.{text['encoder']}.path")
        return sorted(keys)

    def _row_member(self, path: Path, row: dict, m: dict, paper: dict, dataset: str) -> tuple[str, str, dict]:
        """One member ``m`` of a trained row on ``dataset``: its experiment's id, what it runs and
        its ledger against its source code (with the dataset's own deviations: tokenizer, stand-in
        data, smoke run)."""
        ds_cfg = self.cfg["datasets"][dataset]
        if m["method"] not in paper["methods"]:
            raise HarnessError(f"{path}: row '{row['id']}' names unknown method '{m['method']}' "
                               f"(declared: {', '.join(sorted(paper['methods']))})")
        method_file = file_root(path) / paper["methods"][m["method"]]
        exp = self.resolve_experiment(method_file, dataset, m.get("overrides", {}), m.get("variants", []))
        ran = describe_run(exp.config, DescribeContext(ds_cfg, self.cfg["backbones"]))
        source = source_ledger(self.method_file(method_file), m.get("variants", []), reported_dataset(dataset, ds_cfg))
        stand_in = (() if "stands_in_for" not in ds_cfg else
                    (stand_in_deviation(dataset, ds_cfg, exp.image_input.name, exp.config["model"]),))
        stand_in += (smoke_deviation(dataset, ds_cfg),) if "smoke" in ds_cfg else ()
        ledger = row_ledger(exp.config, source, f"{path}: row '{row['id']}'",
                            (*tokenizer_deviation(dataset, ds_cfg, source), *stand_in))
        return exp.id, ran, ledger

    def _add_figure(self, path: Path, paper: dict, fig_name: str, fig: dict) -> None:
        """A paper file's figure, on every dataset its table is built on: its name, table and rows checked."""
        if fig_name == "claims" or fig_name.startswith("claims_"):
            raise HarnessError(f"{path}: figure name '{fig_name}': 'claims' and names starting 'claims_' are taken "
                               f"by the claim figures (figures/claims_<paper>_<dataset>.png)")
        if fig["table"] not in paper["tables"]:
            raise HarnessError(f"{path}: figure '{fig_name}' names table '{fig['table']}', which this paper "
                               f"file does not declare")
        for dataset in self._with_smoke(paper["tables"][fig["table"]]["datasets"]):
            if (fig["table"], dataset) in self.tables:
                if (fig_name, dataset) in self.figures:
                    raise HarnessError(f"{path}: figure '{fig_name}' is declared by two paper files")
                self._check_figure_rows(path, paper, fig_name, fig)
                self.figures[(fig_name, dataset)] = Figure(fig_name, dataset, fig["kind"], fig["table"],
                                                           fig["title"], row=fig.get("row"), rows=fig.get("rows"),
                                                           paper=paper["key"])

    @staticmethod
    def _check_figure_rows(path: Path, paper: dict, fig_name: str, fig: dict) -> None:
        """The rows a figure names are rows of its table with a trained model to show."""
        table_rows = {r["id"]: r for r in paper["tables"][fig["table"]]["rows"]}
        for name in ([fig["row"]] if fig.get("row") else []) + (fig.get("rows") or []):
            if name not in table_rows:
                raise HarnessError(f"{path}: figure '{fig_name}' names row '{name}', which table "
                                   f"'{fig['table']}' does not have")
            if "reported_only" in table_rows[name] or "released" in table_rows[name]:
                what = "reported only" if "reported_only" in table_rows[name] else "the authors' weights"
                raise HarnessError(f"{path}: figure '{fig_name}' names row '{name}', which is {what}: "
                                   f"it has no trained model to show")

    def _released_row(self, path: Path, table_name: str, row: dict, paper: dict, dataset: str,
                      reported: dict) -> Row | dict:
        """A row of the authors' released checkpoints on ``dataset``: their files (config keys of
        ``datasets.<dataset>.released``, each checked to exist) imported into the row's method
        config; where a key is unset, what the table says instead (its id, label and the keys);
        on the built-in synthetic data, nothing ({})."""
        where = f"{path}: table {table_name} row '{row['id']}'"
        ds_cfg = self.cfg["datasets"][dataset]
        spec = row["released"]
        keys = [spec["checkpoint"]] if isinstance(spec["checkpoint"], str) else list(spec["checkpoint"])
        stray = sorted(set(spec.get("expect") or {}) - set(keys))
        if stray:
            raise HarnessError(f"{where}: released.expect names {', '.join(stray)}, which is not one of its "
                               f"checkpoints ({', '.join(keys)})")
        if row["method"] not in paper["methods"]:
            raise HarnessError(f"{where} names unknown method '{row['method']}' "
                               f"(declared: {', '.join(sorted(paper['methods']))})")
        method_file = file_root(path) / paper["methods"][row["method"]]
        kind = model_kind(self.method_file(method_file))
        code = released_code(kind, where)   # checked on every dataset
        if data_kind(ds_cfg) == "synthetic":   # the built-in data: no released weights exist for them
            return {}
        files = ds_cfg.get("released") or {}
        configured = source_dataset(dataset, ds_cfg)   # a smoke run's files are its dataset's
        exp = self.resolve_experiment(method_file, dataset, {}, [])
        encoder = bert_encoder(exp.config["model"])
        # a BERT run: the folder's vocab.txt is the vocabulary (the authors release none with it)
        if (encoder is None) != ("vocab" in spec):
            raise HarnessError(f"{where}: released.vocab " + (
                f"is set, but method '{row['method']}' reads BERT's WordPiece pieces (text_encoders.{encoder}): "
                f"its vocabulary is the BERT folder's" if encoder else
                f"is not set: method '{row['method']}' reads words, from the vocabulary released with the weights"))
        file_keys = [*keys, *([spec["vocab"]] if encoder is None else [])]
        unset = [f"datasets.{configured}.released.{k}" for k in file_keys if k not in files]
        bert_unset = [] if encoder is None or self.cfg["text_encoders"][encoder].get("path") else \
            [f"text_encoders.{encoder}.path"]
        if unset or bert_unset:
            needs = " and ".join((["the authors' released weights"] if unset else []) + (["a BERT folder"] if bert_unset else []))
            return {"id": row["id"], "label": row["label"], "keys": [*unset, *bert_unset], "needs": needs}
        for key in file_keys:
            if not Path(files[key]).expanduser().is_file():
                raise HarnessError(f"datasets.{configured}.released.{key}: file not found: {files[key]} (the authors' "
                                   f"released file that {where} evaluates)")
        source = source_ledger(self.method_file(method_file), [], reported_dataset(dataset, ds_cfg))
        # trained by the authors: no switch of ours ran; the captions are still tokenised here
        smoke = (smoke_deviation(dataset, ds_cfg, trained=False),) if "smoke" in ds_cfg else ()
        ledger = {"code": f"{code} (the authors' released weights)", "switches": [],
                  "deviations": [asdict(d) for d in (*tokenizer_deviation(dataset, ds_cfg, source), *smoke)]}
        vocab_path = (str(Path(files[spec["vocab"]]).expanduser()) if encoder is None
                      else self.layout.wordpiece_captions(dataset, encoder))
        members = tuple(ReleasedMember(exp.id, k, spec.get("vocab"), str(Path(files[k]).expanduser()), vocab_path,
                                       tuple(sorted((spec.get("expect") or {}).get(k, {}).items()))) for k in keys)
        for member in members:   # one import per checkpoint and experiment: every row must say the same of it
            known = self._released.setdefault((dataset, member.exp, member.checkpoint), (member, where))
            if (known[0].vocab, known[0].expect) != (member.vocab, member.expect):
                raise HarnessError(f"{where}: checkpoint '{member.checkpoint}' is imported with vocabulary "
                                   f"'{member.vocab}' and expect {dict(member.expect)}, but {known[1]} imports it "
                                   f"with '{known[0].vocab}' and {dict(known[0].expect)}: one import serves both rows")
        vocabulary = f"vocabulary {spec['vocab']}" if encoder is None else f"BERT folder text_encoders.{encoder}"
        ran = (f"the authors' released weights ({code}): "
               + " + ".join(f"{k} ({Path(files[k]).name})" for k in keys) + f", {vocabulary}"
               + "".join(f"; {note}" for note in [RELEASED_NOTES.get(kind)] if note))
        return Row(table_name, row["id"], row["label"], paper["key"], seeds=[0], members=[], reported=reported,
                   not_reported=row.get("not_reported"), ledger=[ledger], ran=ran, released=members)

    def _with_smoke(self, datasets: list[str]) -> list[str]:
        """A paper file table's datasets, each followed by its smoke run where one is configured."""
        smoke = {}
        for name, ds in self.cfg["datasets"].items():
            if "smoke" in ds:
                smoke.setdefault(ds["smoke"]["of"], []).append(name)
        return [d for dataset in datasets for d in (dataset, *smoke.get(dataset, []))]

    def _built_on(self, table_name: str, datasets: list[str]) -> list[str]:
        """The datasets of a paper file's table that build it: all but those whose ``skip_tables``
        names it (the synthetic data's default job, for its time budget)."""
        return [d for d in datasets if table_name not in self.cfg["datasets"][d].get("skip_tables", [])]

    def skipped(self, table: str, dataset: str) -> bool:
        """A table a paper file declares for ``dataset`` that its ``skip_tables`` leaves out."""
        return (table, dataset) in self.declared_tables and (table, dataset) not in self.tables

    def _add_claims(self, path: Path, paper: dict) -> None:
        """Each claim of a paper file, checked on every dataset of its table: rows the table has and
        runs, a metric that is a mean over test queries, a protocol of the dataset that reports it."""
        for claim_id, claim in (paper.get("claims") or {}).items():
            where = f"{path}: claims.{claim_id}"
            if claim["table"] not in paper["tables"]:
                raise HarnessError(f"{where}.table: '{claim['table']}' is not a table of this paper file "
                                   f"(tables: {', '.join(paper['tables'])})")
            comparison = parse_comparison(claim["compare"], f"{where}.compare")
            check_claimable(comparison.metric, f"{where}.compare")
            released = [r["id"] for r in paper["tables"][claim["table"]]["rows"]
                        if "released" in r and r["id"] in comparison.rows]
            if released:   # a claim is tested on the harness's runs; a released row is absent where unconfigured
                raise HarnessError(f"{where}.compare: row '{released[0]}' is the authors' released weights: claims "
                                   f"compare rows the harness trains")
            if claim.get("printed_rows") and comparison.best is None:
                raise HarnessError(f"{where}.printed_rows: only a best-of-set or rank claim compares rows on their "
                                   f"printed numbers")
            if comparison.best is not None and is_pooled(comparison.metric):
                raise HarnessError(f"{where}.compare: a best-of-set or rank claim on {comparison.metric}, a pooled "
                                   f"metric, is not supported: state it as claims between two rows")
            if (comparison.bound is not None) != bool(claim.get("bound_reason")):
                raise HarnessError(f"{where}.bound_reason: " + (
                    "an equivalence claim says why its bound is what it is, from the paper's words" if
                    comparison.bound is not None else "only an equivalence claim (|a.m - b.m| <= d) has a bound"))
            if comparison.bound is not None and claim.get("margin"):
                raise HarnessError(f"{where}.margin: an equivalence claim has a bound, not a margin")
            raw_rows = {r["id"]: r for r in paper["tables"][claim["table"]]["rows"]}
            for dataset in self._built_on(claim["table"], self._with_smoke(paper["tables"][claim["table"]]["datasets"])):
                rows = {r.id: r for r in self.tables[(claim["table"], dataset)].rows}
                left_out = {r["id"]: r for r in self.tables[(claim["table"], dataset)].unconfigured}
                compared, printed = comparison, list(claim.get("printed_rows") or [])
                for row_id in comparison.rows:
                    if row_id not in rows and row_id not in left_out:
                        raise HarnessError(f"{where}.compare: table {claim['table']} has no row '{row_id}' on "
                                           f"{dataset} (rows: {', '.join(rows)})")
                # a row the harness does not run: printed only; a claim resting on one is undetermined
                unrun = [r for r in comparison.rows if r in left_out or not rows[r].runs_models]
                if comparison.best is not None and unrun and comparison.best not in unrun:
                    # a set member the harness does not run here is compared on its printed numbers only
                    kept = [r for r in comparison.members if r not in unrun]
                    if len(kept) - 1 >= (comparison.rank or 1):   # else a rank among the rest would hold always
                        compared = best_of(comparison, kept, where)
                        printed += unrun
                        unrun = []
                unset = sorted({k for row_id in unrun if row_id in left_out for k in left_out[row_id]["keys"]})
                if unset:   # a compared row needs a file the config does not give: no test on this dataset
                    self.untested_claims.setdefault((paper["key"], dataset), []).append((claim_id, unset))
                    continue
                reported_only = [r for r in unrun if r in rows]
                for row_id in compared.rows:
                    if row_id in rows and is_pooled(compared.metric) and rows[row_id].ensemble_size > 1:
                        raise HarnessError(f"{where}.compare: row '{row_id}' is an ensemble, whose averaged score "
                                           f"matrix has no label predictions: {compared.metric} compares single "
                                           f"models")
                for row_id in claim.get("printed_rows") or []:
                    if row_id not in rows and row_id not in left_out:
                        raise HarnessError(f"{where}.printed_rows: table {claim['table']} has no row '{row_id}' on "
                                           f"{dataset}")
                    if row_id in compared.rows:
                        raise HarnessError(f"{where}.printed_rows: row '{row_id}' is in the compared set too")
                protocols = [p for p in self.cfg["datasets"][dataset]["protocols"]
                             if set(base_metrics(compared.metric)) <= set(get_protocol(p).metrics)]
                if not protocols:
                    raise HarnessError(f"{where}.compare: no protocol of datasets.{dataset}.protocols "
                                       f"({', '.join(self.cfg['datasets'][dataset]['protocols'])}) reports "
                                       f"{compared.metric}")
                ds_cfg = self.cfg["datasets"][dataset]
                # an undetermined claim (a side reported only) keeps every row's printed numbers for the paper's difference
                shown = list(dict.fromkeys(printed + (list(compared.rows) if reported_only else [])))
                printed_numbers = {r: rows[r].reported if r in rows else reported_shown(
                    raw_rows[r].get("reported", {}).get(reported_dataset(dataset, ds_cfg), {}), ds_cfg) for r in shown}
                self.claims.setdefault((paper["key"], dataset), []).append(Claim(
                    claim_id, paper["key"], claim["words"], claim.get("paraphrased", False), claim["where"],
                    claim["table"], compared, float(claim.get("margin", 0.0)), protocols, printed_numbers,
                    reported_only=reported_only, bound_reason=claim.get("bound_reason", "")))

    def _check_row(self, path: Path, table_name: str, table_datasets: list[str], row: dict, paper: dict) -> None:
        """What a row names that no resolved config shows: its overrides (each key one of the method
        schema's, before a merge could drop it) and its reported numbers (a dataset the table is
        built for, a protocol that dataset evaluates, metrics that protocol reports)."""
        where = f"{path}: table {table_name} row '{row['id']}'"
        for i, m in enumerate(row.get("ensemble") or [row]):
            if m.get("overrides") and m["method"] in paper["methods"]:
                raw = self.method_file(file_root(path) / paper["methods"][m["method"]])
                label = "overrides" if "ensemble" not in row else f"ensemble.{i}.overrides"
                validate_layer(dotted_to_nested(m["overrides"]), f"{where}: {label}", model_kind(raw))
        for dataset, by_protocol in (row.get("reported") or {}).items():
            if dataset not in table_datasets:
                raise HarnessError(f"{where}: reported numbers under dataset '{dataset}', which the table is not "
                                   f"built for (tables.{table_name}.datasets: {', '.join(table_datasets)})")
            evaluated = self.cfg["datasets"][dataset]["protocols"] + (
                [STATISTICS_PROTOCOL] if paper["tables"][table_name].get("embedding_statistics") else [])
            for protocol in by_protocol:
                if protocol not in evaluated:
                    raise HarnessError(f"{where}: reported numbers under protocol '{protocol}' for {dataset}, which "
                                       f"datasets.{dataset}.protocols does not evaluate ({', '.join(evaluated)})")
            check_reported(by_protocol, where)

    def _row_view(self, path: Path, table_name: str, row: dict, dataset: str, exp_ids: list[str]) -> str | None:
        """The evaluation view a row declares (``evaluation``), checked against its model's sets."""
        evaluation = row.get("evaluation")
        if not evaluation:
            return None
        where = f"{path}: table {table_name} row '{row['id']}'"
        if "ensemble" in row:
            raise HarnessError(f"{where}: an evaluation view selects elements of one model's sets, not of an ensemble")
        model = self.experiments[(dataset, exp_ids[0])].config["model"]
        sizes = MODEL_KINDS.get(model["kind"]).set_sizes(model)
        if sizes is None:
            raise HarnessError(f"{where}: evaluation views need a model that embeds items as sets; "
                               f"'{model['kind']}' does not")
        check_elements(evaluation, sizes, where)
        return view_name(evaluation)

    def _check_distinct_runs(self, path: Path, row: Row, dataset: str) -> None:
        """Each seed of a row is its own run (for each member): a run counted twice makes a mean
        of copies and a spread of 0. Seeds are unique (schemas); an ensemble's repeated member
        trains at seed + 1000 per earlier repeat, which another seed of the row may equal."""
        runs = row.run_dirs(self.layout, dataset)
        repeated = sorted({run for run in runs if runs.count(run) > 1})
        if repeated:
            raise HarnessError(f"{path}: table {row.table} row '{row.id}' on {dataset}: seeds {row.seeds} give the "
                               f"run {repeated[0]} more than once (a repeated ensemble member trains at seed + "
                               f"{ENSEMBLE_SEED_STRIDE} per earlier repeat); choose seeds that give distinct runs")

    @staticmethod
    def _check_comparisons(path: Path, tbl: Table) -> None:
        rows = {r.id: r for r in tbl.rows}
        for row in tbl.rows:
            if row.compare_to is None:
                continue
            base = rows.get(row.compare_to)
            if base is None or base is row:
                raise HarnessError(f"{path}: row '{row.id}' of table {tbl.name} compares to '{row.compare_to}', "
                                   f"which is not another row of that table")
            if not base.runs_models:
                raise HarnessError(f"{path}: row '{row.id}' of table {tbl.name} compares to '{row.compare_to}', "
                                   f"which is reported only: there are no runs to pair with")
            if base.released:
                raise HarnessError(f"{path}: row '{row.id}' of table {tbl.name} compares to '{row.compare_to}', "
                                   f"the authors' released weights: paired differences need the same seeds' runs")
            if base.seeds != row.seeds:
                raise HarnessError(f"{path}: row '{row.id}' and the row it compares to ('{base.id}') need the same "
                                   f"seeds for paired differences ({row.seeds} vs {base.seeds})")
