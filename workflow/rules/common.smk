import json
import logging
import os
import re
import sys
from collections import Counter

from snakemake.logging import logger as snakemake_logger
from snakemake_interface_logger_plugins.common import LogEvent

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


class AfterTheDagIsBuilt(logging.Filter):
    """Calls ``hook`` once, when Snakemake logs the job counts of the DAG it built: in a dry run
    too, where no onstart handler runs (its lines come before the counts)."""

    def __init__(self, hook):
        super().__init__()
        self.hook, self.called = hook, False

    def filter(self, record):
        if not self.called and getattr(record, "event", None) == LogEvent.RUN_INFO:
            self.called = True
            self.hook()
        return True


for _old in [f for f in snakemake_logger.filters
             if type(f).__name__ in (HarnessErrorsInOneLine.__name__, AfterTheDagIsBuilt.__name__)]:
    snakemake_logger.removeFilter(_old)  # the Snakefile parsed again in one process (the API, tests)
snakemake_logger.addFilter(HarnessErrorsInOneLine())
snakemake_logger.addFilter(AfterTheDagIsBuilt(lambda: announce_dry_run()))   # defined below

# The plug-in folders (config plugins; methods/plugins.py): the registries load them when first
# imported, and every job inherits them through the environment (SLURM ones through sbatch), so
# the variable is set before the rest of the package is imported.
os.environ[PLUGINS_ENV] = environment_value(config.get("plugins", []))

from methods.config import harness_config
from methods.data.datasets import dataset_payload
from methods.estimate import load_costs
from methods.io import write_json
from methods.paths import eval_file, model_file, run_vocab, sims_file, train_log
from methods.plan import Plan, data_kind, test_splits
from methods.plan.dag_checks import InputChecks
from methods.plan.datasets import as_configured   # the one-line errors' keys (HarnessErrorsInOneLine)
from methods.dry_run import dry_run_lines
from methods.plan.resources import dataset_resource as plan_dataset_resource, job_resources, numerics_prefix, rule_resource
from methods.plan.rule_inputs import RuleInputs
from methods.plan.runtime_jobs import PlannedJob, jobs_behind, runtime_spec
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
    encoder="[A-Za-z0-9_]+",   # a text encoder of config text_encoders
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
    return rule_resource(HARNESS, rule_name, key)


def dataset_resource(dataset, rule_name, key):
    return plan_dataset_resource(HARNESS, dataset, rule_name, key)


def numerics_env(dataset, threads):
    return numerics_prefix(HARNESS, dataset, threads)


def resources_of(dataset, rule_name):
    """Memory, run time and GPUs of a rule's jobs on ``dataset`` (a rule of one dataset)."""
    return job_resources(HARNESS, dataset, rule_name)


def numerics_env_of(threads_of):
    """``numerics_env`` of the jobs of a {dataset}-wildcard rule; ``threads_of(dataset)``: its configured threads."""
    return lambda w: numerics_env(w.dataset, threads_of(w.dataset))


def dataset_res(rule_name, key):
    """A resource of a rule with a {dataset} wildcard (``dataset_resource`` of that dataset)."""
    return lambda w: dataset_resource(w.dataset, rule_name, key)


def wildcard_resources(rule_name):
    """Memory and run time of a {dataset}-wildcard rule's jobs (that dataset's), and the rule's GPUs."""
    return {"mem_mb": dataset_res(rule_name, "mem_mb"), "runtime": dataset_res(rule_name, "runtime"),
            "gpu": res(rule_name, "gpus")}


# Every rule that computes something writes a Snakemake benchmark (wall and CPU seconds, max RSS)
# to {R}/benchmarks/<rule>/<the wildcards of its log path>.tsv; the runtime table reads them
# (workflow/rules/runtime.smk). Left out: dataset_config, experiment_config, table_spec,
# figure_spec, claims_spec, report_spec and summary_spec, local rules that only write the JSON
# their params hold (well under a second; a benchmark would time Python's start-up).
def benchmark_file(rule_name, wildcards):
    """The benchmark path pattern of a rule's jobs (``wildcards``: the wildcards part of its log path)."""
    return f"{R}/benchmarks/{rule_name}/{wildcards}.tsv"


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


def write_runtime_specs():
    """Before any job starts: for each runtime job of the DAG, the jobs behind it (rule, benchmark
    file, papers), written where the runtime job reads them."""
    order = [rule.name for rule in workflow.rules]
    for job in workflow.dag.jobs:
        if job.rule.name == "runtime":
            behind = jobs_behind(job, lambda j: workflow.dag.dependencies[j],
                                 lambda j: PlannedJob(j.rule.name, j.wildcards_dict,
                                                      str(j.benchmark) if j.benchmark is not None else None))
            spec = runtime_spec(PLAN, job.wildcards_dict["dataset"], behind, order)
            write_json(LAYOUT.runtime_spec(job.wildcards_dict["dataset"]), spec.to_json())


onstart:  # after the DAG is built (it holds the jobs to run), before any job starts
    check_device_before_jobs()
    write_runtime_specs()


CHECKS = InputChecks(HARNESS)   # each configured file checked once per DAG build (methods/plan/dag_checks.py)


def announce_dry_run():
    """Once the DAG is built, a dry run names each released row its tables leave out and prints
    the GPU-time estimate of each table of a real dataset it holds (methods/dry_run.py)."""
    if not (workflow.dryrun and workflow.is_main_process):
        return
    jobs = [(job.rule.name, job.wildcards_dict) for job in workflow.dag.jobs]
    lines = dry_run_lines(PLAN, [(w["table"], w["dataset"]) for rule, w in jobs if rule == "table"],
                          [(w["table"], w["dataset"]) for rule, w in jobs if rule == "released_rows_table"],
                          CHECKS.dataset, load_costs)
    for line in lines:
        snakemake_logger.info(line)


INPUTS = RuleInputs(PLAN, CHECKS)   # what each rule's jobs read (methods/plan/rule_inputs.py)
SYNTHETIC_PRECOMP = INPUTS.synthetic_precomp()   # a default target of their own: every split's regions
GENERATED_MULTILABEL = [n for n in MULTILABEL if "generated_from" in HARNESS["datasets"][n]]


def paper_name(w):
    """The report category of a paper's results: its name ("SGRAF (Diao et al., AAAI 2021)")."""
    return PLAN.papers[w.paper]


def figure_paper_name(w):
    """The report category of a paper figure: the name of the paper that declares it."""
    return PLAN.papers[PLAN.figure(w.figure, w.dataset).paper]
