"""The jobs behind a runtime table (``tables/runtime_<dataset>``), read from the DAG Snakemake built:
every job its runtime job depends on, with its rule, wildcards and benchmark file, and the papers
each job is for. Nothing here copies a rule's wildcards: a rule added to the workflow is attributed
by the same reading.

A job is for the papers its wildcards name (``paper``; a row's paper for ``table`` and ``row``;
the papers of a table's rows for ``table``; a figure's paper for ``figure``). A job of one run
(wildcards ``exp``, ``ens``, ``seed`` or ``checkpoint``: training, evaluation views, ensembles,
released checkpoints) is for the papers of the jobs that need it, transitively. Any other job is
the dataset's own (data, vocabulary, backbone pre-training, features, the dataset's summary and
figure of every table) and names no paper: it is shared. A job is in the table of its dataset
(``job_datasets``).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Mapping

from methods.job_records import RuntimeJobSpec, RuntimeSpec

RUN_WILDCARDS = frozenset({"exp", "ens", "seed", "checkpoint"})


@dataclass(frozen=True)
class PlannedJob:
    """One job of the DAG: its rule, wildcards, benchmark file (None: the rule writes none) and the
    jobs that need its outputs (their keys)."""

    rule: str
    wildcards: Mapping[str, str]
    benchmark: str | None
    needed_by: tuple[Hashable, ...] = ()


def jobs_behind(root: Any, dependencies: Callable[[Any], Iterable[Any]], describe: Callable[[Any], PlannedJob],
                key: Callable[[Any], Hashable] = id) -> dict[Hashable, PlannedJob]:
    """Every job ``root`` depends on, transitively (``dependencies(job)``: the jobs whose outputs it
    reads; ``describe(job)``: its rule, wildcards and benchmark), keyed by ``key(job)``, each with the
    jobs of this set that need it."""
    seen, order, queue = {key(root): root}, [], deque([root])
    needed_by: dict[Hashable, list[Hashable]] = {}
    while queue:
        job = queue.popleft()
        for dep in dependencies(job):
            needed_by.setdefault(key(dep), []).append(key(job))
            if key(dep) not in seen:
                seen[key(dep)] = dep
                order.append(key(dep))
                queue.append(dep)
    out = {}
    for k in order:
        job = describe(seen[k])
        out[k] = PlannedJob(job.rule, dict(job.wildcards), job.benchmark,
                            tuple(dict.fromkeys(n for n in needed_by.get(k, ()) if n != key(root))))
    return out


def own_papers(plan, job: PlannedJob) -> set[str] | None:
    """The papers a job's wildcards name; None for a job of one run (it is for the papers of the
    jobs that need it); the empty set for the dataset's own jobs."""
    w = job.wildcards
    if "paper" in w:
        return {w["paper"]}
    if "figure" in w:
        return {plan.figure(w["figure"], w["dataset"]).paper}
    if "table" in w and "row" in w:
        return {plan.row(w["table"], w["dataset"], w["row"]).paper}
    if "table" in w:
        return {row.paper for row in plan.table(w["table"], w["dataset"]).rows}
    if RUN_WILDCARDS & set(w):
        return None
    return set()


def attributed_papers(plan, jobs: Mapping[Hashable, PlannedJob]) -> dict[Hashable, set[str]]:
    """Each job's papers (``own_papers``; a run's job: the union of the papers of the jobs that need it)."""
    papers: dict[Hashable, set[str]] = {}

    def of(key: Hashable) -> set[str]:
        if key not in papers:
            own = own_papers(plan, jobs[key])
            papers[key] = own if own is not None else set().union(*map(of, jobs[key].needed_by))
        return papers[key]

    for key in jobs:
        of(key)
    return papers


def job_datasets(jobs: Mapping[Hashable, PlannedJob]) -> dict[Hashable, set[str]]:
    """Each job's dataset: its ``dataset`` wildcard, else (a rule of one dataset, named after it)
    the datasets of the jobs that need it."""
    datasets: dict[Hashable, set[str]] = {}

    def of(key: Hashable) -> set[str]:
        if key not in datasets:
            job = jobs[key]
            datasets[key] = ({job.wildcards["dataset"]} if "dataset" in job.wildcards
                             else set().union(*map(of, job.needed_by)))
        return datasets[key]

    for key in jobs:
        of(key)
    return datasets


def runtime_spec(plan, dataset: str, jobs: Mapping[Hashable, PlannedJob], rule_order: list[str]) -> RuntimeSpec:
    """What ``methods.report.runtime`` reads: every job of ``dataset`` with a benchmark file (its
    rule, the file, its papers; a job of another dataset, such as the synthetic regions a dataset
    of synthetic tags is made from, is in that dataset's table), the rules in ``rule_order`` (the
    workflow's) and the papers ([key, name] pairs in config order)."""
    papers, datasets = attributed_papers(plan, jobs), job_datasets(jobs)
    listed = [RuntimeJobSpec(rule=job.rule, file=job.benchmark, papers=sorted(papers[key]))
              for key, job in jobs.items() if job.benchmark is not None and dataset in datasets[key]]
    listed.sort(key=lambda j: (rule_order.index(j.rule) if j.rule in rule_order else len(rule_order), j.file))
    used = {p for job in listed for p in job.papers}
    return RuntimeSpec(dataset=dataset, rules=[r for r in rule_order if any(j.rule == r for j in listed)],
                       papers=[[key, title] for key, title in plan.papers.items() if key in used], jobs=listed)
