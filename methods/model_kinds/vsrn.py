"""VSRN (Li et al., ICCV 2019): region relation reasoning by a GCN and a GRU over the regions
(``methods.models.vsrn``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, gru_text, regions_text
from methods.model_kinds.settings import boolean, choice, integer, number, object_schema, part, setting

CAPTION_DECODER = {
    "hidden_dim": integer("the generator's GRU units (train.py --dim_hidden 512)", minimum=1),
    "word_dim": integer("its word embedding's width (--dim_word 300)", minimum=1),
    "max_len": integer("label length: longer captions are cut to this many ids, <end> last, and at most "
                       "max_len - 1 steps are decoded (--max_len 60)", minimum=3),
    "input_dropout": number("dropout on the region projection and each step's input (--input_dropout_p 0.2)",
                            minimum=0, exclusiveMaximum=1),
    "listed_twice": boolean("the optimizer and the gradient clipping hold its parameters twice, as the source's "
                            "parameter list does (model.py VSRN: encoder, decoder, then S2VTAttModel); false: once"),
}


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
        "caption_decoder": setting({"oneOf": [{"type": "null"}, object_schema(CAPTION_DECODER)]},
                                   "VSRN's caption generator on the reasoned regions, trained with the "
                                   "caption_generation loss term (methods.models.caption_decoder); null: none, "
                                   "as the metric-learning study trains VSRN", default=None),
    }

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        decoder = model.get("caption_decoder")
        generator = f", caption generator GRU {decoder['hidden_dim']}" if decoder else ""
        return (f"{regions_text(ctx)}, embed {model['embed_dim']}, {model['gcn_blocks']} GCN blocks, "
                f"{gru_text(model['text'])}{generator}")
