"""A model kind as the plan knows it, without building the model: the image input it reads, the
sizes of its embedding sets, and how it describes a run config. Torch-free: the DAG build reads
these declarations; the model itself (``methods.models``) is registered under the same name.
"""
from __future__ import annotations

from typing import Any, ClassVar, Mapping

from methods.data.inputs import IMAGE_INPUTS, REGIONS_WITH_BOXES, ImageInput
from methods.model_kinds.description import DescribeContext, schedule_text
from methods.model_kinds.settings import Declaration, Setting
from methods.registry import Registry


class ModelKind:
    """Subclass per model kind, registered in ``MODEL_KINDS`` under the kind's config name: the
    model's declaration, written once."""

    image_input: ClassVar[str]   # ``methods.data.inputs.IMAGE_INPUTS``: pooled, regions or grid
    # the keys of its ``model`` config block but ``kind`` (``methods.model_kinds.settings``): its
    # method-schema block is generated from them and its constructor takes them as keywords
    settings: ClassVar[Mapping[str, Setting]]
    schema_description: ClassVar[str | None] = None
    schema_conditions: ClassVar[Mapping[str, Any]] = {}   # JSON Schema keywords across the settings
    # a regions model that also reads each region's box, ``<precomp_dir>/{split}_boxes.npy`` (PFAN)
    reads_region_boxes: ClassVar[bool] = False

    @classmethod
    def declaration(cls, kind: str) -> Declaration:
        return Declaration(kind, cls.settings, cls.schema_description, cls.schema_conditions)

    @classmethod
    def set_sizes(cls, model_cfg: dict) -> tuple[int, int] | None:
        """(image, text) elements per set of a ``model`` config block, for models that embed each
        item as a set (evaluation views select among them); None for the others."""
        return None

    @classmethod
    def internals(cls, model_cfg: dict) -> frozenset[str]:
        """What a model of this ``model`` config block can show of its insides: the names of the
        figure kinds that draw them (``methods.report.figure_kinds``, ``internal``); none by default."""
        return frozenset()

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        """What a resolved run config ``cfg`` of this model runs, in a few words: the backbone or
        image input it reads and its dimensions (the ``ran`` column of tables). The helpers of
        ``methods.model_kinds.description`` spell out the parts several models share."""
        raise NotImplementedError(f"model kind {cls.__name__} does not describe its configs (describe)")


MODEL_KINDS: Registry[type[ModelKind]] = Registry("model")


def model_kind(kind: str) -> type[ModelKind]:
    return MODEL_KINDS.get(kind)


def image_input_of(model_cfg: dict) -> ImageInput:
    """The kind of image input the model of a ``model`` config block reads."""
    kind = model_kind(model_cfg["kind"])
    if kind.reads_region_boxes:   # a regions model that reads each region's box too (PFAN)
        return REGIONS_WITH_BOXES
    return IMAGE_INPUTS.get(kind.image_input)


def describe_run(cfg: dict, ctx: DescribeContext) -> str:
    """A resolved run config in a few words: its model's description, then its schedule."""
    return f"{model_kind(cfg['model']['kind']).describe(cfg, ctx)}; {schedule_text(cfg)}"
