"""Set embeddings (Kim, Kim, Kwak, CVPR 2023; PIE-Net of PVSE, Song and Soleymani, CVPR 2019):
``set_embedding`` reads precomputed regions, ``set_embedding_grid`` a ResNet grid
(``methods.models.set_embedding``)."""
from methods.model_kinds.base import MODEL_KINDS, ModelKind
from methods.model_kinds.description import DescribeContext, backbone_text, finetunes, gru_text, regions_text


class SetEmbeddingKind(ModelKind):
    @classmethod
    def set_sizes(cls, model_cfg: dict) -> tuple[int, int]:
        return model_cfg["set_size"], model_cfg["set_size"]

    @classmethod
    def set_module_text(cls, model: dict) -> str:
        module = model["set_module"]
        if module["kind"] == "slot":
            attention = "slot" if module["competition"] == "slots" else "transformer"
            arch = f"{attention} set module (T {module['iterations']}, padding {module['padding']})"
        else:
            arch = "PIE-Net set module" + (" over the raw image input" if module.get("image_input") == "raw" else "")
        sim = model["similarity"]
        params = ", ".join(f"{k} {v:g}" for k, v in sim.items() if k != "kind")
        # PVSE's switches (methods.models.set_embedding), named only when set off DivE's
        projection = model.get("image_projection", {})
        pvse = [text for text, on in (("image fc without MLP", projection.get("mlp", True) is False),
                                      ("global image feature of the mean cell", projection.get("global_pool") == "mean"),
                                      (f"text global {model.get('text_global')}",
                                       model.get("text_global", "average_final") != "average_final")) if on]
        return (f"D {model['embed_dim']}, K {model['set_size']}, {arch}, "
                f"{sim['kind']}{f' ({params})' if params else ''}, {gru_text(model['text'])}"
                + "".join(f", {text}" for text in pvse))


@MODEL_KINDS.register("set_embedding")
class SetEmbeddingRegionsKind(SetEmbeddingKind):
    image_input = "regions"

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        return f"{regions_text(ctx)}, {cls.set_module_text(cfg['model'])}"


@MODEL_KINDS.register("set_embedding_grid")
class SetEmbeddingGridKind(SetEmbeddingKind):
    image_input = "grid"

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        cnn = "fine-tuned" if finetunes(cfg) else "frozen"
        return (f"{backbone_text(model['backbone'], ctx)} {model['grid_scales'][0]} grid, CNN {cnn}, "
                f"{cls.set_module_text(model)}")
