"""The harness at the size of the data it exists for: a fake MS-COCO of the real size
(tests/fullsize_coco.py: 123,287 images, 617,631 captions, 34 GB of region features as sparse
files), planned, prepared and trained for a few steps within bounded memory. Times are printed by
``python -m tests.fullsize_coco DEST --measure`` (a benchmark, not asserted here; docs/benchmarks.md,
"Full-size COCO")."""
import pytest

from tests.fullsize_coco import measure

GiB = 2 ** 30


@pytest.mark.e2e
def test_full_size_coco_is_planned_prepared_and_trained_within_bounded_memory(tmp_path):
    m = measure(tmp_path)
    for step in ("dry_run_first", "dry_run_cached", "data_jobs"):
        assert m[step].rc == 0, m[step].log[-3000:]
    # first sight: the Karpathy file parsed once (~1.5 GB of Python objects), the 33 GB feature file
    # scanned for NaN 64 MB at a time (a memory map of it grew the process to 16.6 GiB)
    assert m["dry_run_first"].peak_rss_bytes < 2 * GiB
    # checks cached: the Karpathy file's index, no parse (the parse alone needs ~1.5 GB), and no
    # torch (0.26 GiB measured; importing torch alone adds ~0.5 GiB)
    assert m["dry_run_cached"].peak_rss_bytes < 0.5 * GiB
    assert m["data_jobs"].peak_anon_bytes < 4 * GiB          # the vocabulary of 616,435 captions (5 per image)
    # PMRP: the val2014 instance annotations (291k polygons) parsed once, then both PMRP protocols on 5K
    for step in ("instance_categories", "pmrp"):
        assert m[step].rc == 0 and m[step].peak_anon_bytes < 4 * GiB, m[step].log[-3000:]
    train = m["training_steps"]
    assert train.rc == 2 and "checkpoint written" in train.log, train.log[-3000:]   # stopped by SIGTERM
    assert m["steps"] >= 1
    # the full training split memory-mapped, two loader workers, batches of 128 pairs
    assert train.peak_anon_tree_bytes < 4 * GiB and train.peak_anon_bytes < 4 * GiB
