"""Which claim runs where: every claim of the paper files, and whether the default job (the main
job on the built-in data), the all-tables config (``config/synthetic_all_tables.yaml``) or real
data tests it. ``docs/claims.md`` holds this table as the command prints it (a test keeps the two
equal):

    python -m methods.plan.claims_coverage
"""
from __future__ import annotations

import argparse

from methods.config import REPO_ROOT, load_harness_config, load_yaml
from methods.plan.datasets import data_kind
from methods.plan.papers import ALL_TABLES_CONFIG
from methods.plan.plan import Plan

BUILT_IN = ("synthetic", "synthtags")


def tested_on(plan: Plan) -> dict[tuple[str, str], list[str]]:
    """(paper, claim id) -> the datasets the plan tests it on."""
    where: dict[tuple[str, str], list[str]] = {}
    for (paper, dataset), claims in plan.claims.items():
        for claim in claims:
            where.setdefault((paper, claim.id), []).append(dataset)
    return where


def coverage_rows(config: str = "config/config.yaml") -> list[dict]:
    """One row per claim of the paper files: its form, table and where it runs."""
    default = Plan(load_harness_config(REPO_ROOT / config))
    every = Plan(load_harness_config(REPO_ROOT / config, load_yaml(REPO_ROOT / ALL_TABLES_CONFIG)))
    in_default, in_every = tested_on(default), tested_on(every)
    untested: dict[tuple[str, str], list[str]] = {}   # claims a dataset cannot test without a configured file
    for (paper, dataset), claims in every.untested_claims.items():
        for claim, keys in claims:
            untested.setdefault((paper, claim), []).append(f"{dataset} once {', '.join(keys)} set")
    planned: dict[tuple[str, str], object] = {}   # (paper, claim id) -> the claim, as first planned
    for (paper, _), claims in every.claims.items():
        for claim in claims:
            planned.setdefault((paper, claim.id), claim)
    rows = []
    for paper in every.papers:
        for (p, claim_id), claim in planned.items():
            if p != paper:
                continue
            datasets = in_every.get((paper, claim_id), [])
            real = sorted(d for d in datasets if data_kind(every.cfg["datasets"][d]) not in ("synthetic", "smoke"))
            rows.append({"paper": paper, "claim": claim_id, "compare": claim.form, "table": claim.table,
                         "default": any(d in BUILT_IN for d in in_default.get((paper, claim_id), [])),
                         "all_tables": any(d in BUILT_IN for d in datasets),
                         "real": real + untested.get((paper, claim_id), [])})
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| paper | claim | tested as | table | default job | all tables | real data |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        compare = r["compare"].replace("|", "\\|")
        lines.append(f"| {r['paper']} | {r['claim']} | `{compare}` | {r['table']} | {'yes' if r['default'] else '–'} | "
                     f"{'yes' if r['all_tables'] else '–'} | {', '.join(r['real']) or '–'} |")
    counts = {}
    for r in rows:
        counts.setdefault(r["paper"], [0, 0])
        counts[r["paper"]][0] += r["default"]
        counts[r["paper"]][1] += 1
    lines += ["", "Per paper, claims the default job checks (of all its claims): "
              + ", ".join(f"{paper} {n} of {total}" for paper, (n, total) in counts.items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args(argv)
    print(markdown(coverage_rows()), end="")


if __name__ == "__main__":
    main()
