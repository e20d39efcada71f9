"""``snakemake --report`` of the session DAG, read in headless Chromium as a user reads it: every
table, the summary and the runtime table, and each paper's page (its reproduction report, tables,
claims and figures) open inline from the report's menus, their text rendered in the page.
Skipped, saying why, where Chromium cannot be installed (tests/browser.py)."""
import re
import time
from pathlib import Path

import pytest
import yaml
from PIL import Image

from methods.config import load_harness_config
from methods.plan import Plan
from tests.browser import browser_binaries, chromium
from tests.conftest import snakemake

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.xdist_group("tiny_dag_folder")]

# the text a frame shows once its page has rendered, with its images' loaded sizes
FRAME_TEXT = "return [document.body ? document.body.innerText : '', " \
             "Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)]"


def words(text: str) -> str:
    return " ".join(text.split())


def plain(cell: str) -> str:
    """A Markdown cell's text as rendered: pipes unescaped, code marks and the marks of paired
    emphasis dropped (a lone asterisk, as in "VSRN*", stays)."""
    unpaired = re.sub(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|\*(?=[^\s*])(.+?)(?<=[^\s*])\*",
                      lambda m: m.group(1) if m.group(1) is not None else m.group(2), cell.replace("\\|", "|"))
    return words(unpaired.replace("`", ""))


def first_column(markdown: str) -> list[str]:
    """The first cell of every body row of every pipe table of a Markdown text."""
    lines, cells = markdown.splitlines(), []
    for i, line in enumerate(lines[2:], start=2):
        if line.startswith("|") and lines[i - 1].startswith("|"):
            if set(line.replace("|", "").strip()) <= set("-: "):
                continue
            cell = re.split(r"(?<!\\)\|", line)[1]
            cells.append(plain(cell))
    return [c for c in cells if c]


def screenshot_shows_something(path: Path) -> bool:
    with Image.open(path) as img:
        return len(img.convert("RGB").getcolors(maxcolors=1 << 20) or ()) > 50


def test_the_report_shows_every_table_and_each_papers_page_inline_in_a_browser(tiny_dag, tmp_path):
    binaries = browser_binaries()
    if isinstance(binaries, str):
        pytest.skip(binaries)
    report = tmp_path / "report.html"
    snakemake(tiny_dag, "--configfile", "tiny.yaml", "--report", str(report))
    plan = Plan(load_harness_config(tiny_dag / "config" / "config.yaml",
                                    yaml.safe_load((tiny_dag / "tiny.yaml").read_text())))
    datasets = plan.cfg["default_datasets"]
    # (category, subcategory or None, result) -> the texts its page must show, the figures it embeds
    pages = {}
    for dataset in datasets:
        for table in sorted(t for t, d in plan.tables if d == dataset):
            md = (tiny_dag / "tables" / f"{table}_{dataset}.md").read_text()
            pages[("Tables", dataset, f"tables/{table}_{dataset}.html")] = ([f"{table} on {dataset}", *first_column(md)], 0)
        for kind in ("summary", "runtime"):
            md = (tiny_dag / "tables" / f"{kind}_{dataset}.md").read_text()
            pages[(kind.capitalize(), None, f"tables/{kind}_{dataset}.html")] = (first_column(md), 0)
        for paper, name in plan.papers.items():
            if dataset not in plan.paper_datasets(paper):
                continue
            expected = [f"Reproduction report: {name} on {dataset}"]
            expected += [f"{t} on {dataset}" for t in plan.report_tables(paper, dataset)]
            claims = bool(plan.claims.get((paper, dataset)))
            if claims:
                expected += first_column((tiny_dag / "tables" / f"claims_{paper}_{dataset}.md").read_text())
            figures = sum(d == dataset and f.paper == paper for (_, d), f in plan.figures.items()) + claims
            pages[(name, dataset, f"reports/{paper}_{dataset}.html")] = (expected, figures)
    built = {str(p.relative_to(tiny_dag)) for folder in ("tables", "reports") for d in datasets
             for p in (tiny_dag / folder).glob(f"*_{d}.html")}
    assert {result for _, _, result in pages} == built   # every page the default targets built is opened

    url = report.resolve().as_uri()
    shots = []
    with chromium(binaries) as browser:
        browser.open(url)
        browser.wait_for("//*[normalize-space(text())='Tables']")
        shots.append(tmp_path / "main.png")
        browser.screenshot(shots[-1])
        menu = None
        for (category, subcategory, result), (expected, figures) in sorted(pages.items(),
                                                                           key=lambda p: (p[0][0], p[0][1] or "")):
            if menu != (category, subcategory):   # back to the list of results, through the menus
                browser.enter_frame(None)
                browser.click(browser.wait_for("//*[normalize-space(text())='Results']")[0])
                browser.click(browser.wait_for(f"//*[normalize-space(text())={xpath_string(category)}]")[0])
                if subcategory is not None and (found := browser.find(f"//*[normalize-space(text())='{subcategory}']")):
                    browser.click(found[0])   # a category with one subcategory lists its results at once
                menu = (category, subcategory)
            browser.enter_frame(None)
            eye = browser.wait_for(f"//tr[.//*[normalize-space(text())='{result}']]//a")
            browser.click(eye[0])
            browser.enter_frame(browser.wait_for("//iframe")[0])
            for _ in range(300):
                text, images = browser.script(FRAME_TEXT)
                if text.strip() and len(images) == figures and all(images):
                    break
                time.sleep(0.1)
            shown = words(text)
            missing = [e for e in expected if words(e) not in shown]
            assert not missing, f"{result} ({category}): not shown in the browser: {missing[:5]}"
            assert len(images) == figures and all(images), f"{result}: {len(images)} images, sizes {images}"
            if result.startswith(("reports/sgraf_", "tables/table1_")):
                browser.enter_frame(None)
                shots.append(tmp_path / Path(result).with_suffix(".png").name)
                browser.screenshot(shots[-1])
    assert all(screenshot_shows_something(p) for p in shots), shots


def xpath_string(text: str) -> str:
    """``text`` as an XPath 1.0 string literal (a paper's name may hold either quote)."""
    if "'" not in text:
        return f"'{text}'"
    if '"' not in text:
        return f'"{text}"'
    return "concat(" + ", \"'\", ".join(f"'{part}'" for part in text.split("'")) + ")"
