"""Config flows one way: YAML -> schema-validated dict -> constructor arguments.

Schemas live in ``workflow/schemas/`` (Snakemake convention) and are used both by the
Snakefile at DAG-build time and by every ``python -m methods...`` entry point.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

from methods.errors import HarnessError, shorten
from methods.paths import ResultsLayout

# libyaml's safe loader where PyYAML was built with it: the plan reads the method files and
# schemas at every Snakemake start, and the pure-Python parser dominated that time
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
REPO_ROOT = Path(__file__).resolve().parents[1]
SCHEMA_DIR = REPO_ROOT / "workflow" / "schemas"
LAYER_SCHEMA = "method layer"  # the name ``validate`` reports for a method file's config layers


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    if not path.exists():
        raise HarnessError(f"config file not found: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.load(f, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise HarnessError(f"{path}: not valid YAML: {exc}") from None
    except UnicodeDecodeError:
        raise HarnessError(f"{path}: not a UTF-8 text file, so not YAML") from None
    except IsADirectoryError:
        raise HarnessError(f"{path}: a directory, not a YAML file") from None
    except OSError as exc:
        raise HarnessError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def load_schema(name: str) -> dict:
    """``name`` is a schema file stem, or ``file#def`` for one of its ``$defs`` (e.g. ``config#dataset``).
    The method schema's file holds what is not a model's; its model blocks come from the models'
    declarations (``methods.model_kinds.method_schema``, which validates method configs)."""
    stem, _, definition = name.partition("#")
    schema = load_yaml(SCHEMA_DIR / f"{stem}.schema.yaml")
    if definition:
        return {"$defs": schema["$defs"], "$ref": f"#/$defs/{definition}"}
    return schema


@functools.lru_cache(maxsize=None)
def _validator(schema_name: str) -> jsonschema.Draft202012Validator:
    # one parse per schema and process: a plan validates every resolved experiment config
    return jsonschema.Draft202012Validator(load_schema(schema_name))


# schema name -> the reprs of the objects that passed it in this process (``validate``)
_PASSED: dict[str, set[str]] = {}


def validate(obj: Any, schema_name: str, where: str) -> Any:
    """Validate ``obj`` against ``workflow/schemas/<schema_name>.schema.yaml``.

    Raises one HarnessError naming the file (``where``) and the offending key path.
    """
    if schema_name in ("method", LAYER_SCHEMA):
        raise ValueError("a method config is validated with its models' blocks: "
                         "methods.model_kinds.method_schema.validate_method / validate_layer")
    return validate_against(obj, _validator(schema_name), schema_name, where)


def validate_against(obj: Any, validator: jsonschema.Draft202012Validator, schema_name: str, where: str) -> Any:
    """``validate`` with a given validator of the schema named ``schema_name`` in messages."""
    passed, seen = _PASSED.setdefault(schema_name, set()), repr(obj)   # repr: a tuple is no array, True no 1
    if seen in passed:   # a plan resolves many rows to the same config: each is checked once per process
        return obj
    errors = sorted(validator.iter_errors(obj),
                    key=lambda e: [(isinstance(p, str), p) for p in e.absolute_path])  # list indices, then keys
    if errors:
        first = errors[0]
        key = ".".join(str(p) for p in first.absolute_path) or "<top level>"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        # jsonschema's message holds a repr of the offending value, which can be a whole section; for
        # a value that fits none of several forms, the schema's description of the forms says more
        message = shorten(first.message, 300)
        if first.validator == "oneOf" and first.schema.get("description"):
            message = f"fits none of its forms: {first.schema['description']}"
        raise HarnessError(f"{where}: invalid {schema_name} config: {key}: {message}{more}")
    passed.add(seen)
    return obj


def deep_merge(base: Mapping, override: Mapping) -> dict:
    """Recursive dict merge; override wins; lists are replaced, not concatenated. A block naming
    another ``kind`` than the one it overrides replaces it whole: a different kind takes different
    keys (``similarity: {kind: mil}`` over ``{kind: smooth_chamfer, alpha: 16}`` keeps no alpha)."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        inherited = out.get(key)
        if (isinstance(value, Mapping) and isinstance(inherited, Mapping)
                and "kind" in value and "kind" in inherited and value["kind"] != inherited["kind"]):
            out[key] = copy.deepcopy(dict(value))
        elif isinstance(value, Mapping) and isinstance(inherited, Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def dotted_to_nested(overrides: Mapping[str, Any]) -> dict:
    """``{"loss.kind": "x"}`` -> ``{"loss": {"kind": "x"}}`` so rows can override single keys."""
    nested: dict = {}
    for key, value in overrides.items():
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return nested


def dotted_value(cfg: Mapping, dotted: str) -> Any:
    """The value at a dotted key of a config (``model.text.word_dim``; a numeric part indexes a
    list: ``loss.terms.0.margin``); ``KeyError(dotted)`` when it is not there."""
    node: Any = cfg
    for part in dotted.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            raise KeyError(dotted)
    return node


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def config_hash(obj: Any, length: int = 10) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()[:length]


def load_harness_config(path: str | Path, overrides: Mapping | None = None) -> dict:
    cfg = load_yaml(path)
    if overrides:
        cfg = deep_merge(cfg, overrides)
    return harness_config(cfg, str(path))


def harness_config(raw: Mapping, where: str) -> dict:
    """The harness config ``raw`` validated, each backbone and text encoder the DAG pre-trains
    (``pretrain``) with the path its rule writes under ``results_dir`` (so a config that moves
    ``results_dir`` moves them too); a path given for such an entry must be that path."""
    cfg = validate(copy.deepcopy(dict(raw)), "config", where)
    layout = ResultsLayout(cfg["results_dir"])
    cfg.setdefault("text_encoders", {})
    for section, key, written_by in (("backbones", "weights", layout.backbone_weights),
                                     ("text_encoders", "path", layout.text_encoder_dir)):
        for name, entry in cfg[section].items():
            if "pretrain" not in entry:
                continue
            written = written_by(entry["pretrain"]["dataset"], name)
            if entry.get(key) not in (None, written):
                raise HarnessError(f"{where}: {section}.{name}: pre-trained by the DAG, which writes it to "
                                   f"'{written}' (results_dir + dataset); leave '{key}' out, or give that path")
            entry[key] = written
    return cfg


# Keywords whose value is a schema, a list of schemas, or a map of names to schemas (JSON Schema
# 2020-12); every other keyword's value is data (``const``, ``enum``, ``required``...).
_SCHEMA_VALUED = {"items", "additionalProperties", "then", "else", "contains", "propertyNames",
                  "unevaluatedProperties", "unevaluatedItems"}
_SCHEMA_LISTS = {"allOf", "anyOf", "oneOf", "prefixItems"}
_SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "dependentSchemas"}


def partial_schema(schema: dict) -> dict:
    """``schema`` for one layer of a config that layers are merged into: no key is required (the
    merged config is validated whole), and a conditional applies only where the layer sets the
    keys its ``if`` tests (a ``properties`` test passes on an absent key, which would apply every
    ``then`` of the model kinds at once). ``oneOf`` becomes ``anyOf`` (with nothing required a
    partial layer may fit several branches); ``not`` is kept whole (it forbids keys)."""
    out: dict = {}
    for key, value in schema.items():
        if key == "required":
            continue
        if key == "if":
            out[key] = _require_tested(value)
        elif key == "not":
            out[key] = value
        elif key in _SCHEMA_VALUED and isinstance(value, dict):
            out[key] = partial_schema(value)
        elif key in _SCHEMA_LISTS:
            out["anyOf" if key == "oneOf" else key] = [partial_schema(v) for v in value]
        elif key in _SCHEMA_MAPS:
            out[key] = {name: partial_schema(v) for name, v in value.items()}
        else:
            out[key] = value
    return out


def _require_tested(condition: dict) -> dict:
    """An ``if`` schema that also requires every property it tests, at every level."""
    if "properties" not in condition:
        return condition
    return {**condition, "required": sorted(set(condition.get("required", [])) | set(condition["properties"])),
            "properties": {name: _require_tested(v) for name, v in condition["properties"].items()}}


