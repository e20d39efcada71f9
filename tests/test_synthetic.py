"""The synthetic dataset: captions are predicates whose true images are known exactly, and the
generated splits are specific enough for hardest negatives, diverse and full of near-misses."""
import itertools
import json
import random

import pytest
import yaml

from methods.config import REPO_ROOT
from methods.data.tokenizers import Tokenizer
from methods.data.synthetic import (Scene, SceneObject, TARGETS, _edit, _sample_scene, generate, holds,
                                    one_edit_keys, split_statistics)


def _scene(background, pattern, *objects):
    return Scene(background, pattern, tuple(SceneObject(s, c, z, cell) for s, c, z, cell in objects))


# Two objects: a large red circle top-left (0, 0), a small blue square centre-right (1, 2).
SCENE = _scene("gray", "plain", ("circle", "red", "large", (0, 0)), ("square", "blue", "small", (1, 2)))
BG = {"background": "gray", "pattern": "plain"}


@pytest.mark.parametrize("predicate, expected", [
    ({"kind": "object", "object": {"shape": "circle", "colour": "red", "size": "large", "cell": [0, 0]}, **BG}, True),
    ({"kind": "object", "object": {"shape": "circle", "colour": "red", "size": "small", "cell": [0, 0]}, **BG}, False),
    ({"kind": "object", "object": {"shape": "circle", "colour": "red", "size": "large", "cell": [0, 0]},
      "background": "gray", "pattern": "striped"}, False),
    # the circle is in column 0, the square in column 2: left of, not right of; row 0 above row 1
    ({"kind": "relation", "a": {"shape": "circle", "colour": "red"}, "b": {"shape": "square", "colour": "blue"},
      "relation": "left_of", **BG}, True),
    ({"kind": "relation", "a": {"shape": "circle", "colour": "red"}, "b": {"shape": "square", "colour": "blue"},
      "relation": "right_of", **BG}, False),
    ({"kind": "relation", "a": {"shape": "circle", "colour": "red"}, "b": {"shape": "square", "colour": "blue"},
      "relation": "above", **BG}, True),
    ({"kind": "relation", "a": {"shape": "square", "colour": "blue"}, "b": {"shape": "circle", "colour": "red"},
      "relation": "below", **BG}, True),
    # a pair needs two distinct objects: one red circle cannot be both
    ({"kind": "pair", "a": {"shape": "circle", "colour": "red", "size": "large"},
      "b": {"shape": "circle", "colour": "red", "size": "large"}, **BG}, False),
    ({"kind": "pair", "a": {"shape": "square", "colour": "blue", "size": "small"},
      "b": {"shape": "circle", "colour": "red", "size": "large"}, **BG}, True),
    # counts are exact
    ({"kind": "inventory", "groups": [{"object": {"shape": "circle", "colour": "red"}, "count": 1}], **BG}, True),
    ({"kind": "inventory", "groups": [{"object": {"shape": "circle", "colour": "red"}, "count": 2}], **BG}, False),
    ({"kind": "inventory", "groups": [{"object": {"shape": "circle", "colour": "red"}, "count": 1},
                                      {"object": {"shape": "square", "colour": "green"}, "count": 1}], **BG}, False),
])
def test_predicates_on_a_hand_built_scene(predicate, expected):
    assert holds(predicate, SCENE) is expected


def _independent_truth(predicate: dict, entry: dict) -> bool:
    """A caption's truth on an image, read from the Karpathy entry's fields (not the generator's code)."""
    if (entry["background"], entry["pattern"]) != (predicate["background"], predicate["pattern"]):
        return False
    objects = entry["box_labels"]
    fits = lambda o, spec: all(o[k] == spec[k] for k in spec)  # noqa: E731
    if predicate["kind"] == "object":
        return any(fits(o, predicate["object"]) for o in objects)
    if predicate["kind"] == "inventory":
        return all(len([o for o in objects if fits(o, g["object"])]) == g["count"] for g in predicate["groups"])
    for i, a in enumerate(objects):
        for j, b in enumerate(objects):
            if i == j or not fits(a, predicate["a"]) or not fits(b, predicate["b"]):
                continue
            if predicate["kind"] == "pair":
                return True
            (ra, ca), (rb, cb) = a["cell"], b["cell"]
            if {"left_of": ca < cb, "right_of": ca > cb, "above": ra < rb, "below": ra > rb}[predicate["relation"]]:
                return True
    return False


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    stats = generate(out, 11, 48, 4, {"train": 90, "val": 20, "test": 30}, min_objects=1, family_size=2,
                     tokenizer=Tokenizer("nltk_line"))
    data = json.loads((out / "dataset_synthetic.json").read_text())
    positives = json.loads((out / "positives_synthetic.json").read_text())
    return data, positives, stats


def test_extended_positives_equal_a_brute_force_over_every_image(small_dataset):
    data, positives, _ = small_dataset
    for split in ("train", "val", "test"):
        entries = [e for e in data["images"] if e["split"] == split]
        written = positives["splits"][split]["caption_images"]
        assert len(written) == 5 * len(entries)
        for entry in entries:
            for sentence in entry["sentences"]:
                truth = [e["imgid"] for e in entries if _independent_truth(sentence["predicate"], e)]
                assert written[str(sentence["sentid"])] == truth
                assert entry["imgid"] in truth


def test_every_image_has_five_different_captions_naming_its_background(small_dataset):
    data, _, _ = small_dataset
    for entry in data["images"]:
        raws = [s["raw"] for s in entry["sentences"]]
        assert len(set(raws)) == 5
        assert all(f"{entry['pattern']} {entry['background']} background" in r for r in raws)


def _differs_in_one_attribute(a: Scene, b: Scene) -> bool:
    """Brute force: same background and pattern with one object changed in one attribute, or the
    same objects with exactly one of background and pattern changed."""
    same_objects = {o.key() for o in a.objects} == {o.key() for o in b.objects}
    if same_objects:
        return (a.background != b.background) + (a.pattern != b.pattern) == 1
    if (a.background, a.pattern) != (b.background, b.pattern) or len(a.objects) != len(b.objects):
        return False
    only_a = {o.key() for o in a.objects} - {o.key() for o in b.objects}
    only_b = {o.key() for o in b.objects} - {o.key() for o in a.objects}
    if len(only_a) != 1 or len(only_b) != 1:
        return False
    (x,), (y,) = only_a, only_b
    return sum(u != v for u, v in zip(x, y)) == 1


def test_one_edit_keys_find_exactly_the_single_attribute_edits():
    rng = random.Random(0)
    scenes = []
    for _ in range(40):
        base = _sample_scene(rng, 1, 4)
        scenes += [base, _edit(base, rng), _edit(_edit(base, rng), rng)]
    for a, b in itertools.combinations(scenes, 2):
        shared = set(one_edit_keys(a)) & set(one_edit_keys(b))
        expected = _differs_in_one_attribute(a, b)
        assert (bool(shared) and a.description() != b.description()) == expected, (a, b)


def test_statistics_on_a_hand_built_split():
    red = ("circle", "red", "large", (0, 0))
    scenes = [_scene("gray", "plain", red), _scene("gray", "plain", ("circle", "blue", "large", (0, 0))),
              _scene("pink", "dotted", ("ring", "white", "small", (2, 2)))]
    obj = lambda s, c, z, cell, bg, pat: {"kind": "object", "object": {"shape": s, "colour": c, "size": z,  # noqa
                                                                          "cell": list(cell)},
                                          "background": bg, "pattern": pat}
    red_caption = obj("circle", "red", "large", (0, 0), "gray", "plain")
    predicates = [[red_caption], [obj("circle", "blue", "large", (0, 0), "gray", "plain")],
                  [obj("ring", "white", "small", (2, 2), "pink", "dotted")]]
    positives = [[0], [1], [2]]
    stats = split_statistics(scenes, predicates, positives)
    # scenes 0 and 1 differ in one colour: captions 0 and 1 have a near-miss, caption 2 has none
    assert stats["hard_negative_share"] == pytest.approx(2 / 3)
    assert stats["ambiguity"] == 0.0
    # a caption true of two of three images: one other true image, batch of min(128, 3) = 3 -> 1 * 2 / 2
    stats = split_statistics(scenes, predicates, [[0, 1], [1], [2]])
    assert stats["ambiguity"] == pytest.approx((1 * 2 / 2) / 3)
    assert stats["captions_with_other_true_images"] == pytest.approx(1 / 3)


def test_the_configured_dataset_meets_its_targets(tmp_path):
    """The shipped generator settings: ambiguity <= 0.1, diversity <= 0.5, hard negatives >= 0.5
    on the training split (the split batches are drawn from)."""
    cfg = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())["datasets"]["synthetic"]["generator"]
    stats = generate(tmp_path, cfg["seed"], 32, cfg["max_objects"], {**cfg["splits"], "val": 2, "test": 2},
                     min_objects=cfg["min_objects"], family_size=cfg["family_size"], tokenizer=Tokenizer("nltk_line"))
    train = stats["train"]
    assert train["images"] == cfg["splits"]["train"]
    for key, (op, bound) in TARGETS.items():
        assert (train[key] <= bound) if op == "<=" else (train[key] >= bound), (key, train[key])
    written = json.loads((tmp_path / "stats.json").read_text())
    assert written["splits"]["train"]["ambiguity"] == pytest.approx(train["ambiguity"])
