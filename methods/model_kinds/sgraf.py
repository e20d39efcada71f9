"""SGRAF (Diao et al., AAAI 2021): similarity graph reasoning and attention filtration
(``methods.models.sgraf``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, gru_text, regions_text


@MODEL_KINDS.register("sgraf")
class SGRAFKind(ModelKind):
    image_input = "regions"

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
