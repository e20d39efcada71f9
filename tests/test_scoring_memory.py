"""Scoring a split within bounded memory: a split's captions are stored by length (no padding to
the longest caption), every block of pairs a cross-attention model scores stays within the
configured element budget, and the DAG's budget (config ``scoring.block_elements``) reaches the
model in training's validation and in evaluation."""
import argparse

import pytest
import torch

from methods.config import load_yaml
from methods.models.cross_attention import (BLOCK_ELEMENTS, PackedWordFeatures, RegionFeatures, WordFeatures,
                                            score_in_blocks, sized_caption_blocks, square_image_block)
from methods.models.sgraf import SGRAF
from methods.models.text import GRUTextEncoder
from methods.scoring import add_block_argument, encode_texts, stored, use_block_budget
from tests.conftest import REPO

DIM = 6


def padded_words(lengths, seed=0):
    """(N, max length, DIM) word features, zero past each caption's length, as an encoder gives them."""
    g = torch.Generator().manual_seed(seed)
    words = torch.randn(len(lengths), max(lengths), DIM, generator=g, dtype=torch.float64)
    mask = torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]
    return words * mask[..., None], torch.randn(len(lengths), DIM, generator=g, dtype=torch.float64)


def test_packed_words_hold_each_caption_once_without_padding():
    lengths = [3, 1, 7, 2, 7, 4]
    words, glob = padded_words(lengths)
    packed = WordFeatures(words, torch.tensor(lengths), glob).packed()
    assert packed.words.shape == (sum(lengths), DIM) and len(packed) == 6
    start = 0
    for k, n in enumerate(lengths):   # caption k's words, back to back, in order
        assert torch.equal(packed.words[start:start + n], words[k, :n])
        start += n


@pytest.mark.parametrize("index", [torch.tensor([4, 0, 3]), torch.tensor([1]), slice(2, 5), torch.tensor([2, 4]), 2])
def test_a_block_of_packed_captions_is_the_padded_block(index):
    lengths = [3, 1, 7, 2, 7, 4]
    words, glob = padded_words(lengths)
    block = WordFeatures(words, torch.tensor(lengths), glob).packed()[index]
    rows = torch.arange(6)[index].reshape(-1)   # an int index: that one caption
    longest = max(lengths[r] for r in rows.tolist())
    assert torch.equal(block.words, words[rows, :longest])   # padded to the block's own longest, zeros after
    assert torch.equal(block.lengths, torch.tensor(lengths)[rows]) and torch.equal(block.glob, glob[rows])


def test_parts_packed_apart_join_into_the_whole():
    lengths = [3, 1, 7, 2, 7, 4]
    words, glob = padded_words(lengths)
    whole = WordFeatures(words, torch.tensor(lengths), glob)
    parts = [WordFeatures(words[a:b, :max(lengths[a:b])], torch.tensor(lengths[a:b]), glob[a:b]).packed()
             for a, b in ((0, 2), (2, 5), (5, 6))]
    joined = PackedWordFeatures.cat(parts)
    assert torch.equal(joined.words, whole.packed().words) and torch.equal(joined[:].words, words)


def sgraf(attention="t2i"):
    torch.manual_seed(0)
    text = GRUTextEncoder(40, 8, 10, bidirectional=True, embed_dropout=0.4)
    return SGRAF(12, 5, 10, 6, text, ["sgr", "saf"], attention={"direction": attention, "smooth": 9.0}).eval()


@pytest.mark.parametrize("attention", ["t2i", "i2t"])
def test_scores_from_packed_captions_equal_those_from_padded_ones_bit_for_bit(attention):
    model = sgraf(attention)
    g = torch.Generator().manual_seed(2)
    lengths = torch.tensor([2, 9, 4, 13, 1, 6, 9, 3, 11, 5])
    tokens = torch.randint(1, 40, (10, 13), generator=g) * (torch.arange(13)[None, :] < lengths[:, None])
    with torch.no_grad():
        img = model.encode_images({"features": torch.randn(7, 5, 12, generator=g)})
        padded = model.encode_texts({"tokens": tokens, "lengths": lengths})
    packed = padded.packed()
    for budget in (1, 500, 10**9):   # one caption per block, several blocks, one block
        model.block_elements = budget
        assert torch.equal(model.score_matrix(img, packed), model.score_matrix(img, padded))


def test_every_block_of_pairs_stays_within_the_budget():
    """COCO-like caption lengths; the pair function sees (images x captions) blocks whose per-pair
    intermediates hold at most the budget's elements (a block of one caption is the floor)."""
    g = torch.Generator().manual_seed(3)
    lengths = torch.randint(6, 50, (300,), generator=g)
    words, glob = padded_words(lengths.tolist())
    captions = WordFeatures(words, lengths, glob).packed()
    images = RegionFeatures(torch.randn(40, 36, DIM, dtype=torch.float64), torch.randn(40, DIM, dtype=torch.float64))

    def pair_elements(length):
        return 36 * length + 2 * (length + 1) * 256

    for budget, image_block in ((2 ** 22, 128), (2 ** 18, 16), (10**4, 8), (2 ** 18, None)):
        seen = []

        def pair_scores(img, cap):
            seen.append((len(img), len(cap), cap.words.shape[1]))
            assert cap.words.shape[1] == int(cap.lengths.max())     # padded to the block's own longest
            return img.glob @ cap.glob.t()

        scores = score_in_blocks(pair_scores, images, captions, pair_elements, budget, image_block)
        torch.testing.assert_close(scores, images.glob @ glob.t(), rtol=0, atol=1e-13)   # each pair once, in place
        assert all(i * c * pair_elements(longest) <= budget or c == 1 for i, c, longest in seen)
        assert sum(i * c for i, c, _ in seen) == 40 * 300 and len(seen) > 1   # each pair once


def test_square_blocks_balance_the_cosine_product_within_the_budget():
    """BFAN-like pairs (16 x 36 regions x words elements each), budget 2**22: pairs per block
    2**22 / (16 * 36 * L), and images x 36 = captions x L gives sqrt(2**22 / (16 * 36**2)) = 14.2
    images at every length; the clip keeps 1 to 128."""
    def per_pair(length):
        return 16 * 36 * length

    assert [square_image_block(per_pair, 2 ** 22, length, 36) for length in (8, 20, 50)] == [14, 14, 14]
    assert square_image_block(lambda length: 1, 2 ** 30, 20, 36) == 128
    assert square_image_block(lambda length: 2 ** 30, 2 ** 22, 20, 36) == 1
    lengths = torch.tensor([20] * 300)
    blocks = sized_caption_blocks(lengths, 1000, per_pair, 2 ** 22, lambda length: 14)
    # 2**22 // (14 * 16 * 36 * 20) = 26 captions: 14 x 36 = 504 rows of regions, 26 x 20 = 520 columns of words
    assert {(len(index), images) for index, _, images in blocks[:-1]} == {(26, 14)}


def test_the_configured_budget_reaches_a_cross_attention_model():
    parser = argparse.ArgumentParser()
    add_block_argument(parser)
    config = load_yaml(REPO / "config" / "config.yaml")["scoring"]["block_elements"]
    assert config == BLOCK_ELEMENTS   # the API's defaults are the DAG's
    args = parser.parse_args(["--block-elements", "cpu=1000", "cuda=2000"])
    model = sgraf()
    use_block_budget(model, args.block_elements, torch.device("cpu"))
    assert model.block_elements == 1000
    use_block_budget(model, [], torch.device("cpu"))
    assert model.block_elements == BLOCK_ELEMENTS["cpu"]
    for bad in ("cpu=0", "tpu=5", "cpu=many"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--block-elements", bad])


def test_a_split_is_encoded_batch_by_batch_into_packed_captions():
    model = sgraf()
    token_lists = [[1 + (3 * k + j) % 39 for j in range(n)] for k, n in enumerate([2, 9, 4, 13, 1, 6, 9])]
    packed = encode_texts(model, token_lists, torch.device("cpu"), batch_size=3)
    assert isinstance(packed, PackedWordFeatures) and packed.words.shape == (44, 10)
    assert packed.lengths.tolist() == [2, 9, 4, 13, 1, 6, 9] and packed.words.dtype == torch.float32
    with torch.no_grad():   # caption 3 alone, padded to nothing: its words as one encoding gives them
        alone = model.encode_texts({"tokens": torch.tensor([token_lists[3]]), "lengths": torch.tensor([13])})
    torch.testing.assert_close(packed[torch.tensor([3])].words, alone.words, rtol=0, atol=1e-6)


def test_stored_encodings_of_other_models_are_kept_as_given():
    embeddings = torch.randn(4, 3, dtype=torch.float16)
    assert stored(embeddings).dtype == torch.float32
    regions = RegionFeatures(torch.randn(2, 3, 4), torch.randn(2, 4))
    assert isinstance(stored(regions), RegionFeatures)
