"""Build ``tables/runtime_<dataset>.md`` (+ ``.csv``): where the time of a dataset's default
targets went, from the Snakemake benchmark file of every job behind them
(``results/benchmarks/<rule>/...tsv``; the spec, read from the DAG before any job starts
(``methods.plan.runtime_jobs``), lists them with their rule and the papers that need each job).

- per rule: jobs, wall seconds (sum, mean, max), CPU seconds (sum), the largest max RSS;
- per paper: the jobs only that paper's rows, tables and figures need; ``shared``: the dataset's
  own jobs (data, vocabulary, backbone pre-training, features) and the jobs several papers need
  (a run two papers' rows use, a table two paper files declare), each counted once;
- ``all jobs``: the sums over every job.

A Snakemake benchmark TSV has the columns ``s, h:m:s, max_rss, max_vms, max_uss, max_pss, io_in,
io_out, mean_load, cpu_time``: ``s`` is the job's wall time, ``cpu_time`` (user + system seconds
of its processes) and ``max_rss`` (MB, over its process tree) are sampled while it runs (``NA``
when it ended before the first sample). A file with several lines (``repeat(...)``) is one job
whose runs add up.
"""
from __future__ import annotations

import datetime

import pandas as pd

from methods.cli import run_command
from methods.errors import HarnessError
from methods.io import write_text
from methods.job_records import RuntimeSpec
from methods.report.html import write_markdown

SHARED = "shared"
ALL = "all jobs"
NEEDED = ("s", "max_rss", "cpu_time")   # of the benchmark TSV columns
STATS = ["jobs", "wall_s", "mean_wall_s", "max_wall_s", "cpu_s", "max_rss_mb", "unsampled_jobs"]
COLUMNS = ["dataset", "grouping", "name", "title", *STATS, "jobs_by_rule"]


def read_benchmark(path: str) -> pd.DataFrame:
    """The lines of one benchmark TSV (``NA`` and ``-`` are missing values)."""
    try:
        frame = pd.read_csv(path, sep="\t", na_values=["NA", "-"])
    except FileNotFoundError:
        raise HarnessError(f"benchmark {path}: cannot read it: no such file (its job's outputs exist but it recorded "
                           f"no benchmark, e.g. made with --touch; snakemake --forcerun <its rule> measures it)") from None
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise HarnessError(f"benchmark {path}: cannot read it as a Snakemake benchmark TSV ({exc})") from None
    missing = [c for c in NEEDED if c not in frame.columns]
    if missing or frame.empty:
        raise HarnessError(f"benchmark {path}: expected a header with {', '.join(NEEDED)} and at least one line "
                           f"(Snakemake's benchmark TSV); missing columns: {missing or 'none'}, lines: {len(frame)}")
    return frame


def _sum_or_missing(values: pd.Series) -> float:
    """Sum of the values there are; missing if none is there."""
    return values.sum(min_count=1)


def job_times(spec: RuntimeSpec) -> pd.DataFrame:
    """One line per job: rule, file, its group (the one paper that needs it, or ``shared``),
    wall s, CPU s and max RSS MB (missing where Snakemake took no sample)."""
    jobs = pd.DataFrame([job.to_json() for job in spec.jobs], columns=["rule", "file", "papers"])
    if jobs["file"].duplicated().any():
        raise HarnessError(f"runtime spec of {spec.dataset}: a benchmark file is listed twice "
                           f"({jobs.loc[jobs['file'].duplicated(), 'file'].iloc[0]})")
    jobs["group"] = jobs["papers"].map(lambda papers: papers[0] if len(papers) == 1 else SHARED)
    lines = pd.concat([read_benchmark(path).assign(file=path) for path in jobs["file"]], ignore_index=True)
    times = (lines.astype({"s": float, "cpu_time": float, "max_rss": float})
             .groupby("file", sort=False)
             .agg(wall_s=("s", "sum"), cpu_s=("cpu_time", _sum_or_missing), max_rss_mb=("max_rss", "max")))
    return jobs.merge(times, left_on="file", right_index=True, how="left", validate="one_to_one")


def summarise(jobs: pd.DataFrame, by: str | None) -> pd.DataFrame:
    """``STATS`` per value of column ``by`` (in order of first appearance), or over all jobs (``by`` None)."""
    keys = jobs[by] if by is not None else pd.Series(ALL, index=jobs.index)
    return (jobs.assign(unsampled=jobs["cpu_s"].isna())
            .groupby(keys.rename("name"), sort=False)
            .agg(jobs=("file", "size"), wall_s=("wall_s", "sum"), mean_wall_s=("wall_s", "mean"),
                 max_wall_s=("wall_s", "max"), cpu_s=("cpu_s", _sum_or_missing), max_rss_mb=("max_rss_mb", "max"),
                 unsampled_jobs=("unsampled", "sum"))
            .reset_index())


def jobs_by_rule(jobs: pd.DataFrame, rules: list[str]) -> pd.Series:
    """Per group, its job count per rule in pipeline order: ``train 12, evaluate 12, ...``."""
    counts = jobs.groupby(["group", "rule"], sort=False).size().rename("n").reset_index()
    counts["order"] = counts["rule"].map(rules.index)
    counts = counts.sort_values(["order"], kind="stable")
    return (counts["rule"] + " " + counts["n"].astype(str)).groupby(counts["group"], sort=False).agg(", ".join)


def build(spec: RuntimeSpec) -> pd.DataFrame:
    """The runtime table: one line per rule, per paper (then ``shared``) and for all jobs, with ``COLUMNS``."""
    papers = dict(spec.papers)   # [key, name] pairs, in the order of the config's paper files
    jobs = job_times(spec)
    unknown = sorted(set(jobs["rule"]) - set(spec.rules))
    if unknown:
        raise HarnessError(f"runtime spec of {spec.dataset}: jobs of rules {unknown} that 'rules' does not order")
    rules = [r for r in spec.rules if r in set(jobs["rule"])]
    groups = [p for p in papers if p in set(jobs["group"])] + ([SHARED] if (jobs["group"] == SHARED).any()
                                                                       else [])
    total = summarise(jobs, None)
    per_rule = summarise(jobs, "rule").set_index("name").loc[rules].reset_index().assign(grouping="rule", title="")
    per_paper = (summarise(jobs, "group").set_index("name").loc[groups].reset_index()
                 .assign(grouping="paper",
                         title=lambda f: f["name"].map(lambda n: papers.get(n, "jobs of the dataset or of several "
                                                                                  "papers")))
                 .merge(jobs_by_rule(jobs, rules).rename("jobs_by_rule"), left_on="name", right_index=True,
                        how="left"))
    table = pd.concat([per_rule, per_paper, total.assign(grouping="all", title="")], ignore_index=True)
    return table.assign(dataset=spec.dataset, jobs_by_rule=table["jobs_by_rule"].fillna(""))[COLUMNS]


def to_csv(table: pd.DataFrame) -> str:
    rounded = table.assign(**{c: table[c].round(2) for c in ("wall_s", "mean_wall_s", "max_wall_s", "cpu_s",
                                                              "max_rss_mb")})
    return rounded.to_csv(index=False, lineterminator="\n")


def _seconds(values: pd.Series) -> pd.Series:
    return values.map(lambda v: "–" if pd.isna(v) else f"{v:.1f}")


def _md_table(frame: pd.DataFrame, columns: dict[str, str]) -> list[str]:
    """``frame``'s ``columns`` (name -> header) as markdown table lines, numbers with one decimal."""
    cells = frame[list(columns)].astype(object).copy()
    for c in cells.columns:
        if c in ("wall_s", "mean_wall_s", "max_wall_s", "cpu_s", "max_rss_mb"):
            cells[c] = _seconds(frame[c])
    lines = ["| " + " | ".join(columns.values()) + " |", "|" + "---|" * len(columns)]
    return lines + ("| " + cells.astype(str).agg(" | ".join, axis=1) + " |").tolist()


def to_markdown(table: pd.DataFrame) -> str:
    total = table[table["grouping"] == "all"].iloc[0]
    dataset = table["dataset"].iloc[0]
    wall = float(total["wall_s"])
    lines = [f"# Runtime on {dataset}", "",
             f"From the Snakemake benchmark of each of the {total['jobs']} jobs behind the default targets of "
             f"{dataset} (`<results_dir>/benchmarks/<rule>/…tsv`). Sum of job wall times: {wall:.1f} s "
             f"({datetime.timedelta(seconds=round(wall))}). Job wall seconds summed over jobs exceed the DAG's "
             "wall time when jobs run in parallel (`--cores` > 1, a cluster). CPU s (user + system of a job's "
             "processes) and max RSS (MB, its process tree, the largest over the jobs of a line) are Snakemake's "
             "samples, taken every 0.5 s early in a job and every 30 s later: lower bounds, and none for a job "
             "over before the first sample (column 'unsampled'; its CPU s count as 0 in the sums).", "",
             "## Per rule", ""]
    stats = {"jobs": "jobs", "wall_s": "wall s", "mean_wall_s": "mean s", "max_wall_s": "max s", "cpu_s": "CPU s",
             "max_rss_mb": "max RSS MB", "unsampled_jobs": "unsampled"}
    per_rule = table[table["grouping"].isin(["rule", "all"])]
    lines += _md_table(per_rule, {"name": "rule", **stats})
    lines += ["", "## Per paper", "",
              "Jobs that only one paper's rows, tables and figures need, per paper; `shared`: the dataset's own "
              "jobs (data generation, vocabulary, backbone pre-training, features) and the jobs several papers "
              "need (a run two papers' rows use, a table two paper files declare), each counted once.", ""]
    per_paper = table[table["grouping"].isin(["paper", "all"])]
    named = (per_paper["grouping"] == "paper") & (per_paper["name"] != SHARED)
    per_paper = per_paper.assign(label=per_paper["name"].where(~named, per_paper["title"] + " (`" + per_paper["name"]
                                                                      + "`)"))
    lines += _md_table(per_paper, {"label": "paper", "jobs": "jobs", "wall_s": "wall s", "cpu_s": "CPU s",
                                   "max_rss_mb": "max RSS MB", "unsampled_jobs": "unsampled",
                                   "jobs_by_rule": "jobs per rule"})
    return "\n".join(lines) + "\n"


def write_runtime(args) -> None:
    table = build(RuntimeSpec.read(args.spec))
    write_text(args.out_csv, to_csv(table))
    write_markdown(args.out_md, args.out_html, to_markdown(table))


def _arguments(parser) -> None:
    parser.add_argument("--spec", required=True, help="runtime.spec.json: jobs (rule, benchmark file, papers), "
                                                      "rules in pipeline order, papers ([key, name] pairs)")
    parser.add_argument("--out-csv", required=True)
    parser.add_argument("--out-md", required=True)
    parser.add_argument("--out-html", help="the same Markdown as a page (snakemake --report shows it inline)")


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, write_runtime, argv, dataset_config=False)


if __name__ == "__main__":
    main()
