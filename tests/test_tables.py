"""Tables and the reproduced-vs-reported scatter, through their command lines: seed aggregation,
differences and verdicts worked by hand, columns from the metric declarations."""
import csv
import json
from pathlib import Path

import pytest

from methods.errors import HarnessError
from methods.job_records import RowAggregate
from methods.metrics.protocols import get_protocol
from methods.metrics.declarations import METRICS
from methods.report import aggregate, figure, table, table_rows, verdicts
from tests.records import run_evaluation, table_row, table_spec

TOLERANCE = {"recall": 2.0, "rsum": 6.0, "rank": 1.0}
TRAINING_CHECK = {"min_gain_share": 0.05, "min_score_spread": 1e-4, "saturated_share": 0.99}


def _metrics(**overrides):
    values = {m: 10.0 for m in get_protocol("f30k_1k").metrics}
    values.update(overrides)
    return values


def _eval(tmp_path, name, seed, ensemble_size=1, **overrides):
    path = tmp_path / "evals" / name / f"eval_{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run_evaluation(seed, [{"protocol": "f30k_1k", "metrics": _metrics(**overrides)}],
                                              f"cfg{seed}", ensemble_size=ensemble_size)))
    return str(path)


def _row(tmp_path, name, evals):
    out = tmp_path / "rows" / f"{name}.json"
    aggregate.main(["--out", str(out), *evals])
    return str(out)


def _table(tmp_path, rows, row_files, kind="real"):
    spec = tmp_path / "t.spec.json"
    spec.write_text(json.dumps({"table": "t", "dataset": "f30k", "dataset_kind": kind, "titles": ["a paper"],
                                "protocols": ["f30k_1k"], "tolerance": TOLERANCE, "training_check": TRAINING_CHECK,
                                "rows": [table_row(**r) for r in rows]}))
    out_csv, out_md = tmp_path / "t.csv", tmp_path / "t.md"
    table.main(["--spec", str(spec), "--out-csv", str(out_csv), "--out-md", str(out_md), *row_files])
    with open(out_csv) as f:
        return list(csv.DictReader(f)), out_md.read_text()


LEDGER = [{"code": "org/repo (model.py)", "switches": [], "deviations": []}]


def _spec_row(name, reported=None, ensemble_size=1, reported_ensemble=1, ledger=LEDGER, compare_to=None):
    rep = {"f30k_1k": {"ensemble_size": reported_ensemble, "metrics": reported, "source": "paper, Table 1"}}
    return {"id": name, "label": name.upper(), "paper": "p", "not_reported": None, "ensemble_size": ensemble_size,
            "reported": rep if reported else {}, "ledger": ledger, "compare_to": compare_to}


@pytest.fixture
def two_seeds(tmp_path):
    """i2t_r1 over seeds 50.0 and 53.0: mean 51.5, population std 1.5."""
    return _row(tmp_path, "two", [_eval(tmp_path, "two", 0, i2t_r1=50.0), _eval(tmp_path, "two", 1, i2t_r1=53.0)])


def test_two_seed_cell_worked_by_hand(tmp_path, two_seeds):
    # reported 53.5: |51.5 - 53.5| = 2.0, exactly the R@K tolerance -> within; 49.0 -> 2.5 off -> outside
    cells, md = _table(tmp_path, [_spec_row("two", {"i2t_r1": 53.5, "i2t_r5": 7.5})], [two_seeds])
    r1 = next(c for c in cells if c["metric"] == "i2t_r1")
    assert (r1["reproduced"], r1["reproduced_std"], r1["n_seeds"], r1["seeds"]) == ("51.5", "1.5", "2", "0 1")
    assert (r1["reported"], r1["difference"], r1["tolerance"], r1["verdict"]) == ("53.5", "-2.0", "2.0", "within")
    assert r1["run_configs"] == "cfg0 cfg1" and r1["reported_source"] == "paper, Table 1"
    r5 = next(c for c in cells if c["metric"] == "i2t_r5")
    assert (r5["reproduced"], r5["reproduced_std"], r5["difference"], r5["verdict"]) == \
        ("10.0", "0.0", "2.5", "outside")
    t2i = next(c for c in cells if c["metric"] == "t2i_r1")
    assert (t2i["reported"], t2i["difference"], t2i["verdict"]) == ("", "", "not reported")
    # the cells' verdicts differ: the row's verdict column names each with its metrics
    assert "| TWO | 0 1 | 1 | 51.5 ± 1.5 / 53.5 | 10.0 ± 0.0 / 7.5 | 10.0 ± 0.0 |" in md
    assert md.splitlines()[[i for i, l in enumerate(md.splitlines()) if l.startswith("| TWO")][0]].endswith(
        "| within: i2t_r1; outside: i2t_r5 |")
    assert "| row | seeds | ens. | " + " | ".join(EXPECTED_COLUMNS) + " | verdict |" in md

    cells, _ = _table(tmp_path, [_spec_row("two", {"i2t_r1": 49.0})], [two_seeds])
    assert next(c for c in cells if c["metric"] == "i2t_r1")["verdict"] == "outside"


def test_one_seed_has_no_std_and_verdicts_not_comparable(tmp_path):
    one = _row(tmp_path, "one", [_eval(tmp_path, "one", 7, i2t_r1=52.9)])
    cells, _ = _table(tmp_path, [_spec_row("one", {"i2t_r1": 52.9})], [one])
    r1 = next(c for c in cells if c["metric"] == "i2t_r1")
    assert (r1["reproduced"], r1["reproduced_std"], r1["n_seeds"], r1["difference"]) == ("52.9", "", "1", "0.0")

    cells, _ = _table(tmp_path, [_spec_row("one", {"i2t_r1": 52.9})], [one], kind="synthetic")
    assert next(c for c in cells if c["metric"] == "i2t_r1")["verdict"] == "not comparable (synthetic data)"
    cells, _ = _table(tmp_path, [_spec_row("one", {"i2t_r1": 52.9}, reported_ensemble=2)], [one])
    assert next(c for c in cells if c["metric"] == "i2t_r1")["verdict"] == "not comparable (ensemble of 2 vs 1)"


EXPECTED_COLUMNS = ["i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum", "i2t_medr", "t2i_medr"]


def test_columns_are_the_protocols_in_table_metrics(tmp_path, two_seeds):
    cells, md = _table(tmp_path, [_spec_row("two")], [two_seeds])
    expected = [m for m in get_protocol("f30k_1k").metrics if METRICS.get(m).in_table]
    assert expected == EXPECTED_COLUMNS   # i2t_meanr: computed for every run, not a column
    assert [c["metric"] for c in cells] == expected
    # no reported number anywhere: no verdict column, one line says so
    assert "| row | seeds | ens. | " + " | ".join(expected) + " |" in md and "| verdict |" not in md
    assert {c["reported_source"] for c in cells} == {"no reported number in the sources"}
    for c in cells:
        assert float(c["tolerance"]) == TOLERANCE[METRICS.get(c["metric"]).tolerance]
    assert verdicts.tolerance_for("t2i_medr", TOLERANCE) == 1.0 and verdicts.tolerance_for("rsum", TOLERANCE) == 6.0


def test_aggregate_keeps_every_metric_of_the_protocol(tmp_path, two_seeds):
    agg = json.loads(Path(two_seeds).read_text())
    cells = agg["protocols"]["f30k_1k"]
    assert set(cells) == set(get_protocol("f30k_1k").metrics)  # i2t_meanr too
    assert cells["i2t_r1"] == {"mean": 51.5, "std": 1.5, "values": [50.0, 53.0], "seeds": [0, 1]}


def test_paired_difference_and_t_test_worked_by_hand(tmp_path):
    # i2t_r1 per seed: source 50, 52, 54; switched 51, 55, 54 -> differences 1, 3, 0
    base = _row(tmp_path, "base", [_eval(tmp_path, "base", s, i2t_r1=v) for s, v in enumerate([50.0, 52.0, 54.0])])
    alt = _row(tmp_path, "alt", [_eval(tmp_path, "alt", s, i2t_r1=v) for s, v in reversed(list(enumerate([51.0, 55.0, 54.0])))])
    switched = [{"code": "org/repo (model.py)", "deviations": [],
                 "switches": [{"name": "axis", "key": "model.axis", "runs": "feature", "source": "region",
                               "behaviour": "normalises over dim 1"}]}]
    cells, md = _table(tmp_path, [_spec_row("base"), _spec_row("alt", ledger=switched, compare_to="base")], [base, alt])
    r1 = next(c for c in cells if c["row"] == "alt" and c["metric"] == "i2t_r1")
    # mean 4/3; population std sqrt(14/9) = 1.247; paired t = (4/3) / (sqrt(7/3) / sqrt(3)) with 2 degrees
    # of freedom, whose two-sided p has the closed form 1 - t / sqrt(2 + t^2)
    t = (4 / 3) / ((7 / 3) ** 0.5 / 3 ** 0.5)
    assert (r1["compared_to"], r1["paired_difference"], r1["paired_difference_std"]) == ("base", "1.33", "1.25")
    assert float(r1["paired_p"]) == pytest.approx(1 - t / (2 + t * t) ** 0.5, abs=5e-4)  # 3 significant digits
    r5 = next(c for c in cells if c["row"] == "alt" and c["metric"] == "i2t_r5")
    assert (r5["paired_difference"], r5["paired_p"]) == ("0.0", "")  # the same for every seed: no test
    assert all(c["compared_to"] == "" and c["paired_difference"] == "" for c in cells if c["row"] == "base")
    assert {c["non_source_switches"] for c in cells if c["row"] == "alt"} == {"model.axis=feature (source: region)"}
    assert "(Δ +1.33 ± 1.25)" in md
    assert "- ALT vs BASE (3 seeds): i2t_r1 0.27 · i2t_r5 – ·" in md
    assert "- ALT: `model.axis` = feature (source: region)" in md and "- BASE: none (every switch at the source value)" in md
    assert "- `model.axis` = region: normalises over dim 1" in md


def test_compared_rows_need_the_same_seeds(tmp_path):
    base = _row(tmp_path, "base", [_eval(tmp_path, "base", s) for s in (0, 1)])
    alt = _row(tmp_path, "alt", [_eval(tmp_path, "alt", s) for s in (0, 2)])
    spec = table_spec([_spec_row("base"), _spec_row("alt", compare_to="base")], dataset="f30k", titles=["a paper"],
                      protocols=["f30k_1k"], tolerance=TOLERANCE, training_check=TRAINING_CHECK)
    aggregates = {"base": RowAggregate.read(base), "alt": RowAggregate.read(alt)}
    with pytest.raises(HarnessError, match=r"their seeds differ \(\[0, 2\] vs \[0, 1\]\)"):
        table_rows.build_rows(spec, aggregates)


def test_scatter_keeps_only_percent_scale_metrics(tmp_path):
    path = tmp_path / "t_f30k.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=table_rows.COLUMNS, lineterminator="\n", restval="")
        writer.writeheader()
        for metric, reported in [("i2t_r1", "52.9"), ("t2i_r10", "80.0"), ("i2t_r5", ""), ("rsum", "409.8"),
                                 ("i2t_medr", "1"), ("t2i_medr", "2.0")]:
            writer.writerow({"row": "a", "metric": metric, "reproduced": "50.0", "reported": reported,
                             "verdict": "outside" if reported else "not reported"})
    percent = {"i2t_r1", "t2i_r10", "i2t_r5"}
    assert {m for m in ("i2t_r1", "t2i_r10", "i2t_r5", "rsum", "i2t_medr", "t2i_medr")
            if METRICS.get(m).scale == "percent"} == percent
    out = tmp_path / "scatter.png"
    assert figure.scatter([str(path)], str(out), "f30k") == 2  # i2t_r1, t2i_r10 (i2t_r5 has no reported number)
    assert out.stat().st_size > 0


def test_a_reported_only_row_shows_the_papers_cells_beside_the_runs(tmp_path, two_seeds):
    """A row the harness does not run: its reported cells only, no reproduced value, verdict
    'reported only', and why it is not run; the scatter leaves it out."""
    baseline = {**_spec_row("caan", {"i2t_r1": 70.1, "rsum": 478.6}, ensemble_size=0, ledger=[]),
                "reported_only": "method not built", "seeds": [], "members": []}
    cells, md = _table(tmp_path, [_spec_row("two", {"i2t_r1": 53.5}), baseline], [two_seeds])
    mine = [c for c in cells if c["row"] == "caan"]
    assert [c["metric"] for c in mine] == ["i2t_r1", "rsum"]
    assert {(c["reproduced"], c["reproduced_std"], c["n_seeds"], c["ensemble_size"], c["difference"], c["verdict"])
            for c in mine} == {("", "", "", "", "", "reported only")}
    assert [c["reported"] for c in mine] == ["70.1", "478.6"] and mine[0]["reported_source"] == "paper, Table 1"
    assert next(c for c in cells if c["row"] == "two" and c["metric"] == "i2t_r1")["verdict"] == "within"
    line = next(line for line in md.splitlines() if line.startswith("| CAAN"))
    assert line.startswith("| CAAN [1] |  |  | — / 70.1 |") and line.endswith("|  | — / 478.6 |  |  |")
    assert "Verdict of every reproduced cell with a reported number: **within**." in md
    assert "- [1] not run: method not built" in md                 # why, in the row's note
    out = tmp_path / "scatter.png"
    figure.main(["--dataset", "f30k", "--out", str(out), str(tmp_path / "t.csv")])
    assert out.exists()


def test_one_verdict_for_the_table_where_every_row_shares_it(tmp_path):
    one = _row(tmp_path, "one", [_eval(tmp_path, "one", 7, i2t_r1=52.9)])
    other = _row(tmp_path, "other", [_eval(tmp_path, "other", 7)])
    cells, md = _table(tmp_path, [_spec_row("one", {"i2t_r1": 52.9, "t2i_r1": 40.0}), _spec_row("other")],
                       [one, other], kind="synthetic")
    assert "Verdict of every reproduced cell with a reported number: **not comparable (synthetic data)**." in md
    assert "| verdict |" not in md and "not comparable" not in md.split("## Protocol")[1].split("Sources")[0]
    assert "| ONE | 7 | 1 | 52.9 / 52.9 | 10.0 | 10.0 | 10.0 / 40.0 |" in md


def test_the_rsum_of_a_source_that_prints_every_recall_is_computed_and_marked(tmp_path):
    """Diao et al. print six recalls and no RSUM: the reported RSUM is their sum, judged like a
    printed one and marked as computed; a printed RSUM is kept as printed."""
    recalls = {"i2t_r1": 77.8, "i2t_r5": 94.1, "i2t_r10": 97.4, "t2i_r1": 58.5, "t2i_r5": 83.0, "t2i_r10": 88.8}
    one = _row(tmp_path, "one", [_eval(tmp_path, "one", 0, rsum=498.0)])
    cells, md = _table(tmp_path, [_spec_row("one", recalls)], [one])
    rsum = next(c for c in cells if c["metric"] == "rsum")
    assert (rsum["reported"], rsum["difference"], rsum["verdict"]) == ("499.6", "-1.6", "within")  # 499.6 by hand
    assert rsum["reported_computed"] == "sum of the printed i2t_r1, i2t_r5, i2t_r10, t2i_r1, t2i_r5, t2i_r10"
    assert "498.0 / 499.6Σ" in md and "Σ: a sum the source does not print" in md
    printed = {**recalls, "rsum": 499.0}   # a printed RSUM that is not the sum of the printed recalls stays
    cells, md = _table(tmp_path, [_spec_row("one", printed)], [one])
    rsum = next(c for c in cells if c["metric"] == "rsum")
    assert (rsum["reported"], rsum["reported_computed"]) == ("499.0", "") and "Σ" not in md
    partial = {k: v for k, v in recalls.items() if k != "t2i_r10"}   # a part missing: nothing computed
    cells, _ = _table(tmp_path, [_spec_row("one", partial)], [one])
    assert next(c for c in cells if c["metric"] == "rsum")["reported"] == ""


def test_the_ledger_has_one_section_per_source_code(tmp_path):
    """Two rows of one code whose deviations differ share a section; a deviation of some of its
    rows names them."""
    shared = {"name": "vocabulary", "source": "train+dev", "ours": "train", "why": "no dev data"}
    own = {"name": "saf_batchnorm", "source": "per caption", "ours": "per block", "why": "speed"}
    ledger = lambda *devs: [{"code": "org/repo (model.py)", "switches": [], "deviations": list(devs)}]  # noqa: E731
    a = _row(tmp_path, "a", [_eval(tmp_path, "a", 0)])
    b = _row(tmp_path, "b", [_eval(tmp_path, "b", 0)])
    _, md = _table(tmp_path, [_spec_row("a", ledger=ledger(shared, own)), _spec_row("b", ledger=ledger(shared))], [a, b])
    assert md.count("### org/repo (model.py)") == 1
    assert "- vocabulary. Source code: train+dev. Here: train. Why: no dev data.\n" in md
    assert "- saf_batchnorm. Source code: per caption. Here: per block. Why: speed. Rows: A." in md
