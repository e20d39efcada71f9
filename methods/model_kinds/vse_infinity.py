"""VSE-infinity (Chen et al., CVPR 2021): region features (``vse_infinity``) or a CNN grid's
cells (``vse_infinity_grid``) and the words, each pooled by a learned pooling (GPO) into one
vector; the words from a bi-GRU or a BERT (``methods.models.vse_infinity``, ``vse_infinity_grid``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import (DescribeContext, backbone_text, finetunes, regions_text,
                                              text_encoder_text)
from methods.model_kinds.settings import BACKBONE_BN, choice, integer, number, setting, text

POOLINGS = ["gpo", "mean", "max"]   # methods.models.pooling.POOLINGS


@MODEL_KINDS.register("vse_infinity")
class VSEInfinityKind(ModelKind):
    image_input = "regions"
    schema_description = "VSE-infinity on precomputed regions (woodfrog/vse_infty, precomp_enc_type basic)"
    settings = {
        "embed_dim": integer("the joint space (--embed_size 1024); the image MLP's hidden layer is half of it",
                             minimum=2),
        "region_drop": number("fraction of regions removed per training image, the source's size augmentation "
                              "(image_caption.py: a region is kept when a uniform draw exceeds 0.2)",
                              minimum=0, exclusiveMaximum=1),
        "pooling": choice(POOLINGS, "the pooling of the regions and of the words: gpo (the source), mean or max "
                          "(VSE-infinity Table 3)"),
        "text": setting({"oneOf": [{"$ref": "#/$defs/text_gru"}, {"$ref": "#/$defs/text_bert"}]},
                        "the words: a bi-GRU (branch bigru) or a BERT (branch master; text_bert)"),
    }

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        return (f"{regions_text(ctx)}, embed {model['embed_dim']}, {model['pooling'].upper()} pooling, "
                f"{text_encoder_text(model['text'])}")


BACKBONE_SCHEDULE = {
    "type": "object", "additionalProperties": False,
    "required": ["embedding_warmup_epochs", "backbone_warmup_epochs", "backbone_lr_factor"],
    "properties": {
        "embedding_warmup_epochs": {"type": "integer", "minimum": 0, "description": (
            "epochs with the CNN frozen (--embedding_warmup_epochs); the next one ramps the loss from 0 "
            "(warmup_alpha)")},
        "backbone_warmup_epochs": {"type": "integer", "minimum": 0, "description": (
            "epochs each with the CNN's last block, then its last two, then three trained before all of it "
            "(--backbone_warmup_epochs)")},
        "backbone_lr_factor": {"type": "number", "exclusiveMinimum": 0, "description": (
            "the CNN's learning rate over the stage's (--backbone_lr_factor)")},
    },
}


@MODEL_KINDS.register("vse_infinity_grid")
class VSEInfinityGridKind(ModelKind):
    image_input = "grid"
    schema_description = ("VSE-infinity on a CNN grid's last map (woodfrog/vse_infty, precomp_enc_type backbone): "
                          "the CNN runs on every batch's images")
    settings = {
        "backbone": text("a key of config backbones: the CNN, trained by the run's fine-tune stage"),
        "backbone_bn": BACKBONE_BN,
        "grid_scales": setting({"type": "array", "minItems": 1, "maxItems": 1, "items": {"const": "conv5"}},
                               "the CNN's last map (layer4), whose cells are pooled: [conv5]"),
        "embed_dim": integer("the joint space (--embed_size 1024)", minimum=1),
        "backbone_schedule": setting(BACKBONE_SCHEDULE, "which of the CNN trains when (train.py's warm-up options)"),
        "grid_drop": number("the source's grid drop in training (EncoderImageFull: an image keeps its cells when a "
                            "uniform u <= 0.2, else the cells whose draw exceeds 0.2 u); 0: none",
                            minimum=0, exclusiveMaximum=1),
        "pooling": choice(POOLINGS, "the pooling of the cells and of the words: gpo (the source), mean or max"),
        "text": setting({"oneOf": [{"$ref": "#/$defs/text_gru"}, {"$ref": "#/$defs/text_bert"}]},
                        "the words: a bi-GRU (branch bigru) or a BERT (branch master; text_bert)"),
    }

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model, images = cfg["model"], cfg["training"].get("images")
        size = f" at {images['size']}×{images['size']} px" if images else ""
        cnn = "fine-tuned" if finetunes(cfg) else "frozen"
        return (f"{backbone_text(model['backbone'], ctx)} last-map grid{size}, CNN {cnn} "
                f"(lr x{model['backbone_schedule']['backbone_lr_factor']:g}), embed {model['embed_dim']}, "
                f"{model['pooling'].upper()} pooling, {text_encoder_text(model['text'])}")
