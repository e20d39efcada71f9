"""Evaluation views of set models: a trained model scored with only some elements of its image
or text sets (Kim, Kim, Kwak, CVPR 2023, Table 5). A paper row declares
``evaluation: {image_elements: [0], text_elements: [1, 2]}`` (0-based slot indices; an absent
side keeps all of its elements); the view's name (``i0_t1-2``, ``all`` for neither) names the
row's evaluation files (``eval_<split>@<view>.json``) beside the run's own, so a view re-uses the
trained model instead of training it again.
"""
from __future__ import annotations

import re

from methods.errors import HarnessError

SIDES = {"image_elements": "i", "text_elements": "t"}
_PART = re.compile(r"^([it])(all|\d+(?:-\d+)*)$")


def view_name(evaluation: dict) -> str:
    parts = []
    for key, letter in SIDES.items():
        indices = evaluation.get(key)
        parts.append(f"{letter}all" if indices is None else letter + "-".join(str(i) for i in indices))
    return "_".join(parts)


def parse_view(name: str) -> dict[str, list[int] | None]:
    """``i0_tall`` -> {image_elements: [0], text_elements: None}; a malformed name is an error."""
    out: dict[str, list[int] | None] = {}
    parts = name.split("_")
    letters = {v: k for k, v in SIDES.items()}
    for part in parts:
        match = _PART.match(part)
        if not match or letters[match.group(1)] in out:
            raise HarnessError(f"evaluation view '{name}': expected i<indices|all>_t<indices|all>, e.g. i0-2_tall")
        out[letters[match.group(1)]] = None if match.group(2) == "all" else [int(i) for i in match.group(2).split("-")]
    if set(out) != set(SIDES):
        raise HarnessError(f"evaluation view '{name}': expected i<indices|all>_t<indices|all>, e.g. i0-2_tall")
    return out


def check_elements(evaluation: dict, set_sizes: tuple[int, int], where: str) -> None:
    """Indices within the set sizes (image, text), distinct, and not empty."""
    for (key, _), size in zip(SIDES.items(), set_sizes):
        indices = evaluation.get(key)
        if indices is None:
            continue
        if not indices or len(set(indices)) != len(indices) or any(i < 0 or i >= size for i in indices):
            raise HarnessError(f"{where}: evaluation.{key} {indices}: distinct element indices in 0..{size - 1} "
                               f"(the model's sets have {size} elements)")
