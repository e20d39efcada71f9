"""VSRN (Li et al., ICCV 2019): region relation reasoning by a GCN and a GRU over the regions
(``methods.models.vsrn``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, gru_text, regions_text
from methods.model_kinds.settings import boolean, choice, integer, part


@MODEL_KINDS.register("vsrn")
class VSRNKind(ModelKind):
    image_input = "regions"
    settings = {
        "embed_dim": integer(minimum=1),
        "gcn_blocks": integer("residual relation-reasoning GCN blocks (4 in VSRN)", minimum=0),
        "region_l2norm": choice(["feature", "region_axis"], "axis of the region-level l2 normalisations: `feature` "
                                "(each region vector) or `region_axis` (across regions, what the public code does; "
                                "KunpengLi1994/VSRN#7)"),
        "l2norm_after_fc": boolean("l2-normalise the regions after the fc (the public code skips it on Flickr30K)"),
        "final_bn": boolean("BatchNorm on the GRU's final state (public code on Flickr30K; the study on both datasets)"),
        "text": part("text_gru"),
    }

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        return f"{regions_text(ctx)}, embed {model['embed_dim']}, {model['gcn_blocks']} GCN blocks, {gru_text(model['text'])}"
