"""VSE++ (Faghri et al., BMVC 2018): a CNN's pooled feature and a GRU caption in one space
(``methods.models.vsepp``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, backbone_text, finetunes, gru_text, pooled_dim
from methods.model_kinds.settings import boolean, choice, integer, part, text


@MODEL_KINDS.register("vsepp")
class VSEPPKind(ModelKind):
    image_input = "pooled"
    settings = {
        "embed_dim": integer(minimum=1),
        "backbone": text("a key of config backbones"),
        "pre_fc_l2norm": boolean("l2-normalise the pooled CNN feature before the fc (what the public VSE++ code does)"),
        "backbone_bn": choice(["frozen", "train"], "BatchNorm mode of the CNN while fine-tuning: `frozen` keeps "
                              "ImageNet statistics (eval mode), `train` updates them (fartashf/vsepp#4, #30)"),
        "image_l2norm": boolean("the image embedding is l2-normalised after the fc (fartashf/vsepp model.py "
                                "EncoderImageFull); false: left unnormalised, as its --no_imgnorm (the README's VSE0 "
                                "runs), scores then being dot products with the unit caption vectors", default=True),
        "text": part("text_gru"),
    }

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        cnn = "fine-tuned" if finetunes(cfg) else "frozen"
        return (f"{backbone_text(model['backbone'], ctx)}, CNN {cnn}, {pooled_dim(model['backbone'], ctx)}-d pooled, "
                f"embed {model['embed_dim']}, {gru_text(model['text'])}")
