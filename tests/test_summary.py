"""The dataset summary (tables/summary_<dataset>.md): each run row's main metric against chance
from its aggregate's training checks, whether it trained, and each paper's claims; and the plan's
summary spec names every run row of the papers' tables and their claims tables."""
import argparse

import pandas as pd
import pytest

from methods.config import REPO_ROOT, load_harness_config
from methods.errors import HarnessError
from methods.io import write_json
from methods.plan import Plan
from methods.report import summary

CHECK = {"min_gain_share": 0.05, "min_score_spread": 1e-4, "saturated_share": 0.99}
CHANCE = 15.89


def check(value: float, spread: float = 0.3) -> dict:
    return {"main_metric": "rsum", "value": value, "chance": CHANCE, "max": 600.0,
            "gain_share": (value - CHANCE) / (600.0 - CHANCE), "score_spread": spread}


def aggregate(values: list[float]) -> dict:
    return {"seeds": list(range(len(values))), "ensemble_size": 1, "config_hashes": ["cfg"], "protocols": {},
            "training_checks": [{"seed": s, "split": "test", "protocol": "synthetic_test", "check": check(v)}
                                for s, v in enumerate(values)]}


def spec(tmp_path, claims_csv=None) -> dict:
    rows = [("good", "a trained row", [300.0, 310.0]), ("flat", "a plateau", [20.0, 310.0])]
    for row_id, _, values in rows:
        write_json(tmp_path / f"{row_id}.json", aggregate(values))
    return {"dataset": "synthetic", "dataset_kind": "synthetic", "reported_dataset": "flickr",
            "protocol": "synthetic_test", "checked_protocols": ["synthetic_test"], "training_check": CHECK,
            "papers": [{"paper": "p", "paper_name": "Someone et al., VENUE 2024", "claims": claims_csv,
                        "tables": [{"table": "t1", "shared_with": ["Other et al., VENUE 2023"], "rows": [
                            {"id": r, "label": label, "seeds": [0, 1], "ensemble_size": 1,
                             "aggregate": str(tmp_path / f"{r}.json")} for r, label, _ in rows]}]}]}


def test_rows_against_chance_and_the_claims_verdicts(tmp_path):
    claims = tmp_path / "claims.csv"
    pd.DataFrame([{"claim": "good_beats_flat", "compare": "good.rsum > flat.rsum", "protocol": "synthetic_test",
                   "reported_difference": 12.5, "reproduced_difference": 142.5, "ci_low": float("nan"),
                   "ci_high": float("nan"), "verdict": "undetermined: flat did not train (synthetic data)"}]
                 ).to_csv(claims, index=False)
    s = spec(tmp_path, str(claims))
    write_json(tmp_path / "spec.json", s)
    summary.write_summary(argparse.Namespace(spec=str(tmp_path / "spec.json"), out_csv=str(tmp_path / "s.csv"),
                                             out_md=str(tmp_path / "s.md"), out_html=str(tmp_path / "s.html")))
    rows = pd.read_csv(tmp_path / "s.csv").set_index("row")
    # the mean over seeds, the population std, and the mean over chance, worked by hand
    assert rows.loc["good", "value"] == 305.0 and rows.loc["good", "value_std"] == 5.0
    assert rows.loc["good", "times_chance"] == round(305.0 / CHANCE, 1) == 19.2
    # the mean of the seeds' shares of the way from chance to the maximum, in percent
    assert rows.loc["good", "gain_share"] == round(100 * (305.0 - CHANCE) / (600 - CHANCE), 1) == 49.5
    assert rows.loc["good", "trained"] == "trained"
    # one seed of 'flat' is at 20 RSUM: (20 - 15.89) / (600 - 15.89) = 0.7 % of the way, below 5 %
    assert rows.loc["flat", "trained"] == "did not train" and "seed 0 synthetic_test" in rows.loc["flat", "training_check"]
    md = (tmp_path / "s.md").read_text()
    assert "1 trained, 1 did not train, 0 unknown" in md
    assert ("Lowest trained row: p / t1 / good at 49.5 % of the way from chance to the maximum "
            "(rsum 305.0, chance 15.9, 19.2 × chance)") in md
    assert "| t1 | a trained row | 0 1 | rsum 305.0 ± 5.0 | 19.2 | 49.5 | trained |" in md
    # (20 - 15.89) / 584.11 = 0.7 %, (310 - 15.89) / 584.11 = 50.4 %: mean 25.5 %
    assert "| t1 | a plateau | 0 1 | rsum 165.0 ± 145.0 | 10.4 | 25.5 | **did not train**: seed 0" in md
    assert "| good_beats_flat | `good.rsum > flat.rsum` | synthetic_test | +12.50 | +142.50 | – | undetermined: flat did not train (synthetic data) |" in md
    assert "Claims: 1 undetermined." in md and "standing in for flickr" in md
    assert "- Table t1 is shared with Other et al., VENUE 2023: its rows are listed under the paper" in md
    page = (tmp_path / "s.html").read_text()   # the same text, as a page
    assert "<td><strong>did not train</strong>: seed 0" in page and "<code>good.rsum &gt; flat.rsum</code>" in page


def test_the_plan_summarises_every_run_row_and_the_claims_tables():
    plan = Plan(load_harness_config(REPO_ROOT / "config" / "config.yaml"))
    s = plan.summary_spec("synthetic").to_json()
    assert s["protocol"] == "synthetic_test"
    expected = {(t, r.id) for (t, d), tbl in plan.tables.items() if d == "synthetic" for r in tbl.rows if r.runs_models}
    listed = [(p["paper"], t["table"], r["id"]) for p in s["papers"] for t in p["tables"] for r in t["rows"]]
    assert {(t, r) for _, t, r in listed} == expected and len(listed) == len(expected)   # each row once
    # table1 (VSE++, SCAN, MVSA and SGRAF rows): each row under the paper whose file declares it
    table1 = {p["paper"]: [r["id"] for t in p["tables"] if t["table"] == "table1" for r in t["rows"]] for p in s["papers"]}
    assert table1["scan"] == ["scan_ensemble"] and "vsepp_resnet152_ft" in table1["vsepp"]
    assert all(plan.row("table1", "synthetic", r).paper == p for p, ids in table1.items() for r in ids)
    shared = next(t for p in s["papers"] if p["paper"] == "scan" for t in p["tables"] if t["table"] == "table1")
    assert len(shared["shared_with"]) == 3 and plan.papers["scan"] not in shared["shared_with"]
    assert {p["paper"] for p in s["papers"] if p["claims"]} == {p for p, d in plan.claims if d == "synthetic"}
    assert "tables/summary_synthetic.md" in plan.default_targets()
    assert plan.summary_spec("synthtags").protocol == "labelwise_test"
    with pytest.raises(HarnessError, match="tables/summary_nowhere.md"):
        plan.summary_spec("nowhere")
