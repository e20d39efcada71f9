"""VSE-infinity (Chen et al., CVPR 2021): region features and bi-GRU words, each pooled by a
learned pooling (GPO) into one vector; the words from a bi-GRU or a BERT (``methods.models.vse_infinity``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, regions_text, text_encoder_text
from methods.model_kinds.settings import choice, integer, number, setting

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
