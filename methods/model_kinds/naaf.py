"""NAAF (Zhang et al., CVPR 2022): negative-aware attention of words over regions, with the
mismatch threshold mined in training (``methods.models.naaf``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, gru_text, regions_text
from methods.model_kinds.settings import boolean, choice, integer, number, part


@MODEL_KINDS.register("naaf")
class NAAFKind(ModelKind):
    image_input = "regions"
    settings = {
        "embed_dim": integer(minimum=1),
        "lambda_softmax": number("temperature of both positive attentions, the thresholded one and SCAN's "
                                 "relevance weighting (--lambda_softmax; 20 in both README commands)",
                                 exclusiveMinimum=0),
        "alpha": number("penalty parameter of the optimal threshold between the matched and mismatched "
                        "similarity distributions (--alpha)", exclusiveMinimum=0, default=2.0),
        "mined_words": integer("words of correctly ranked captions a training batch must mine before it "
                               "estimates the thresholds (the code's empirical 200)", minimum=1, default=200),
        "unmined_thresholds": choice(["zero", "keep"], "the thresholds while a batch has mined too few words: "
                                     "zero, as the public code (reset after each caption, so every batch starts "
                                     "again from 0); keep: those carried from earlier batches", default="zero"),
        "intra_propagation": boolean("at evaluation, decide each word's negative term from its caption's "
                                     "intra-modal attention over the words' best-region similarities "
                                     "(xattn_score_test forces it on); training never uses it", default=True),
        "intra_lambda": number("temperature of that intra-modal softmax (5 in xattn_score_test)",
                               exclusiveMinimum=0, default=5.0),
        "evaluation_dtype": choice(["float64", "model"], "dtype of a split's scores (validation and test): float64 "
                                   "scores the float32 encodings in float64, as CrossmodalGroup/NAAF's "
                                   "evaluation.py; model: in the encodings' dtype", default="model"),
        "text": part("text_gru"),
    }

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        intra = ", intra-modal" if model.get("intra_propagation", True) else ""
        return (f"{regions_text(ctx)}, embed {model['embed_dim']}, negative-aware attention t-i "
                f"(λ {model['lambda_softmax']:g}, α {model.get('alpha', 2.0):g}{intra}), {gru_text(model['text'])}")
