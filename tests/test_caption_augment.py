"""Caption augmentation (VSE-infinity's, as kdwonn/DivE's data.py applies it)."""
from __future__ import annotations

import pytest
import torch

from methods import api
from methods.data.caption_augment import CaptionAugmentation, extra_tokens
from methods.training.data import augment_caption
from methods.errors import HarnessError

START, END = 1, 2


def dive_tokenize(words, draws, random_ids, drop_prob, mask_id):
    """DivE data.py ``tokenize``'s caption_augmentation, written out with given uniform draws."""
    idxs = []
    for t, prob, rid in zip(words, draws, random_ids):
        if prob < drop_prob:
            prob /= drop_prob
            if prob < 0.5:
                idxs += [mask_id]
            elif prob < 0.6:
                idxs += [rid]
        else:
            idxs += [t]
    return [START] + idxs + [END]


def test_equals_the_public_code_on_the_same_draws():
    augment = CaptionAugmentation(0.2, 0.5, 0.1, vocab_size=50)
    words = torch.randint(4, 50, (400,), generator=torch.Generator().manual_seed(0)).tolist()
    g = torch.Generator().manual_seed(7)
    out = augment_caption(augment, [START, *words, END], torch.Generator().manual_seed(7))
    draws = torch.rand(len(words), generator=g).tolist()
    random_ids = torch.randint(51, (len(words),), generator=g).tolist()   # <mask> (50) can be drawn too
    assert out == dive_tokenize(words, draws, random_ids, 0.2, mask_id=50)
    assert 50 in out and len(out) < len(words) + 2                        # some masked, some deleted


def test_shares_of_masked_replaced_and_deleted_words():
    """Over 200,000 words: masked 0.2 x 0.5, deleted 0.2 x 0.4 and kept 0.8 (+ replacements that
    drew the word itself), each within 5 binomial standard deviations."""
    n = 200_000
    augment = CaptionAugmentation(0.2, 0.5, 0.1, vocab_size=10_000)
    out = augment_caption(augment, [START, *([7] * n), END], torch.Generator().manual_seed(1))
    assert out[0] == START and out[-1] == END
    body = torch.tensor(out[1:-1])
    counts = {"mask": int((body == 10_000).sum()), "kept": int((body == 7).sum()),
              "deleted": n - len(body)}
    counts["replaced"] = n - counts["mask"] - counts["kept"] - counts["deleted"]
    for name, p in (("mask", 0.1), ("deleted", 0.08), ("kept", 0.8), ("replaced", 0.02)):
        assert abs(counts[name] - n * p) < 5 * (n * p * (1 - p)) ** 0.5, (name, counts)


def test_no_augmentation_is_the_identity_and_only_masking_adds_a_token():
    tokens = [START, 5, 6, 7, END]
    assert augment_caption(CaptionAugmentation(0.0, 0.5, 0.1, 20), tokens) == tokens
    assert augment_caption(CaptionAugmentation(1.0, 1.0, 0.0, 20), tokens) == [START, 20, 20, 20, END]
    assert augment_caption(CaptionAugmentation(1.0, 0.0, 0.0, 20), tokens) == [START, END]
    assert extra_tokens({"caption_augment": {"prob": 0.2, "mask": 0.5, "replace": 0.1}}) == 1
    assert extra_tokens({"caption_augment": {"prob": 0.2, "mask": 0.0, "replace": 0.1}}) == 0
    assert extra_tokens({}) == 0


def test_the_set_rows_augment_and_shares_above_one_are_a_plan_error():
    assert api.experiment_config("set_embeddings", "synthetic")["training"]["caption_augment"] == \
        {"prob": 0.2, "mask": 0.5, "replace": 0.1}                          # DivE --caption_drop_prob 0.2
    with pytest.raises(HarnessError, match=r"training.caption_augment: .*mask \+ replace <= 1"):
        api.experiment_config("set_embeddings", "synthetic",
                              overrides={"training.caption_augment": {"prob": 0.2, "mask": 0.8, "replace": 0.3}})
