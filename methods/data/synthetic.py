"""Deterministic synthetic image-caption dataset whose captions can be checked against every image.

A scene is a background (colour and pattern) and 1..4 coloured shapes, each with a size and a
cell of a 3 x 3 grid (one object per cell). Every caption is generated from a *predicate* over
scenes, kept beside its text, so the generator knows exactly which images of a split each caption
truly describes: the synthetic counterpart of ECCV Caption / CxC for COCO (Chun et al., ECCV
2022). Predicate kinds (every caption names the background, which keeps captions specific):

- ``object``: "a large red circle at the top left on a plain gray background": some object has
  this shape, colour, size and cell;
- ``relation``: "a red circle to the left of a blue square on a ...": two distinct objects with
  these shapes and colours, the first in a column left of (a row above, ...) the second;
- ``pair``: "a small red circle and a large blue square on a ...": two distinct objects;
- ``inventory``: "two red circles and a blue square on a ...": for each (colour, shape) group
  named, exactly that many objects of the scene.

Scenes come in families: each base scene is followed by ``family_size - 1`` minimal edits of it
(one background attribute, or one attribute of one object: colour, shape, size or cell), so the
split holds near-misses that differ from a true match in exactly one attribute (hard negatives).

Writes ``images/*.png``, ``dataset_<name>.json`` (Karpathy layout plus boxes, labels and each
caption's predicate), ``positives_<name>.json`` (per split, every caption's true images) and
``stats.json`` (ambiguity, diversity and hard-negative share per split; ``split_statistics``).

``python -m methods.data.synthetic --dataset-config results/synthetic/dataset.json --out DIR``
"""
from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from methods.cli import run_command
from methods.data.datasets import load_dataset_payload
from methods.data.tokenizers import Tokenizer
from methods.io import atomic_path, write_json

SHAPES = {  # canonical name -> synonyms used in captions
    "circle": ["circle", "disc"],
    "square": ["square", "box"],
    "triangle": ["triangle", "wedge"],
    "cross": ["cross", "plus sign"],
    "ring": ["ring", "hoop"],
    "bar": ["bar", "stick"],
}
PLURAL = {"circle": "circles", "square": "squares", "triangle": "triangles", "cross": "crosses",
          "ring": "rings", "bar": "bars", "disc": "discs", "box": "boxes", "wedge": "wedges",
          "plus sign": "plus signs", "hoop": "hoops", "stick": "sticks"}
COLOURS = {  # canonical name -> (RGB, synonyms); none is a background colour
    "red": ((214, 39, 40), ["red", "crimson"]),
    "green": ((44, 160, 44), ["green"]),
    "blue": ((31, 90, 220), ["blue"]),
    "yellow": ((240, 210, 30), ["yellow", "golden"]),
    "purple": ((148, 60, 189), ["purple", "violet"]),
    "orange": ((255, 127, 14), ["orange"]),
    "white": ((245, 245, 245), ["white"]),
    "black": ((15, 15, 15), ["black"]),
}
BACKGROUNDS = {
    "gray": (120, 120, 120), "beige": (214, 198, 160), "teal": (38, 110, 112),
    "navy": (28, 36, 78), "pink": (232, 168, 190),
}
PATTERNS = ["plain", "striped", "dotted", "noisy"]
SIZES = {"small": (0.16, 0.21), "large": (0.26, 0.31)}  # side, fraction of the image side (a cell is 1/3)
SIZE_WORDS = {"small": ["small", "little"], "large": ["large", "big"]}
COUNT_WORDS = {1: "one", 2: "two", 3: "three", 4: "four"}
CELL_WORDS = {(0, 0): "at the top left", (0, 1): "at the top", (0, 2): "at the top right",
              (1, 0): "on the left", (1, 1): "in the centre", (1, 2): "on the right",
              (2, 0): "at the bottom left", (2, 1): "at the bottom", (2, 2): "at the bottom right"}
RELATIONS = {"left_of": "to the left of", "right_of": "to the right of", "above": "above", "below": "below"}
OBJECT_ATTRIBUTES = ("shape", "colour", "size", "cell")
SCENE_ATTRIBUTES = ("background", "pattern")
# Image labels (multi-hot): what the captions speak about, so that the backbone pre-trained on
# them encodes it, as BUTD's detector was trained on Visual Genome objects and attributes.
LABELS = ([f"shape:{s}" for s in SHAPES] + [f"colour:{c}" for c in COLOURS] + [f"size:{z}" for z in SIZES]
          + [f"object:{c} {s}" for c in COLOURS for s in SHAPES] + [f"cell:{r}{c}" for r, c in sorted(CELL_WORDS)]
          + [f"background:{b}" for b in BACKGROUNDS] + [f"pattern:{p}" for p in PATTERNS])
CAPTIONS_PER_IMAGE = 5
AMBIGUITY_BATCH = 128  # the batch of training images the ambiguity statistic refers to


@dataclass(frozen=True)
class SceneObject:
    shape: str
    colour: str
    size: str
    cell: tuple[int, int]  # (row, column) of the 3 x 3 grid

    def key(self) -> tuple:
        return (self.shape, self.colour, self.size, self.cell)


@dataclass(frozen=True)
class Scene:
    background: str
    pattern: str
    objects: tuple[SceneObject, ...]

    def description(self) -> tuple:
        """What captions can speak about (rendering jitter aside); equal descriptions, same scene."""
        return (self.background, self.pattern, frozenset(o.key() for o in self.objects))


# ---------------------------------------------------------------------------------------------
# Predicates: dicts (JSON-serialisable, written with each caption) evaluated on scenes.

def _matches(obj: SceneObject, spec: dict) -> bool:
    return all(getattr(obj, k) == (tuple(v) if k == "cell" else v) for k, v in spec.items())


def _relation_holds(relation: str, a: SceneObject, b: SceneObject) -> bool:
    (ra, ca), (rb, cb) = a.cell, b.cell
    return {"left_of": ca < cb, "right_of": ca > cb, "above": ra < rb, "below": ra > rb}[relation]


def holds(predicate: dict, scene: Scene) -> bool:
    """Whether a caption's predicate is true of a scene (the definition of a true match)."""
    if scene.background != predicate["background"] or scene.pattern != predicate["pattern"]:
        return False
    objects, kind = scene.objects, predicate["kind"]
    if kind == "object":
        return any(_matches(o, predicate["object"]) for o in objects)
    if kind in ("relation", "pair"):
        return any(_matches(a, predicate["a"]) and _matches(b, predicate["b"])
                   and (kind == "pair" or _relation_holds(predicate["relation"], a, b))
                   for a, b in itertools.permutations(objects, 2))
    if kind == "inventory":
        return all(sum(_matches(o, group["object"]) for o in objects) == group["count"]
                   for group in predicate["groups"])
    raise ValueError(f"unknown predicate kind '{kind}'")


def mentioned(predicate: dict, scene: Scene) -> frozenset[int]:
    """Indices of the scene's objects that a caption of it speaks about."""
    kind = predicate["kind"]
    if kind == "object":
        return frozenset(i for i, o in enumerate(scene.objects) if _matches(o, predicate["object"]))
    if kind in ("relation", "pair"):
        return frozenset(predicate["indices"])
    return frozenset(i for i, o in enumerate(scene.objects)
                     if any(_matches(o, g["object"]) for g in predicate["groups"]))


# ---------------------------------------------------------------------------------------------
# Scenes and their minimal edits.

def _sample_scene(rng: random.Random, min_objects: int, max_objects: int) -> Scene:
    n = rng.randint(min_objects, max_objects)
    cells = rng.sample(sorted(CELL_WORDS), n)
    objects = tuple(SceneObject(rng.choice(sorted(SHAPES)), rng.choice(sorted(COLOURS)), rng.choice(sorted(SIZES)),
                                cell) for cell in cells)
    return Scene(rng.choice(sorted(BACKGROUNDS)), rng.choice(PATTERNS), objects)


def _edit(scene: Scene, rng: random.Random) -> Scene:
    """The scene with exactly one attribute changed: half the time the background's colour or
    pattern (every caption names them), otherwise one attribute of one object."""
    if rng.random() < 0.5:
        if rng.random() < 0.5:
            return replace(scene, background=rng.choice([b for b in sorted(BACKGROUNDS) if b != scene.background]))
        return replace(scene, pattern=rng.choice([p for p in PATTERNS if p != scene.pattern]))
    k = rng.randrange(len(scene.objects))
    obj = scene.objects[k]
    taken = {o.cell for o in scene.objects}
    attribute = rng.choice(OBJECT_ATTRIBUTES if len(taken) < len(CELL_WORDS) else OBJECT_ATTRIBUTES[:3])
    choices = {"shape": [s for s in sorted(SHAPES) if s != obj.shape],
               "colour": [c for c in sorted(COLOURS) if c != obj.colour],
               "size": [s for s in sorted(SIZES) if s != obj.size],
               "cell": [c for c in sorted(CELL_WORDS) if c not in taken]}[attribute]
    objects = list(scene.objects)
    objects[k] = replace(obj, **{attribute: rng.choice(choices)})
    return replace(scene, objects=tuple(objects))


def one_edit_keys(scene: Scene) -> list[tuple]:
    """Keys shared by exactly the scenes that differ from this one in at most one attribute
    (the attribute replaced by a wildcard): two different scenes sharing a key are minimal edits."""
    objects = [o.key() for o in scene.objects]
    keys = [("background", scene.pattern, frozenset(objects)), ("pattern", scene.background, frozenset(objects))]
    for k, obj in enumerate(objects):
        rest = frozenset(objects[:k] + objects[k + 1:])
        for a, attribute in enumerate(OBJECT_ATTRIBUTES):
            wild = obj[:a] + ("*",) + obj[a + 1:]
            keys.append((attribute, scene.background, scene.pattern, rest, wild))
    return keys


# ---------------------------------------------------------------------------------------------
# Rendering.

def _render(scene: Scene, side: int, rng: random.Random) -> tuple[Image.Image, list[list[float]]]:
    base = BACKGROUNDS[scene.background]
    img = Image.new("RGB", (side, side), base)
    draw = ImageDraw.Draw(img)
    shade = tuple(max(0, min(255, v + (40 if sum(base) < 300 else -40))) for v in base)
    if scene.pattern == "striped":
        step = max(4, side // 8)
        for x in range(-side, side, step):
            draw.line([(x, 0), (x + side, side)], fill=shade, width=max(1, step // 3))
    elif scene.pattern == "dotted":
        step = max(4, side // 8)
        for y in range(step // 2, side, step):
            for x in range(step // 2, side, step):
                draw.ellipse([x - 1, y - 1, x + 1, y + 1], fill=shade)
    elif scene.pattern == "noisy":
        noise = np.random.default_rng(rng.getrandbits(32)).integers(-25, 26, (side, side, 1))
        img = Image.fromarray(np.clip(np.asarray(base) + noise, 0, 255).astype(np.uint8), "RGB")
        draw = ImageDraw.Draw(img)
    boxes = []
    for obj in scene.objects:
        row, col = obj.cell
        half = rng.uniform(*SIZES[obj.size]) * side / 2
        slack = side / 6 - half  # keep the object inside its cell
        cx = (col + 0.5) * side / 3 + rng.uniform(-slack, slack)
        cy = (row + 0.5) * side / 3 + rng.uniform(-slack, slack)
        x0, y0, x1, y1 = cx - half, cy - half, cx + half, cy + half
        boxes.append([round(v, 2) for v in (x0, y0, x1, y1)])
        rgb = COLOURS[obj.colour][0]
        w = x1 - x0
        if obj.shape == "circle":
            draw.ellipse([x0, y0, x1, y1], fill=rgb)
        elif obj.shape == "square":
            draw.rectangle([x0, y0, x1, y1], fill=rgb)
        elif obj.shape == "triangle":
            draw.polygon([(x0 + w / 2, y0), (x1, y1), (x0, y1)], fill=rgb)
        elif obj.shape == "cross":
            t = w / 3
            draw.rectangle([x0 + t, y0, x1 - t, y1], fill=rgb)
            draw.rectangle([x0, y0 + t, x1, y1 - t], fill=rgb)
        elif obj.shape == "ring":
            draw.ellipse([x0, y0, x1, y1], outline=rgb, width=max(2, int(w / 4)))
        elif obj.shape == "bar":
            draw.rectangle([x0, y0 + w * 0.3, x1, y1 - w * 0.3], fill=rgb)
    return img, boxes


# ---------------------------------------------------------------------------------------------
# Captions: a predicate of the scene and a sentence saying it (synonyms vary, the predicate not).

def _article(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def _noun(spec: dict, rng: random.Random) -> str:
    words = [rng.choice(COLOURS[spec["colour"]][1]), rng.choice(SHAPES[spec["shape"]])]
    if "size" in spec:
        words.insert(0, rng.choice(SIZE_WORDS[spec["size"]]))
    return " ".join(words)


def _background_phrase(scene: Scene) -> str:
    return f"on a {scene.pattern} {scene.background} background"


def _object_caption(scene: Scene, i: int, rng: random.Random) -> tuple[dict, str]:
    obj = scene.objects[i]
    spec = {"shape": obj.shape, "colour": obj.colour, "size": obj.size, "cell": list(obj.cell)}
    text = f"{_article(_noun(spec, rng))} {CELL_WORDS[obj.cell]} {_background_phrase(scene)}"
    return {"kind": "object", "object": spec, "background": scene.background, "pattern": scene.pattern}, text


def _relation_caption(scene: Scene, i: int, j: int, rng: random.Random) -> tuple[dict, str]:
    a, b = scene.objects[i], scene.objects[j]
    true = [r for r in RELATIONS if _relation_holds(r, a, b)]
    relation = rng.choice(true)
    spec_a, spec_b = ({"shape": o.shape, "colour": o.colour} for o in (a, b))
    text = (f"{_article(_noun(spec_a, rng))} {RELATIONS[relation]} {_article(_noun(spec_b, rng))} "
            f"{_background_phrase(scene)}")
    return {"kind": "relation", "a": spec_a, "b": spec_b, "relation": relation, "indices": [i, j],
            "background": scene.background, "pattern": scene.pattern}, text


def _pair_caption(scene: Scene, i: int, j: int, rng: random.Random) -> tuple[dict, str]:
    spec_a, spec_b = ({"shape": o.shape, "colour": o.colour, "size": o.size} for o in (scene.objects[i], scene.objects[j]))
    text = f"{_article(_noun(spec_a, rng))} and {_article(_noun(spec_b, rng))} {_background_phrase(scene)}"
    return {"kind": "pair", "a": spec_a, "b": spec_b, "indices": [i, j],
            "background": scene.background, "pattern": scene.pattern}, text


def _inventory_caption(scene: Scene, rng: random.Random) -> tuple[dict, str]:
    counts = Counter((o.colour, o.shape) for o in scene.objects)
    groups = [{"object": {"shape": s, "colour": c}, "count": k} for (c, s), k in sorted(counts.items())]
    rng.shuffle(groups)
    phrases = []
    for g in groups:
        colour = rng.choice(COLOURS[g["object"]["colour"]][1])
        noun = rng.choice(SHAPES[g["object"]["shape"]])
        phrases.append(_article(f"{colour} {noun}") if g["count"] == 1
                       else f"{COUNT_WORDS[g['count']]} {colour} {PLURAL[noun]}")
    listed = phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]
    return {"kind": "inventory", "groups": groups, "background": scene.background, "pattern": scene.pattern}, \
        f"{listed} {_background_phrase(scene)}"


def _captions(scene: Scene, rng: random.Random, n: int = CAPTIONS_PER_IMAGE) -> list[tuple[dict, str]]:
    """``n`` captions that speak about different objects where the scene allows it: up to three
    single objects, one relation (or pair) that brings in an object not yet named where there is
    one, the inventory of scenes of three or more objects; then, for small scenes, the same facts
    in other words."""
    order = list(range(len(scene.objects)))
    rng.shuffle(order)
    chosen = [_object_caption(scene, i, rng) for i in order[:3]]
    if len(order) >= 2:
        i, j = (order[3], order[0]) if len(order) > 3 else tuple(rng.sample(order, 2))
        chosen.append(_relation_caption(scene, i, j, rng) if rng.random() < 0.7 else _pair_caption(scene, i, j, rng))
    if len(order) >= 3:
        chosen.append(_inventory_caption(scene, rng))
    texts = {t for _, t in chosen}
    for _ in range(200):
        if len(chosen) >= n:
            break
        predicate, text = (_object_caption(scene, rng.choice(order), rng) if rng.random() < 0.8
                           else _inventory_caption(scene, rng))
        if text not in texts:
            chosen.append((predicate, text))
            texts.add(text)
    if len(chosen) < n:
        raise ValueError(f"cannot word {n} different captions for scene {scene}")
    rng.shuffle(chosen)
    return chosen[:n]


# ---------------------------------------------------------------------------------------------
# Extended positives and statistics.

def caption_positives(predicates: list[dict], scenes: list[Scene]) -> list[list[int]]:
    """For each predicate, the indices of the scenes it is true of. Every predicate names the
    background, so only scenes with the same background and pattern are evaluated."""
    by_background = defaultdict(list)
    for index, scene in enumerate(scenes):
        by_background[(scene.background, scene.pattern)].append(index)
    return [[i for i in by_background[(p["background"], p["pattern"])] if holds(p, scenes[i])] for p in predicates]


def _jaccard(a: frozenset, b: frozenset) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def split_statistics(scenes: list[Scene], predicates: list[list[dict]], positives: list[list[int]]) -> dict:
    """Ambiguity, diversity and hard negatives of one split (scenes, each image's caption
    predicates, each caption's true images, captions image-major).

    - ambiguity: mean over captions of the expected number of *other* true images in a random
      batch of 128 images of the split holding the caption's own: (|positives| - 1) * 127 / (N - 1);
    - diversity: over images with two or more objects, the mean over pairs of its captions of the
      Jaccard overlap of the sets of objects the two captions mention (image mean, then mean);
    - hard negatives: the share of captions for which the split holds an image that is no true
      match but differs from a true match in exactly one attribute (``one_edit_keys``).
    """
    n = len(scenes)
    neighbours: dict[tuple, set[int]] = defaultdict(set)
    for index, scene in enumerate(scenes):
        for key in one_edit_keys(scene):
            neighbours[key].add(index)
    descriptions = [scene.description() for scene in scenes]
    near_misses = [{j for key in one_edit_keys(scene) for j in neighbours[key] if descriptions[j] != descriptions[i]}
                   for i, scene in enumerate(scenes)]   # per image, once: captions share their images
    n_captions = sum(len(preds) for preds in predicates)
    if n_captions != len(positives):
        raise ValueError(f"{n_captions} captions but {len(positives)} lists of true images")
    ambiguity = [(len(pos) - 1) * (min(AMBIGUITY_BATCH, n) - 1) / max(n - 1, 1) for pos in positives]
    hard = []
    for pos in positives:
        true = set(pos)
        hard.append(any(j not in true for i in pos for j in near_misses[i]))
    diversity = []
    for img, preds in enumerate(predicates):
        if len(scenes[img].objects) >= 2:
            sets = [mentioned(p, scenes[img]) for p in preds]
            diversity.append(sum(_jaccard(a, b) for a, b in itertools.combinations(sets, 2))
                             / (len(sets) * (len(sets) - 1) / 2))
    mean = lambda values: float(sum(values) / len(values)) if values else float("nan")  # noqa: E731
    return {"images": n, "captions": n_captions, "ambiguity": mean(ambiguity),
            "captions_with_other_true_images": mean([len(p) > 1 for p in positives]),
            "mean_true_images_per_caption": mean([len(p) for p in positives]),
            "diversity": mean(diversity), "hard_negative_share": mean(hard)}


TARGETS = {"ambiguity": ("<=", 0.1), "diversity": ("<=", 0.5), "hard_negative_share": (">=", 0.5)}


def meets_targets(stats: dict) -> dict[str, bool]:
    return {k: (stats[k] <= v if op == "<=" else stats[k] >= v) for k, (op, v) in TARGETS.items()}


# ---------------------------------------------------------------------------------------------

def _scenes(rng: random.Random, count: int, min_objects: int, max_objects: int, family_size: int) -> list[Scene]:
    """Families of a base scene and ``family_size - 1`` single edits of it (all distinct)."""
    scenes: list[Scene] = []
    while len(scenes) < count:
        family = [_sample_scene(rng, min_objects, max_objects)]
        while len(family) < min(family_size, count - len(scenes)):
            edited = _edit(family[0], rng)
            if all(edited.description() != s.description() for s in family):
                family.append(edited)
        scenes.extend(family)
    return scenes


def generate(out_dir: str | Path, seed: int, image_size: int, max_objects: int, splits: dict[str, int], *,
             min_objects: int, family_size: int, tokenizer: Tokenizer, name: str = "synthetic") -> dict:
    """Write the dataset (see the module doc) and return the per-split statistics; ``tokenizer``
    writes each sentence's ``tokens`` (the Karpathy layout's field; the harness reads ``raw``)."""
    out_dir = Path(out_dir)
    images_dir = out_dir / "images"
    images_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    entries, positives, stats = [], {}, {}
    sentid = imgid = 0
    for split in ("train", "val", "test"):
        scenes = _scenes(rng, splits[split], min_objects, max_objects, family_size)
        first_imgid, first_sentid = imgid, sentid
        split_predicates = []
        for scene in scenes:
            img, boxes = _render(scene, image_size, rng)
            filename = f"{name}_{imgid:06d}.png"
            with atomic_path(images_dir / filename, suffix=".png") as tmp:
                img.save(tmp, format="PNG", optimize=False)
            captions = _captions(scene, rng)
            split_predicates.append([p for p, _ in captions])
            sentences = [{"raw": text, "tokens": tokenizer(text), "imgid": imgid, "sentid": sentid + k,
                          "predicate": {k2: v for k2, v in p.items() if k2 != "indices"}}
                         for k, (p, text) in enumerate(captions)]
            present = ({f"background:{scene.background}", f"pattern:{scene.pattern}"}
                       | {f"{k}:{v}" for o in scene.objects for k, v in
                          (("shape", o.shape), ("colour", o.colour), ("size", o.size),
                           ("object", f"{o.colour} {o.shape}"), ("cell", "%d%d" % o.cell))})
            entries.append({
                "imgid": imgid, "filename": filename, "split": split,
                "sentids": [s["sentid"] for s in sentences], "sentences": sentences, "boxes": boxes,
                "box_labels": [{"shape": o.shape, "colour": o.colour, "size": o.size, "cell": list(o.cell)}
                               for o in scene.objects],
                "labels": [int(label in present) for label in LABELS],
                "background": scene.background, "pattern": scene.pattern,
            })
            sentid += len(sentences)
            imgid += 1
        flat = [p for preds in split_predicates for p in preds]
        found = caption_positives(flat, scenes)
        for k, pos in enumerate(found):
            if k // CAPTIONS_PER_IMAGE not in pos:
                raise AssertionError(f"caption {first_sentid + k} is not true of its own image")
        positives[split] = {"caption_images": {str(first_sentid + k): [first_imgid + i for i in pos]
                                               for k, pos in enumerate(found)}}
        stats[split] = split_statistics(scenes, split_predicates, found)
    write_json(out_dir / f"dataset_{name}.json",
               {"dataset": name, "label_names": LABELS, "seed": seed, "images": entries})
    write_json(out_dir / f"positives_{name}.json", {
        "dataset": name, "splits": positives,
        "definition": "every image of the caption's split of which the caption's predicate is true "
                      "(methods.data.synthetic.holds), its own image included"})
    # The targets are for the split training batches are drawn from; in the small val and test
    # splits a batch is most of the split, so their ambiguity counts nearly every sibling.
    write_json(out_dir / "stats.json", {"dataset": name, "targets": {k: f"{op} {v}" for k, (op, v) in TARGETS.items()},
                                        "train_meets_targets": meets_targets(stats["train"]), "splits": stats})
    return stats


def _generate(args) -> None:
    payload = load_dataset_payload(args.dataset_config)
    cfg = payload.dataset["generator"]
    stats = generate(args.out, cfg["seed"], cfg["image_size"], cfg["max_objects"], cfg["splits"],
                     min_objects=cfg["min_objects"], family_size=cfg["family_size"],
                     tokenizer=payload.tokenizer(), name=payload.name)
    for split, s in stats.items():
        print(f"{split}: {s['images']} images, {s['captions']} captions; ambiguity {s['ambiguity']:.3f}, "
              f"diversity {s['diversity']:.3f}, hard negatives {s['hard_negative_share']:.3f}; "
              f"{s['mean_true_images_per_caption']:.2f} true images per caption")
    print("training split meets the targets (ambiguity <= 0.1, diversity <= 0.5, hard negatives >= 0.5): "
          + ", ".join(f"{k} {'yes' if ok else 'NO'}" for k, ok in meets_targets(stats["train"]).items()))


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, lambda p: p.add_argument("--out", required=True), _generate, argv)


if __name__ == "__main__":
    main()
