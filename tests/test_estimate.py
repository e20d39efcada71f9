"""The GPU-time estimate of a table (methods.estimate) and the benchmark that measures its costs
(methods.benchmarks.run_cost): workloads counted by hand from the method files, prices from
hand-written costs, and a benchmark entry that the estimate reads back."""
import copy

import pytest
import torch
import yaml

from methods import api
from methods.benchmarks import run_cost
from methods.config import REPO_ROOT, load_yaml
from methods.estimate import COSTS_FILE, cost_key, estimate, load_costs, table_work
from methods.plan import Plan
from tests.conftest import config_with_every_table

COCO_IMAGES = {"train": 113_287, "dev": 5_000, "testall": 5_000}   # Karpathy: train + restval, val, test


@pytest.fixture(scope="module")
def plan():
    return Plan(config_with_every_table())


def test_runs_share_a_cost_key_unless_a_step_may_cost_otherwise():
    coco = api.harness_config()["datasets"]["coco"]
    cfg = api.experiment_config("sgraf", "coco")
    other = copy.deepcopy(cfg)
    other["training"]["stages"][0].update(lr=1e-3, epochs=3)
    other["training"]["stages"].append({**other["training"]["stages"][0], "name": "more"})
    other["training"]["num_workers"] = 1
    assert cost_key(other, coco) == cost_key(cfg, coco) and cost_key(cfg, coco).startswith("sgraf-")
    for path, value in [(("training", "batch_size"), 64), (("model", "embed_dim"), 512), (("training", "amp"), True)]:
        changed = copy.deepcopy(cfg)
        changed[path[0]][path[1]] = value
        assert cost_key(changed, coco) != cost_key(cfg, coco), path
    finetuned = copy.deepcopy(cfg)
    finetuned["training"]["stages"][0]["finetune_backbone"] = True
    assert cost_key(finetuned, coco) != cost_key(cfg, coco)
    # a dataset of other shapes is priced by measurements of its own
    fewer_regions = {**coco, "precomp": {**coco["precomp"], "n_regions": 10}}
    assert cost_key(cfg, fewer_regions) != cost_key(cfg, coco)


def test_a_tables_work_counts_each_run_once_from_its_stages(plan):
    """COCO table 1: VSE++ fine-tuned is 30 frozen + 15 fine-tuned epochs over 566,435 captions
    (config/methods/vsepp.yaml), 3 seeds; SGRAF's row is an ensemble of an SGR and an SAF run."""
    work = table_work(plan, "table1", "coco", COCO_IMAGES)
    table = plan.table("table1", "coco")
    runs = {(exp, row.member_seed(s, i)) for row in table.rows for s in row.seeds for i, exp in enumerate(row.members)}
    assert len(work) == len(runs) == len({(w.exp, w.seed) for w in work})
    vsepp_ft = next(r for r in table.rows if r.id == "vsepp_resnet152_ft")
    stages = yaml.safe_load((REPO_ROOT / "config/methods/vsepp.yaml").read_text())["base"]["training"]["stages"]
    frozen = sum(s["epochs"] for s in stages if not s["finetune_backbone"])
    tuned = sum(s["epochs"] for s in stages if s["finetune_backbone"])
    for w in (w for w in work if w.exp == vsepp_ft.members[0]):
        assert w.train_items == {"frozen": frozen * 566_435, "finetune": tuned * 566_435}
        assert w.validations == {"frozen": frozen, "finetune": tuned}
        assert (w.val_images, w.test_images, w.texts_per_image) == (1000, (5000,), 5)
    assert len([w for w in work if w.exp == vsepp_ft.members[0]]) == len(vsepp_ft.seeds)


def entry(key, device, frozen=None, finetune=None):
    stages = {k: v for k, v in (("frozen", frozen), ("finetune", finetune)) if v}
    return {"key": key, "method": key.split("-")[0], "runs": "coco table1", "device": device, "torch": "2.x",
            "date": "2026-11-27", "commit": "abc1234", "stages": stages}


def test_the_estimate_prices_measured_runs_and_names_the_others(plan):
    work = table_work(plan, "table1", "coco", COCO_IMAGES)
    sgr = next(w for w in work if w.method == "sgraf")
    cost = {"train_s_per_item": 2e-3, "encode_s_per_image": 1e-3, "score_s_per_mpair": 0.4}
    costs = [entry(sgr.key, "GPU A", frozen=cost), entry(sgr.key, "GPU B", frozen=cost)]
    est = estimate(work, costs)
    same = [w for w in work if w.key == sgr.key]
    epochs = sgr.validations["frozen"]
    # by hand: items x 2 ms; each validation 1000 images x 1 ms + 1000 x 5000 pairs x 0.4 s per million
    assert est.seconds["training"] == pytest.approx(len(same) * sgr.train_items["frozen"] * 2e-3)
    assert est.seconds["validation"] == pytest.approx(len(same) * epochs * (1.0 + 2.0))
    assert est.seconds["test"] == pytest.approx(len(same) * (5.0 + 5000 * 25000 / 1e6 * 0.4))
    assert est.device == "GPU A" and est.priced == len(same)
    assert sum(est.unmeasured.values()) == len(work) - len(same) and "vsepp" in est.unmeasured
    text = "\n".join(est.lines("tables/table1_coco.csv", "MEASURE"))
    assert "(estimate)" in text and "measured on GPU A (2026-11-27" in text
    assert "not measured on GPU A, so not estimated: " in text and "`MEASURE`" in text
    # a fine-tuned run priced without its fine-tune stage's costs is not priced at all
    vsepp = next(w for w in work if w.method == "vsepp" and "finetune" in w.train_items)
    assert estimate([vsepp], [entry(vsepp.key, "GPU A", frozen=cost)]).priced == 0


def test_with_no_measurement_the_dry_run_says_so(plan):
    est = estimate(table_work(plan, "table1", "coco", COCO_IMAGES), [])
    (head, missing) = est.lines("tables/table1_coco.csv", "MEASURE")
    assert "GPU-hours" not in head + missing
    assert missing.startswith("  not measured on any GPU, so not estimated: ")


def test_the_committed_costs_file_is_valid():
    assert isinstance(load_costs(COSTS_FILE), list)


def test_the_benchmark_measures_a_run_and_its_entry_prices_it(tmp_path):
    """One synthetic SGRAF run configuration measured on the CPU (two steps), written to a costs
    file as a GPU's would be, and read back by the estimate."""
    harness = config_with_every_table()
    plan = Plan(harness)
    configs = run_cost.run_configs(plan, "synthetic", ["sgraf_t1"])
    key, (cfg, exps) = next(iter(configs.items()))
    torch.set_num_threads(1)
    stages = run_cost.measure(cfg, harness["datasets"]["synthetic"], harness["backbones"], torch.device("cpu"),
                              harness["scoring"]["block_elements"], steps=2, warmup=1, n_images=20)
    assert set(stages) == {"frozen"}
    assert all(v > 0 for v in stages["frozen"].values())
    costs = tmp_path / "costs.yaml"
    costs.write_text("# header kept\nmeasurements: []\n")
    run_cost.write(str(costs), [{**entry(key, "GPU X"), "stages": stages}])
    run_cost.write(str(costs), [{**entry(key, "GPU X"), "stages": stages}])   # the same key and device: replaced
    assert costs.read_text().startswith("# header kept\n") and len(load_yaml(costs)["measurements"]) == 1
    # --missing-only skips what the file holds for the device measuring, and only that
    assert run_cost.measured_keys(str(costs), "GPU X") == {key} and run_cost.measured_keys(str(costs), "GPU Y") == set()
    work = [w for w in table_work(plan, "sgraf_t1", "synthetic", {"train": 500, "dev": 100, "test": 200})
            if w.key == key]
    est = estimate(work, load_costs(costs))
    assert est.priced == len(work) > 0 and est.seconds["training"] > 0


def test_each_stage_kind_is_timed_at_its_own_rate_and_a_diverging_measurement_fails(monkeypatch):
    """A fine-tuning stage is timed at its own learning rate, not the first stage's (MVSA's random
    ResNet-152 fine-tuned at the frozen stage's 5e-4 diverged within six steps on an H200); a
    measurement whose training leaves non-finite weights is an error, never a cost entry."""
    harness = config_with_every_table()
    plan = Plan(harness)
    ds = harness["datasets"]["synthetic"]
    cfg = next(c for c, _ in run_cost.run_configs(plan, "synthetic", ["table1"]).values()
               if {s["finetune_backbone"] for s in c["training"]["stages"]} == {False, True})
    rates = []
    make_optimizer = run_cost.make_optimizer
    monkeypatch.setattr(run_cost, "make_optimizer", lambda kind, groups, lr, wd, betas: rates.append(lr) or
                        make_optimizer(kind, groups, lr, wd, betas))
    torch.set_num_threads(1)
    run_cost.measure(cfg, ds, harness["backbones"], torch.device("cpu"), harness["scoring"]["block_elements"],
                     steps=1, warmup=1, n_images=4)
    stages = cfg["training"]["stages"]
    assert rates == [next(s["lr"] for s in stages if not s["finetune_backbone"]),
                     next(s["lr"] for s in stages if s["finetune_backbone"])]
    assert rates[0] != rates[1]   # else this would not tell the two apart
    exploding = copy.deepcopy(cfg)
    for stage in exploding["training"]["stages"]:
        stage["lr"] = float("inf")
    with pytest.raises(RuntimeError, match="training diverged"):
        run_cost.measure(exploding, ds, harness["backbones"], torch.device("cpu"),
                         harness["scoring"]["block_elements"], steps=1, warmup=1, n_images=4)


def test_the_benchmarks_pages_gpu_memory_column_is_the_measured_peaks():
    """The cost table of docs/benchmarks.md gives, per method (and stage kind), the most GPU memory
    any of its measured configurations allocated, in GiB: read from config/measured_costs.yaml, not
    typed."""
    import re

    groups = {"VSE++": [["vsepp:frozen"], ["vsepp:finetune"]], "VSRN": [["vsrn:frozen"]], "SCAN": [["scan:frozen"]],
              "SGRAF": [["sgraf:frozen"]], "set embeddings": [["set_embeddings:frozen", "set_embeddings_grid:frozen"],
                                                              ["set_embeddings_grid:finetune"]],
              "label-wise": [["label_wise:frozen"]]}
    peaks: dict[str, int] = {}
    for entry in load_costs():
        for kind, stage in entry["stages"].items():
            key = f"{entry['method']}:{kind}"
            peaks[key] = max(peaks.get(key, 0), stage.get("train_peak_gpu_mib", 0), stage.get("eval_peak_gpu_mib", 0))
    page = (REPO_ROOT / "docs" / "benchmarks.md").read_text()
    for name, parts in groups.items():
        (line,) = [ln for ln in page.splitlines() if ln.startswith(f"| {name}") and re.search(r"ms \| [\d. /]+ GiB \|", ln)]
        shown = [float(v) for v in re.search(r"\| ([\d. /]+) GiB \|", line).group(1).split(" / ")]
        assert shown == [round(max(peaks[k] for k in keys) / 1024, 1) for keys in parts], name


def test_a_bert_grid_run_is_measured_on_a_stand_in_of_its_bert_at_its_own_image_size(tmp_path, monkeypatch):
    """The run-cost benchmark measures the rows an unset BERT folder or optional CNN leaves out (random
    weights of the architecture: the configured folder's config.json, else bert-base-uncased's), and
    shows a fine-tuned CNN images of the run's training.images size, not the dataset's crop."""
    from tests.test_bert_text import bert_folder

    folder, _ = bert_folder(tmp_path / "tiny_bert", pieces=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"])
    harness = config_with_every_table()
    harness["text_encoders"]["bert_synthetic"] = {"kind": "bert", "path": str(folder)}   # as if the DAG had pre-trained it
    stand_ins = run_cost.bert_stand_ins(harness, tmp_path / "stand_ins")
    assert (tmp_path / "stand_ins/bert_synthetic/config.json").read_text() == (folder / "config.json").read_text()
    assert yaml.safe_load((tmp_path / "stand_ins/bert_base_uncased/config.json").read_text())["hidden_size"] == 768
    cfg = api.experiment_config("vse_infinity_grid_bert", "synthetic")
    cfg["training"]["images"]["size"] = 40
    sides = []
    images = run_cost.RandomImages
    monkeypatch.setattr(run_cost, "RandomImages", lambda n, side: sides.append(side) or images(n, side))
    torch.set_num_threads(1)
    stages = run_cost.measure(cfg, harness["datasets"]["synthetic"], harness["backbones"], torch.device("cpu"), {},
                              steps=1, warmup=0, n_images=4, text_encoders=stand_ins)
    assert set(stages) == {"finetune"} and all(v > 0 for v in stages["finetune"].values())
    assert sides and set(sides) == {40} and harness["datasets"]["synthetic"]["features"]["crop"] != 40
