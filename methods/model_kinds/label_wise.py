"""Label-wise retrieval: label vectors of regions and words through transformers
(``methods.models.label_wise``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, gru_text, regions_text


@MODEL_KINDS.register("label_wise")
class LabelWiseKind(ModelKind):
    image_input = "regions"

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        tr = model["transformer"]
        shared = "shared" if model["shared_transformer"] else "per-modality"
        scores = "cosine" if model["retrieval_score"] == "cosine" else "dot-product"
        return (f"{regions_text(ctx)}, D {model['embed_dim']}, {shared} {tr['layers']}-layer transformer "
                f"({tr['heads']} heads, FF {tr['ff_dim']}), {model['n_classes']} labels, {gru_text(model['text'])}, "
                f"{scores} scores")
