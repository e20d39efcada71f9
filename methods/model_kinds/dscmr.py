"""DSCMR, Deep Supervised Cross-Modal Retrieval (Zhen et al., CVPR 2019; ``methods.models.dscmr``):
one fixed vector per item, a per-modality Linear + ReLU, one shared common-space Linear and one
shared label classifier."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, regions_text
from methods.model_kinds.settings import choice, integer


@MODEL_KINDS.register("dscmr")
class DSCMRKind(ModelKind):
    image_input = "regions"
    schema_description = "DSCMR (Zhen et al., CVPR 2019; methods/models/dscmr.py)"
    settings = {
        "hidden_dim": integer("ImgNN / TextNN outputs (IDCM_NN img_output_dim = text_output_dim 2048)", minimum=1),
        "embed_dim": integer("the common space: the shared linearLayer's outputs (minus_one_dim 1024)", minimum=1),
        "n_classes": integer("C: the dataset's labels (linearLayer2's outputs; must equal the data's)", minimum=1),
        "label_rule": choice(["threshold", "relative_to_largest"],
                             "label scores for micro-F1: threshold (linearLayer2's outputs clamped to [0, 1]: a label "
                             "is predicted at >= 0.5, the midpoint of the 0/1 targets it regresses onto) or "
                             "relative_to_largest (each output over the item's largest, the label-wise rows' rule)",
                             default="threshold"),
    }

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        return (f"{regions_text(ctx)} averaged, text bag of words, hidden {model['hidden_dim']}, shared common space "
                f"{model['embed_dim']}, {model['n_classes']} labels, cosine scores")
