"""Model kinds declared in their schema block: ``x-model`` in ``$defs.<kind>`` of the method schema
(``workflow/schemas/method.schema.yaml``, or a plug-in folder's), for a model whose plan-time facts
are its image input and a one-line description. Such a model is its implementation
(``methods.models``), its schema block, its method file and its paper file; a kind with more to
declare (set sizes, insides a figure draws, a description with conditions) is a ``ModelKind``
subclass in a file of this package instead.

    x-model:
      image_input: regions                              # methods.data.inputs.IMAGE_INPUTS
      describe: "{regions}, embed {embed_dim}, {text}"  # the tables' ``ran`` column

A ``describe`` field is one of ``DESCRIPTION_PARTS`` (the wording every model shares) or a key of
the model block, written as its value.
"""
from __future__ import annotations

from string import Formatter
from typing import Callable

from methods.config import SCHEMA_DIR, load_yaml
from methods.data.inputs import IMAGE_INPUTS
from methods.errors import HarnessError
from methods.model_kinds.base import ModelKind
from methods.model_kinds.description import (DescribeContext, backbone_text, finetunes, gru_text, pooled_dim,
                                             regions_text)
from methods.plugins import schema_files
from methods.registry import Registry

DECLARATION_KEY = "x-model"

# field -> its text for a resolved run config; the wording of ``methods.model_kinds.description``
DESCRIPTION_PARTS: dict[str, Callable[[dict, DescribeContext], str]] = {
    "regions": lambda cfg, ctx: regions_text(ctx),
    "backbone": lambda cfg, ctx: backbone_text(cfg["model"]["backbone"], ctx),
    "pooled_dim": lambda cfg, ctx: str(pooled_dim(cfg["model"]["backbone"], ctx)),
    "cnn": lambda cfg, ctx: "fine-tuned" if finetunes(cfg) else "frozen",
    "text": lambda cfg, ctx: gru_text(cfg["model"]["text"]),
}


class DeclaredKind(ModelKind):
    """A kind built from its ``x-model`` declaration (``declared_kind``)."""

    template: str

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        fields = {name: (DESCRIPTION_PARTS[name](cfg, ctx) if name in DESCRIPTION_PARTS else cfg["model"][name])
                  for name in template_fields(cls.template)}
        return cls.template.format_map(fields)


def template_fields(template: str) -> list[str]:
    return [field for _, field, _, _ in Formatter().parse(template) if field is not None]


def declared_kind(name: str, block: dict, where: str) -> type[ModelKind]:
    """The kind that schema block ``$defs.<name>`` of file ``where`` declares under ``x-model``;
    each key, image input and description field is checked (one line naming it otherwise)."""
    declaration = block[DECLARATION_KEY]
    at = f"{where}: $defs.{name}.{DECLARATION_KEY}"
    if not isinstance(declaration, dict) or set(declaration) != {"image_input", "describe"}:
        raise HarnessError(f"{at}: declares two keys, image_input and describe")
    if declaration["image_input"] not in IMAGE_INPUTS:
        raise HarnessError(f"{at}.image_input: '{declaration['image_input']}' is not an image input "
                           f"({', '.join(IMAGE_INPUTS.names())})")
    template = declaration["describe"]
    if not isinstance(template, str):
        raise HarnessError(f"{at}.describe: a text with {{fields}}")
    try:
        fields = template_fields(template)
    except ValueError as e:
        raise HarnessError(f"{at}.describe: {e}") from None
    keys = set(block.get("properties", {})) - {"kind"}
    for field in fields:
        if field not in DESCRIPTION_PARTS and field not in keys:
            raise HarnessError(f"{at}.describe: '{{{field}}}' is neither a description part "
                               f"({', '.join(DESCRIPTION_PARTS)}) nor a key of the model block")
    return type(f"Declared_{name}", (DeclaredKind,),
                {"image_input": declaration["image_input"], "template": template,
                 "__doc__": f"Model kind '{name}', declared in {where}."})


def register_declared_kinds(registry: Registry[type[ModelKind]]) -> None:
    """Register the kind of every model block with an ``x-model`` declaration, in the method schema
    and the plug-in folders' (``methods.plugins``); a kind also declared by a class is refused."""
    for path in (SCHEMA_DIR / "method.schema.yaml", *schema_files("method")):
        for name, block in (load_yaml(path).get("$defs") or {}).items():
            if not isinstance(block, dict) or DECLARATION_KEY not in block:
                continue
            if block.get("properties", {}).get("kind", {}).get("const") != name:
                raise HarnessError(f"{path}: $defs.{name}.{DECLARATION_KEY}: only a model block (kind: {{const: "
                                   f"{name}}}) declares a model")
            if name in registry:
                raise HarnessError(f"{path}: $defs.{name}.{DECLARATION_KEY}: model kind '{name}' is also a "
                                   f"ModelKind class ({registry.get(name).__module__}); keep one")
            registry.register(name, declared_kind(name, block, str(path)))
