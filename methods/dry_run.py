"""What a dry run says of the tables its DAG builds, once the DAG is built: each released row a
table leaves out and the config keys that would add it, and each real dataset's table's GPU-time
estimate (``methods.estimate``; the synthetic data's times are in ``tables/runtime_<dataset>.md``
and a smoke run is a few batches).
"""
from __future__ import annotations

import functools
from typing import Callable, Iterable

from methods.estimate import BENCHMARK as COST_BENCHMARK, estimate, table_work
from methods.plan.datasets import data_kind


def unconfigured_lines(plan, table: str, dataset: str) -> list[str]:
    """The rows of a table that its config leaves out (released weights or a BERT folder not
    configured), and the keys that would add each."""
    return [f"tables/{table}_{dataset}.csv: row '{row['id']}' ({row['needs']}) is left out: set "
            f"{', '.join(row['keys'])}" for row in plan.table(table, dataset).unconfigured]


def estimate_lines(plan, table: str, dataset: str, split_images: dict[str, int], costs: list[dict]) -> list[str]:
    """The GPU-time estimate of a table on a real dataset."""
    work = table_work(plan, table, dataset, split_images)
    measure = f"{COST_BENCHMARK} --dataset {dataset} --tables {table} --device cuda --write config/measured_costs.yaml"
    return estimate(work, costs).lines(f"tables/{table}_{dataset}.csv", measure)


def dry_run_lines(plan, tables: Iterable[tuple[str, str]], released_tables: Iterable[tuple[str, str]],
                  split_images: Callable[[str], dict[str, int]], costs: Callable[[], list[dict]]) -> list[str]:
    """The notes of the (table, dataset) pairs whose table job the DAG holds and of those whose
    released-rows table it holds, each table once, in name order. ``split_images(dataset)``: the
    dataset's images per split (its checks); ``costs()``: the measured costs, read when needed."""
    tables, released_tables, lines = set(tables), set(released_tables), []
    read_costs = functools.cache(costs)   # read once, for the first real table
    for table, dataset in sorted(tables | released_tables):
        # a paper table of synthetic data shows no released row; its released-rows table names them
        if (table, dataset) in released_tables or data_kind(plan.cfg["datasets"][dataset]) != "synthetic":
            lines += unconfigured_lines(plan, table, dataset)
        if (table, dataset) in tables and data_kind(plan.cfg["datasets"][dataset]) not in ("synthetic", "smoke"):
            lines += estimate_lines(plan, table, dataset, split_images(dataset), read_costs())
    datasets = {dataset for _, dataset in tables}
    for (paper, dataset), untested in sorted(plan.untested_claims.items()):
        if dataset in datasets:
            lines += [f"claims of {paper} on {dataset}: '{claim}' is not tested (a row it compares is left out): set "
                      f"{', '.join(keys)}" for claim, keys in untested]
    return lines
