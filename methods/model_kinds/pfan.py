"""PFAN (Wang et al., IJCAI 2019): regions with position features from their boxes, SCAN's cross
attention on top (``methods.models.pfan``). It reads each region's box besides its features."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, gru_text, regions_text
from methods.model_kinds.scan import similarity_text
from methods.model_kinds.settings import choice, integer, part


@MODEL_KINDS.register("pfan")
class PFANKind(ModelKind):
    image_input = "regions"
    reads_region_boxes = True
    settings = {
        "embed_dim": integer(minimum=1),
        "similarity": part("scan_similarity"),
        "grid": integer("the image is split into grid x grid blocks (EncoderImagePrecomp split_size: 16)",
                        minimum=1, default=16),
        "region_blocks": integer("blocks kept per region, those it overlaps most (the released position files: 15)",
                                 minimum=1, default=15),
        "position_dim": integer("width of the block embeddings and the position feature (position_embed_size: 200)",
                                minimum=1, default=200),
        "padding_blocks": choice(["attend", "masked"], "a region's unfilled block slots (padding index, weight 0): "
                                 "attend, in both softmaxes over its slots as the public code; masked: left out",
                                 default="attend"),
        "evaluation_dtype": choice(["float64", "model"], "dtype of a split's scores (validation and test): float64 "
                                   "scores the float32 encodings in float64, as the source's evaluation.py; model: in "
                                   "the encodings' dtype", default="model"),
        "text": part("text_gru"),
    }

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        return (f"{regions_text(ctx)} with box positions ({model['grid']}×{model['grid']} blocks, "
                f"{model['region_blocks']} per region), embed {model['embed_dim']}, "
                f"{similarity_text(model['similarity'])}, {gru_text(model['text'])}")
