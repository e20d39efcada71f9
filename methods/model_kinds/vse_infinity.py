"""VSE-infinity (Chen et al., CVPR 2021): region features and bi-GRU words, each pooled by a
learned pooling (GPO) into one vector (``methods.models.vse_infinity``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, gru_text, regions_text
from methods.model_kinds.settings import choice, integer, number, part

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
        "text": part("text_gru"),
    }

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        return (f"{regions_text(ctx)}, embed {model['embed_dim']}, {model['pooling'].upper()} pooling, "
                f"{gru_text(model['text'])}")
