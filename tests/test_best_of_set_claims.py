"""Best-of-set claims (``best(a, b, c).m == a``): the machine form read as "a above the best of the
others", the paired bootstrap of a − max(others) against a direct implementation on the same draws
with the share of resamples in which a is the best, and the claims job on planted rows (supported,
contradicted, inconclusive; the paper's printed numbers judged apart)."""
import copy

import numpy as np
import pytest
import yaml
from scipy.special import ndtr, ndtri

from methods.config import REPO_ROOT, load_harness_config
from methods.data.datasets import dataset_payload
from methods.errors import HarnessError
from methods.job_records import ClaimsSpec
from methods.metrics.protocols import get_protocol
from methods.metrics.query_units import protocol_units
from methods.metrics.relevance import CaptionsOfImage
from methods.metrics.retrieval import retrieval_metrics
from methods.plan import Plan
from methods.report import claims as claims_job
from methods.report.bootstrap import paired_difference_interval, side_value
from methods.report.claim_form import parse_comparison
from tests.conftest import config_with_every_table
from tests.records import claim_record, claims_spec_record, planted_claim_row

TPI = 5


def test_best_of_a_set_reads_the_row_above_the_best_of_the_others():
    c = parse_comparison("best(a, b_2, c).i2t_r1 == b_2", "here")
    assert (c.left, c.right, c.left_reduce, c.right_reduce, c.best) == (("b_2",), ("a", "c"), "mean", "max", "b_2")
    assert c.text() == "best(a, b_2, c).i2t_r1 == b_2" and c.rows == ("b_2", "a", "c")
    lower = parse_comparison(" best( a ,b ).t2i_meanr==a ", "here")   # lower is better: the lowest of the others above a
    assert (lower.left, lower.right, lower.left_reduce, lower.right_reduce) == (("b",), ("a",), "min", "mean")
    for bad, message in (("best(a, b).rsum == c", "'c', is not in the set"), ("best(a, a).rsum == a", "twice"),
                         ("best(a, b).rsumm == a", "unknown metric 'rsumm'"), ("best(a).rsum == a", "is not")):
        with pytest.raises(HarnessError, match=message):
            parse_comparison(bad, "claims.x.compare")


def test_a_side_of_the_best_of_its_rows_hand_worked():
    sums = np.array([[[60.0, 20.0]], [[30.0, 70.0]]])   # two rows, one metric, two images
    counts = np.array([[1.0, 1.0]])
    assert side_value(sums, counts, reduce="max") == pytest.approx(50.0)   # row means 40 and 50
    assert side_value(sums, counts, reduce="min") == pytest.approx(40.0)
    picked = np.array([0, 0])                                              # image 0 twice: 60 vs 30
    assert side_value(sums[:, :, picked], counts[:, picked], reduce="max") == pytest.approx(60.0)


def units(scores):
    return protocol_units(scores, get_protocol("synthetic_test"), CaptionsOfImage(TPI), ["rsum"])


def planted(rng, n, strength):
    return rng.normal(size=(n, n * TPI)) + strength * np.repeat(np.eye(n), TPI, axis=1)


def test_best_of_set_bootstrap_equals_a_direct_implementation_with_the_share_of_resamples():
    rng = np.random.default_rng(0)
    a, b, c = (units(planted(rng, 15, s)) for s in (1.6, 1.4, 0.8))
    got = paired_difference_interval(a.sums[None], np.stack([b.sums, c.sums]), a.counts, n_resamples=400, seed=3,
                                     reduce_b="max")
    counts = a.counts

    def value(u, picked):
        return sum(u.sums[m, picked].sum() / counts[m, picked].sum() for m in range(len(counts)))

    def stat(picked):
        return value(a, picked) - max(value(b, picked), value(c, picked))
    n = 15
    draws = np.random.default_rng(3).integers(0, n, (400, n))
    theta_b = np.array([stat(i) for i in draws])
    theta = stat(np.arange(n))
    z0 = ndtri(((theta_b < theta).sum() + (theta_b <= theta).sum()) / 800)
    jack = np.array([stat(np.delete(np.arange(n), j)) for j in range(n)])
    d = jack.mean() - jack
    accel = (d ** 3).sum() / (6 * (d ** 2).sum() ** 1.5)
    ends = [np.percentile(theta_b, 100 * ndtr(z0 + (z0 + z) / (1 - accel * (z0 + z)))) for z in (ndtri(0.025),
                                                                                                   ndtri(0.975))]
    assert got["estimate"] == pytest.approx(theta, rel=1e-12)
    assert got["estimate"] == pytest.approx(a.value("rsum") - max(b.value("rsum"), c.value("rsum")), rel=1e-12)
    assert (got["low"], got["high"]) == (pytest.approx(ends[0], rel=1e-12), pytest.approx(ends[1], rel=1e-12))
    assert got["share_above"] == pytest.approx(np.mean(theta_b > 0))


@pytest.fixture(scope="module")
def harness():
    return config_with_every_table()


@pytest.fixture(scope="module")
def judged(tmp_path_factory, harness):
    """Rows ``strong``, ``mid``, ``twin`` (strong's model, another draw) and ``weak`` on 40 test
    images, one seed each; best-of-set claims over them; printed numbers for two more rows."""
    root = tmp_path_factory.mktemp("best")
    rng = np.random.default_rng(1)
    protocol = get_protocol("synthetic_test")
    rsum, rows = {}, {}
    for row_id, strength in (("strong", 2.0), ("mid", 1.0), ("twin", 2.0), ("weak", 0.4)):
        scores = planted(rng, 40, strength)
        rsum[row_id] = retrieval_metrics(scores.astype(np.float32).astype(np.float64))["rsum"]
        rows[f"t/{row_id}"] = planted_claim_row(root, row_id, scores, protocol, {protocol.name: {
            "source": f"paper, row '{row_id}'", "ensemble_size": 1,
            "metrics": {"rsum": {"strong": 500, "mid": 400}.get(row_id, 300)}}})

    def claim(claim_id, members, best, printed=None):
        return claim_record(claim_id, f"best({', '.join(members)}).rsum == {best}", protocol.name, printed)
    printed = {"camp": {protocol.name: {"source": "paper, row 'camp'", "ensemble_size": 1, "metrics": {"rsum": 450}}},
               "rdan": {protocol.name: {"source": "paper, row 'rdan'", "ensemble_size": 1, "metrics": {"rsum": 520}}}}
    spec = claims_spec_record(rows, [claim("strong_best", ["mid", "strong", "weak"], "strong", {"camp": printed["camp"]}),
                                     claim("weak_best", ["mid", "strong", "weak"], "weak"),
                                     claim("strong_best_of_twin", ["strong", "twin", "weak"], "strong"),
                                     claim("strong_best_printed_rival", ["mid", "strong"], "strong", printed)])
    frame = claims_job.claims_frame(ClaimsSpec.from_json(spec, "test"), dataset_payload(harness, "synthetic"))
    return frame.set_index("claim"), rsum, ClaimsSpec.from_json(spec, "test")


def test_best_of_set_claims_on_planted_rows(judged):
    frame, rsum, _ = judged
    strong = frame.loc["strong_best"]
    assert strong["reproduced_difference"] == pytest.approx(rsum["strong"] - max(rsum["mid"], rsum["weak"]), abs=1e-3)
    assert strong["right_reproduced"] == pytest.approx(rsum["mid"], abs=1e-3)   # the best of the others
    assert strong["rival"] == "mid"
    assert strong["verdict"] == "supported" and strong["p_holds"] > 0.99
    assert strong["reported_difference"] == pytest.approx(500 - 400)           # printed: the best of the run rows
    weak = frame.loc["weak_best"]
    assert weak["verdict"] == "contradicted" and weak["p_holds"] < 0.01
    twin = frame.loc["strong_best_of_twin"]
    assert twin["verdict"] == "inconclusive" and 0.01 < twin["p_holds"] < 0.99


def test_the_printed_numbers_are_judged_apart_with_the_rows_only_printed(judged):
    frame, _, spec = judged
    assert frame.loc["strong_best", "printed_verdict"] == (
        "holds on the printed numbers of 4 rows: strong 500, best of the others camp 450")
    assert frame.loc["strong_best", "printed_rows"] == "camp"
    rival = frame.loc["strong_best_printed_rival"]
    assert rival["printed_verdict"] == "does not hold on the printed numbers of 4 rows: strong 500, best of the " \
                                       "others rdan 520"
    assert rival["verdict"] == "supported"        # ours compares the rows the harness runs
    text = claims_job.markdown(frame.reset_index(), spec)
    assert "supported; P(best) 1.00, best of the others mid" in text and "- `strong_best_printed_rival` (synthetic_test): does not hold" in text


def test_a_set_member_left_out_for_its_files_is_compared_on_its_printed_number(tmp_path):
    """SGRAF's state-of-the-art claim on Flickr30K without PFAN's box files: PFAN's row is left out
    of the table, and the claim compares the other rows, PFAN among the printed ones."""
    precomp = tmp_path / "f30k_precomp"
    precomp.mkdir()
    cfg = load_harness_config(REPO_ROOT / "config" / "config.yaml", {"datasets": {"flickr": {"precomp_dir": str(precomp)}}})
    claims = {c.id: c for c in Plan(cfg).claims[("sgraf", "flickr")]}
    claim = claims["sgraf_best_i2t_r1"]
    assert claim.comparison.text() == "best(sgraf, scan_ensemble, vsrn_single, bfan, vsrn_ensemble, imram).i2t_r1 == sgraf"
    assert list(claim.printed) == ["camp", "sgm", "rdan", "mmca", "caan", "dprnn", "pfan"]
    assert claim.printed["pfan"]["f30k_1k"]["metrics"]["i2t_r1"] == 70.0   # SGRAF Table 1's PFAN row
    for split in ("train", "dev", "test"):   # with the box files, PFAN is compared on its runs
        (precomp / f"{split}_boxes.npy").write_bytes(b"")
    claim = {c.id: c for c in Plan(cfg).claims[("sgraf", "flickr")]}["sgraf_best_i2t_r1"]
    assert "pfan" in claim.comparison.rows and "pfan" not in claim.printed


def test_a_best_of_set_claim_the_plan_cannot_check_is_one_line_naming_it(harness, tmp_path):
    paper = yaml.safe_load((REPO_ROOT / "methods/papers/sgraf.yaml").read_text())
    base = paper["claims"]["sgraf_best_i2t_r1"]
    for change, message in (({"printed_rows": ["camp"], "compare": "sgraf.rsum > saf.rsum"}, "only a best-of-set or rank claim"),
                            ({"printed_rows": ["bfan"]}, "row 'bfan' is in the compared set too"),
                            ({"printed_rows": ["nobody"]}, "has no row 'nobody'"),
                            ({"printed_rows": []}, "printed_rows")):
        paper["claims"] = {"the_claim": {**base, **change}}
        path = tmp_path / "sgraf.yaml"
        path.write_text(yaml.safe_dump(paper, allow_unicode=True))
        cfg = copy.deepcopy(harness)
        cfg["papers"] = [p for p in cfg["papers"] if not p.endswith("sgraf.yaml")] + [str(path)]
        with pytest.raises(HarnessError, match=message) as err:
            Plan(cfg)
        assert "\n" not in str(err.value)
