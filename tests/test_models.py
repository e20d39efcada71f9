"""Model parts against independent computations."""
import torch

from methods.features.backbone import ResNetBackbone
from methods.models.text import GRUTextEncoder
from methods.models.vsepp import VSEPP


def test_gru_encoder_takes_the_last_valid_step_regardless_of_padding():
    torch.manual_seed(0)
    enc = GRUTextEncoder(20, 8, 6).eval()
    caption = torch.tensor([[1, 5, 7, 9, 2]])
    alone = enc(caption, torch.tensor([5]))
    padded = torch.tensor([[1, 5, 7, 9, 2, 0, 0, 0], [1, 3, 2, 0, 0, 0, 0, 0]])
    batch = enc(padded, torch.tensor([5, 3]))
    torch.testing.assert_close(batch[0], alone[0])
    # independent: run the GRU step by step over the 5 real tokens
    out, h = enc.gru(enc.embed(caption))
    torch.testing.assert_close(alone[0], h[-1, 0] / h[-1, 0].norm())


def test_vsepp_frozen_backbone_stays_in_eval_mode_and_gets_no_gradient():
    torch.manual_seed(0)
    model = VSEPP(ResNetBackbone("resnet18", "none"), 16, GRUTextEncoder(10, 4, 16))
    model.set_finetune(False)
    model.train()
    assert not model.backbone.training and model.fc.training
    assert all(not p.requires_grad for p in model.backbone.parameters())
    images = torch.randn(2, 3, 64, 64)
    emb = model.encode_images({"images": images})
    torch.testing.assert_close(emb.norm(dim=1), torch.ones(2))
    # cached pooled features and the CNN path give the same embedding
    pooled = model.backbone.pooled(images)
    torch.testing.assert_close(model.encode_images({"pooled": pooled}), emb)
    model.set_finetune(True)
    assert any(p.requires_grad for p in model.backbone.parameters())
