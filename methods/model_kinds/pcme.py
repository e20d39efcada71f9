"""Probabilistic cross-modal embeddings (PCME; Chun et al., CVPR 2021): each image (a CNN grid's
last map) and caption (a bi-GRU) a Gaussian, sampled, ranked by the match probability of the
samples (``methods.models.pcme``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, backbone_text, finetunes, gru_text
from methods.model_kinds.settings import BACKBONE_BN, choice, integer, number, setting, text


@MODEL_KINDS.register("pcme")
class PCMEKind(ModelKind):
    image_input = "grid"
    schema_description = ("PCME (naver-ai/pcme): mean and variance heads on a CNN grid's last map and a bi-GRU, "
                          "Monte-Carlo samples scored by their match probability")
    settings = {
        "backbone": text("a key of config backbones: the CNN whose cached maps the frozen stage reads, and which a "
                         "fine-tune stage trains (--model__cnn_type resnet152)"),
        "backbone_bn": BACKBONE_BN,
        "grid_scales": setting({"type": "array", "minItems": 1, "maxItems": 1, "items": {"const": "conv5"}},
                               "the CNN's last map, whose 7x7 cells are attended over: [conv5]"),
        "embed_dim": integer("D, the embedding space (embed_dim 1024); the caption bi-GRUs have D/2 units",
                             minimum=2, multipleOf=2),
        "text": setting({"$ref": "#/$defs/text_gru"},
                        "the caption bi-GRU over the word embeddings (word_dim 300, GloVe; hidden_dim D/2)"),
        "n_samples": integer("samples per item, in training and evaluation (n_samples_inference 7)", minimum=1,
                             default=7),
        "init_negative_scale": number("a of the match logit -a |z_i - z_j| + b at initialisation (15)",
                                      exclusiveMinimum=0, default=15.0),
        "init_shift": number("b at initialisation (15)", default=15.0),
        "eval_method": choice(["matching_prob", "matmul"],
                              "how evaluation ranks: the mean match probability of the sample pairs "
                              "(evaluate_recall_coco.py, the reported numbers) or the dot product of the sample "
                              "means (matmul, the source's validation during training)",
                              default="matching_prob"),
        "sample_seed": integer("seed of the evaluation samples (the source draws them unseeded)", minimum=0,
                               default=0),
    }

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        cnn = "fine-tuned" if finetunes(cfg) else "frozen"
        ranked = "match probability" if model.get("eval_method", "matching_prob") == "matching_prob" else "sample-mean dot"
        return (f"{backbone_text(model['backbone'], ctx)} {model['grid_scales'][0]} grid, CNN {cnn}, "
                f"D {model['embed_dim']}, {model.get('n_samples', 7)} samples ranked by {ranked}, "
                f"{gru_text(model['text'])}")
