"""A source checkpoint's tensors onto the project's model: every source tensor used exactly once,
every project tensor set exactly once, shapes and dtypes equal (no cast: the released files hold
the models' own float32 weights and int64 step counts), all checked before any tensor is used;
otherwise one line naming the key."""
from __future__ import annotations

import re
from typing import Mapping, Sequence

import torch

from methods.errors import HarnessError

Rules = Sequence[tuple[str, str]]   # (regex a whole source name matches, the project name: re.sub template)
Ignored = Sequence[tuple[str, str]]   # (regex of source names read and not kept, why nothing depends on them)


def torchvision_resnet_rules(prefix: str) -> list[tuple[str, str]]:
    """A torchvision ResNet's tensors under ``prefix`` (a regex: ``img_enc\\.cnn\\.``) onto the
    project's backbone, whose stem holds conv1, bn1, relu, maxpool and layer1."""
    return [(prefix + r"conv1\.weight", "backbone.stem.0.weight"),
            (prefix + r"bn1\.(\w+)", r"backbone.stem.1.\1"),
            (prefix + r"layer1\.(.+)", r"backbone.stem.4.\1"),
            (prefix + r"layer([234])\.(.+)", r"backbone.layer\1.\2")]


def pie_net_rules(source: str, target: str) -> list[tuple[str, str]]:
    """PVSE's PIENet (attention w_1, w_2, fc, layer_norm; PCME's copy names them alike) under
    ``source`` (a regex: ``img_enc\\.pie_net\\.``) onto the project's ``PIENet`` named ``target``."""
    return [(source + r"attention\.w_([12])\.weight", target + r".w\1.weight"),
            (source + r"fc\.(weight|bias)", target + r".fc.\1"),
            (source + r"layer_norm\.(weight|bias)", target + r".norm.\1")]


def project_name(source: str, rules: Rules) -> str | None:
    """The project name of a source tensor by the first rule whose pattern matches it whole."""
    for pattern, replacement in rules:
        if re.fullmatch(pattern, source):
            return re.sub(f"^(?:{pattern})$", replacement, source)
    return None


def map_tensors(source: Mapping[str, torch.Tensor], target: Mapping[str, torch.Tensor], rules: Rules,
                where: str, ignored: Ignored = ()) -> dict[str, torch.Tensor]:
    """``source`` renamed by ``rules`` into a state dict with exactly ``target``'s names, shapes and
    dtypes (``target``: the project model's own state dict). A source tensor matching an
    ``ignored`` pattern is read and not kept (the importer says why no score depends on it); a
    dtype other than the model's is refused."""
    out: dict[str, torch.Tensor] = {}
    origin: dict[str, str] = {}
    unplaced = []
    for key, tensor in source.items():
        if any(re.fullmatch(pattern, key) for pattern, _ in ignored):
            continue
        name = project_name(key, rules)
        if name is None:
            unplaced.append(key)
            continue
        if name not in target:
            raise HarnessError(f"{where}: tensor '{key}' maps to '{name}', which the project's model does not have")
        if name in out:
            raise HarnessError(f"{where}: tensors '{origin[name]}' and '{key}' both map to '{name}'")
        if not torch.is_tensor(tensor) or tuple(tensor.shape) != tuple(target[name].shape):
            shape = tuple(tensor.shape) if torch.is_tensor(tensor) else type(tensor).__name__
            raise HarnessError(f"{where}: tensor '{key}' has shape {shape}, but '{name}' of the project's model "
                               f"is {tuple(target[name].shape)}")
        wanted = target[name].dtype
        if tensor.dtype != wanted:
            raise HarnessError(f"{where}: tensor '{key}' is {str(tensor.dtype).removeprefix('torch.')}, but '{name}' "
                               f"of the project's model is {str(wanted).removeprefix('torch.')}; the importer "
                               f"converts no such file")
        out[name], origin[name] = tensor, key
    if unplaced:
        raise HarnessError(f"{where}: {len(unplaced)} tensors have no place in the project's model "
                           f"(e.g. '{unplaced[0]}'): the checkpoint holds parts this importer does not know")
    missing = [k for k in target if k not in out]
    if missing:
        raise HarnessError(f"{where}: the checkpoint sets no '{missing[0]}' of the project's model "
                           f"({len(missing)} tensors unset)")
    return out
