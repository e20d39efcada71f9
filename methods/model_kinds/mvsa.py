"""MVSA: SCAN's cross attention on multi-scale ResNet grids (``methods.models.mvsa``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, backbone_text, finetunes, gru_text
from methods.model_kinds.scan import similarity_text
from methods.model_kinds.settings import BACKBONE_BN, GRID_SCALE, block, boolean, choice, integer, part, setting, text


@MODEL_KINDS.register("mvsa")
class MVSAKind(ModelKind):
    image_input = "grid"
    settings = {
        "backbone": text("a key of config backbones: the CNN whose cached maps are read, and which the fine-tune "
                         "stage trains"),
        "backbone_bn": BACKBONE_BN,
        "grid_scales": setting({"type": "array", "minItems": 1, "uniqueItems": True, "items": GRID_SCALE},
                               "ResNet stages whose cells are the instance candidates: conv3 (28x28 at 224 px), "
                               "conv4 (14x14), conv5 (7x7)"),
        "fusion_pooling": choice(["max", "avg", None], "how finer scales' instance features are down-sampled to the "
                                 "coarsest grid before the candidates are concatenated (supplement Table 2: max or "
                                 "avg); null for one scale"),
        "candidate_dim": integer("C, the instance candidates' dimension (2048)", minimum=1),
        "embed_dim": integer("D, the instance features' and words' dimension (1024)", minimum=1),
        "asa": block({
            "blocks": integer("stacked blocks (0: no ASA)", minimum=0),
            "inter_dim": integer("theta/phi/g dimension (Wang et al.: half the input's)", minimum=1),
            "batchnorm": boolean("BatchNorm after W_z, its scale and shift initialised to zero (the supplement: "
                                 "crucial to convergence)"),
        }, "adaptive self-attention, non-local blocks (Wang et al., CVPR 2018) over each scale's candidates"),
        "similarity": part("scan_similarity"),
        "text": part("text_gru"),
    }
    schema_conditions = {
        "if": {"properties": {"grid_scales": {"maxItems": 1}}},
        "then": {"properties": {"fusion_pooling": {"const": None, "description": "one scale has nothing to fuse"}}},
        "else": {"properties": {"fusion_pooling": {"enum": ["max", "avg"],
                                                   "description": "two or more scales are fused by pooling"}}},
    }

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
