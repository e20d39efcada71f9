"""Each training item draws its random augmentation from a seed of its own (per item and epoch), so
a run's numbers do not depend on how many DataLoader workers read the items, and the number of
workers can follow the job's cores."""
import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from methods.data.inputs import CachedImageFeatures, SplitData
from methods.data.text import Vocabulary
from methods.data.tokenizers import Tokenizer
from methods.features.backbone import train_transform
from methods.features.images import ImageFiles
from methods.train import loader_workers
from methods.training.data import sample_seed, training_batches

CAPTIONS = [f"a {c} dog {w} on the grass near {v} today" for c in ("red", "tan", "black", "white")
            for w in ("runs", "sits") for v in ("trees", "water", "rocks")]   # 4 images x 6 captions
TEXTS_PER_IMAGE = 6


def augmented_split(tmp_path, with_images: bool):
    vocab = Vocabulary.build(CAPTIONS, threshold=1, tokenizer=Tokenizer("nltk_line"))
    classes = np.arange(4 * 5, dtype=np.int64).reshape(4, 5) + 100
    split = SplitData("train", CAPTIONS, CachedImageFeatures(np.zeros((4, 5, 2), np.float32)), None,
                      TEXTS_PER_IMAGE, np.eye(4, dtype=np.uint8), classes)
    training = {"batching": "captions", "batch_positives": "diagonal",
                "caption_augment": {"prob": 0.3, "mask": 0.5, "replace": 0.2},
                "masked_prediction": {"word_prob": 0.3, "region_prob": 0.4}}
    images = None
    if with_images:
        for i in range(4):
            pixels = np.random.default_rng(i).integers(0, 255, (40, 50, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / f"{i}.png")
        images = ImageFiles(tmp_path, [f"{i}.png" for i in range(4)], train_transform(24))
    return training_batches(training, split, vocab, images)


def epoch_batches(dataset, collate, epoch_seed: int, workers: int) -> list[dict]:
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(epoch_seed)).tolist()
    loader = DataLoader(dataset.for_epoch(epoch_seed), batch_size=5, sampler=order, collate_fn=collate,
                        num_workers=workers, generator=torch.Generator().manual_seed(epoch_seed))
    return list(loader)


@pytest.mark.parametrize("with_images", [False, True])
def test_batches_are_the_same_whatever_the_number_of_workers(tmp_path, with_images):
    dataset, collate = augmented_split(tmp_path, with_images)
    alone = epoch_batches(dataset, collate, 7, workers=0)
    for workers in (1, 2):
        torch.manual_seed(workers)   # the process's own stream must not matter either
        for a, b in zip(alone, epoch_batches(dataset, collate, 7, workers)):
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    tokens = torch.cat([torch.nn.functional.pad(b["tokens"], (0, 20 - b["tokens"].shape[1])) for b in alone])
    assert (tokens == dataset.augment.mask_id).any()   # words were masked: the draws are not a no-op
    other = epoch_batches(dataset, collate, 8, workers=0)   # another epoch draws anew
    assert any(not torch.equal(a["token_targets"], b["token_targets"]) for a, b in zip(alone, other))


def test_an_items_draws_leave_the_process_stream_where_it_was(tmp_path):
    dataset, _ = augmented_split(tmp_path, with_images=True)
    dataset.for_epoch(3)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    first = dataset[4]
    assert torch.equal(torch.get_rng_state(), before)   # the model's dropout stream is untouched
    again = dataset[4]
    assert first[1] == again[1] and torch.equal(first[2], again[2]) and first[4] == sample_seed(3, 4)


def test_an_items_draws_never_reseed_the_gpu_stream(tmp_path, monkeypatch):
    """Read in the main process (no workers), an item must not touch the CUDA generator that the
    model's dropout draws from on a GPU (torch.manual_seed would reseed it; fork_rng(devices=[])
    restores the CPU's only)."""
    reseeded = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: reseeded.append(seed))
    monkeypatch.setattr(torch.cuda, "manual_seed", lambda seed: reseeded.append(seed))
    dataset, collate = augmented_split(tmp_path, with_images=True)
    collate([dataset.for_epoch(3)[k] for k in (0, 7, 13)])
    assert reseeded == []


def test_loader_workers_follow_the_jobs_threads():
    assert loader_workers({"num_workers": 8}, 2) == 2
    assert loader_workers({"num_workers": 4}, 16) == 4
    assert loader_workers({"num_workers": 0}, 2) == 0
