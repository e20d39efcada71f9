"""Set embeddings (Kim, Kim, Kwak, CVPR 2023; PIE-Net of PVSE, Song and Soleymani, CVPR 2019):
``set_embedding`` reads precomputed regions, ``set_embedding_grid`` a ResNet grid
(``methods.models.set_embedding``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import (DescribeContext, backbone_text, finetunes, regions_text,
                                              text_encoder_text)
from methods.model_kinds.settings import BACKBONE_BN, GRID_SCALE, choice, integer, number, part, setting, text

# what both set models take (their parts are blocks of the method schema, shared by the two)
SET_SETTINGS = {
    "image_projection": part("set_image_projection"),
    "set_size": integer("K: elements per set, both modalities", minimum=1),
    "dropout": number("DivE --dropout / --img_1x1_dropout (0.1)", minimum=0, exclusiveMaximum=1),
    "lr_scale": part("set_lr_scale", default=None),   # no scale: 1 for both
    "set_module": part("set_module"),
    "similarity": part("set_similarity"),
    "text": setting({"oneOf": [{"$ref": "#/$defs/text_gru"}, {"$ref": "#/$defs/text_bert"}]},
                    "the words: a bi-GRU over word embeddings (DivE EncoderText) or a BERT (EncoderTextBERT, "
                    "--use_bert; slot set module only)"),
    "text_global": part("set_text_global", default="average_final"),
}


def frozen_text(epochs: int) -> str:
    """When the CNN of a fine-tuned run does not train: '' (never), 'frozen in epoch 1', 'frozen in epochs 1-3'."""
    return "" if not epochs else "frozen in epoch 1" if epochs == 1 else f"frozen in epochs 1-{epochs}"


class SetEmbeddingKind(ModelKind):
    @classmethod
    def set_sizes(cls, model_cfg: dict) -> tuple[int, int]:
        return model_cfg["set_size"], model_cfg["set_size"]

    @classmethod
    def set_module_text(cls, model: dict) -> str:
        module = model["set_module"]
        if module["kind"] == "slot":
            attention = "slot" if module["competition"] == "slots" else "transformer"
            ablated = [text for text, on in (("initial slots sampled", module.get("initial_slots") == "sampled"),
                                             ("GRU update", module.get("slot_update") == "gru"),
                                             ("no global feature in the elements", module.get("global_residual") is False))
                       if on]   # appendix B.3's ablations, named only when set off the paper's model
            arch = f"{attention} set module (T {module['iterations']}, padding {module['padding']}" + "".join(
                f", {text}" for text in ablated) + ")"
        else:
            arch = "PIE-Net set module" + (" over the raw image input" if module.get("image_input") == "raw" else "")
        sim = model["similarity"]
        params = ", ".join(f"{k} {v:g}" for k, v in sim.items() if k != "kind")
        # PVSE's switches (methods.models.set_embedding), named only when set off DivE's
        projection = model.get("image_projection", {})
        text_global = model.get("text_global", "average_final")
        pvse = [text for text, on in (("image fc without MLP", projection.get("mlp", True) is False),
                                      ("global image feature of the mean cell", projection.get("global_pool") == "mean"),
                                      (f"text global {text_global}", text_global != "average_final"))
                if on]
        return (f"D {model['embed_dim']}, K {model['set_size']}, {arch}, "
                f"{sim['kind']}{f' ({params})' if params else ''}, {text_encoder_text(model['text'])}"
                + "".join(f", {text}" for text in pvse))


@MODEL_KINDS.register("set_embedding")
class SetEmbeddingRegionsKind(SetEmbeddingKind):
    image_input = "regions"
    settings = {
        **SET_SETTINGS,
        "region_padding": choice(["batch_longest", "all"], "training batches' regions after region_drop: "
                                 "batch_longest pads to the most regions any image of the batch kept (DivE's "
                                 "collate_fn_butd), all keeps every image's full count"),
        "embed_dim": integer("D: region MLP, GRU hidden, slots and elements", minimum=2),
        "region_drop": number("fraction of regions removed per training image (DivE --butd_drop_prob 0.2)",
                              minimum=0, exclusiveMaximum=1),
    }

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        return f"{regions_text(ctx)}, {cls.set_module_text(cfg['model'])}"


@MODEL_KINDS.register("set_embedding_grid")
class SetEmbeddingGridKind(SetEmbeddingKind):
    image_input = "grid"
    schema_description = "set embeddings of a CNN grid's cells (the set-embedding paper's ResNet-152 + bi-GRU rows)"
    settings = {
        **SET_SETTINGS,
        "backbone": text("a key of config backbones: the CNN whose cached maps are read, and which a fine-tune "
                         "stage trains"),
        "backbone_bn": BACKBONE_BN,
        "grid_scales": setting({"type": "array", "minItems": 1, "maxItems": 1, "items": GRID_SCALE},
                               "the one ResNet stage whose cells are the local inputs (conv5: 7x7 at 224 px)"),
        "embed_dim": integer("D: cell MLP, GRU hidden, slots and elements (a multiple of 4: the 2-D positions give "
                             "rows and columns sin/cos pairs on half of it each)", minimum=4, multipleOf=4),
        "backbone_frozen_epochs": integer("epochs of a fine-tune stage's run in which the CNN does not train "
                                          "(DivE --warm_img --warm_epoch: the CNN runs, frozen, on every batch; the "
                                          "optimizer holds it throughout)", minimum=0, default=0),
    }

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model, images = cfg["model"], cfg["training"].get("images")
        size = f" at {images['size']}×{images['size']} px" if images else ""
        cnn = "fine-tuned" if finetunes(cfg) else "frozen"
        details = [f"lr x{model['lr_scale']['backbone']:g}" if "backbone" in (model.get("lr_scale") or {}) else "",
                   frozen_text(model.get("backbone_frozen_epochs", 0)) if finetunes(cfg) else ""]
        details = ", ".join(d for d in details if d)
        return (f"{backbone_text(model['backbone'], ctx)} {model['grid_scales'][0]} grid{size}, CNN {cnn}"
                f"{f' ({details})' if details else ''}, {cls.set_module_text(model)}")
