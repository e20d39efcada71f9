"""Each registered model kind's oracles, found by its name: ``tests/oracles/<kind>.py`` of the
repository, or of the plug-in folder that adds the model (``methods.plugins``: the package's path
takes in each folder's ``tests/oracles``). The generic tests parametrize over the registry and ask
this module for each kind's oracle, so a model registered without one fails until it exists:

- ``float64_cases()`` (``tests/test_float64.py``): (label, float64 model in eval mode, image
  inputs, per-pair reference) tuples; the reference writes the public code's equations out one
  (image, caption) pair at a time (``tests.oracles._float64`` has the shared pieces);
- ``DESCRIPTIONS`` (``tests/test_descriptions.py``): (run config, dataset config block, the
  description written by hand) for small hand-built configs (``tests.oracles._descriptions``);
- optionally ``SOURCE_BEHAVIOUR`` (``tests/test_fidelity.py``): method file -> the keys its public
  code fixes, written from that code, with ``PER_DATASET`` and ``ROW_FACTORS`` where they apply.
"""
import importlib
from types import ModuleType

from methods.model_kinds import MODEL_KINDS
from methods.plugins import plugin_folders

__path__ += [str(folder / "tests" / "oracles") for folder in plugin_folders()]   # noqa: F821 (a package's path)


def oracle_of(kind: str) -> ModuleType:
    """The oracle module of model kind ``kind``; an AssertionError naming the file it lacks."""
    try:
        return importlib.import_module(f"{__name__}.{kind}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{kind}":
            raise
        raise AssertionError(f"model '{kind}' is registered but has no oracle file tests/oracles/{kind}.py "
                             f"(in the repository or its plug-in folder)") from None


def oracle_part(kind: str, part: str):
    """``part`` of kind ``kind``'s oracle; an AssertionError naming what it lacks."""
    oracle = oracle_of(kind)
    if not hasattr(oracle, part):
        raise AssertionError(f"model '{kind}' is registered but its oracle {oracle.__file__} has no {part}")
    return getattr(oracle, part)


def merged_oracle_parts(part: str) -> dict:
    """The dicts named ``part`` of every registered kind's oracle that has one, merged (a key that
    two oracles give is an error); a kind without an oracle file is left to the tests that need one."""
    merged = {}
    for kind in MODEL_KINDS.names():
        try:
            oracle = oracle_of(kind)
        except AssertionError:
            continue
        for key, value in getattr(oracle, part, {}).items():
            if key in merged:
                raise AssertionError(f"{part}[{key!r}] is given by two oracles (one is {oracle.__file__})")
            merged[key] = value
    return merged
