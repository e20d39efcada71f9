"""BFAN (Liu et al., ACM MM 2019): bidirectional focal attention of regions and words (``methods.models.bfan``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, gru_text, regions_text
from methods.model_kinds.settings import choice, integer, number, part


@MODEL_KINDS.register("bfan")
class BFANKind(ModelKind):
    image_input = "regions"
    settings = {
        "embed_dim": integer(minimum=1),
        "focal": choice(["equal", "prob"], "which fragments the focal attention keeps: equal (weight above the mean "
                        "weight, every fragment's confidence equal) or prob (sum_j (a_i - a_j) sqrt(a_j) > 0, "
                        "confidences the square roots of the weights)"),
        "lambda_softmax": number("softmax temperature of the pre-assigned attention (--lambda_softmax; 20 in "
                                 "every README command)", exclusiveMinimum=0),
        "empty_focus": choice(["nan", "keep_all"], "a query none of whose fragments passes the focal threshold "
                              "(its weights all equal, e.g. a one-word caption's in i-t): nan, the public code's 0/0; "
                              "keep_all: its pre-assigned attention, every fragment kept", default="nan"),
        "evaluation_dtype": choice(["float64", "model"], "dtype of a split's scores (validation and test): float64 "
                                   "scores the float32 encodings in float64, as CrossmodalGroup/BFAN's evaluation.py; "
                                   "model: in the encodings' dtype", default="model"),
        "text": part("text_gru"),
    }

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        return (f"{regions_text(ctx)}, embed {model['embed_dim']}, focal attention t-i + i-t "
                f"({model['focal']}, λ {model['lambda_softmax']:g}), {gru_text(model['text'])}")
