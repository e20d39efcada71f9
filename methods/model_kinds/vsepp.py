"""VSE++ (Faghri et al., BMVC 2018): a CNN's pooled feature and a GRU (``methods.models.vsepp``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, backbone_text, finetunes, gru_text, pooled_dim


@MODEL_KINDS.register("vsepp")
class VSEPPKind(ModelKind):
    image_input = "pooled"

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        cnn = "fine-tuned" if finetunes(cfg) else "frozen"
        return (f"{backbone_text(model['backbone'], ctx)}, CNN {cnn}, {pooled_dim(model['backbone'], ctx)}-d pooled, "
                f"embed {model['embed_dim']}, {gru_text(model['text'])}")
