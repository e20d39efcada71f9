"""A model's settings, declared once and torch-free: the keys of its ``model`` config block, each
with the JSON Schema of its value, what it means, and its default where a config may leave it out.
The method schema's block for the model (``$defs.<kind>``) is generated from them
(``schema_block``), and the model's constructor takes them as keywords (``tests/test_architecture.py``
checks the keywords and the defaults against the declaration).

    settings = {
        "embed_dim": integer(minimum=1),
        "image_l2norm": boolean("l2-normalise the image embedding", default=True),
        "text": part("text_gru"),
    }

A ``part`` is a block of the method schema's ``$defs`` that several models share (the text GRU,
SCAN's cross attention, the set modules), referenced by name.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()   # a setting every config of the model gives


@dataclass(frozen=True)
class Setting:
    schema: Mapping[str, Any]   # JSON Schema of the value
    default: Any = REQUIRED     # the value a config that leaves the key out runs with

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def schema_with_default(self) -> dict:
        """The value's schema, its description ending with the default for an optional key (a
        shared part says itself what its absence means)."""
        out = dict(self.schema)
        if not self.required and "$ref" not in out:
            said = f"{out['description']}; " if "description" in out else ""
            out["description"] = f"{said}default {_yaml_literal(self.default)}"
        return out


def _yaml_literal(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _described(schema: dict, doc: str | None) -> dict:
    return {**schema, "description": doc} if doc else schema


def setting(schema: Mapping[str, Any], doc: str | None = None, default: Any = REQUIRED) -> Setting:
    """A setting of any JSON Schema (an array, a union of types, a value with conditions)."""
    return Setting(_described(dict(schema), doc), default)


def integer(doc: str | None = None, default: Any = REQUIRED, **bounds: Any) -> Setting:
    """An integer; ``bounds``: ``minimum``, ``maximum``, ``multipleOf``."""
    return Setting(_described({"type": "integer", **bounds}, doc), default)


def number(doc: str | None = None, default: Any = REQUIRED, **bounds: Any) -> Setting:
    """A number; ``bounds``: ``minimum``, ``exclusiveMinimum``, ``maximum``, ``exclusiveMaximum``."""
    return Setting(_described({"type": "number", **bounds}, doc), default)


def boolean(doc: str | None = None, default: Any = REQUIRED) -> Setting:
    return Setting(_described({"type": "boolean"}, doc), default)


def text(doc: str | None = None, default: Any = REQUIRED) -> Setting:
    return Setting(_described({"type": "string"}, doc), default)


def choice(values: list, doc: str | None = None, default: Any = REQUIRED) -> Setting:
    """One of ``values``."""
    return Setting(_described({"enum": list(values)}, doc), default)


def part(name: str, default: Any = REQUIRED) -> Setting:
    """A block of the method schema's ``$defs`` that several models share."""
    return Setting({"$ref": f"#/$defs/{name}"}, default)


def block(settings: Mapping[str, Setting], doc: str | None = None, default: Any = REQUIRED,
          **conditions: Any) -> Setting:
    """A nested block of settings (a dict argument of the constructor); ``conditions``: JSON
    Schema keywords across its keys (``anyOf``, ``allOf``, ``if``/``then``)."""
    return Setting(_described(object_schema(settings, conditions), doc), default)


def object_schema(settings: Mapping[str, Setting], conditions: Mapping[str, Any] | None = None,
                  **fixed: Any) -> dict:
    """The JSON Schema of a block of ``settings``: no other key, the ones without a default required."""
    properties = {**fixed, **{name: s.schema_with_default() for name, s in settings.items()}}
    required = [*fixed, *(name for name, s in settings.items() if s.required)]
    return {"type": "object", "additionalProperties": False, "required": required, "properties": properties,
            **(conditions or {})}


# settings of the grid models (MVSA, the set embeddings of a CNN grid): the CNN's BatchNorm while
# it is fine-tuned, and a ResNet stage whose cells are the model's inputs
BACKBONE_BN = choice(["frozen", "train"], "BatchNorm mode of the CNN while fine-tuning (`frozen`, eval mode, or `train`)")
GRID_SCALE = {"enum": ["conv3", "conv4", "conv5"]}


@dataclass(frozen=True)
class Declaration:
    """What a model kind's settings generate: its method-schema block."""

    kind: str
    settings: Mapping[str, Setting]
    description: str | None = None
    conditions: Mapping[str, Any] = field(default_factory=dict)

    def schema_block(self) -> dict:
        """``$defs.<kind>`` of the method schema: ``kind`` is the const, every setting a key."""
        out = object_schema(self.settings, self.conditions, kind={"const": self.kind})
        return _described(out, self.description)

    def defaults(self) -> dict[str, Any]:
        """The settings a config may leave out, with the values the model then runs."""
        return {name: s.default for name, s in self.settings.items() if not s.required}
