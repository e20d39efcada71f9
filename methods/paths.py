"""Every folder and file name of a results tree, in one place: the rules name their inputs and
outputs, the jobs the files they write and read, and the report the files it reads, through these.

    <results>/<dataset>/dataset.json                       the dataset payload every job reads
    <results>/<dataset>/vocab.json
    <results>/<dataset>/data/, precomp/, source/           generated data; synthetic (or imported) regions;
                                                           a generated tag dataset's source files
    <results>/<dataset>/features/<backbone>/               cached CNN outputs
    <results>/<dataset>/backbones/<backbone>.pt            a backbone pre-trained here
    <results>/<dataset>/runs/<exp>/config.json             an experiment's resolved config
    <results>/<dataset>/runs/<exp>/seed<s>/                a run: model.pt, train_log.json,
                                                           eval_<split>[@<view>].json, sims_<split>[@<view>].npy,
                                                           checkpoints/ while it trains
    <results>/<dataset>/ensembles/<ens>/seed<s>/           an ensemble's eval_<split>.json, sims_<split>.npy
    <results>/<dataset>/rows/<table>/<row>.json            a row's aggregate over seeds
    <results>/<dataset>/{tables,figures,claims,reports}/<name>.spec.json, summary.spec.json, runtime.spec.json

Any part may be a Snakemake wildcard (``"{exp}"``): the same functions give the rules' patterns.
Logs and benchmarks (``<results>/logs/<rule>/``, ``<results>/benchmarks/<rule>/``) are the rules' own.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MODEL_FILE = "model.pt"            # a run's kept weights
TRAIN_LOG = "train_log.json"       # a run's history, best epoch and provenance
RUN_VOCAB = "vocab.json"           # an imported run's vocabulary (the authors' released one)
CHECKPOINTS = "checkpoints"        # a run's last.pt (resume) and best.pt while it trains
SPEC_KINDS = ("tables", "released_tables", "figures", "claims", "reports")


def _view(view: str | None) -> str:
    return "" if view is None else f"@{view}"


def eval_name(split: str, view: str | None = None) -> str:
    """A run's (or an ensemble's) evaluation record of a test split, or of an evaluation view of it."""
    return f"eval_{split}{_view(view)}.json"


def sims_name(split: str, view: str | None = None) -> str:
    """The (images x texts) score matrix beside it."""
    return f"sims_{split}{_view(view)}.npy"


def checkpoints_dir(run: str | Path) -> str:
    return f"{run}/{CHECKPOINTS}"


def model_file(run: str | Path) -> str:
    return f"{run}/{MODEL_FILE}"


def run_vocab(run: str | Path) -> str:
    return f"{run}/{RUN_VOCAB}"


def train_log(run: str | Path) -> str:
    return f"{run}/{TRAIN_LOG}"


def eval_file(run: str | Path, split: str, view: str | None = None) -> str:
    return f"{run}/{eval_name(split, view)}"


def sims_file(run: str | Path, split: str, view: str | None = None) -> str:
    return f"{run}/{sims_name(split, view)}"


@dataclass(frozen=True)
class ResultsLayout:
    """The folders and files below one results folder (config ``results_dir``)."""

    root: str

    def dataset_dir(self, dataset: str) -> str:
        return f"{self.root}/{dataset}"

    def dataset_config(self, dataset: str) -> str:
        return f"{self.root}/{dataset}/dataset.json"

    def vocab(self, dataset: str) -> str:
        return f"{self.root}/{dataset}/vocab.json"

    def data_dir(self, dataset: str) -> str:
        return f"{self.root}/{dataset}/data"

    def precomp_dir(self, dataset: str) -> str:
        return f"{self.root}/{dataset}/precomp"

    def instance_categories(self, dataset: str) -> str:
        """The COCO instance categories of a dataset's images (``methods.data.instance_categories``)."""
        return f"{self.root}/{dataset}/data/instance_categories.npz"

    def source_dir(self, dataset: str) -> str:
        """A generated tag dataset's source files, in the label-wise code's layout."""
        return f"{self.root}/{dataset}/source"

    def features_dir(self, dataset: str, backbone: str) -> str:
        return f"{self.root}/{dataset}/features/{backbone}"

    def backbone_weights(self, dataset: str, backbone: str) -> str:
        return f"{self.root}/{dataset}/backbones/{backbone}.pt"

    def text_encoder_dir(self, dataset: str, encoder: str) -> str:
        """The folder of a text encoder the DAG pre-trains (config.json, vocab.txt, model.safetensors)."""
        return f"{self.root}/{dataset}/text_encoders/{encoder}"

    def wordpiece_captions(self, dataset: str, encoder: str) -> str:
        """A dataset's captions tokenised for one BERT text encoder (``methods.data.wordpiece``)."""
        return f"{self.root}/{dataset}/text/{encoder}.json"

    def experiment_config(self, dataset: str, exp: str) -> str:
        return f"{self.root}/{dataset}/runs/{exp}/config.json"

    def run_dir(self, dataset: str, exp: str, seed: int | str) -> str:
        return f"{self.root}/{dataset}/runs/{exp}/seed{seed}"

    def released_dir(self, dataset: str, exp: str, checkpoint: str) -> str:
        """An authors' checkpoint imported into experiment ``exp`` (``checkpoint``: its config key)."""
        return f"{self.root}/{dataset}/released/{exp}/{checkpoint}"

    def ensemble_dir(self, dataset: str, ens: str, seed: int | str) -> str:
        return f"{self.root}/{dataset}/ensembles/{ens}/seed{seed}"

    def row_aggregate(self, dataset: str, table: str, row: str) -> str:
        return f"{self.root}/{dataset}/rows/{table}/{row}.json"

    def spec(self, dataset: str, kind: str, name: str) -> str:
        """What the job building a table (or its released rows), figure, claims table or report of ``name`` reads."""
        if kind not in SPEC_KINDS:
            raise ValueError(f"spec kind '{kind}': expected one of {', '.join(SPEC_KINDS)}")
        return f"{self.root}/{dataset}/{kind}/{name}.spec.json"

    def summary_spec(self, dataset: str) -> str:
        return f"{self.root}/{dataset}/summary.spec.json"

    def runtime_spec(self, dataset: str) -> str:
        return f"{self.root}/{dataset}/runtime.spec.json"
