"""A model's settings are declared once (``methods.model_kinds.settings``): its method-schema block is
generated from them, checked here against blocks written by hand, and a config of the model is then
validated by them (``methods.model_kinds.method_schema``)."""
import copy

import pytest

from methods.config import load_yaml
from methods.errors import HarnessError
from methods.model_kinds.method_schema import method_schema, validate_layer, validate_method
from methods.model_kinds.settings import Declaration, block, boolean, choice, integer, number, part, setting
from methods.plugins import PLUGINS_ENV
from tests.conftest import REPO


def test_settings_generate_the_block_written_by_hand():
    declaration = Declaration("toy", {
        "embed_dim": integer("D", minimum=1),
        "scale": number(exclusiveMinimum=0, default=1.0),
        "norm": boolean(default=True),
        "mode": choice(["a", "b"]),
        "shape": setting({"type": "array", "items": {"type": "integer"}}, "sizes"),
        "inner": block({"depth": integer(minimum=0), "skip": boolean(default=False)},
                       anyOf=[{"properties": {"depth": {"const": 1}}}]),
        "text": part("text_gru"),
    }, description="a toy", conditions={"not": {"required": ["x"]}})
    assert declaration.schema_block() == {
        "type": "object", "additionalProperties": False, "description": "a toy",
        "required": ["kind", "embed_dim", "mode", "shape", "inner", "text"],
        "properties": {
            "kind": {"const": "toy"},
            "embed_dim": {"type": "integer", "minimum": 1, "description": "D"},
            "scale": {"type": "number", "exclusiveMinimum": 0, "description": "default 1.0"},
            "norm": {"type": "boolean", "description": "default true"},
            "mode": {"enum": ["a", "b"]},
            "shape": {"type": "array", "items": {"type": "integer"}, "description": "sizes"},
            "inner": {"type": "object", "additionalProperties": False, "required": ["depth"],
                      "properties": {"depth": {"type": "integer", "minimum": 0},
                                     "skip": {"type": "boolean", "description": "default false"}},
                      "anyOf": [{"properties": {"depth": {"const": 1}}}]},
            "text": {"$ref": "#/$defs/text_gru"},
        },
        "not": {"required": ["x"]},
    }
    assert declaration.defaults() == {"scale": 1.0, "norm": True}


def vsepp_config() -> dict:
    raw = load_yaml(REPO / "config" / "methods" / "vsepp.yaml")["base"]
    return {"method": "vsepp", **copy.deepcopy(raw)}


def test_a_models_config_is_checked_by_its_declared_settings():
    cfg = vsepp_config()
    assert "image_l2norm" not in cfg["model"]   # a setting with a default may be left out
    validate_method(cfg, "vsepp.yaml")
    del cfg["model"]["embed_dim"]
    with pytest.raises(HarnessError, match=r"^x\.yaml: invalid method config: model: 'embed_dim' is a required"):
        validate_method(cfg, "x.yaml")
    cfg = vsepp_config()
    cfg["model"]["embed_dim"] = 0
    with pytest.raises(HarnessError, match=r"model\.embed_dim: 0 is less than the minimum of 1"):
        validate_method(cfg, "x.yaml")
    cfg = vsepp_config()
    cfg["model"]["gcn_blocks"] = 4   # VSRN's, not VSE++'s
    with pytest.raises(HarnessError, match=r"model: Additional properties are not allowed \('gcn_blocks'"):
        validate_method(cfg, "x.yaml")
    with pytest.raises(HarnessError, match=r"row 1: invalid method layer config: model\.backbone_bn: 'both' is not one"):
        validate_layer({"model": {"backbone_bn": "both"}}, "row 1", "vsepp")


def test_every_declared_kind_is_a_model_kind_of_the_schema():
    schema = method_schema()
    from methods.model_kinds import MODEL_KINDS

    assert schema["properties"]["model"]["properties"]["kind"]["enum"] == MODEL_KINDS.names()
    for kind in MODEL_KINDS.names():
        assert schema["$defs"][kind]["properties"]["kind"] == {"const": kind}


def test_a_plugin_schema_file_is_refused_naming_the_declaration(tmp_path, monkeypatch):
    """Model blocks are generated from the declarations: a plug-in folder's schema file would go unread."""
    schema = tmp_path / "workflow" / "schemas" / "method.schema.yaml"
    schema.parent.mkdir(parents=True)
    schema.write_text("$defs:\n  mine: {type: object, properties: {kind: {const: mine}}}\n")
    monkeypatch.setenv(PLUGINS_ENV, str(tmp_path))
    with pytest.raises(HarnessError, match=r"method\.schema\.yaml: a model's schema block is generated from its "
                                           r"settings: declare them in the ModelKind"):
        method_schema()
