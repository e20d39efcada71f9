import json

from methods.config import validate
from methods.data.checks import check_backbone_weights, check_dataset_inputs
from methods.workflow import Plan, dataset_paths, dataset_payload, test_splits

HARNESS = validate(dict(config), "config", "config/config.yaml (with --config/--configfile overrides)")
PLAN = Plan(HARNESS)
R = HARNESS["results_dir"]
DEVICE = HARNESS["device"]
SYNTHETIC = [n for n, d in HARNESS["datasets"].items() if d["kind"] == "synthetic"]


wildcard_constraints:
    dataset="[a-z0-9]+",
    table="[a-z0-9_]+",
    row="[a-z0-9_]+",
    exp="[a-z0-9_]+-[0-9a-f]{10}",
    ens="ens-[0-9a-f]{10}",
    seed="[0-9]+",
    split="[a-z]+",
    backbone="[A-Za-z0-9_]+",


def res(rule_name, key):
    return HARNESS["resources"][rule_name][key]


def dataset_json(w):
    return f"{R}/{w.dataset}/dataset.json"


def data_inputs_of(dataset):
    """Karpathy file and image folder of a dataset; real ones are checked here, at DAG-build time."""
    check_dataset_inputs(HARNESS, dataset)
    paths = dataset_paths(HARNESS, dataset)
    return {"karpathy": str(paths["karpathy_json"]), "images": str(paths["images_dir"])}


def data_inputs(w):
    return data_inputs_of(w.dataset)


def features_dir(dataset, backbone):
    return f"{R}/{dataset}/features/{backbone}"


SYNTHETIC_PRECOMP = [
    f"{R}/{name}/precomp/{split}_ims.npy"
    for name in SYNTHETIC
    if name in HARNESS["default_datasets"] and "region" in HARNESS["datasets"][name]["features"]
    for split in HARNESS["datasets"][name]["splits"]
]
