"""A method file's config layers -> one experiment's resolved config: the method's base, its
preset for the dataset, each named variant, a row's overrides; every layer checked before a merge
could drop a misspelled key."""
from __future__ import annotations

from pathlib import Path

from methods.config import deep_merge, dotted_to_nested
from methods.data.caption_augment import CaptionAugmentation
from methods.errors import HarnessError
from methods.fidelity import load_method_file
from methods.losses.term_kinds import rebase_term
from methods.model_kinds import finetunes, image_input_of
from methods.model_kinds.method_schema import validate_layer, validate_method


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
    validate_method(cfg, where)
    image_input = image_input_of(cfg["model"])   # what the schema cannot say: the model's input fixes it
    if finetunes(cfg) and not image_input.finetunable:
        raise HarnessError(f"{where}: training.stages: finetune_backbone is true, but a {cfg['model']['kind']} model "
                           f"reads precomputed {image_input.name}: it has no CNN to fine-tune")
    try:   # what the schema cannot say: the augmentation's shares sum to at most 1
        CaptionAugmentation.from_config(cfg["training"], vocab_size=1)
    except ValueError as err:
        raise HarnessError(f"{where}: training.caption_augment: {err}") from None
    if cfg["training"].get("caption_augment") and cfg["training"].get("caption_drop"):
        raise HarnessError(f"{where}: training.caption_drop and training.caption_augment are two sources' rules "
                           "for the same step: name one")
    backbone = cfg["model"].get("backbone")
    if backbones is not None and backbone is not None and backbone not in backbones:
        raise HarnessError(f"{method_file}: backbone '{backbone}' is not in config backbones "
                           f"({', '.join(sorted(backbones))})")
    return cfg


def bert_encoder(model_cfg: dict) -> str | None:
    """The BERT text encoder (config ``text_encoders``) a resolved model block's text reads, or None."""
    text = model_cfg.get("text") or {}
    return text["encoder"] if text.get("kind") == "bert" else None
