"""Every registered model, converted to float64, gives the scores of a per-pair float64
reference written from the public code's equations, to 1e-10.

The tolerance is far below fp32 resolution, so a hidden cast to float32 anywhere in a model
fails the test. The references take one (image, caption) pair at a time, without padding,
masks, blocks or the vectorised tricks of the models (Gram-matrix norms, fused projections);
they write linear maps, norms, attention, graph steps and eval-mode BatchNorm out as plain
tensor ops and call only the model's own ``nn.GRU`` modules (a library primitive) on one
unpadded sequence. Each model's reference is its oracle's ``float64_cases``
(``tests/oracles/<kind>.py``, found by the registered name); a model registered without one
fails the test."""
import pytest
import torch

from methods.models import MODELS
from tests.oracles import oracle_part
from tests.oracles._float64 import LENGTHS, N_IMAGES, texts
from tests.oracles.scan import float64_cases as scan_cases
from tests.test_mvsa_scan import reference_pair as scan_reference_pair


def cases(kind):
    return oracle_part(kind, "float64_cases")()


def as_dtype(feats, dtype):
    """Cached features (a tensor, or a dict of grid maps per scale) in another dtype."""
    return {k: v.to(dtype) for k, v in feats.items()} if isinstance(feats, dict) else feats.to(dtype)


@pytest.mark.parametrize("kind", MODELS.names())
def test_float64_scores_equal_the_per_pair_reference(kind):
    text_batch = texts()
    for label, model, images, reference in cases(kind):
        with torch.no_grad():   # each encoding starts in eval mode, as a split's does (PCME reseeds its samples)
            img, txt = model.eval().encode_images(images), model.eval().encode_texts(text_batch)
            block = model.score(img, txt)
            model.score_chunk = 2          # embedding models: image blocks of 2
            model.block_elements = 1       # cross-attention models: one caption per block
            matrix = model.score_matrix(img, txt)
            want = reference(model, images, text_batch)
            # cached float32 features are cast to the model's dtype (exactly: float32 -> float64)
            single = as_dtype(images["features"], torch.float32)
            from_float32 = model.score(model.eval().encode_images({"features": single}), txt)
            from_float64 = model.score(model.eval().encode_images({"features": as_dtype(single, torch.float64)}), txt)
        assert block.dtype == matrix.dtype == want.dtype == torch.float64, label
        assert matrix.device.type == "cpu" and matrix.shape == (N_IMAGES, len(LENGTHS)), label
        torch.testing.assert_close(block, want, rtol=1e-10, atol=1e-10, msg=lambda m: f"{label}: {m}")
        torch.testing.assert_close(matrix, want, rtol=1e-10, atol=1e-10, msg=lambda m: f"{label}: {m}")
        torch.testing.assert_close(from_float32, from_float64, rtol=0, atol=0, msg=lambda m: f"{label}: {m}")
        assert want.std() > 1e-3, f"{label}: the scores are (nearly) constant"


@pytest.mark.parametrize("kind", ["vsepp", "sgraf"])
def test_the_api_keeps_float64_features_of_a_float64_model(kind):
    """``api.encode_images`` on float64 features of a float64 model scores as the model itself
    does on them, not as on the features rounded to float32 (which gives other bits)."""
    from methods import api
    label, model, images, _ = next(iter(cases(kind)))
    feats, text_batch = images["features"], texts()
    with torch.no_grad():
        txt = model.encode_texts(text_batch)
        direct = model.score(model.encode_images({"features": feats}), txt)
        rounded = model.score(model.encode_images({"features": feats.to(torch.float32).to(torch.float64)}), txt)
        via_api = model.score(api.encode_images(model, feats.numpy(), batch_size=len(feats), device="cpu"), txt)
    torch.testing.assert_close(via_api, direct, rtol=0, atol=0)
    assert not torch.equal(rounded, direct), label   # the check can fail: float32 rounding moves the scores


def test_scan_evaluates_a_float32_model_in_float64_as_its_source():
    """kuanghuei/SCAN's evaluation scores its float32 encodings in float64: with
    ``evaluation_dtype: float64`` a float32 model's split scores are the float64 per-pair
    reference on those float32 encodings; with ``model`` they are float32 (other bits)."""
    for label, model64, images, _ in scan_cases():
        model = model64.float()
        feats, text_batch = images["features"].float(), texts()
        with torch.no_grad():
            img, txt = model.encode_images({"features": feats}), model.encode_texts(text_batch)
            model.evaluation_dtype = "float64"
            source = model.score_matrix(img, txt)
            model.evaluation_dtype = "model"
            own = model.score_matrix(img, txt)
            # the reference: the same float32 encodings, widened, scored pair by pair in float64
            want = torch.tensor([[scan_reference_pair(img.regions[i].double(), txt.words[c, :int(txt.lengths[c])].double(),
                                                      model.direction, model.aggregation, model.lambda_softmax,
                                                      model.lambda_lse)
                                  for c in range(len(txt))] for i in range(len(img))], dtype=torch.float64)
        assert source.dtype == torch.float64 and own.dtype == torch.float32, label
        torch.testing.assert_close(source, want, rtol=1e-12, atol=1e-12, msg=lambda m: f"{label}: {m}")
        assert not torch.equal(own.double(), source), label
