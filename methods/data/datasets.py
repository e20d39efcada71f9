"""Where a configured dataset's inputs live, and the dataset payload (``dataset.json``) that the
data, feature, training and evaluation jobs of one dataset read."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from methods.config import validate
from methods.data.karpathy import Split, load_splits
from methods.data.tokenizers import Tokenizer
from methods.errors import HarnessError
from methods.io import read_json
from methods.paths import ResultsLayout


def dataset_paths(cfg: dict, name: str) -> dict[str, Path | None]:
    """Where a dataset's inputs live: generated under results/ for synthetic, from config otherwise.
    ``positives``: the extended-positives file (every image each caption describes,
    ``methods.data.positives``), written by the synthetic generator; None for Karpathy datasets.
    ``instance_categories``: where the DAG writes a Karpathy dataset's images' COCO instance
    categories from its ``instance_annotations`` folder (``methods.data.instance_categories``); None
    when that is not configured."""
    if name not in cfg["datasets"]:
        raise HarnessError(f"unknown dataset '{name}'; configured: {', '.join(sorted(cfg['datasets']))}")
    ds = cfg["datasets"][name]
    layout = ResultsLayout(cfg["results_dir"])
    if ds["kind"] == "synthetic":
        root = Path(layout.data_dir(name))
        return {"karpathy_json": root / f"dataset_{name}.json", "images_dir": root / "images",
                "precomp_dir": Path(layout.precomp_dir(name)), "glove": None, "vocab": None,
                "nltk_data": None, "positives": root / f"positives_{name}.json"}
    if ds["kind"] == "multilabel":  # imported under results/ from source_dir (methods.data.multilabel)
        source = Path(layout.source_dir(name)) if "generated_from" in ds else (
            Path(ds["source_dir"]).expanduser() if ds.get("source_dir") else None)
        images = (Path(ds["images_dir"]).expanduser() if ds.get("images_dir") else
                  dataset_paths(cfg, ds["generated_from"]["dataset"])["images_dir"] if "generated_from" in ds else None)
        return {"karpathy_json": Path(layout.data_dir(name)) / f"dataset_{name}.json", "images_dir": images,
                "precomp_dir": Path(layout.precomp_dir(name)), "source_dir": source, "positives": None,
                **{k: (Path(ds[k]).expanduser() if ds.get(k) else None) for k in ("glove", "vocab", "nltk_data")}}
    instances = Path(ds["instance_annotations"]).expanduser() if ds.get("instance_annotations") else None
    return {**{k: (Path(ds[k]).expanduser() if ds.get(k) else None)
               for k in ("karpathy_json", "images_dir", "precomp_dir", "glove", "vocab", "nltk_data")}, "positives": None,
            "instance_annotations": instances,
            "instance_categories": Path(layout.instance_categories(name)) if instances else None}


@dataclass
class DatasetPayload:
    """What the data, feature, training and evaluation jobs of one dataset read (``dataset.json``):
    its name, its config block (``datasets.<name>``), its resolved input paths and the configured
    backbones and text encoders. ``splits`` reads harness splits from the Karpathy file, each once per payload."""

    name: str
    dataset: dict
    paths: dict
    backbones: dict = field(default_factory=dict)
    text_encoders: dict = field(default_factory=dict)
    _splits: dict[str, Split] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def from_json(cls, obj: dict) -> "DatasetPayload":
        return cls(obj["name"], obj["dataset"], obj["paths"], obj.get("backbones", {}), obj.get("text_encoders", {}))

    def to_json(self) -> dict:
        return {"name": self.name, "dataset": self.dataset, "backbones": self.backbones,
                "text_encoders": self.text_encoders, "paths": self.paths}

    def splits(self, names: list[str]) -> dict[str, Split]:
        """The named harness splits, each with the dataset's ``texts_per_image``; a smoke run's, its
        first images (``smoke_limit``). The first call parses the Karpathy file once for every split
        of the dataset (COCO's is 160 MB: a job reads it once, not once per split)."""
        if any(n not in self._splits for n in names):
            missing = [n for n in self.dataset["splits"] if n not in self._splits] + [
                n for n in dict.fromkeys(names) if n not in self.dataset["splits"]]
            loaded = load_splits(self.paths["karpathy_json"], {n: self.dataset["splits"][n] for n in missing},
                                 self.dataset["texts_per_image"])
            for n, split in loaded.items():
                limit = smoke_limit(self.dataset, n)
                self._splits[n] = split if limit is None else split.head(limit)
        return {n: self._splits[n] for n in names}

    def split(self, name: str) -> Split:
        return self.splits([name])[name]

    def tokenizer(self) -> Tokenizer:
        """The tokenizer of the dataset (``datasets.<name>.tokenizer``)."""
        return Tokenizer.from_dataset(self.dataset, self.paths.get("nltk_data"), f"datasets.{self.name}")


def dataset_payload(cfg: dict, name: str) -> DatasetPayload:
    """What the data/feature/training rules of one dataset need to know (written to dataset.json)."""
    return DatasetPayload(name, cfg["datasets"][name], {k: str(v) if v else None for k, v in dataset_paths(cfg, name).items()},
                          cfg["backbones"], cfg.get("text_encoders", {}))


def load_dataset_payload(path: str | Path) -> DatasetPayload:
    payload = read_json(path)
    if not (isinstance(payload, dict) and all(isinstance(payload.get(k), dict) for k in ("dataset", "paths"))
            and isinstance(payload.get("name"), str)):
        raise HarnessError(f"{path}: no 'dataset' and 'paths' objects, so not the dataset config the DAG writes; "
                           f"delete it and run snakemake again")
    validate(payload["dataset"], "config#dataset", str(path))
    return DatasetPayload.from_json(payload)


def dataset_tokenizer(cfg: dict, name: str) -> Tokenizer:
    """The tokenizer of a configured dataset (``datasets.<name>.tokenizer``)."""
    return Tokenizer.from_dataset(cfg["datasets"][name], dataset_paths(cfg, name)["nltk_data"], f"datasets.{name}")


def smoke_limit(ds_cfg: dict, split: str) -> int | None:
    """How many first images of harness split ``split`` a smoke run reads (``datasets.<name>.smoke``,
    set on ``<name>-smoke``): ``train_images`` of the train split, ``eval_images`` of the others;
    None for every other dataset (all images)."""
    smoke = ds_cfg.get("smoke")
    if smoke is None:
        return None
    return smoke["train_images"] if split == "train" else smoke["eval_images"]
