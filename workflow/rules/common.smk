import json

from methods.config import validate
from methods.data.checks import check_backbone_weights, check_dataset_inputs
from methods.data.datasets import dataset_paths, dataset_payload, features_dir as backbone_features_dir
from methods.errors import HarnessError
from methods.metrics.protocols import get_protocol
from methods.plan import Plan, test_splits
from methods.report.paper_figures import FIGURE_KINDS

HARNESS = validate(dict(config), "config", "config/config.yaml (with --config/--configfile overrides)")
PLAN = Plan(HARNESS)
R = HARNESS["results_dir"]
DEVICE = HARNESS["device"]
CONDA_ENV = "../../envs/harness.yaml"  # relative to workflow/rules/; for --software-deployment-method conda
SYNTHETIC = [n for n, d in HARNESS["datasets"].items() if d["kind"] == "synthetic"]


wildcard_constraints:
    dataset="[a-z0-9]+",
    figure="|".join(sorted({f for f, _ in PLAN.figures})) or "no-paper-figure",
    table="[a-z0-9_]+",
    row="[a-z0-9_]+",
    exp="[a-z0-9_]+-[0-9a-f]{10}",
    ens="ens-[0-9a-f]{10}",
    seed="[0-9]+",
    split="[a-z]+",
    backbone="[A-Za-z0-9_]+",


def res(rule_name, key):
    return HARNESS["resources"][rule_name][key]


def dataset_res(rule_name, key):
    """A resource of a rule with a {dataset} wildcard: the dataset's override where it sets one
    (datasets.<name>.resources), else the rule's."""
    return lambda w: HARNESS["datasets"][w.dataset].get("resources", {}).get(rule_name, {}).get(
        key, HARNESS["resources"][rule_name][key])


# Every rule that computes something writes a Snakemake benchmark (wall and CPU seconds, max RSS)
# to {R}/benchmarks/<rule>/<the wildcards of its log path>.tsv; the runtime table reads them
# (workflow/rules/runtime.smk). Left out: dataset_config, experiment_config, table_spec,
# figure_spec and runtime_spec, local rules that only write the JSON their params hold (well
# under a second; a benchmark would time Python's start-up).
BENCHMARKS = {}  # rule name -> benchmark path pattern


def benchmark_file(rule_name, wildcards):
    """The benchmark path pattern of a rule (``wildcards``: the wildcards part of its log path), recorded in BENCHMARKS."""
    BENCHMARKS[rule_name] = f"{R}/benchmarks/{rule_name}/{wildcards}.tsv"
    return BENCHMARKS[rule_name]


def dataset_json(w):
    return f"{R}/{w.dataset}/dataset.json"


_CHECKED_DATASETS = set()  # the check stats every image: once per dataset per DAG build


def checked_dataset(dataset):
    if dataset not in _CHECKED_DATASETS:
        check_dataset_inputs(HARNESS, dataset)
        _CHECKED_DATASETS.add(dataset)


def data_inputs_of(dataset):
    """Karpathy file and image folder of a dataset; real ones are checked here, at DAG-build time."""
    checked_dataset(dataset)
    paths = dataset_paths(HARNESS, dataset)
    return {"karpathy": str(paths["karpathy_json"]), "images": str(paths["images_dir"])}


def data_inputs(w):
    return data_inputs_of(w.dataset)


def features_dir(dataset, backbone):
    return backbone_features_dir(R, dataset, backbone)


SYNTHETIC_PRECOMP = [
    f"{R}/{name}/precomp/{split}_ims.npy"
    for name in SYNTHETIC
    if name in HARNESS["default_datasets"] and "region" in HARNESS["datasets"][name]["features"]
    for split in HARNESS["datasets"][name]["splits"]
]


def backbone_weights(w):
    check_backbone_weights(HARNESS, w.backbone)
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


def train_inputs(w):
    exp = PLAN.experiment(w.dataset, w.exp)
    weights = []
    if exp.backbone is not None:
        check_backbone_weights(HARNESS, exp.backbone)
        weights = PLAN.weights_input(exp.backbone)
    return {
        **data_inputs(w),
        "cfg": dataset_json(w),
        "exp": f"{R}/{w.dataset}/runs/{w.exp}/config.json",
        "vocab": f"{R}/{w.dataset}/vocab.json",
        "features": [f for split in ("train", "dev") for f in image_feature_files(w.dataset, w.exp, split)],
        "weights": weights,
    }


def positives_inputs(w):
    """The extended-positives file of a dataset that has one, with the Karpathy file its sentids
    and imgids refer to; a protocol that needs extended positives on a dataset without them fails
    here, when the DAG is built."""
    paths = dataset_paths(HARNESS, w.dataset)
    if paths["positives"] is None:
        needing = [p for p in HARNESS["datasets"][w.dataset]["protocols"]
                   if get_protocol(p).relevance == "extended_positives"]
        if needing:
            raise HarnessError(f"datasets.{w.dataset}.protocols: {', '.join(needing)} need extended positives "
                               f"(every image each caption describes), which only the synthetic generator writes")
        return {}
    return {"positives": str(paths["positives"]), "karpathy": str(paths["karpathy_json"])}


def evaluate_inputs(w):
    exp = PLAN.experiment(w.dataset, w.exp)
    inputs = {
        **data_inputs(w),
        **positives_inputs(w),
        "cfg": dataset_json(w),
        "model": f"{run_dir(w.dataset, w.exp, w.seed)}/model.pt",
        "vocab": f"{R}/{w.dataset}/vocab.json",
    }
    if exp.may_evaluate_on_cached_features:  # best epoch with a frozen CNN, or regions: cached test features
        inputs["features"] = image_feature_files(w.dataset, w.exp, w.split)
    return inputs


def ensemble_members(w):
    row = PLAN.rows_using(w.dataset, w.ens)
    return [run_dir(w.dataset, exp, row.member_seed(int(w.seed), i)) for i, exp in enumerate(row.members)]


def row_evals(w):
    row = PLAN.row(w.table, w.dataset, w.row)
    splits = test_splits(HARNESS, w.dataset)
    if row.ensemble_id is None:
        return [f"{run_dir(w.dataset, row.members[0], s)}/eval_{sp}.json" for s in row.seeds for sp in splits]
    return [f"{R}/{w.dataset}/ensembles/{row.ensemble_id}/seed{s}/eval_{sp}.json" for s in row.seeds for sp in splits]


def table_inputs(w):
    tbl = PLAN.table(w.table, w.dataset)
    checked_dataset(w.dataset)
    return {
        "spec": f"{R}/{w.dataset}/tables/{w.table}.spec.json",
        "rows": [f"{R}/{w.dataset}/rows/{w.table}/{r.id}.json" for r in tbl.rows],
    }


def figure_inputs(w):
    """The spec and row aggregates, plus what the figure's kind needs (FIGURE_KINDS)."""
    fig = PLAN.figure(w.figure, w.dataset)
    spec = PLAN.figure_spec(w.figure, w.dataset)
    needs = FIGURE_KINDS.get(fig.kind).needs
    inputs = {
        "spec": f"{R}/{w.dataset}/figures/{w.figure}.spec.json",
        "rows": [f"{R}/{w.dataset}/rows/{fig.table}/{r['id']}.json" for r in spec["rows"]],
    }
    if "train_logs" in needs:
        inputs["logs"] = [f"{run}/train_log.json" for r in spec["rows"] for run in r["runs"]]
    if "trained_run" in needs:  # one trained model, its test scores and its inputs
        exp = PLAN.row(fig.table, w.dataset, fig.row).members[0]
        inputs.update(cfg=dataset_json(w), vocab=f"{R}/{w.dataset}/vocab.json",
                      model=f"{spec['run']}/model.pt", sims=f"{spec['run']}/sims_{spec['split']}.npy",
                      features=image_feature_files(w.dataset, exp, spec["split"]))
    return inputs


def figure_extra_args(w):
    """Command-line arguments a figure kind needs beyond its spec and row aggregates."""
    fig = PLAN.figure(w.figure, w.dataset)
    if "trained_run" not in FIGURE_KINDS.get(fig.kind).needs:
        return ""
    exp = PLAN.row(fig.table, w.dataset, fig.row).members[0]
    return (f"--dataset-config {R}/{w.dataset}/dataset.json --vocab {R}/{w.dataset}/vocab.json "
            f"--features-dir {image_features_dir(w.dataset, exp)}")
