"""The README and the docs pages say what the code and config do, and their examples work as written.

The numbers docs/synthetic-dataset.md states about the default job are the ones the code and config
give: the synthetic dataset's statistics table (computed here by generating the configured dataset),
chance on its test split and the did-not-train threshold (closed forms computed here from the split
size, independently of ``chance_recalls``). Per-row results are in no page: the DAG writes them
(``tables/summary_<dataset>.md``). Every ```yaml block of the README and the docs pages is used as
written; the worked example of docs/adding-a-method.md is run by tests/test_plugins.py. Every relative
link of the README, the docs pages and config/README.md resolves, to a file and to a heading.
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
DOCS = REPO / "docs"
SYNTHETIC_PAGE = (DOCS / "synthetic-dataset.md").read_text()
ADDING_A_METHOD_PAGE = (DOCS / "adding-a-method.md").read_text()
CONFIG = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
README_MAX_LINES = 200


def doc_pages() -> list[Path]:
    """The README and every docs page: the pages whose ```yaml blocks are used as written."""
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def linked_pages() -> list[Path]:
    """Every page whose links must resolve: the README, the docs pages and config/README.md."""
    return [*doc_pages(), REPO / "config" / "README.md"]


def _statistics_table() -> dict[str, dict[str, str]]:
    """docs/synthetic-dataset.md's statistics table: statistic -> split -> the printed cell."""
    header = "| statistic | definition | target | train | val | test |"
    assert header in SYNTHETIC_PAGE, "the synthetic dataset page's statistics table header changed"
    lines = SYNTHETIC_PAGE[SYNTHETIC_PAGE.index(header):].splitlines()[2:]
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
    splits = re.search(r"Splits: ([\d,]+) training images \(([\d,]+) captions\), (\d+) validation, (\d+) test",
                       SYNTHETIC_PAGE)
    assert splits, "the synthetic dataset page's split sentence changed"
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
                     r"so 6 × chance = (\d+\.\d)", SYNTHETIC_PAGE, re.S)
    assert text, "the synthetic dataset page's chance sentence changed"
    assert (int(text[1]), int(text[2].replace(",", ""))) == (n_test, n_test * captions)
    assert float(text[3]) == pytest.approx(round(chance, 1), abs=1e-9)
    assert float(text[4]) == pytest.approx(round(6 * chance, 1), abs=1e-9)
    share = CONFIG["training_check"]["min_gain_share"]
    threshold = re.search(r"gained less than (\d+) % of the way.*?\(RSUM below (\d+\.\d) here\)", SYNTHETIC_PAGE,
                          re.S)
    assert threshold, "the synthetic dataset page's did-not-train sentence changed"
    assert float(threshold[1]) == pytest.approx(100 * share)
    assert float(threshold[2]) == pytest.approx(round(chance + share * (600 - chance), 1), abs=1e-9)


WORKED_EXAMPLE_FILE = re.compile(r"```(?:python|yaml) file=(\S+)\n(.*?)```", re.S)


def worked_example_files() -> dict[str, str]:
    """docs/adding-a-method.md's worked example of a new model: path -> the text its block gives that file."""
    page = ADDING_A_METHOD_PAGE
    section = page[page.index("## Worked example"):page.index("## A model in a folder of your own")]
    return dict(WORKED_EXAMPLE_FILE.findall(section))


def test_the_worked_example_is_the_only_place_of_file_blocks():
    """Every ```python file=... and ```yaml file=... block of the README and the docs pages is one of
    the worked example's (a file block elsewhere would be run by no test)."""
    paths = [path for page in doc_pages() for path, _text in WORKED_EXAMPLE_FILE.findall(page.read_text())]
    assert sorted(paths) == sorted(worked_example_files()), paths


# -- the README's and the docs pages' YAML examples work as written ---------------------------------

def readme_yaml_blocks() -> list[tuple[str, dict]]:
    """("page:line", parsed block) of every ```yaml block of the README and the docs pages that is
    not a file of the worked example (```yaml file=...: tests/test_plugins.py runs those)."""
    blocks = []
    for page in doc_pages():
        text = page.read_text()
        for match in re.finditer(r"^```yaml\n(.*?)^```", text, re.S | re.M):
            where = f"{page.relative_to(REPO)}:{text[:match.start()].count(chr(10)) + 1}"
            blocks.append((where, yaml.safe_load(match.group(1))))
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


def test_every_yaml_block_of_the_readme_and_the_docs_is_used_as_written(tmp_path):
    """A config example (its keys top-level keys of config/config.yaml), set over config/config.yaml
    with its files present, loads and plans every table (the results_dir example once failed on the
    synthetic backbone's weights path); the claims example is a claim of a paper file, word for
    word. Every block is one or the other."""
    blocks = readme_yaml_blocks()
    config_keys = set(CONFIG) - {"claims"}   # a `claims:` block is a paper file's claims
    configs = [(line, b) for line, b in blocks if set(b) <= config_keys]
    claims = [(line, b) for line, b in blocks if set(b) == {"claims"}]
    assert len(configs) >= 2 and len(claims) == 1 and len(configs) + len(claims) == len(blocks), \
        [line for line, _ in blocks]
    assert any(set(b) & {"backbones", "datasets"} for _, b in configs), "no config block sets a path"
    for line, block in configs:
        disk = tmp_path / ("disk" + re.sub(r"\W", "_", line))
        cfg = load_harness_config(REPO / "config" / "config.yaml", planted(block, disk))
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


FENCED_BLOCK = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """A page without its fenced code blocks (a `# comment` line there is no heading, a link no link)."""
    return FENCED_BLOCK.sub("", text)


def page_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of a page, repeated headings numbered (-1, -2, ...)."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+?)#*$", prose(page.read_text()), re.M):
        anchor = github_anchor(heading)
        n = seen.get(anchor, 0)
        seen[anchor] = n + 1
        anchors.add(anchor if n == 0 else f"{anchor}-{n}")
    return anchors


def relative_links(page: Path) -> list[str]:
    """Every link of a page's prose that is not to a web address."""
    return [t for t in LINK.findall(prose(page.read_text())) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_github_anchor_follows_githubs_rules():
    assert github_anchor("Your own Flickr30K / COCO in 5 steps") == "your-own-flickr30k--coco-in-5-steps"
    assert github_anchor("`coco_5k_eccv`: ECCV Caption and CxC") == "coco_5k_eccv-eccv-caption-and-cxc"
    assert github_anchor("Time limits, preemption and resumption") == "time-limits-preemption-and-resumption"


def test_every_relative_link_resolves_to_a_file_and_a_heading():
    """Every relative link of the README, the docs pages and config/README.md names an existing
    file, and its #anchor (on the same page, or on the page it names) a heading of that page."""
    broken = []
    links = 0
    for page in linked_pages():
        for target in relative_links(page):
            links += 1
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(REPO)}: ({target})"
            if not linked.is_file():
                broken.append(f"{where}: no file {path}")
            elif anchor and (linked.suffix != ".md" or anchor not in page_anchors(linked)):
                broken.append(f"{where}: no heading #{anchor} in {linked.relative_to(REPO)}")
            elif REPO not in linked.parents:
                broken.append(f"{where}: outside the repository")
    assert links > 50 and broken == [], broken


def test_the_readme_is_a_short_front_door_linking_every_docs_page():
    """At most 200 lines; the set-up commands first, after a few lines (.ci/run runs the install and
    test commands as written); the five steps before anything long; a link to every docs page and
    to config/README.md."""
    assert len(README.splitlines()) <= README_MAX_LINES, len(README.splitlines())
    first_block = re.search(r"^```bash\n(.*?)^```", README, re.S | re.M)
    assert first_block and README[:first_block.start()].count("\n") <= 10
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands == ['python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[dev]"',
                        "snakemake --cores 2", "pytest"], commands
    ci = (REPO / ".ci" / "run").read_text()
    assert 'pip install -e ".[dev]"' in ci and re.search(r"^pytest\b", ci, re.M)
    assert first_block.start() < README.index("## Your own Flickr30K / COCO in 5 steps") < 6000
    linked = {(REPO / t.partition("#")[0]).resolve() for t in relative_links(REPO / "README.md")}
    pages = [*sorted(DOCS.glob("*.md")), REPO / "config" / "README.md"]
    assert [str(p.relative_to(REPO)) for p in pages if p.resolve() not in linked] == []


def test_no_page_points_into_the_shared_folder():
    """The papers are cited by author, venue, year and table, never by a path of the shared folder."""
    assert [str(p.relative_to(REPO)) for p in linked_pages() if "../shared" in p.read_text()] == []


def _schema_keys(node, defs: dict, out: set[str], depth: int = 0) -> set[str]:
    """Every property name of a JSON schema, through its $refs."""
    if isinstance(node, dict) and depth < 8:
        if "$ref" in node:
            return _schema_keys(defs[node["$ref"].split("/")[-1]], defs, out, depth + 1)
        for key, sub in (node.get("properties") or {}).items():
            out.add(key)
            _schema_keys(sub, defs, out, depth + 1)
        if isinstance(node.get("additionalProperties"), dict):
            _schema_keys(node["additionalProperties"], defs, out, depth + 1)
    return out


def test_config_readme_documents_every_key_of_the_config_schema():
    """config/README.md names every key of workflow/schemas/config.schema.yaml (top-level and below),
    in a code span, and every top-level key of config/config.yaml in its table of top-level keys."""
    doc = (REPO / "config" / "README.md").read_text()
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    keys = _schema_keys(schema, schema["$defs"], set())
    assert set(CONFIG) <= keys
    missing = [k for k in sorted(keys) if not re.search(r"`[^`\n]*\b" + re.escape(k) + r"\b[^`\n]*`", doc)]
    assert missing == []
    top = doc[doc.index("## Top-level keys"):].split("\n## ")[0]
    assert [k for k in schema["properties"] if f"| `{k}` |" not in top] == []
