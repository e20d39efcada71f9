import functools
import json
import logging
import os
import re
import sys
from collections import Counter

from snakemake.logging import logger as snakemake_logger

from methods.errors import HarnessError
from methods.plugins import PLUGINS_ENV, environment_value


class HarnessErrorsInOneLine(logging.Filter):
    """Snakemake reports an exception raised while the DAG is built (here, or in an input function,
    wrapped in an InputFunctionException) as a block with a traceback. A HarnessError is the
    user's mistake and its message already names the file or key: show `error: <message>` alone.
    Snakemake logs the exception while handling it, so it is the one sys.exc_info() sees."""

    def filter(self, record):
        if record.levelno >= logging.ERROR:
            message = harness_error_in(sys.exc_info()[1])
            if message is not None:
                record.msg, record.args = f"error: {as_configured(message)}", ()
        return True


# How Snakemake's WorkflowError writes an exception it wraps (InputFunctionException: "Error:\n  <type>: <message>")
WRAPPED_HARNESS_ERROR = re.compile(r"^\s*HarnessError: (.+)$", re.MULTILINE)


def harness_error_in(exc):
    """The message of the HarnessError ``exc`` is, was raised while handling (its __cause__ /
    __context__ chain), or wraps: Snakemake re-raises an input function's InputFunctionException
    inside another handler, which replaces its context, so the HarnessError survives only in its text."""
    seen, chain = set(), []
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, HarnessError):
            return str(exc)
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    for exc in chain:
        wrapped = WRAPPED_HARNESS_ERROR.search(str(exc))
        if wrapped:
            return wrapped.group(1)
    return None


for _old in [f for f in snakemake_logger.filters if type(f).__name__ == HarnessErrorsInOneLine.__name__]:
    snakemake_logger.removeFilter(_old)  # the Snakefile parsed again in one process (the API, tests)
snakemake_logger.addFilter(HarnessErrorsInOneLine())

# The plug-in folders (config plugins; methods/plugins.py): the registries load them when first
# imported, and every job inherits them through the environment (SLURM ones through sbatch), so
# the variable is set before the rest of the package is imported.
os.environ[PLUGINS_ENV] = environment_value(config.get("plugins", []))

from methods.config import harness_config
from methods.data.checks import check_backbone_weights, check_dataset_inputs
from methods.data.word_vectors import check_word_vectors
from methods.data.multilabel import check_model_labels, check_source as check_multilabel_source
from methods.data.multilabel import source_files as multilabel_source_files, source_split as multilabel_source_split
from methods.data.datasets import dataset_paths, dataset_payload, dataset_tokenizer
from methods.data.tokenizers import PUNKT_FILES
from methods.estimate import BENCHMARK as COST_BENCHMARK, estimate, load_costs, table_work
from methods.features.weights_check import check_weights_fit
from methods.job_records import RuntimeJobSpec, RuntimeSpec
from methods.numerics import shell_prefix
from methods.paths import eval_file, model_file, run_vocab, sims_file, train_log
from methods.metrics.protocols import check_coco_ids, check_split_sizes, get_protocol
from methods.plan import Plan, data_kind, test_splits
from methods.plan.datasets import as_configured   # the one-line errors' keys (HarnessErrorsInOneLine)
from methods.report.figure_kinds import FIGURE_KINDS
from methods.placement import check_gpu_for_local_run, check_resource_names, cuda_visible, runs_jobs_here
from methods.retries import FAILED_JOBS_ENV, failed_jobs_dir

_defaults = workflow.resource_settings.default_resources   # None without --default-resources or a profile
check_resource_names(list(_defaults.keys()) if _defaults is not None else [],
                     workflow.resource_settings.overwrite_resources or {})
PLAN = Plan(harness_config(config, "config/config.yaml (with --config/--configfile overrides)"))
HARNESS = PLAN.cfg   # the validated config, with the smoke run of each real dataset (methods/plan/datasets.py)
R = HARNESS["results_dir"]
LAYOUT = PLAN.layout   # every folder and file name of the results tree (methods/paths.py)
# the same names as the rules' patterns (a wildcard where a name goes)
DATASET_JSON, VOCAB = LAYOUT.dataset_config("{dataset}"), LAYOUT.vocab("{dataset}")
DATA, PRECOMP, SOURCE = LAYOUT.data_dir("{dataset}"), LAYOUT.precomp_dir("{dataset}"), LAYOUT.source_dir("{dataset}")
# This run's folder of failure records: a retry of a job that stopped on a bad config or input
# stops at once (methods/retries.py). Jobs inherit the variable, SLURM ones through sbatch.
if workflow.is_main_process:
    os.environ[FAILED_JOBS_ENV] = failed_jobs_dir(R)

DEVICE = HARNESS["device"]
# --block-elements of the jobs that score a split (config scoring.block_elements)
BLOCK_ELEMENTS = " ".join(f"{device}={n}" for device, n in HARNESS["scoring"]["block_elements"].items())
# the bounds of reading a released file (config untrusted_files; methods/untrusted/sandbox.py)
READER_LIMITS = (f"--reader-memory-mb {HARNESS['untrusted_files']['memory_mb']} "
                 f"--reader-seconds {HARNESS['untrusted_files']['seconds']}")
CONDA_ENV = "../../envs/harness.yaml"  # relative to workflow/rules/; for --software-deployment-method conda
SYNTHETIC = [n for n, d in HARNESS["datasets"].items() if d["kind"] == "synthetic"]
MULTILABEL = [n for n, d in HARNESS["datasets"].items() if d["kind"] == "multilabel"]


wildcard_constraints:
    dataset="[a-z0-9]+(-smoke)?",   # a real dataset's smoke run: <name>-smoke (methods/plan/datasets.py)
    figure="|".join(sorted({f for f, _ in PLAN.figures})) or "no-paper-figure",
    table="[a-z0-9_]+",
    paper="[a-z0-9_]+",   # a paper file's key
    row="[a-z0-9_]+",
    exp="[a-z0-9_]+-[0-9a-f]{10}",
    ens="ens-[0-9a-f]{10}",
    seed="[0-9]+",
    split="[a-z]+",
    backbone="[A-Za-z0-9_]+",


# Every job writes its output to its log; when it fails, the log's last lines (its one-line
# `error:`, or a bug's traceback end) go to the job's stderr too, so a plain `snakemake` shows
# them on the console (no workflow profile needed; the SLURM profile's --show-failed-logs shows
# the log of a remote job). tr: a progress bar's \r updates are one line for tail. Keeps the
# exit status (2 = bad config or input: methods/retries.py does not retry it).
TO_LOG = "> {log} 2>&1 || {{ status=$?; tail -n 5 {log} | tr '\\r' '\\n' | tail -n 5 >&2; exit $status; }}"


def logged(command):
    """A job's shell command, its output sent to the job's log (TO_LOG)."""
    return command + TO_LOG


def res(rule_name, key):
    return HARNESS["resources"][rule_name][key]


def dataset_resource(dataset, rule_name, key):
    """A resource of a rule's jobs on one dataset: the dataset's override where it sets one
    (datasets.<name>.resources), else the rule's."""
    return HARNESS["datasets"][dataset].get("resources", {}).get(rule_name, {}).get(key, HARNESS["resources"][rule_name][key])


def dataset_gpus(dataset, rule_name):
    """GPUs a rule's jobs on ``dataset`` ask for: none for a dataset of portable numerics, whose
    jobs run on the CPU whatever the node has (methods.runtime.resolve_device), so they go to the
    CPU partition; else the dataset's override, else the rule's."""
    if HARNESS["datasets"][dataset]["numerics"] == "portable":
        return 0
    return dataset_resource(dataset, rule_name, "gpus")


def numerics_env(dataset, threads):
    """What a job of ``dataset`` writes before ``python -m``: its numerics mode's environment
    (``datasets.<name>.numerics``; portable: fixed kernels and ``threads``, the rule's configured
    count, whatever --cores gives it; methods/numerics.py), empty for native."""
    return shell_prefix(HARNESS["datasets"][dataset]["numerics"], threads)


def numerics_env_of(threads_of):
    """``numerics_env`` of the jobs of a {dataset}-wildcard rule; ``threads_of(dataset)``: its configured threads."""
    return lambda w: numerics_env(w.dataset, threads_of(w.dataset))


def dataset_res(rule_name, key):
    """A resource of a rule with a {dataset} wildcard (``dataset_resource`` of that dataset)."""
    return lambda w: dataset_resource(w.dataset, rule_name, key)


# Every rule that computes something writes a Snakemake benchmark (wall and CPU seconds, max RSS)
# to {R}/benchmarks/<rule>/<the wildcards of its log path>.tsv; the runtime table reads them
# (workflow/rules/runtime.smk). Left out: dataset_config, experiment_config, table_spec,
# figure_spec, claims_spec, report_spec, summary_spec and runtime_spec, local rules that only write the JSON
# their params hold (well under a second; a benchmark would time Python's start-up).
BENCHMARKS = {}  # rule name -> benchmark path pattern


def benchmark_file(rule_name, wildcards):
    """The benchmark path pattern of a rule's jobs (``wildcards``: the wildcards part of its log path), recorded in BENCHMARKS."""
    BENCHMARKS[rule_name] = f"{R}/benchmarks/{rule_name}/{wildcards}.tsv"
    return BENCHMARKS[rule_name]


def dataset_json(w):
    return LAYOUT.dataset_config(w.dataset)


def check_device_before_jobs():
    """``device: cuda`` where no GPU is visible stops a local run once its DAG is built, before the
    first job (methods/placement.py); a cluster run, a dry run and a job on a node are not checked."""
    if DEVICE != "cuda":
        return
    runs_here = runs_jobs_here(main_process=workflow.is_main_process, local_executor=workflow.local_exec,
                               dry_run=workflow.dryrun, touch=workflow.touch)
    device_jobs = Counter(job.rule.name for job in workflow.dag.needrun_jobs() if "device" in job.rule.params.keys())
    check_gpu_for_local_run(DEVICE, runs_here=runs_here, device_jobs=dict(device_jobs),
                            gpu_visible=runs_here and bool(device_jobs) and cuda_visible())


onstart:  # after the DAG is built (it holds the jobs to run), before any job starts
    check_device_before_jobs()


_CHECKED_DATASETS = set()  # the check stats every image: once per dataset per DAG build


def checked_dataset(dataset):
    if dataset not in _CHECKED_DATASETS:
        splits, keep_index = check_dataset_inputs(HARNESS, dataset)
        protocols, karpathy = HARNESS["datasets"][dataset]["protocols"], dataset_paths(HARNESS, dataset)["karpathy_json"]
        sizes, where = {n: len(s) for n, s in splits.items()}, str(karpathy)
        if HARNESS["datasets"][dataset]["kind"] == "multilabel":   # the source files' headers (none when generated)
            sizes, where = check_multilabel_source(HARNESS, dataset), f"datasets.{dataset}.source_dir"
        check_split_sizes(dataset, protocols, sizes, where)
        check_coco_ids(protocols, splits, karpathy)
        keep_index()   # a Karpathy file's index is cached once every check of the dataset has passed
        _CHECKED_DATASETS.add(dataset)
        _SPLIT_IMAGES[dataset] = sizes


_SPLIT_IMAGES = {}   # dataset -> images per harness split, as its input checks counted them
_ESTIMATED = set()
gpu_costs = functools.cache(load_costs)   # config/measured_costs.yaml, read by a dry run's estimates only


def announce_gpu_time(table, dataset):
    """A dry run prints the GPU-time estimate of each table of a real dataset it plans, once
    (methods/estimate.py); the synthetic data's times are in tables/runtime_<dataset>.md, and a
    smoke run is a few batches."""
    if not (workflow.dryrun and workflow.is_main_process) or (table, dataset) in _ESTIMATED \
            or data_kind(HARNESS["datasets"][dataset]) == "synthetic":
        return
    _ESTIMATED.add((table, dataset))
    announce_unconfigured(table, dataset)
    if data_kind(HARNESS["datasets"][dataset]) == "smoke":
        return
    work = table_work(PLAN, table, dataset, _SPLIT_IMAGES[dataset])
    measure = f"{COST_BENCHMARK} --dataset {dataset} --tables {table} --device cuda --write config/measured_costs.yaml"
    for line in estimate(work, gpu_costs()).lines(f"tables/{table}_{dataset}.csv", measure):
        snakemake_logger.info(line)


_ANNOUNCED = set()


def announce_unconfigured(table, dataset):
    """A dry run names, once, each released row a table leaves out and the config keys that would add it."""
    if not (workflow.dryrun and workflow.is_main_process) or (table, dataset) in _ANNOUNCED:
        return
    _ANNOUNCED.add((table, dataset))
    for row in PLAN.table(table, dataset).unconfigured:   # the authors' weights this table will not show
        snakemake_logger.info(f"tables/{table}_{dataset}.csv: row '{row['id']}' (the authors' released weights) is "
                              f"left out: set {', '.join(row['keys'])}")


_CHECKED_BACKBONES = set()  # loading a weights file is slow: once per backbone per DAG build (and cached)


def checked_backbone(backbone):
    """The backbone's weights are configured, present, and fit its architecture."""
    if backbone not in _CHECKED_BACKBONES:
        check_backbone_weights(HARNESS, backbone)
        check_weights_fit(HARNESS, backbone)
        _CHECKED_BACKBONES.add(backbone)


def data_inputs_of(dataset):
    """Karpathy file and image folder of a dataset; real ones are checked here, at DAG-build time."""
    checked_dataset(dataset)
    paths = dataset_paths(HARNESS, dataset)
    images = {"images": str(paths["images_dir"])} if paths["images_dir"] else {}  # multilabel: none
    return {"karpathy": str(paths["karpathy_json"]), **images}


def tokenizer_inputs(w):
    """The Punkt model files of a dataset tokenised with nltk (checked here, at DAG-build time):
    the vocabulary, which holds the dataset's tokenised captions, is built again when they change."""
    tokenizer = dataset_tokenizer(HARNESS, w.dataset)
    return [str(tokenizer.punkt / f) for f in PUNKT_FILES] if tokenizer.punkt else []


def data_inputs(w):
    return data_inputs_of(w.dataset)


def features_dir(dataset, backbone):
    return LAYOUT.features_dir(dataset, backbone)


SYNTHETIC_PRECOMP = [
    f"{LAYOUT.precomp_dir(name)}/{split}_ims.npy"
    for name in SYNTHETIC
    if name in HARNESS["default_datasets"] and "region" in HARNESS["datasets"][name]["features"]
    for split in HARNESS["datasets"][name]["splits"]
]


def backbone_weights(w):
    checked_backbone(w.backbone)
    return PLAN.weights_input(w.backbone)


def region_grid(w):
    region = HARNESS["datasets"][w.dataset]["features"]["region"]
    return f"{features_dir(w.dataset, region['backbone'])}/{w.split}_{region['layer']}.npy"


def run_dir(dataset, exp, seed):
    return PLAN.run_dir(dataset, exp, seed)


def image_features_dir(dataset, exp_id):
    """Where the experiment's image input lives (its kind says: cached features, precomputed regions)."""
    return PLAN.image_feature_dir(dataset, exp_id)


def image_feature_files(dataset, exp_id, split):
    return PLAN.image_feature_files(dataset, exp_id, split)


def positives_inputs_of(dataset):
    """The extended-positives file of a dataset that has one, with the Karpathy file its sentids
    and imgids refer to; a protocol that needs extended positives on a dataset without them fails
    here, when the DAG is built."""
    paths = dataset_paths(HARNESS, dataset)
    if paths["positives"] is None:
        needing = [p for p in HARNESS["datasets"][dataset]["protocols"]
                   if get_protocol(p).relevance == "extended_positives"]
        if needing:
            raise HarnessError(f"datasets.{dataset}.protocols: {', '.join(needing)} need extended positives "
                               f"(every image each caption describes), which only the synthetic generator writes")
        return {}
    return {"positives": str(paths["positives"]), "karpathy": str(paths["karpathy_json"])}


def positives_inputs(w):
    return positives_inputs_of(w.dataset)


def train_inputs_of(dataset, exp_id):
    """What a training job reads: the dataset's files, the experiment's config, the vocabulary, the
    train and dev image input and backbone weights, and what the evaluation of the kept model on
    the test splits reads (extended positives; the cached test features when the kept epoch may
    be one with a frozen CNN, or the model reads regions)."""
    exp = PLAN.experiment(dataset, exp_id)
    weights = []
    if exp.backbone is not None:
        checked_backbone(exp.backbone)
        weights = PLAN.weights_input(exp.backbone)
    data = data_inputs_of(dataset)  # checks the dataset's files first (a configured GloVe file exists, its head parses)
    check_word_vectors(HARNESS, dataset, exp.config["model"], exp_id)
    check_model_labels(HARNESS, dataset, exp.config["model"], f"experiment {exp_id} ({exp.config['method']})")
    splits = ["train", "dev"] + (test_splits(HARNESS, dataset) if exp.may_evaluate_on_cached_features else [])
    return {
        **data,
        **positives_inputs_of(dataset),
        "cfg": LAYOUT.dataset_config(dataset),
        "exp": LAYOUT.experiment_config(dataset, exp_id),
        "vocab": LAYOUT.vocab(dataset),
        "features": [f for split in splits for f in image_feature_files(dataset, exp_id, split)],
        "weights": weights,
    }


def view_inputs_of(dataset, exp, seed, split):
    """What evaluating the views of a trained run reads: its model, the test split's image input,
    the vocabulary and the dataset's relevance files."""
    return {
        **positives_inputs_of(dataset),
        "cfg": LAYOUT.dataset_config(dataset),
        "vocab": LAYOUT.vocab(dataset),
        "model": model_file(run_dir(dataset, exp, seed)),
        "features": image_feature_files(dataset, exp, split),
    }


def released_inputs_of(dataset, exp_id, checkpoint):
    """What importing and evaluating an authors' checkpoint reads: the dataset's files, the
    experiment's config, the checkpoint and vocabulary files (config datasets.<name>.released),
    and the test splits' image input (precomputed regions; a model with a CNN reads the images)."""
    member = PLAN.released_member(dataset, exp_id, checkpoint)
    exp = PLAN.experiment(dataset, exp_id)
    features = ([f for split in test_splits(HARNESS, dataset) for f in image_feature_files(dataset, exp_id, split)]
                if exp.backbone is None else [])
    return {
        **data_inputs_of(dataset),
        **positives_inputs_of(dataset),
        "cfg": LAYOUT.dataset_config(dataset),
        "exp": LAYOUT.experiment_config(dataset, exp_id),
        "checkpoint": member.checkpoint_path,
        "vocab": member.vocab_path,
        "features": features,
    }


def ensemble_members(w):
    return PLAN.rows_using(w.dataset, w.ens).member_runs(LAYOUT, w.dataset, int(w.seed))


def row_evals(w):
    row = PLAN.row(w.table, w.dataset, w.row)
    if not row.runs_models:
        raise HarnessError(f"row '{w.row}' of table {w.table} is reported only ({row.reported_only}): "
                           f"it has no runs to aggregate")
    splits = test_splits(HARNESS, w.dataset)
    if row.ensemble_id is None:   # the run's own evaluations, or those of the row's evaluation view
        return [eval_file(row.member_runs(LAYOUT, w.dataset, s)[0], sp, row.view) for s in row.seeds for sp in splits]
    return [eval_file(LAYOUT.ensemble_dir(w.dataset, row.ensemble_id, s), sp) for s in row.seeds for sp in splits]


def table_inputs(w):
    tbl = PLAN.table(w.table, w.dataset)
    checked_dataset(w.dataset)
    announce_gpu_time(w.table, w.dataset)
    return {
        "spec": LAYOUT.spec(w.dataset, "tables", w.table),
        "rows": [LAYOUT.row_aggregate(w.dataset, w.table, r.id) for r in tbl.rows if r.runs_models],
    }


def released_table_inputs(w):
    """The released rows of a table: their spec and aggregates (no training run behind them)."""
    tbl = PLAN.table(w.table, w.dataset)
    rows = [LAYOUT.row_aggregate(w.dataset, w.table, r.id) for r in tbl.rows if r.released]
    if not rows:
        raise HarnessError(f"tables/released/{w.table}_{w.dataset}.csv: table {w.table} has no row of the authors' "
                           f"released weights configured on {w.dataset}"
                           + (f" (set {', '.join(sorted({k for r in tbl.unconfigured for k in r['keys']}))})"
                              if tbl.unconfigured else ""))
    checked_dataset(w.dataset)
    announce_unconfigured(w.table, w.dataset)
    return {"spec": LAYOUT.spec(w.dataset, "released_tables", w.table), "rows": rows}


def released_tables_of(dataset):
    """Every table's released rows on ``dataset`` (target released_<dataset>); none configured: one line."""
    tables = PLAN.released_tables(dataset)
    if not tables:
        keys = sorted({k for (t, d), tbl in PLAN.tables.items() if d == dataset for r in tbl.unconfigured
                       for k in r["keys"]})
        raise HarnessError(f"target released_{dataset}: no row of the authors' released weights is configured on "
                           f"{dataset}" + (f"; the paper files' released rows read {', '.join(keys)}" if keys else
                                           " (no paper file declares one for it)"))
    return [f"tables/released/{t}_{dataset}.csv" for t in tables]


def figure_inputs(w):
    """The spec and row aggregates, plus what the figure's kind needs (FIGURE_KINDS)."""
    fig = PLAN.figure(w.figure, w.dataset)
    spec = PLAN.figure_spec(w.figure, w.dataset)
    needs = FIGURE_KINDS.get(fig.kind).needs
    inputs = {
        "spec": LAYOUT.spec(w.dataset, "figures", w.figure),
        "rows": [LAYOUT.row_aggregate(w.dataset, fig.table, r.id) for r in spec.rows],
    }
    if "train_logs" in needs:
        inputs["logs"] = [train_log(run) for r in spec.rows for run in r.runs]
    if "trained_runs" in needs:  # the trained models of several rows and their test inputs
        inputs.update(cfg=dataset_json(w), vocab=LAYOUT.vocab(w.dataset),
                      models=[model_file(run) for run in spec.trained.values()],
                      features=sorted({f for r in fig.rows
                                       for f in image_feature_files(w.dataset, PLAN.row(fig.table, w.dataset, r).members[0],
                                                                    spec.split)}))
    if "trained_run" in needs:  # one trained model, its test scores and its inputs
        exp = PLAN.row(fig.table, w.dataset, fig.row).members[0]
        inputs.update(cfg=dataset_json(w), vocab=LAYOUT.vocab(w.dataset),
                      model=model_file(spec.run), sims=sims_file(spec.run, spec.split),
                      evaluation=eval_file(spec.run, spec.split),   # its model config, its training check
                      features=image_feature_files(w.dataset, exp, spec.split))
    if "positives" in needs:  # what a true match is, where the dataset has extended positives
        inputs.update(positives_inputs_of(w.dataset))
    return inputs


def figure_extra_args(w):
    """Command-line arguments a figure kind needs beyond its spec and row aggregates."""
    fig = PLAN.figure(w.figure, w.dataset)
    needs = FIGURE_KINDS.get(fig.kind).needs
    if "trained_run" not in needs and "trained_runs" not in needs:
        return ""
    exp = PLAN.row(fig.table, w.dataset, fig.row or fig.rows[0]).members[0]
    return (f"--dataset-config {LAYOUT.dataset_config(w.dataset)} --vocab {LAYOUT.vocab(w.dataset)} "
            f"--features-dir {image_features_dir(w.dataset, exp)}")


# -- multi-label sources (data.smk) --
GENERATED_MULTILABEL = [n for n in MULTILABEL if "generated_from" in HARNESS["datasets"][n]]


def multilabel_source_inputs(dataset, split=None):
    """The source files an import job of ``dataset`` reads (of ``split``, else of every split),
    checked first; a generated source: its folder, a DAG output."""
    checked_dataset(dataset)
    ds, source = HARNESS["datasets"][dataset], dataset_paths(HARNESS, dataset)["source_dir"]
    if "generated_from" in ds:
        return [str(source)]
    return sorted({str(p) for s in ([split] if split else ds["splits"]) for p in multilabel_source_files(ds, source, s)})


def synthetic_tags_from(w):
    """The generating synthetic dataset's Karpathy file and region files of this dataset's splits."""
    ds = HARNESS["datasets"][w.dataset]
    checked_dataset(w.dataset)
    src = ds["generated_from"]["dataset"]
    return {"json": f"{LAYOUT.data_dir(src)}/dataset_{src}.json",
            "precomp": [f"{LAYOUT.precomp_dir(src)}/{multilabel_source_split(ds, s)}_{suffix}"
                        for s in ds["splits"] for suffix in ("ims.npy", "boxes.npy", "ids.txt")]}


def multilabel_cls_input(w):
    """The detector class scores of a split (``{split}_cls.npy``), needed by region-class targets."""
    ds, source = HARNESS["datasets"][w.dataset], dataset_paths(HARNESS, w.dataset)["source_dir"]
    checked_dataset(w.dataset)
    if "generated_from" in ds:
        return [str(source)]
    path = source / f"{multilabel_source_split(ds, w.split)}_cls.npy"
    if not path.is_file():
        raise HarnessError(f"datasets.{w.dataset}: {path} not found: region-class targets of split "
                           f"'{w.split}' need its detector class scores (N, regions, classes)")
    return [str(path)]


# -- claims and reports (report.smk) --
def claims_inputs(w):
    if not PLAN.paper_claims(w.paper, w.dataset):   # an unknown paper or dataset fails there, in one line
        raise HarnessError(f"target tables/claims_{w.paper}_{w.dataset}.csv: paper file '{w.paper}' states no claim "
                           f"checked on {w.dataset} (its report, reports/{w.paper}_{w.dataset}.md, has its tables)")
    checked_dataset(w.dataset)
    return {"spec": LAYOUT.spec(w.dataset, "claims", w.paper), "cfg": dataset_json(w),
            **positives_inputs_of(w.dataset), "scores": PLAN.claims_score_files(w.paper, w.dataset),
            "rows": PLAN.claims_row_aggregates(w.paper, w.dataset)}   # their training checks


def paper_name(w):
    """The report category of a paper's results: its name ("SGRAF (Diao et al., AAAI 2021)")."""
    return PLAN.papers[w.paper]


def figure_paper_name(w):
    """The report category of a paper figure: the name of the paper that declares it."""
    return PLAN.papers[PLAN.figure(w.figure, w.dataset).paper]


def paper_page_inputs(w):
    """A paper's page: its reproduction report, its tables and claims table (Markdown), and its
    figures on the dataset (those its file declares, then its claims figure)."""
    claims = PLAN.paper_claims(w.paper, w.dataset, f"reports/{w.paper}_{w.dataset}.html")
    return {"report": f"reports/{w.paper}_{w.dataset}.md",
            "tables": [f"tables/{t}_{w.dataset}.md" for t in PLAN.report_tables(w.paper, w.dataset)],
            "claims": [f"tables/claims_{w.paper}_{w.dataset}.md"] if claims else [],
            "figures": [f"figures/{name}_{w.dataset}.png" for (name, d), fig in PLAN.figures.items()
                        if d == w.dataset and fig.paper == w.paper]
                       + ([f"figures/claims_{w.paper}_{w.dataset}.png"] if claims else [])}


def report_inputs(w):
    # an unknown paper, or a dataset it has no table on: one line
    claims = PLAN.paper_claims(w.paper, w.dataset, f"reports/{w.paper}_{w.dataset}.md")
    tables = PLAN.report_tables(w.paper, w.dataset)
    return {"spec": LAYOUT.spec(w.dataset, "reports", w.paper),
            "tables": [f"tables/{t}_{w.dataset}.csv" for t in tables],
            "table_specs": [LAYOUT.spec(w.dataset, "tables", t) for t in tables],
            "claims": [f"tables/claims_{w.paper}_{w.dataset}.csv"] if claims else []}
