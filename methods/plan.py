"""The plan: harness config + paper files -> datasets, experiments, runs, ensembles, tables, figures.

The Snakefile builds its DAG from this plan; entry points use it to find paths. Everything
is computed from declarative files; an experiment is named ``<method>-<hash of its resolved
config>`` so a changed hyper-parameter gives a new run directory, never a stale result.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from methods.config import REPO_ROOT, config_hash, deep_merge, dotted_to_nested, load_yaml, validate, validate_layer
from methods.data.caption_augment import CaptionAugmentation
from methods.data.inputs import ImageInput
from methods import numerics
from methods.errors import HarnessError
from methods.fidelity import (load_method_file, merge_ledgers, row_ledger, source_ledger, stand_in_deviation,
                              tokenizer_deviation)
from methods.losses.term_kinds import rebase_term, term_configs
from methods.metrics.declarations import base_metrics, check_claimable
from methods.metrics.protocols import CHECKED_PROTOCOLS, STATISTICS_PROTOCOL, get_protocol
from methods.model_kinds import MODEL_KINDS, DescribeContext, describe_run, finetunes, image_input_of
from methods.model_kinds.element_views import check_elements, view_name
from methods.paths import ResultsLayout, sims_file
from methods.plugins import check_loaded, file_root
from methods.report.claim_form import Comparison, parse_comparison
from methods.report.figure_kinds import FIGURE_KINDS

ENSEMBLE_SEED_STRIDE = 1000  # a repeated ensemble member trains with seed s + 1000 * (earlier repeats)


def test_splits(cfg: dict, dataset: str) -> list[str]:
    """Harness splits evaluated for a dataset (one metrics file each), in protocol order."""
    out: list[str] = []
    for name in cfg["datasets"][dataset]["protocols"]:
        split = get_protocol(name).split
        if split not in cfg["datasets"][dataset]["splits"]:
            raise HarnessError(f"dataset {dataset}: protocol {name} needs split '{split}', "
                               f"which datasets.{dataset}.splits does not define")
        if split not in out:
            out.append(split)
    return out


def apply_layer(cfg: dict, layer: dict) -> dict:
    """``cfg`` with one config layer merged in; a layer that changes the loss kind keeps only the
    inherited loss parameters that kind takes (``methods.losses.rebase_term``)."""
    merged = deep_merge(cfg, layer)
    if isinstance(layer.get("loss"), dict) and isinstance(cfg.get("loss"), dict):
        merged["loss"] = rebase_term(cfg["loss"], layer["loss"])
    return merged


def model_kind(raw: dict) -> str | None:
    """The model kind a method file's base sets (its layers' ``model`` blocks are that kind's)."""
    model = raw["base"].get("model")
    return model.get("kind") if isinstance(model, dict) else None


def method_layers(raw: dict) -> list[tuple[str, dict | None]]:
    """(key, layer) of every config layer of a method file: base, presets, each variant's base and presets."""
    layers = [("base", raw["base"])] + [(f"presets.{d}", layer) for d, layer in raw["presets"].items()]
    for name, variant in (raw.get("variants") or {}).items():
        layers.append((f"variants.{name}.base", variant.get("base")))
        layers += [(f"variants.{name}.presets.{d}", layer) for d, layer in (variant.get("presets") or {}).items()]
    return layers


def dataset_names(raw: dict) -> list[tuple[str, str]]:
    """(key, dataset) of every dataset a method file names: presets, by_dataset values, deviation datasets."""
    named = [(f"presets.{d}", d) for d in raw["presets"]]
    for name, variant in (raw.get("variants") or {}).items():
        named += [(f"variants.{name}.presets.{d}", d) for d in variant.get("presets") or {}]
    blocks = [("source", raw["source"])] + [(f"variants.{n}.source", v["source"])
                                            for n, v in (raw.get("variants") or {}).items() if v.get("source")]
    for label, block in blocks:
        for name, switch in (block.get("switches") or {}).items():
            named += [(f"{label}.switches.{name}.by_dataset.{d}", d) for d in (switch or {}).get("by_dataset") or {}]
        for name, deviation in (block.get("deviations") or {}).items():
            named += [(f"{label}.deviations.{name}.datasets", d) for d in (deviation or {}).get("datasets") or []]
    return named


def check_method_file(raw: dict, path: str | Path, datasets: list[str] | None = None) -> None:
    """Every layer of a method file holds only keys of the method schema, and every name it gives
    exists: datasets are configured (``datasets``; None: not checked), a variant's source update
    names a switch or deviation the method declares. Otherwise a misspelled key or name is
    ignored without a word (a layer no row applies, a layer a later one replaces, a preset never
    matched) and a run differs from what its row says."""
    for label, layer in method_layers(raw):
        validate_layer(layer, f"{path}: {label}", model_kind(raw))
    for name, variant in (raw.get("variants") or {}).items():
        for part, noun, whole in (("switches", "switch", {"key", "value", "behaviour"}),
                                  ("deviations", "deviation", {"source", "ours", "why"})):
            for item, update in ((variant.get("source") or {}).get(part) or {}).items():
                # a whole switch or deviation may be new; null (not applicable) or a partial one updates
                if item not in raw["source"][part] and (update is None or not whole <= set(update)):
                    raise HarnessError(f"{path}: variants.{name}.source.{part}.{item}: the method's source block "
                                       f"declares no {noun} '{item}' to update (declared: "
                                       f"{', '.join(sorted(raw['source'][part])) or 'none'})")
    for label, dataset in dataset_names(raw) if datasets is not None else []:
        if dataset not in datasets:
            raise HarnessError(f"{path}: {label}: no dataset '{dataset}' is configured "
                               f"(datasets: {', '.join(sorted(datasets))})")


def resolve_method_config(method_file: str | Path, dataset: str, overrides: dict | None = None,
                          variants: list[str] | None = None, backbones: dict | None = None,
                          raw: dict | None = None) -> dict:
    """The resolved config of one experiment: method base, then its preset for the dataset, then
    each named variant (its base, then its preset for the dataset), then the row's dotted
    overrides; validated against the method schema (its hash names the experiment)."""
    if raw is None:  # ``raw``: the file, already loaded and checked (by the plan)
        raw = load_method_file(method_file)
        check_method_file(raw, method_file)
    presets = raw["presets"]
    if dataset not in presets:
        raise HarnessError(f"{method_file}: no preset for dataset '{dataset}' (has: {', '.join(sorted(presets))})")
    cfg = apply_layer(raw["base"], presets[dataset] or {})
    declared = raw.get("variants") or {}
    for name in variants or []:
        if name not in declared:
            raise HarnessError(f"{method_file}: unknown variant '{name}' (declared: {', '.join(sorted(declared)) or 'none'})")
        cfg = apply_layer(cfg, declared[name].get("base") or {})
        cfg = apply_layer(cfg, (declared[name].get("presets") or {}).get(dataset) or {})
    cfg = apply_layer(cfg, dotted_to_nested(overrides or {}))
    cfg["method"] = raw["method"]
    keep = cfg.get("training", {}).pop("run_stages", None)
    if keep is not None:  # a row may run a subset of the method's stages (e.g. no fine-tuning)
        names = [s.get("name") for s in cfg["training"].get("stages", [])]
        unknown = sorted(set(keep) - set(names))
        if unknown:
            raise HarnessError(f"{method_file}: run_stages names unknown stages {unknown}; stages: {names}")
        cfg["training"]["stages"] = [s for s in cfg["training"]["stages"] if s["name"] in keep]
    where = f"{method_file} (dataset {dataset}, overrides {overrides or {}})"
    validate(cfg, "method", where)
    image_input = image_input_of(cfg["model"])   # what the schema cannot say: the model's input fixes it
    if finetunes(cfg) and not image_input.finetunable:
        raise HarnessError(f"{where}: training.stages: finetune_backbone is true, but a {cfg['model']['kind']} model "
                           f"reads precomputed {image_input.name}: it has no CNN to fine-tune")
    try:   # what the schema cannot say: the augmentation's shares sum to at most 1
        CaptionAugmentation.from_config(cfg["training"], vocab_size=1)
    except ValueError as err:
        raise HarnessError(f"{where}: training.caption_augment: {err}") from None
    backbone = cfg["model"].get("backbone")
    if backbones is not None and backbone is not None and backbone not in backbones:
        raise HarnessError(f"{method_file}: backbone '{backbone}' is not in config backbones "
                           f"({', '.join(sorted(backbones))})")
    return cfg


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


def repository_tables(dataset: str) -> set[str]:
    """Tables the harness's own paper files (methods/papers) declare for ``dataset``."""
    names = set()
    for path in sorted((REPO_ROOT / "methods" / "papers").glob("*.yaml")):
        for name, table in (load_yaml(path).get("tables") or {}).items():
            if dataset in (table.get("datasets") or []):
                names.add(name)
    return names


@dataclass
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
        return not all(s["finetune_backbone"] for s in self.config["training"]["stages"])


@dataclass
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

    @property
    def runs_models(self) -> bool:
        return self.reported_only is None

    @property
    def ensemble_size(self) -> int:
        return len(self.members)

    @property
    def ensemble_id(self) -> str | None:
        return None if len(self.members) <= 1 else "ens-" + config_hash(self.members)

    def member_seed(self, seed: int, member: int) -> int:
        """Members with different configs train with the row's seed (SGRAF = the SGR and SAF runs of
        that seed); a member repeating an earlier member's config gets +1000 per earlier repeat."""
        return seed + ENSEMBLE_SEED_STRIDE * self.members[:member].count(self.members[member])


@dataclass
class Table:
    name: str
    dataset: str
    titles: list[str]
    rows: list[Row]
    statistics: bool = False      # also shows the set models' embedding statistics (protocol set_statistics)


@dataclass
class Figure:
    name: str
    dataset: str
    kind: str
    table: str
    title: str
    row: str | None = None        # saf_weights: the row whose first run is inspected
    rows: list[str] | None = None  # the rows a figure compares (set_element_projection)
    paper: str | None = None      # the key of the paper file that declares it


@dataclass
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

    @property
    def form(self) -> str:
        return self.comparison.text() + (f" + {self.margin:g}" if self.margin else "")


def data_kind(ds_cfg: dict) -> str:
    """What tables and figures say of a dataset's data: ``synthetic`` for the built-in dataset and
    for datasets the DAG generates from it (synthetic tags), else its kind."""
    return "synthetic" if ds_cfg["kind"] == "synthetic" or "generated_from" in ds_cfg else ds_cfg["kind"]


def reported_dataset(dataset: str, ds_cfg: dict) -> str:
    """The dataset whose reported numbers a dataset's tables show: the one it stands in for, or itself."""
    return ds_cfg.get("stands_in_for", {}).get("dataset", dataset)


def stand_in_protocols(ds_cfg: dict) -> list[str]:
    """The protocols of the real dataset a synthetic one stands in for (``stands_in_for.protocol``:
    one name, or a list when its tables report under several, e.g. retrieval and label prediction)."""
    if "stands_in_for" not in ds_cfg:
        return []
    protocol = ds_cfg["stands_in_for"]["protocol"]
    return [protocol] if isinstance(protocol, str) else list(protocol)


class Plan:
    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.layout = ResultsLayout(cfg["results_dir"])
        check_loaded(cfg.get("plugins", []), "methods.model_kinds")   # the models its method files may name
        self._check_config_names()
        for name, bb in cfg["backbones"].items():
            if "pretrain" in bb:
                expected = str(Path(self.layout.backbone_weights(bb["pretrain"]["dataset"], name)))
                if bb["weights"] != expected:
                    raise HarnessError(f"backbones.{name}: pre-trained by the DAG, so weights must be '{expected}'")
        self.experiments: dict[tuple[str, str], Experiment] = {}
        self.tables: dict[tuple[str, str], Table] = {}
        self.figures: dict[tuple[str, str], Figure] = {}
        self.papers: dict[str, str] = {}   # paper key -> paper (as its file names it), in config order
        self.paper_notes: dict[str, str] = {}
        self.paper_tables: dict[str, list[str]] = {}   # paper key -> the tables its file declares
        self.claims: dict[tuple[str, str], list[Claim]] = {}   # (paper key, dataset) -> claims checked there
        # (table, dataset) of every table a paper file declares, built or left out by datasets.<name>.skip_tables
        self.declared_tables: set[tuple[str, str]] = set()
        self._method_files: dict[Path, dict] = {}
        stated = []
        for paper_file in cfg["papers"]:
            path = REPO_ROOT / paper_file if not Path(paper_file).is_absolute() else Path(paper_file)
            stated.append((path, self._add_paper(path)))
        for path, paper in stated:   # after every paper: a claim may compare with another file's row of its table
            self._add_claims(path, paper)
        for dataset, ds_cfg in cfg["datasets"].items():
            declared = {name for name, ds in self.declared_tables if ds == dataset}
            named = [(f"table_seeds.{name}", name) for name in ds_cfg.get("table_seeds", {})]
            named += [(f"skip_tables.{i}", name) for i, name in enumerate(ds_cfg.get("skip_tables", []))]
            unknown = [(key, name) for key, name in named if name not in declared]
            if unknown:  # a table of one of the harness's own paper files left out of `papers` is no typo
                unknown = [(key, name) for key, name in unknown if name not in repository_tables(dataset)]
            for key, name in unknown:
                raise HarnessError(f"datasets.{dataset}.{key}: no table '{name}' is declared for "
                                   f"{dataset} (declared: {', '.join(sorted(declared)) or 'none'})")

    # -- building -------------------------------------------------------------------------
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
        cfg = resolve_method_config(method_file, dataset, overrides, variants, self.cfg["backbones"],
                                    self.method_file(method_file))
        cfg = numerics.experiment_config(cfg, self.cfg["datasets"][dataset])
        exp = Experiment(f"{cfg['method']}-{config_hash(cfg)}", dataset, cfg["method"], cfg)
        self.experiments.setdefault((dataset, exp.id), exp)
        return exp

    def _add_paper(self, path: Path) -> dict:
        paper = validate(load_yaml(path), "paper", str(path))
        if paper["key"] in self.papers:
            raise HarnessError(f"{path}: key '{paper['key']}' is the key of another paper file in config papers")
        self.papers[paper["key"]] = paper["paper"]
        self.paper_notes[paper["key"]] = paper.get("notes", "")
        self.paper_tables[paper["key"]] = list(paper["tables"])
        for table_name, table in paper["tables"].items():
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
            self.declared_tables.update((table_name, dataset) for dataset in table["datasets"])
            for dataset in self._built_on(table_name, table["datasets"]):
                ds_cfg = self.cfg["datasets"][dataset]
                reported_key = reported_dataset(dataset, ds_cfg)
                key = (table_name, dataset)
                tbl = self.tables.setdefault(key, Table(table_name, dataset, [], []))
                tbl.titles.append(f"{paper['paper']}: {table['title']}")
                tbl.statistics = tbl.statistics or table.get("embedding_statistics", False)
                for row in table["rows"]:
                    if any(r.id == row["id"] for r in tbl.rows):
                        raise HarnessError(f"{path}: row id '{row['id']}' appears twice in table {table_name}")
                    reported = self._reported_for(row.get("reported", {}).get(reported_key, {}), ds_cfg)
                    if "reported_only" in row:   # the paper's numbers beside ours: nothing to run
                        tbl.rows.append(Row(table_name, row["id"], row["label"], paper["key"], [], [], reported,
                                            row.get("not_reported"), reported_only=row["reported_only"]))
                        continue
                    members = row.get("ensemble") or [{"method": row["method"], "overrides": row.get("overrides", {}),
                                                       "variants": row.get("variants", [])}]
                    exp_ids, ledgers, ran = [], [], []
                    for m in members:
                        if m["method"] not in paper["methods"]:
                            raise HarnessError(f"{path}: row '{row['id']}' names unknown method '{m['method']}' "
                                               f"(declared: {', '.join(sorted(paper['methods']))})")
                        method_file = file_root(path) / paper["methods"][m["method"]]
                        exp = self.resolve_experiment(method_file, dataset, m.get("overrides", {}), m.get("variants", []))
                        exp_ids.append(exp.id)
                        ran.append(describe_run(exp.config, DescribeContext(ds_cfg, self.cfg["backbones"])))
                        source = source_ledger(self.method_file(method_file), m.get("variants", []), reported_key)
                        stand_in = (() if "stands_in_for" not in ds_cfg else
                                    (stand_in_deviation(dataset, ds_cfg, exp.image_input.name, exp.config["model"]),))
                        ledgers.append(row_ledger(exp.config, source, f"{path}: row '{row['id']}'",
                                                  (*tokenizer_deviation(dataset, ds_cfg, source), *stand_in)))
                    view = self._row_view(path, table_name, row, dataset, exp_ids)
                    seeds = ds_cfg.get("table_seeds", {}).get(table_name, ds_cfg.get("seeds", row["seeds"]))
                    tbl.rows.append(Row(table_name, row["id"], row["label"], paper["key"], seeds, exp_ids,
                                        reported, row.get("not_reported"), merge_ledgers(ledgers),
                                        row.get("compare_to"), " + ".join(dict.fromkeys(ran)), view,
                                        dict(row.get("overrides") or {})))
                    self._check_distinct_runs(path, tbl.rows[-1], dataset)
                self._check_comparisons(path, tbl)
        for fig_name, fig in (paper.get("figures") or {}).items():
            if fig_name == "claims" or fig_name.startswith("claims_"):
                raise HarnessError(f"{path}: figure name '{fig_name}': 'claims' and names starting 'claims_' are taken "
                                   f"by the claim figures (figures/claims_<paper>_<dataset>.png)")
            if fig["table"] not in paper["tables"]:
                raise HarnessError(f"{path}: figure '{fig_name}' names table '{fig['table']}', which this paper "
                                   f"file does not declare")
            for dataset in paper["tables"][fig["table"]]["datasets"]:
                if (fig["table"], dataset) in self.tables:
                    if (fig_name, dataset) in self.figures:
                        raise HarnessError(f"{path}: figure '{fig_name}' is declared by two paper files")
                    table_rows = {r["id"]: r for r in paper["tables"][fig["table"]]["rows"]}
                    for name in ([fig["row"]] if fig.get("row") else []) + (fig.get("rows") or []):
                        if name not in table_rows:
                            raise HarnessError(f"{path}: figure '{fig_name}' names row '{name}', which table "
                                               f"'{fig['table']}' does not have")
                        if "reported_only" in table_rows[name]:
                            raise HarnessError(f"{path}: figure '{fig_name}' names row '{name}', which is reported "
                                               f"only: it has no trained model to show")
                    self.figures[(fig_name, dataset)] = Figure(fig_name, dataset, fig["kind"], fig["table"],
                                                               fig["title"], row=fig.get("row"), rows=fig.get("rows"),
                                                               paper=paper["key"])
        return paper

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
            for dataset in self._built_on(claim["table"], paper["tables"][claim["table"]]["datasets"]):
                rows = {r.id: r for r in self.tables[(claim["table"], dataset)].rows}
                for row_id in comparison.rows:
                    if row_id not in rows:
                        raise HarnessError(f"{where}.compare: table {claim['table']} has no row '{row_id}' on "
                                           f"{dataset} (rows: {', '.join(rows)})")
                    if not rows[row_id].runs_models:
                        raise HarnessError(f"{where}.compare: row '{row_id}' is reported only: there are no runs "
                                           f"to test the claim on")
                protocols = [p for p in self.cfg["datasets"][dataset]["protocols"]
                             if set(base_metrics(comparison.metric)) <= set(get_protocol(p).metrics)]
                if not protocols:
                    raise HarnessError(f"{where}.compare: no protocol of datasets.{dataset}.protocols "
                                       f"({', '.join(self.cfg['datasets'][dataset]['protocols'])}) reports "
                                       f"{comparison.metric}")
                self.claims.setdefault((paper["key"], dataset), []).append(Claim(
                    claim_id, paper["key"], claim["words"], claim.get("paraphrased", False), claim["where"],
                    claim["table"], comparison, float(claim.get("margin", 0.0)), protocols))

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
        model = self.experiment(dataset, exp_ids[0]).config["model"]
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
        runs = self.row_runs(row, dataset)
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
            if base.seeds != row.seeds:
                raise HarnessError(f"{path}: row '{row.id}' and the row it compares to ('{base.id}') need the same "
                                   f"seeds for paired differences ({row.seeds} vs {base.seeds})")

    @staticmethod
    def _reported_for(by_protocol: dict, ds_cfg: dict) -> dict:
        """Reported numbers keyed by this dataset's protocols; a synthetic dataset shows those of the
        protocol it stands in for (its verdicts are then 'not comparable') under each of its
        protocols that reports one of those metrics (not under extended-positive ones)."""
        if "stands_in_for" not in ds_cfg:
            return by_protocol
        statistics = {p: v for p, v in by_protocol.items() if p == STATISTICS_PROTOCOL}  # not tied to a dataset
        shown = {}
        for stood_in in stand_in_protocols(ds_cfg):
            source = by_protocol.get(stood_in)
            if source:
                shown.update({p: source for p in ds_cfg["protocols"]
                              if p not in shown and set(source["metrics"]) & set(get_protocol(p).metrics)})
        return {**shown, **statistics}

    # -- queries --------------------------------------------------------------------------
    def check_target_dataset(self, dataset: str, target: str) -> None:
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
        targets = []
        for dataset in self.cfg["default_datasets"]:
            names = sorted(t for t, d in self.tables if d == dataset)
            targets += [f"tables/{t}_{dataset}.csv" for t in names]
            if names:
                targets.append(f"figures/reproduced_vs_reported_{dataset}.png")
            targets += sorted(f"figures/{f}_{dataset}.png" for f, d in self.figures if d == dataset)
            for paper in self.papers:
                if dataset in self.paper_datasets(paper):
                    targets.append(f"reports/{paper}_{dataset}.md")
                if (paper, dataset) in self.claims:
                    targets += [f"tables/claims_{paper}_{dataset}.csv", f"figures/claims_{paper}_{dataset}.png"]
            if names:
                targets.append(f"tables/summary_{dataset}.md")
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
        return {(c.table, r): self.row(c.table, dataset, r) for c in self.paper_claims(paper, dataset)
                for r in c.comparison.rows}

    def score_files(self, row: Row, dataset: str, split: str) -> list[list[str]]:
        """Per seed of a row, the score matrices of ``split`` it averages (one per ensemble member;
        an evaluation view's own matrix)."""
        return [[sims_file(self.run_dir(dataset, exp, row.member_seed(s, i)), split, row.view)
                 for i, exp in enumerate(row.members)] for s in row.seeds]

    def row_aggregate(self, dataset: str, table: str, row_id: str) -> str:
        """The aggregate of a run row's seeds (rule aggregate_row): its metrics and training checks."""
        return self.layout.row_aggregate(dataset, table, row_id)

    def claims_spec(self, paper: str, dataset: str) -> dict:
        """What the claims job of a paper on a dataset reads: each claim, and each compared row's
        seeds, score files per protocol, reported numbers and aggregate (its training checks)."""
        claims = self.paper_claims(paper, dataset)
        ds_cfg = self.cfg["datasets"][dataset]
        rows = {}
        for (table, row_id), row in self._claim_rows(paper, dataset).items():
            protocols = sorted({p for c in claims if c.table == table and row_id in c.comparison.rows
                                for p in c.protocols})
            rows[f"{table}/{row_id}"] = {
                "table": table, "id": row_id, "label": row.label, "seeds": row.seeds,
                "ensemble_size": row.ensemble_size, "view": row.view, "reported": row.reported,
                "scores": {p: self.score_files(row, dataset, get_protocol(p).split) for p in protocols},
                "aggregate": self.row_aggregate(dataset, table, row_id)}
        return {"paper": paper, "paper_name": self.papers[paper], "dataset": dataset, "dataset_kind": data_kind(ds_cfg),
                "reported_dataset": reported_dataset(dataset, ds_cfg), "bootstrap": self.cfg["claims"],
                "training_check": self.cfg["training_check"], "rows": rows,
                "claims": [{"id": c.id, "words": c.words, "paraphrased": c.paraphrased, "where": c.where,
                            "table": c.table, "form": c.form, "left": list(c.comparison.left),
                            "right": list(c.comparison.right), "metric": c.comparison.metric, "margin": c.margin,
                            "protocols": c.protocols} for c in claims]}

    def claims_score_files(self, paper: str, dataset: str) -> list[str]:
        spec = self.claims_spec(paper, dataset)
        return sorted({f for row in spec["rows"].values() for per_seed in row["scores"].values()
                       for files in per_seed for f in files})

    def claims_row_aggregates(self, paper: str, dataset: str) -> list[str]:
        """The aggregates of the rows the claims compare (their training checks; built for the tables anyway)."""
        return sorted(row["aggregate"] for row in self.claims_spec(paper, dataset)["rows"].values())

    def report_spec(self, paper: str, dataset: str) -> dict:
        """What a paper's reproduction report on a dataset shows beyond its tables and claims."""
        ds_cfg = self.cfg["datasets"][dataset]
        return {"paper": paper, "paper_name": self.papers[paper], "notes": self.paper_notes[paper], "dataset": dataset,
                "dataset_kind": data_kind(ds_cfg), "reported_dataset": reported_dataset(dataset, ds_cfg),
                "tables": self.report_tables(paper, dataset), "has_claims": bool(self.paper_claims(paper, dataset)),
                "skipped_tables": [t for t in self.paper_tables[paper] if self.skipped(t, dataset)],
                "all_tables_config": ALL_TABLES_CONFIG,
                "bootstrap": self.cfg["claims"], "tolerance": self.cfg["tolerance"],
                "training_check": self.cfg["training_check"]}

    def summary_spec(self, dataset: str) -> dict:
        """What the summary of a dataset reads (``methods.report.summary``): per paper with a table
        on it, each table's run rows with their aggregates, and its claims table where it states
        claims; the dataset's first protocol with a training check gives the main metric."""
        self.check_target_dataset(dataset, f"tables/summary_{dataset}.md")
        ds_cfg = self.cfg["datasets"][dataset]
        papers = []
        for paper in self.papers:
            if dataset not in self.paper_datasets(paper):
                continue
            tables = [{"table": t, "rows": [{"id": r.id, "label": r.label, "seeds": r.seeds,
                                             "ensemble_size": r.ensemble_size,
                                             "aggregate": self.row_aggregate(dataset, t, r.id)}
                                            for r in self.table(t, dataset).rows if r.runs_models]}
                      for t in self.report_tables(paper, dataset)]
            papers.append({"paper": paper, "paper_name": self.papers[paper], "tables": tables,
                           "claims": f"tables/claims_{paper}_{dataset}.csv" if (paper, dataset) in self.claims else None})
        checked = [p for p in ds_cfg["protocols"] if get_protocol(p).main_metric is not None]
        if not checked:
            raise HarnessError(f"tables/summary_{dataset}.md: no protocol of datasets.{dataset}.protocols has a main "
                               f"metric to summarise ({', '.join(ds_cfg['protocols'])})")
        return {"dataset": dataset, "dataset_kind": data_kind(ds_cfg), "reported_dataset": reported_dataset(dataset, ds_cfg),
                "protocol": checked[0], "checked_protocols": sorted(CHECKED_PROTOCOLS),
                "training_check": self.cfg["training_check"], "papers": papers}

    def summary_inputs(self, dataset: str) -> list[str]:
        spec = self.summary_spec(dataset)
        return sorted({row["aggregate"] for p in spec["papers"] for t in p["tables"] for row in t["rows"]}
                      | {p["claims"] for p in spec["papers"] if p["claims"]})

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
        return [self.run_dir(dataset, exp, row.member_seed(s, i)) for s in row.seeds for i, exp in enumerate(row.members)]

    def figure(self, name: str, dataset: str) -> Figure:
        self.check_target_dataset(dataset, f"{name}_{dataset}")
        if (name, dataset) not in self.figures:
            known = sorted(f"{f}_{d}" for f, d in self.figures)
            raise HarnessError(f"no figure '{name}' is declared for dataset '{dataset}'; declared: {', '.join(known)}")
        return self.figures[(name, dataset)]

    def figure_spec(self, name: str, dataset: str) -> dict:
        fig = self.figure(name, dataset)
        rows = []
        run_rows = [r for r in self.table(fig.table, dataset).rows if r.runs_models]   # reported-only rows have none
        configs = [self.experiment(dataset, row.members[0]).config for row in run_rows]
        for row, cfg in zip(run_rows, configs):
            rows.append({"id": row.id, "label": row.label, "model": cfg["model"]["kind"], "method": cfg["method"],
                         "loss": "+".join(t["kind"] for t in term_configs(cfg["loss"])), "seeds": row.seeds, "ensemble_size": row.ensemble_size,
                         "runs": self.row_runs(row, dataset), "ran": row.ran})
        spec = {"figure": name, "kind": fig.kind, "title": fig.title, "dataset": dataset, "table": fig.table,
                "dataset_kind": data_kind(self.cfg["datasets"][dataset]),
                "protocols": self.cfg["datasets"][dataset]["protocols"], "rows": rows}
        kind = FIGURE_KINDS.get(fig.kind)
        if kind.row_details is not None:   # what the drawing compares across the rows
            for out, details in zip(rows, kind.row_details(run_rows, configs, f"figure {name}"), strict=True):
                out.update(details)
        if fig.rows is not None and kind.ordered_rows:   # e.g. curves from the rows' training logs,
            by_id = {r["id"]: r for r in rows}           # in the figure's order (first: solid)
            spec["rows"] = [by_id[r] for r in fig.rows]
        elif fig.rows is not None:  # several trained models: each row's first run
            spec.update(trained={r: self.first_run(fig.table, dataset, r) for r in fig.rows},
                        split=test_splits(self.cfg, dataset)[0])
        if fig.row is not None:  # one trained model: the row's first member, first seed, first test split,
            # and the thresholds that say whether it trained (a figure of an untrained one says so)
            kind.check_model(self.experiment(dataset, self.row(fig.table, dataset, fig.row).members[0]).config["model"],
                             f"figure {name}, row '{fig.row}'")
            spec.update(row=fig.row, run=self.first_run(fig.table, dataset, fig.row), split=test_splits(self.cfg, dataset)[0],
                        training_check=self.cfg["training_check"])
        return spec

    def first_run(self, table: str, dataset: str, row_id: str) -> str:
        """The run a figure inspects for a row: its first member's run of its first seed."""
        row = self.row(table, dataset, row_id)
        return self.run_dir(dataset, row.members[0], row.member_seed(row.seeds[0], 0))

    def row(self, table: str, dataset: str, row_id: str) -> Row:
        for row in self.table(table, dataset).rows:
            if row.id == row_id:
                return row
        raise HarnessError(f"table {table}_{dataset} has no row '{row_id}'")

    def table_spec(self, table: str, dataset: str) -> dict:
        tbl = self.table(table, dataset)
        return {"table": table, "dataset": dataset, "dataset_kind": data_kind(self.cfg["datasets"][dataset]),
                "titles": tbl.titles, "tolerance": self.cfg["tolerance"], "training_check": self.cfg["training_check"],
                "protocols": self.cfg["datasets"][dataset]["protocols"] + ([STATISTICS_PROTOCOL] if tbl.statistics else []),
                "rows": [{"id": r.id, "label": r.label, "paper": r.paper, "seeds": r.seeds,
                          "ensemble_size": r.ensemble_size, "members": r.members, "reported": r.reported,
                          "not_reported": r.not_reported, "ledger": r.ledger, "compare_to": r.compare_to,
                          "ran": r.ran, "view": r.view, "reported_only": r.reported_only}
                         for r in tbl.rows]}

    def weights_input(self, backbone: str) -> list[str]:
        """The weights file a job needs as input: a DAG output, a configured file, or nothing ('none')."""
        weights = self.cfg["backbones"][backbone]["weights"]
        return [] if weights in (None, "none") else [weights]

    def rows_using(self, dataset: str, ensemble_id: str) -> Row:
        for (t, d), tbl in self.tables.items():
            for row in tbl.rows:
                if d == dataset and row.ensemble_id == ensemble_id:
                    return row
        raise HarnessError(f"unknown ensemble '{ensemble_id}' for dataset '{dataset}'")
