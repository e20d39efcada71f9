"""The DAG build's checks of a config's files, each run once per build: a dataset's files (splits,
sizes, protocols' image counts, COCO ids; stats every image) and a backbone's weights (loading a
weights file is slow). The input functions of the rules call them; the counts a dataset's check
made are what the dry run's cost estimates read.
"""
from __future__ import annotations

from methods.data.checks import check_backbone_weights, check_dataset_inputs
from methods.data.datasets import dataset_paths
from methods.data.instance_categories import check_instance_annotations
from methods.data.multilabel import check_source as check_multilabel_source
from methods.data.wordpiece import check_bert_folder
from methods.errors import HarnessError
from methods.features.weights_check import check_weights_fit
from methods.metrics.protocols import check_coco_ids, check_split_sizes, plausible_match_splits


class InputChecks:
    """The checks of one validated harness config, remembered for the DAG build that owns this object."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self._split_images: dict[str, dict[str, int]] = {}
        self._split_index: dict[str, dict] = {}
        self._backbones: set[str] = set()
        self._text_encoders: set[tuple[str, bool]] = set()

    def dataset(self, name: str) -> dict[str, int]:
        """Checks a dataset's files (once) and returns its images per harness split."""
        if name not in self._split_images:
            splits, keep_index = check_dataset_inputs(self.cfg, name)
            ds, karpathy = self.cfg["datasets"][name], dataset_paths(self.cfg, name)["karpathy_json"]
            sizes, where = {n: len(s) for n, s in splits.items()}, str(karpathy)
            if ds["kind"] == "multilabel":   # the source files' headers (none when generated)
                sizes, where = check_multilabel_source(self.cfg, name), f"datasets.{name}.source_dir"
            check_split_sizes(name, ds["protocols"], sizes, where)
            check_coco_ids(ds["protocols"], splits, karpathy)
            self._instance_annotations(name, splits)
            keep_index()   # a Karpathy file's index is cached once every check of the dataset has passed
            self._split_images[name], self._split_index[name] = sizes, splits
        return self._split_images[name]

    def split_index(self, name: str) -> dict:
        """The index of a Karpathy dataset's harness splits (its image files and COCO ids), checked."""
        self.dataset(name)
        return self._split_index[name]

    def _instance_annotations(self, name: str, splits: dict) -> None:
        """Plausible-match protocols: a Karpathy dataset whose instance annotation files are there."""
        ds = self.cfg["datasets"][name]
        needing = plausible_match_splits(ds["protocols"])
        if not needing:
            return
        if ds["kind"] != "karpathy":
            raise HarnessError(f"datasets.{name}.protocols: plausible-match protocols need COCO instance annotations "
                               f"of a Karpathy dataset; {name} is {ds['kind']}")
        check_instance_annotations(ds.get("instance_annotations"), f"datasets.{name}.instance_annotations",
                                   {s: splits[s] for s in needing if s in splits})

    def text_encoder(self, name: str, weights: bool = True) -> None:
        """A configured BERT folder is set and laid out as a BERT's (checked once; one the DAG
        pre-trains is its output); ``weights`` False: its weights file is not read (a released
        checkpoint holds the BERT's weights)."""
        if (name, weights) in self._text_encoders or (name, True) in self._text_encoders:
            return
        encoders = self.cfg.get("text_encoders") or {}
        if name not in encoders:
            raise HarnessError(f"model.text.encoder: '{name}' is not configured under text_encoders "
                               f"(configured: {', '.join(sorted(encoders)) or 'none'})")
        enc = encoders[name]
        if "pretrain" not in enc:
            if not enc.get("path"):
                raise HarnessError(f"text_encoders.{name}.path: not set (a BERT folder: config.json, vocab.txt, "
                                   f"model.safetensors or pytorch_model.bin)")
            check_bert_folder(enc["path"], f"text_encoders.{name}.path", weights=weights)
        self._text_encoders.add((name, weights))

    def backbone(self, name: str) -> None:
        """The backbone's weights are configured, present, and fit its architecture (checked once)."""
        if name not in self._backbones:
            check_backbone_weights(self.cfg, name)
            check_weights_fit(self.cfg, name)
            self._backbones.add(name)
