"""IMRAM (Chen et al., CVPR 2020): iterative matching with recurrent attention memory
(``methods.models.imram``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, gru_text, regions_text
from methods.model_kinds.settings import boolean, choice, integer, number, part

MODES = ("full", "text", "image")
MODE_LABELS = {"full": "Full-IMRAM", "text": "Text-IMRAM", "image": "Image-IMRAM"}


@MODEL_KINDS.register("imram")
class IMRAMKind(ModelKind):
    image_input = "regions"
    settings = {
        "embed_dim": integer(minimum=1),
        "mode": choice(list(MODES), "text: words attend to regions (Text-IMRAM); image: regions attend to "
                       "words (Image-IMRAM); full: the step scores of both summed (Full-IMRAM, one model "
                       "trained on the sum)"),
        "steps": integer("matching steps K: each attends with the memory of the previous step as its query",
                         minimum=1, maximum=8),
        "lambda_softmax": number("softmax temperature of the cross-modal attention (--lambda_softmax)",
                                 exclusiveMinimum=0),
        "memory_l2norm": boolean("l2-normalise the memory after each gated update; the public commands pass "
                                 "--no_IMRAM_norm, so false", default=False),
        "text": part("text_gru"),
    }

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        norm = ", memory l2" if model.get("memory_l2norm", False) else ""
        return (f"{regions_text(ctx)}, embed {model['embed_dim']}, {MODE_LABELS[model['mode']]} "
                f"(K {model['steps']}, λ {model['lambda_softmax']:g}{norm}), {gru_text(model['text'])}")
