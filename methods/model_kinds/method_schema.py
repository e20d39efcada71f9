"""The method schema with its models: the file's sections (``workflow/schemas/method.schema.yaml``:
training, loss, the parts models share) and one block per declared model kind, generated from its
settings (``methods.model_kinds.settings``). ``model.kind`` lists the declared kinds and a
``model`` block is checked against its kind's block; a new model declares its settings in its
kind and adds nothing here. Method configs (resolved, or one layer of a method file) are
validated here.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Mapping

import jsonschema

from methods.config import (LAYER_SCHEMA, SCHEMA_DIR, deep_merge, load_schema, partial_schema,
                            validate_against)
from methods.errors import HarnessError
from methods.model_kinds.base import MODEL_KINDS
from methods.plugins import schema_files


def method_schema() -> dict:
    """The method schema: the file, each declared kind's block under ``$defs``, and the dispatch."""
    schema = load_schema("method")
    stale = schema_files("method")
    if stale:
        raise HarnessError(f"{stale[0]}: a model's schema block is generated from its settings: declare them in the "
                           f"ModelKind of its methods/model_kinds/<name>.py (settings) and remove this file")
    for kind, declared in MODEL_KINDS.items():
        if kind in schema["$defs"]:
            raise HarnessError(f"{SCHEMA_DIR / 'method.schema.yaml'}: $defs.{kind}: a part of the method schema "
                               f"is named as model kind '{kind}' ({declared.__module__}); rename one")
        schema["$defs"][kind] = declared.declaration(kind).schema_block()
    kinds = MODEL_KINDS.names()
    schema["properties"]["model"]["properties"]["kind"] = {"enum": kinds, "description": "a declared model kind"}
    schema["allOf"] = schema.get("allOf", []) + [
        {"if": {"properties": {"model": {"properties": {"kind": {"const": kind}}}}},
         "then": {"properties": {"model": {"$ref": f"#/$defs/{kind}"}}}} for kind in kinds]
    return schema


def method_layer_schema() -> dict:
    """What one config layer of a method file may hold (its base, a preset, a variant's base or
    preset, a paper row's overrides): the method schema with nothing required, plus the keys only
    a layer sets (``$defs.layer_only`` of method_file.schema.yaml, e.g. ``training.run_stages``)."""
    layer_only = load_schema("method_file")["$defs"]["layer_only"]
    return deep_merge(partial_schema(method_schema()), {"properties": layer_only["properties"]})


@functools.lru_cache(maxsize=None)
def _validator(layer: bool) -> jsonschema.Draft202012Validator:
    # one parse per process: a plan validates every resolved experiment config
    return jsonschema.Draft202012Validator(method_layer_schema() if layer else method_schema())


def validate_method(cfg: Any, where: str) -> Any:
    """A resolved method config checked against the method schema (one line naming ``where`` and
    the key otherwise)."""
    return validate_against(cfg, _validator(False), "method", where)


def validate_layer(layer: Mapping | None, where: str, model_kind: str | None = None) -> None:
    """Validate one config layer strictly (no unknown key at any level), before any merge can drop
    or replace it. ``model_kind``: the method's model kind, which picks the model block's keys
    where the layer's ``model`` does not name its own."""
    if not layer:
        return
    checked = dict(layer)
    if model_kind is not None and isinstance(layer.get("model"), Mapping) and "kind" not in layer["model"]:
        checked["model"] = {"kind": model_kind, **layer["model"]}
    validate_against(checked, _validator(True), LAYER_SCHEMA, where)


def read_experiment(path: str | Path, dataset: Any) -> dict:
    """An experiment file (a resolved method config JSON, as the plan writes it) for a job on a
    dataset (``dataset``: its payload, a ``methods.data.datasets.DatasetPayload``): one of another harness version
    (a key missing or unknown) fails naming the key, and one planned for other numerics than the
    dataset runs fails, since its hash says which numerics its results come from."""
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise HarnessError(f"{path}: not a readable experiment file ({type(exc).__name__}: {exc})") from None
    validate_method({k: v for k, v in cfg.items() if k != "numerics"}, str(path))
    planned, mode = cfg.get("numerics", "native"), dataset.dataset.get("numerics", "native")
    if planned != mode:
        raise HarnessError(f"{path} was planned for {planned} numerics but dataset '{dataset.name}' runs {mode} "
                           f"(datasets.{dataset.name}.numerics): plan the experiment again")
    return cfg
