"""SCAN (Lee et al., ECCV 2018): stacked cross attention of regions and words (``methods.models.scan``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, gru_text, regions_text
from methods.model_kinds.settings import choice, integer, part


def similarity_text(sim: dict) -> str:
    """``t-i LSE (λ1 9, λ2 6)``: a ``similarity`` config block in the papers' notation."""
    lse = f", λ2 {sim['lambda_lse']:g}" if sim["aggregation"] == "lse" else ""
    return f"{sim['direction'][0]}-{sim['direction'][-1]} {sim['aggregation'].upper()} (λ1 {sim['lambda_softmax']:g}{lse})"


@MODEL_KINDS.register("scan")
class SCANKind(ModelKind):
    image_input = "regions"
    settings = {
        "embed_dim": integer(minimum=1),
        "similarity": part("scan_similarity"),
        "evaluation_dtype": choice(["float64", "model"], "dtype of a split's scores (validation and test): float64 "
                                   "scores the float32 encodings in float64, as kuanghuei/SCAN's evaluation.py; model: "
                                   "in the encodings' dtype"),
        "text": part("text_gru"),
    }

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        return (f"{regions_text(ctx)}, embed {model['embed_dim']}, {similarity_text(model['similarity'])}, "
                f"{gru_text(model['text'])}")
