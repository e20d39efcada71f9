"""What a row runs, set against the public code that produced the number it is judged by.

A method file's ``source`` block names that code, how it tokenises captions (``tokenizer``: a
dataset-level choice, ``datasets.<name>.tokenizer``, so a row on a dataset of captions tokenised
otherwise lists it as a deviation), and lists
- ``switches``: config keys whose value the source code fixes (``value``; ``by_dataset`` where
  it differs per dataset), with what the source does (``behaviour``). A row whose resolved
  config runs another value shows the switch in its deviation ledger. A key the method schema
  makes optional names the value a config without it runs (``absent``).
- ``deviations``: behaviours of the source code that the harness does not reproduce and has no
  switch for (``source``, ``ours``, ``why``). They are in the ledger of every row of the method.

A variant's ``source`` block updates the method's: another ``code`` (a variant that trains what
another public code trained, e.g. the metric-learning study's copy of VSE++), other switch
values, further deviations, ``null`` for a switch or deviation that does not apply to it. A
synthetic dataset is compared with the source's behaviour on the dataset it stands in for.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from methods.config import deep_merge, dotted_value, load_yaml, validate
from methods.errors import HarnessError


NO_DEFAULT = object()   # a switch whose key every resolved config holds


@dataclass(frozen=True)
class Switch:
    name: str
    key: str            # dotted config key, e.g. model.region_l2norm
    value: object       # what the source code runs
    behaviour: str      # what that value does, with the citation
    absent: object = NO_DEFAULT   # what a config without the key runs (an optional model key's default)


@dataclass(frozen=True)
class Deviation:
    name: str
    source: str         # what the source code does
    ours: str           # what the harness does instead
    why: str


@dataclass(frozen=True)
class SourceLedger:
    code: str
    tokenizer: str              # methods.data.tokenizers.TOKENIZERS
    tokenizer_behaviour: str
    switches: tuple[Switch, ...]
    deviations: tuple[Deviation, ...]


# Switches at which every source runs the same value: the harness's own options, off for every row
# that reproduces a source, listed with a row that runs them on.
HARNESS_SWITCHES = (
    Switch("length_buckets", "training.length_buckets", None,
           "random batches: every public code draws its batches from a shuffled DataLoader, whatever "
           "the captions' lengths (the MVSA paper, with no public code, describes nothing else)"),
)


def load_method_file(path: str | Path) -> dict:
    """A method file, validated before any of its layers is resolved."""
    return validate(load_yaml(path), "method_file", str(path))


def source_ledger(raw: dict, variants: list[str] | None, dataset: str) -> SourceLedger:
    """The source code's behaviour for a method file with these variants on ``dataset``."""
    block = raw["source"]
    for name in variants or []:
        update = (raw.get("variants") or {}).get(name, {}).get("source") or {}
        block = deep_merge(block, update)
        for switch, changed in (update.get("switches") or {}).items():
            if changed and "value" in changed and "by_dataset" not in changed and block["switches"][switch]:
                block["switches"][switch].pop("by_dataset", None)  # a new value replaces the per-dataset ones too
    for name, sw in block["switches"].items():
        if sw is not None and not {"key", "value", "behaviour"} <= set(sw):
            raise HarnessError(f"method '{raw['method']}': source switch '{name}' needs key, value and behaviour "
                               f"(a variant may only change the value of a switch the method declares)")
    switches = HARNESS_SWITCHES + tuple(
        Switch(name, s["key"], (s.get("by_dataset") or {}).get(dataset, s["value"]), s["behaviour"],
               s.get("absent", NO_DEFAULT))
        for name, s in block["switches"].items() if s is not None)
    deviations = tuple(Deviation(name, d["source"], d["ours"], d["why"]) for name, d in block["deviations"].items()
                       if d is not None and dataset in d.get("datasets", [dataset]))
    return SourceLedger(block["code"], block["tokenizer"]["value"], block["tokenizer"]["behaviour"], switches, deviations)


def tokenizer_deviation(dataset: str, ds_cfg: dict, ledger: SourceLedger) -> tuple[Deviation, ...]:
    """The row's deviation when its dataset's captions are tokenised otherwise than by the source
    (none on tag datasets: their texts are tag words, which no source tokenises; none for a BERT's
    WordPiece, which the harness runs as the source)."""
    if ds_cfg.get("text") == "tags" or ledger.tokenizer in (ds_cfg["tokenizer"], "wordpiece"):
        return ()
    why = ("the built-in data need no Punkt model: their captions are single sentences, on which the "
           "two give the same words" if ds_cfg["kind"] == "synthetic" else
           "set in config for this dataset; the words differ from the source's on captions of several sentences")
    return (Deviation("tokenizer", ledger.tokenizer_behaviour,
                      f"datasets.{dataset}.tokenizer: {ds_cfg['tokenizer']} (methods/data/tokenizers.py)", why),)


def stand_in_deviation(dataset: str, ds_cfg: dict, image_input: str, model_cfg: dict) -> Deviation:
    """What a synthetic stand-in dataset changes for a row: its data and the image features read."""
    stands_in_for = ds_cfg["stands_in_for"]["dataset"]
    region = ds_cfg["features"].get("region")
    if image_input == "regions" and region is not None:
        features = (f"{region['n_regions']} RoIAlign regions per image from the {region['layer']} map of "
                    f"{region['backbone']}, standing in for the 36 BUTD regions (2048-d) of the source")
    elif image_input == "regions":   # a dataset built from another one's regions (synthetic tags)
        source = ds_cfg.get("generated_from", {}).get("dataset", "its source")
        features = (f"the {ds_cfg['precomp']['n_regions']} regions per image ({ds_cfg['precomp']['feature_dim']}-d) "
                    f"of the {source} dataset, standing in for the 36 BUTD regions (2048-d) of the source")
    else:
        features = f"{image_input} features of {model_cfg.get('backbone', 'its CNN')}"
    sizes = ds_cfg.get("generator", {}).get("splits") or ds_cfg.get("split_sizes", {})
    splits = ", ".join(f"{k} {v}" for k, v in sizes.items())
    return Deviation("stand_in_data", f"trains and tests on {stands_in_for}",
                     f"the {dataset} dataset ({ds_cfg['kind']}{': ' + splits + ' images' if splits else ''}); "
                     f"image input: {features}",
                     "a run without the real data; its numbers are not comparable with the reported ones")


def smoke_deviation(dataset: str, ds_cfg: dict, trained: bool = True) -> Deviation:
    """What a smoke run changes for a row (``datasets.<name>.smoke``): its data and, for a row it
    trains (not the authors' released weights), its training."""
    smoke = ds_cfg["smoke"]
    ours = (f"the {dataset} smoke run: the first {smoke['train_images']} training images and the first "
            f"{smoke['eval_images']} of every other split, each training stage at most {smoke['epochs']} epochs of "
            f"at most {smoke['batches_per_epoch']} batches" if trained else
            f"the {dataset} smoke run: the first {smoke['eval_images']} images of every test split")
    return Deviation("smoke_run", f"{'trains and ' if trained else ''}tests on all of {smoke['of']}", ours,
                     "a check that every job runs on the dataset's files, before the real run; its numbers are not "
                     "comparable with the reported ones")


def config_value(cfg: dict, switch: Switch, where: str) -> object:
    try:
        return dotted_value(cfg, switch.key)
    except KeyError:
        if switch.absent is not NO_DEFAULT:
            return switch.absent
        raise HarnessError(f"{where}: source switch key '{switch.key}' is not in the resolved config") from None


def row_ledger(cfg: dict, ledger: SourceLedger, where: str, extra: tuple[Deviation, ...] = ()) -> dict:
    """The ledger of one experiment: the source code, every switch it runs at a non-source value
    (with the value it runs), and the fixed deviations (then ``extra`` ones, e.g. stand-in data)."""
    off = []
    for s in ledger.switches:
        value = config_value(cfg, s, where)
        if value != s.value:
            off.append({"name": s.name, "key": s.key, "runs": value, "source": s.value, "behaviour": s.behaviour})
    return {"code": ledger.code, "switches": off, "deviations": [asdict(d) for d in (*ledger.deviations, *extra)]}


def merge_ledgers(ledgers: list[dict]) -> list[dict]:
    """The ledgers of a row's ensemble members, each distinct one once, in member order."""
    out: list[dict] = []
    for ledger in ledgers:
        if ledger not in out:
            out.append(ledger)
    return out
