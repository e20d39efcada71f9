"""MVSA: SCAN's cross attention on multi-scale ResNet grids (``methods.models.mvsa``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, backbone_text, finetunes, gru_text
from methods.model_kinds.scan import similarity_text


@MODEL_KINDS.register("mvsa")
class MVSAKind(ModelKind):
    image_input = "grid"

    @classmethod
    def internals(cls, model_cfg: dict) -> frozenset[str]:
        """The adaptive self-attention of the instance candidates, per scale (with ASA blocks)."""
        return frozenset({"asa_attention"} if model_cfg["asa"]["blocks"] else ())

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        cnn = "fine-tuned" if finetunes(cfg) else "frozen"
        scales = " + ".join(model["grid_scales"])
        fusion = f" ({model['fusion_pooling']}-pooled to the coarsest)" if model["fusion_pooling"] else ""
        asa = f"{model['asa']['blocks']} ASA" if model["asa"]["blocks"] else "no ASA"
        return (f"{backbone_text(model['backbone'], ctx)} {scales}{fusion}, CNN {cnn}, {asa}, "
                f"C {model['candidate_dim']}, D {model['embed_dim']}, {similarity_text(model['similarity'])}, "
                f"{gru_text(model['text'])}")
