"""Label-wise retrieval: label vectors of regions and words through transformers
(``methods.models.label_wise``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, gru_text, regions_text
from methods.model_kinds.settings import block, boolean, choice, integer, number, part, setting


@MODEL_KINDS.register("label_wise")
class LabelWiseKind(ModelKind):
    image_input = "regions"
    schema_description = "label-wise retrieval by semantic sharing (Yang et al., IJCAI 2021; methods/models/label_wise.py)"
    settings = {
        "embed_dim": integer("d: region fc, bi-GRU hidden, transformer width (1024)", minimum=1),
        "n_classes": integer("C: the dataset's labels (the label head's outputs; must equal the data's)", minimum=1),
        "n_region_classes": integer("detector classes predicted for selected regions (the code's 1000)", minimum=1),
        "region_classes": boolean("the model predicts selected regions' detector classes (masked region-class "
                                  "prediction): the regions input then loads the train split's region classes"),
        "transformer": block({
            "layers": integer(minimum=1),
            "heads": integer(minimum=1),
            "ff_dim": integer(minimum=1),
            "dropout": number(minimum=0, exclusiveMaximum=1),
            "init_weights": setting({"type": ["string", "null"]}, "null: Xavier-uniform (the code); a path: a torch "
                                    "state dict of an nn.TransformerEncoder of these sizes, loaded strictly (the paper "
                                    "initialises from BERT-base)"),
        }),
        "shared_transformer": boolean("one encoder and label classifier for both modalities (the paper); false gives "
                                      "each its own (Table 1 'Independent')"),
        "text_padding_mask": boolean("padded words are masked out of attention (false: attended, as the code)"),
        "mean_over_padding": boolean("a text's label vector averages every padded position (true: the code) or its "
                                     "words"),
        "sigmoid_before_cross_entropy": boolean("masked predictions pass a sigmoid before the cross-entropy (the code)"),
        "max_length": setting({"type": ["integer", "null"], "minimum": 1}, "texts are cut to this many tokens (the "
                              "supplement's 150); null: none"),
        "text": part("text_gru"),
        "layer_norm": choice(["code", "torch"], "the transformer's LayerNorm: code (a (x - mean) / (unbiased std + "
                             "1e-6) + b, the code's transformer.py) or torch ((x - mean) / sqrt(biased variance + "
                             "1e-6), torch.nn.LayerNorm)"),
        "text_position_term": boolean("true: every text position, padded ones included, adds 1e-5 p / 2 with p a fixed "
                                      "U(-0.1, 0.1) vector (the code's position embedding of id 0, which no gradient "
                                      "reaches); false: none"),
        "retrieval_score": choice(["cosine", "dot"], "cosine of the items' label vectors (the code on MIRFlickr and "
                                  "NUS-WIDE, utils/evaluation.py i2t_one) or their dot product (its COCO evaluation, "
                                  "i2t / t2i)"),
    }

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        tr = model["transformer"]
        shared = "shared" if model["shared_transformer"] else "per-modality"
        scores = "cosine" if model["retrieval_score"] == "cosine" else "dot-product"
        return (f"{regions_text(ctx)}, D {model['embed_dim']}, {shared} {tr['layers']}-layer transformer "
                f"({tr['heads']} heads, FF {tr['ff_dim']}), {model['n_classes']} labels, {gru_text(model['text'])}, "
                f"{scores} scores")
