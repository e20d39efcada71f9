"""The order of an epoch's batches (methods.training.batch_order): random batches are exactly a
shuffled DataLoader's; length buckets cover every item once, batch neighbours in length within
a pool, and cut the padding a step pays for."""
import random

import pytest
import torch
from torch.utils.data import BatchSampler, RandomSampler

from methods.training.batch_order import epoch_batches


@pytest.mark.parametrize("n, batch_size", [(10, 3), (128, 128), (1000, 128), (1, 4)])
def test_random_batches_are_a_shuffled_loaders(n, batch_size):
    """Without buckets: the batches torch's RandomSampler + BatchSampler draw from the same seed
    (what every public code's DataLoader(shuffle=True) does), the last one short."""
    oracle = list(BatchSampler(RandomSampler(range(n), generator=torch.Generator().manual_seed(7)), batch_size, False))
    assert epoch_batches(n, batch_size, torch.Generator().manual_seed(7)) == oracle


def coco_like_lengths(n: int, seed: int) -> list[int]:
    """Caption lengths in tokens spread like COCO's (mean ~14 words, a long tail to 50)."""
    rng = random.Random(seed)
    return [min(50, max(6, round(rng.lognormvariate(2.55, 0.25)) + (rng.random() < 0.02) * rng.randint(10, 30)))
            for _ in range(n)]


def test_buckets_cover_each_item_once_and_group_by_length_within_a_pool():
    n, batch_size, pool = 1003, 16, 5
    lengths = coco_like_lengths(n, 0)
    batches = epoch_batches(n, batch_size, torch.Generator().manual_seed(3), lengths, pool)
    assert sorted(i for b in batches for i in b) == list(range(n))
    # every batch full but one, of the last pool (pools are whole batches)
    assert sum(len(b) != batch_size for b in batches) == (n % batch_size != 0)
    assert sorted(len(b) for b in batches)[0] == (n % batch_size or batch_size)
    # the pools are consecutive runs of the same random permutation the unbucketed order uses
    order = torch.randperm(n, generator=torch.Generator().manual_seed(3)).tolist()
    pool_of = {item: k // (pool * batch_size) for k, item in enumerate(order)}
    for b in batches:
        assert len({pool_of[i] for i in b}) == 1
    # within a pool, batches do not interleave in length: one's longest <= the next one's shortest
    for p in set(pool_of.values()):
        spans = sorted((min(lengths[i] for i in b), max(lengths[i] for i in b)) for b in batches if pool_of[b[0]] == p)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_buckets_shuffle_the_batches_and_depend_only_on_the_seed():
    n, lengths = 2000, coco_like_lengths(2000, 1)
    a = epoch_batches(n, 32, torch.Generator().manual_seed(11), lengths, 10)
    assert a == epoch_batches(n, 32, torch.Generator().manual_seed(11), lengths, 10)
    assert a != epoch_batches(n, 32, torch.Generator().manual_seed(12), lengths, 10)
    # batch order is shuffled across pools: not ascending in length pool after pool
    longest = [max(lengths[i] for i in b) for b in a]
    assert longest != sorted(longest)
    first_pool = {i for b in a[:10] for i in b}
    order = torch.randperm(n, generator=torch.Generator().manual_seed(11)).tolist()
    assert first_pool != set(order[:320])


def test_buckets_cut_the_padding_a_step_pays_for():
    """Padded tokens (batch size x longest caption, summed over batches) against the tokens
    themselves, COCO-like lengths at batch 128: random batches pad to 2.7 times the tokens,
    pools of 50 batches to 1.04 times (the figures of docs/source-code.md, "The switches")."""
    n, batch_size = 128 * 400, 128
    lengths = coco_like_lengths(n, 2)
    tokens = sum(lengths)

    def padded(batches):
        return sum(len(b) * max(lengths[i] for i in b) for b in batches)
    random_pad = padded(epoch_batches(n, batch_size, torch.Generator().manual_seed(0)))
    bucket_pad = padded(epoch_batches(n, batch_size, torch.Generator().manual_seed(0), lengths, 50))
    assert random_pad > 1.8 * tokens
    assert bucket_pad < 1.1 * tokens


def test_buckets_need_one_length_per_item():
    with pytest.raises(ValueError, match="one length per item"):
        epoch_batches(10, 2, torch.Generator().manual_seed(0), [3] * 9, 2)
