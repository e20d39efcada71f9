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

from methods.errors import HarnessError

# libyaml's safe loader where PyYAML was built with it: the plan reads the method files and
# schemas at every Snakemake start, and the pure-Python parser dominated that time
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
REPO_ROOT = Path(__file__).resolve().parents[1]
SCHEMA_DIR = REPO_ROOT / "workflow" / "schemas"


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    if not path.exists():
        raise HarnessError(f"config file not found: {path}")
    try:
        with open(path) as f:
            return yaml.load(f, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise HarnessError(f"{path}: not valid YAML: {exc}") from None


def load_schema(name: str) -> dict:
    """``name`` is a schema file stem, or ``file#def`` for one of its ``$defs`` (e.g. ``config#dataset``)."""
    stem, _, definition = name.partition("#")
    schema = load_yaml(SCHEMA_DIR / f"{stem}.schema.yaml")
    if definition:
        return {"$defs": schema["$defs"], "$ref": f"#/$defs/{definition}"}
    return schema


@functools.lru_cache(maxsize=None)
def _validator(schema_name: str) -> jsonschema.Draft202012Validator:
    # one parse per schema and process: a plan validates every resolved experiment config
    return jsonschema.Draft202012Validator(load_schema(schema_name))


def validate(obj: Any, schema_name: str, where: str) -> Any:
    """Validate ``obj`` against ``workflow/schemas/<schema_name>.schema.yaml``.

    Raises one HarnessError naming the file (``where``) and the offending key path.
    """
    errors = sorted(_validator(schema_name).iter_errors(obj), key=lambda e: list(e.absolute_path))
    if errors:
        lines = []
        for err in errors[:5]:
            key = ".".join(str(p) for p in err.absolute_path) or "<top level>"
            lines.append(f"  {key}: {err.message}")
        more = f"\n  ... and {len(errors) - 5} more" if len(errors) > 5 else ""
        raise HarnessError(f"{where}: invalid {schema_name} config:\n" + "\n".join(lines) + more)
    return obj


def deep_merge(base: Mapping, override: Mapping) -> dict:
    """Recursive dict merge; override wins; lists are replaced, not concatenated."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
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


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def config_hash(obj: Any, length: int = 10) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()[:length]


def load_harness_config(path: str | Path, overrides: Mapping | None = None) -> dict:
    cfg = load_yaml(path)
    if overrides:
        cfg = deep_merge(cfg, overrides)
    return validate(cfg, "config", str(path))
