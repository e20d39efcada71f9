"""Build ``tables/<table>_<dataset>.csv`` (+ ``.md``): per row, protocol and metric the reproduced
value (mean, std over seeds), the reported value, their difference and a verdict.

Verdicts: ``within`` / ``outside`` the configured tolerance; ``not comparable`` when the data
is synthetic or the reported row is an ensemble of another size than the reproduced one (a
single model is never judged against an ensemble number); ``not reported`` when the sources
give no number for the cell; ``reported only`` for a row the harness does not run (the paper's
number beside ours, no reproduced value; the row's ``reported_only`` says why); ``did not train``
for every cell of a row one of whose runs (or ensemble members) did not learn
(``methods.metrics.training_check``, with the spec's ``training_check`` thresholds: its main metric
near chance, or near-constant scores). Columns ``trained`` (yes / no / unknown: evaluations written
before the check) and ``training_check`` (what did not train: seed, protocol, main metric vs
chance) say so for every cell; the markdown names those rows under each protocol's table, and the
metric columns every row of which is saturated (within ``saturated_share`` of the metric's best:
they cannot tell the rows apart).

Each row also says what its runs really ran (``ran``: the backbone or image input, the
dimensions and the schedule, from the resolved run configs; ``methods.model_kinds.description``),
beside its label, which names the paper setting it stands for; on synthetic data the two differ.
The markdown keys it to the label as a note (``[n]``) under the tables, says a verdict every
judged cell shares once above them (else a verdict column per row), groups the rows of one source
of reported numbers, and lists the environments the rows' models trained in
(``methods.report.environment``). A sum a source does not print but whose parts it prints (RSUM
from six printed recalls) is reported as their sum, marked as computed (``reported_computed``).

Each row also carries its deviation ledger (``methods.fidelity``): the config switches it runs
at a value other than the source code's, and the source behaviours not reproduced. A row that
declares ``compare_to`` gets its paired difference from that row (same seeds): mean and
population std over seeds of (row - compared row), and the paired t-test's p (scipy).

The columns of a protocol are the metrics it reports that are declared ``in_table``
(``methods.metrics``), in the protocol's order; each metric's declaration names its tolerance.
"""
from __future__ import annotations

from pathlib import Path

from methods.cli import run_command
from methods.io import write_text
from methods.job_records import RowAggregate, TableSpec
from methods.report.html import write_markdown
from methods.report.markdown_table import to_markdown
from methods.report.table_rows import build_rows, to_csv


def write_table(args) -> None:
    """Reads the spec and the row aggregates, writes the table's CSV and Markdown (and its page)."""
    spec = TableSpec.read(args.spec)
    aggregates = {Path(p).stem: RowAggregate.read(p) for p in args.rows}
    rows = build_rows(spec, aggregates)
    write_text(args.out_csv, to_csv(rows))
    write_markdown(args.out_md, args.out_html, to_markdown(spec, rows))


def _arguments(parser) -> None:
    parser.add_argument("--spec", required=True)
    parser.add_argument("--out-csv", required=True)
    parser.add_argument("--out-md", required=True)
    parser.add_argument("--out-html", help="the same Markdown as a page (snakemake --report shows it inline)")
    parser.add_argument("rows", nargs="*", help="row aggregate JSONs, named <row id>.json (none for a reported-only row)")


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, write_table, argv, dataset_config=False)


if __name__ == "__main__":
    main()
