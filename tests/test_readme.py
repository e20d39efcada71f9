"""The numbers the README states about the default job are the ones the code and config give.

The README keeps only numbers a test checks: the synthetic dataset's statistics table (computed here
by generating the configured dataset), chance on its test split and the did-not-train threshold
(closed forms computed here from the split size, independently of ``chance_recalls``). Per-row
results are not in the README: the DAG writes them (``tables/summary_<dataset>.md``).
"""
import re
from math import comb
from pathlib import Path

import pytest
import yaml

from methods.config import load_harness_config
from methods.data.synthetic import generate
from methods.data.tokenizers import Tokenizer
from methods.plan import Plan

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
CONFIG = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def _statistics_table() -> dict[str, dict[str, str]]:
    """The README's synthetic statistics table: statistic -> split -> the printed cell."""
    header = "| statistic | definition | target | train | val | test |"
    assert header in README, "the README's statistics table header changed"
    lines = README[README.index(header):].splitlines()[2:]
    rows = {}
    for line in lines:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(("train", "val", "test"), cells[3:6]))
    return rows


def test_statistics_table_is_what_the_configured_generator_gives(tmp_path):
    cfg = CONFIG["datasets"]["synthetic"]["generator"]
    stats = generate(tmp_path, cfg["seed"], cfg["image_size"], cfg["max_objects"], cfg["splits"],
                     min_objects=cfg["min_objects"], family_size=cfg["family_size"], tokenizer=Tokenizer("nltk_line"))
    table = _statistics_table()
    keys = {"ambiguity": "ambiguity", "diversity": "diversity", "hard negatives": "hard_negative_share",
            "true images per caption": "mean_true_images_per_caption"}
    decimals = {"true images per caption": 2}
    assert set(table) == set(keys)
    for label, key in keys.items():
        for split in ("train", "val", "test"):
            assert table[label][split] == f"{stats[split][key]:.{decimals.get(label, 3)}f}", (label, split)
    splits = re.search(r"Splits: ([\d,]+) training images \(([\d,]+) captions\), (\d+) validation, (\d+) test", README)
    assert splits, "the README's split sentence changed"
    train, captions, val, test = (int(g.replace(",", "")) for g in splits.groups())
    assert (train, val, test) == (cfg["splits"]["train"], cfg["splits"]["val"], cfg["splits"]["test"])
    assert captions == stats["train"]["captions"]


def _chance_rsum(n_images: int, captions: int) -> float:
    """RSUM of random scores: image->text R@K = P(one of the image's captions in the top K of cN),
    text->image R@K = K / N."""
    total = captions * n_images
    i2t = sum(1 - comb(total - captions, k) / comb(total, k) for k in (1, 5, 10))
    t2i = sum(k / n_images for k in (1, 5, 10))
    return 100 * (i2t + t2i)


def test_chance_and_did_not_train_threshold_are_the_closed_forms():
    n_test = CONFIG["datasets"]["synthetic"]["generator"]["splits"]["test"]
    captions = CONFIG["datasets"]["synthetic"]["texts_per_image"]
    chance = _chance_rsum(n_test, captions)
    text = re.search(r"Chance on the test split \((\d+) images, ([\d,]+) captions\).*?RSUM (\d+\.\d) .*?"
                     r"so 6 × chance = (\d+\.\d)", README, re.S)
    assert text, "the README's chance sentence changed"
    assert (int(text[1]), int(text[2].replace(",", ""))) == (n_test, n_test * captions)
    assert float(text[3]) == pytest.approx(round(chance, 1), abs=1e-9)
    assert float(text[4]) == pytest.approx(round(6 * chance, 1), abs=1e-9)
    share = CONFIG["training_check"]["min_gain_share"]
    threshold = re.search(r"gained less than (\d+) % of the way.*?\(RSUM below (\d+\.\d) here\)", README, re.S)
    assert threshold, "the README's did-not-train sentence changed"
    assert float(threshold[1]) == pytest.approx(100 * share)
    assert float(threshold[2]) == pytest.approx(round(chance + share * (600 - chance), 1), abs=1e-9)


WORKED_EXAMPLE_FILE = re.compile(r"```(?:python|yaml) file=(\S+)\n(.*?)```", re.S)


def worked_example_files() -> dict[str, str]:
    """The README's worked example of a new model: path -> the text its block gives that file."""
    section = README[README.index("### Worked example"):README.index("## Python API")]
    return dict(WORKED_EXAMPLE_FILE.findall(section))


# -- the README's YAML examples work as written ----------------------------------------------------

def readme_yaml_blocks() -> list[tuple[int, dict]]:
    """(line, parsed block) of every ```yaml block of the README that is not a file of the worked
    example (```yaml file=...: tests/test_plugins.py runs those)."""
    blocks = []
    for match in re.finditer(r"^```yaml\n(.*?)^```", README, re.S | re.M):
        blocks.append((README[:match.start()].count("\n") + 1, yaml.safe_load(match.group(1))))
    return blocks


def planted(value, root: Path, key: str = ""):
    """The block with every absolute or home path moved under ``root``, where an empty file (a
    folder for the *_dir, nltk_data and results_dir keys) now stands: what the user's disk holds."""
    if isinstance(value, dict):
        return {k: planted(v, root, k) for k, v in value.items()}
    if isinstance(value, str) and value.startswith(("/", "~")):
        path = root / value.lstrip("~/")
        if key.endswith("_dir") or key == "nltk_data":
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        return str(path)
    return value


def test_every_yaml_block_of_the_readme_is_used_as_written(tmp_path):
    """A config example, set over config/config.yaml with its files present, loads and plans
    every table (the README's results_dir example once failed on the synthetic backbone's
    weights path); the claims example is a claim of a paper file, word for word."""
    blocks = readme_yaml_blocks()
    configs = [(line, b) for line, b in blocks if set(b) <= {"results_dir", "backbones", "datasets", "papers"}]
    claims = [(line, b) for line, b in blocks if set(b) == {"claims"}]
    assert len(configs) >= 2 and len(claims) == 1 and len(configs) + len(claims) == len(blocks), \
        [line for line, _ in blocks]
    for line, block in configs:
        cfg = load_harness_config(REPO / "config" / "config.yaml", planted(block, tmp_path / f"disk{line}"))
        plan = Plan(cfg)
        assert plan.tables, line
        if "results_dir" in block:   # the DAG's own backbone moves with the results
            assert cfg["backbones"]["resnet18_synthetic"]["weights"].startswith(cfg["results_dir"] + "/synthetic/")
    papers = {p.stem: yaml.safe_load(p.read_text()) for p in (REPO / "methods" / "papers").glob("*.yaml")}
    (line, block), = claims
    for claim_id, claim in block["claims"].items():
        declared = [p["claims"][claim_id] for p in papers.values() if claim_id in (p.get("claims") or {})]
        assert declared and all(declared[0][k] == v for k, v in claim.items()), (line, claim_id)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_contents_name_every_section_and_every_link_to_a_section_resolves():
    headings = re.findall(r"^#{2,3} (.+)$", README, re.M)
    anchors = {github_anchor(h) for h in headings}
    links = re.findall(r"\]\(#([^)]+)\)", README)
    assert links and not [link for link in links if link not in anchors]
    contents = README[README.index("**Contents.**"):].split("\n\n")[0]
    sections = [h for h in re.findall(r"^## (.+)$", README, re.M)]
    assert [s for s in sections if f"(#{github_anchor(s)})" not in contents] == []
    # the set-up comes first, then the contents and the five steps, before anything long
    assert README.index("**Contents.**") < README.index("## Your own Flickr30K / COCO in 5 steps") < 6000
