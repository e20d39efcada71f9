"""Deterministic synthetic image-caption dataset, written in the Karpathy layout.

Scenes of 1..max_objects coloured shapes on textured backgrounds; five captions per image
from a grammar with synonyms, attributes, counts and spatial relations. Each caption of an
image focuses on a different object or aspect, so an image is matched by diverse captions
and a caption can fit several images (hard negatives exist).

``python -m methods.data.synthetic --config config/config.yaml --dataset synthetic --out DIR``
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw

from methods.cli import run_command
from methods.data.datasets import load_dataset_payload
from methods.data.text import tokenize
from methods.io import atomic_path, write_json

SHAPES = {  # canonical name -> synonyms used in captions
    "circle": ["circle", "disc", "round shape"],
    "square": ["square", "box", "block"],
    "triangle": ["triangle", "wedge"],
    "cross": ["cross", "plus sign"],
    "ring": ["ring", "hoop"],
    "bar": ["bar", "stick"],
}
PLURAL = {"circle": "circles", "square": "squares", "triangle": "triangles", "cross": "crosses",
          "ring": "rings", "bar": "bars"}
COLOURS = {  # canonical name -> (RGB, synonyms)
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
SIZES = {"small": (0.16, 0.24), "large": (0.32, 0.44)}
SIZE_WORDS = {"small": ["small", "little", "tiny"], "large": ["large", "big"]}
COUNT_WORDS = {1: "one", 2: "two", 3: "three", 4: "four"}
LABELS = [f"shape:{s}" for s in SHAPES] + [f"colour:{c}" for c in COLOURS]


@dataclass(frozen=True)
class SceneObject:
    shape: str
    colour: str
    size: str
    cx: float  # centre, in [0, 1]
    cy: float
    extent: float  # half-size, fraction of the image side

    def box(self, side: int) -> list[float]:
        r = self.extent * side
        return [self.cx * side - r, self.cy * side - r, self.cx * side + r, self.cy * side + r]

    def position_phrase(self) -> str:
        horiz = "left" if self.cx < 1 / 3 else "right" if self.cx > 2 / 3 else ""
        vert = "top" if self.cy < 1 / 3 else "bottom" if self.cy > 2 / 3 else ""
        if not horiz and not vert:
            return "in the centre"
        return f"at the {' '.join(p for p in (vert, horiz) if p)}"


def _sample_scene(rng: random.Random, max_objects: int) -> tuple[str, str, list[SceneObject]]:
    background = rng.choice(sorted(BACKGROUNDS))
    pattern = rng.choice(PATTERNS)
    n = rng.randint(1, max_objects)
    objects: list[SceneObject] = []
    for _ in range(200):  # rejection sampling keeps objects mostly apart
        if len(objects) == n:
            break
        size = rng.choice(sorted(SIZES))
        extent = rng.uniform(*SIZES[size]) / 2
        cx, cy = rng.uniform(extent, 1 - extent), rng.uniform(extent, 1 - extent)
        if any(math.hypot(cx - o.cx, cy - o.cy) < 0.8 * (extent + o.extent) for o in objects):
            continue
        colour = rng.choice([c for c in sorted(COLOURS) if c != background])
        objects.append(SceneObject(rng.choice(sorted(SHAPES)), colour, size, cx, cy, extent))
    return background, pattern, objects


def _render(background: str, pattern: str, objects: list[SceneObject], side: int, rng: random.Random) -> Image.Image:
    base = BACKGROUNDS[background]
    img = Image.new("RGB", (side, side), base)
    draw = ImageDraw.Draw(img)
    shade = tuple(max(0, min(255, v + (40 if sum(base) < 300 else -40))) for v in base)
    if pattern == "striped":
        step = max(4, side // 8)
        for x in range(-side, side, step):
            draw.line([(x, 0), (x + side, side)], fill=shade, width=max(1, step // 3))
    elif pattern == "dotted":
        step = max(4, side // 8)
        for y in range(step // 2, side, step):
            for x in range(step // 2, side, step):
                draw.ellipse([x - 1, y - 1, x + 1, y + 1], fill=shade)
    elif pattern == "noisy":
        px = img.load()
        for y in range(side):
            for x in range(side):
                d = rng.randint(-25, 25)
                px[x, y] = tuple(max(0, min(255, v + d)) for v in base)
    for obj in objects:
        rgb = COLOURS[obj.colour][0]
        x0, y0, x1, y1 = obj.box(side)
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
            draw.ellipse([x0, y0, x1, y1], outline=rgb, width=max(2, int(w / 5)))
        elif obj.shape == "bar":
            draw.rectangle([x0, y0 + w * 0.35, x1, y1 - w * 0.35], fill=rgb)
    return img


def _noun(obj: SceneObject, rng: random.Random, size: bool = False) -> str:
    words = [rng.choice(COLOURS[obj.colour][1]), rng.choice(SHAPES[obj.shape])]
    if size:
        words.insert(0, rng.choice(SIZE_WORDS[obj.size]))
    phrase = " ".join(words)
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def _relation(a: SceneObject, b: SceneObject) -> str:
    dx, dy = b.cx - a.cx, b.cy - a.cy
    if abs(dx) >= abs(dy):
        return "to the left of" if dx > 0 else "to the right of"
    return "above" if dy > 0 else "below"


def _captions(background: str, pattern: str, objects: list[SceneObject], rng: random.Random, n: int = 5) -> list[str]:
    """n captions, each from a different template/focus where the scene allows it."""
    bg = background if pattern == "plain" else f"{pattern} {background}"
    candidates: list[str] = []
    order = list(range(len(objects)))
    rng.shuffle(order)
    for i in order:  # one attribute caption per object
        obj = objects[i]
        candidates.append(f"{_noun(obj, rng, size=True)} {obj.position_phrase()}")
    for i in order:  # relations between pairs
        for j in order:
            if i != j:
                candidates.append(f"{_noun(objects[i], rng)} {_relation(objects[i], objects[j])} {_noun(objects[j], rng)}")
    shapes = sorted({o.shape for o in objects})
    for s in shapes:
        k = sum(o.shape == s for o in objects)
        noun = rng.choice(SHAPES[s]) if k == 1 else PLURAL[s]
        candidates.append(f"{COUNT_WORDS[k]} {noun} on a {bg} background")
    n_obj = len(objects)
    candidates.append(f"{COUNT_WORDS[n_obj]} {'shape' if n_obj == 1 else 'shapes'} on a {bg} background")
    if n_obj > 1:
        a, b = rng.sample(objects, 2)
        candidates.append(f"{_noun(a, rng)} and {_noun(b, rng)}")
    candidates.append(f"a {bg} picture with {_noun(rng.choice(objects), rng)}")
    # Keep the first attribute caption (the most specific), then pick the rest at random.
    first, rest = candidates[0], candidates[1:]
    rng.shuffle(rest)
    chosen = [first] + rest[: n - 1]
    while len(chosen) < n:  # tiny scenes: paraphrase with fresh synonyms
        chosen.append(f"{_noun(rng.choice(objects), rng, size=True)} on a {bg} background")
    return chosen


def generate(out_dir: str | Path, seed: int, image_size: int, max_objects: int, splits: dict[str, int]) -> None:
    """Write ``images/*.png``, ``dataset_synthetic.json`` (Karpathy layout, plus boxes and labels)."""
    out_dir = Path(out_dir)
    images_dir = out_dir / "images"
    images_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    entries = []
    sentid = 0
    imgid = 0
    for split in ("train", "val", "test"):
        for _ in range(splits[split]):
            background, pattern, objects = _sample_scene(rng, max_objects)
            img = _render(background, pattern, objects, image_size, rng)
            filename = f"synthetic_{imgid:06d}.png"
            with atomic_path(images_dir / filename, suffix=".png") as tmp:
                img.save(tmp, format="PNG", optimize=False)
            caps = _captions(background, pattern, objects, rng)
            sentences = [{"raw": c, "tokens": tokenize(c), "imgid": imgid, "sentid": sentid + k}
                         for k, c in enumerate(caps)]
            present = {f"shape:{o.shape}" for o in objects} | {f"colour:{o.colour}" for o in objects}
            entries.append({
                "imgid": imgid, "filename": filename, "split": split,
                "sentids": [s["sentid"] for s in sentences], "sentences": sentences,
                "boxes": [[round(v, 2) for v in o.box(image_size)] for o in objects],
                "box_labels": [{"shape": o.shape, "colour": o.colour, "size": o.size} for o in objects],
                "labels": [int(name in present) for name in LABELS],
                "background": background, "pattern": pattern,
            })
            sentid += len(sentences)
            imgid += 1
    write_json(out_dir / "dataset_synthetic.json",
               {"dataset": "synthetic", "label_names": LABELS, "seed": seed, "images": entries})


def _generate(args) -> None:
    cfg = load_dataset_payload(args.dataset_config)["dataset"]["generator"]
    generate(args.out, cfg["seed"], cfg["image_size"], cfg["max_objects"], cfg["splits"])


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, lambda p: p.add_argument("--out", required=True), _generate, argv)


if __name__ == "__main__":
    main()
