"""SGRAF (Diao et al., AAAI 2021): similarity graph reasoning and attention filtration
(``methods.models.sgraf``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, gru_text, regions_text
from methods.model_kinds.settings import block, boolean, choice, integer, number, part, setting


@MODEL_KINDS.register("sgraf")
class SGRAFKind(ModelKind):
    image_input = "regions"
    settings = {
        "embed_dim": integer(minimum=1),
        "sim_dim": integer("similarity-vector (graph node) dimension; 256 in the paper, Table 7 sweeps 128/256/384",
                           minimum=1),
        "heads": setting({"type": "array", "minItems": 1, "uniqueItems": True, "items": {"enum": ["sgr", "saf", "avg"]}},
                         "similarity aggregation: sgr (graph reasoning), saf (attention filtration), avg (mean of "
                         "the per-node scores, the paper's AA). Two heads = joint training: shared representations, "
                         "summed losses, mean score at inference"),
        "nodes": block({"global": boolean(), "local": boolean()}, "which similarity nodes exist (Table 3 GLO / LOC)",
                       anyOf=[{"properties": {"global": {"const": True}}}, {"properties": {"local": {"const": True}}}]),
        "sgr_steps": integer("graph-reasoning steps, separate parameters each (Table 3: 1-4; 0 = no reasoning)",
                             minimum=0, maximum=8),
        "attention": block({
            "direction": choice(["t2i", "i2t"], "t2i: words attend to regions, word nodes (the paper); i2t: regions "
                                "attend to words, region nodes (Table 4)"),
            "smooth": number("softmax temperature lambda (9 in the paper)", exclusiveMinimum=0),
        }),
        "similarity": choice(["vector", "scalar"], "vector (Eq. 1, the paper's SV) or scalar cosine (SS; only with "
                             "heads [avg])"),
        "sa_dropout": number("dropout inside the self-attention global features", minimum=0, exclusiveMaximum=1),
        "text": part("text_gru"),
    }
    schema_conditions = {"allOf": [{"if": {"properties": {"similarity": {"const": "scalar"}}, "required": ["similarity"]},
                                    "then": {"properties": {"heads": {"const": ["avg"]}}}}]}

    @classmethod
    def internals(cls, model_cfg: dict) -> frozenset[str]:
        """The SAF head's weights over a caption's words (Fig. 3): words attend to regions (t2i),
        one node per word (local nodes)."""
        saf_over_words = ("saf" in model_cfg["heads"] and model_cfg["attention"]["direction"] == "t2i"
                          and model_cfg["nodes"]["local"])
        return frozenset({"saf_weights"} if saf_over_words else ())

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        graph = f", graph dim {model['sim_dim']}" if model["similarity"] == "vector" else ""
        return f"{regions_text(ctx)}, embed {model['embed_dim']}{graph}, {gru_text(model['text'])}"
