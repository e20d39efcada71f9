"""VSRN (Li et al., ICCV 2019): region features through a GCN and a GRU (``methods.models.vsrn``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, gru_text, regions_text


@MODEL_KINDS.register("vsrn")
class VSRNKind(ModelKind):
    image_input = "regions"

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        return (f"{regions_text(ctx)}, embed {model['embed_dim']}, {model['gcn_blocks']} GCN blocks, "
                f"{gru_text(model['text'])}")
