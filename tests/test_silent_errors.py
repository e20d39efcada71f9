"""Mistakes that used to be accepted and give a wrong result under the right label are errors
when the plan is built, each one line naming the file and key: a misspelled key or name in a
method or paper file, a repeated seed, reported numbers filed where no table reads them, a
target for an unknown dataset, a precomputed split that is not the split's images."""
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from methods.config import REPO_ROOT, load_harness_config
from methods.data.checks import check_dataset_inputs
from methods.errors import HarnessError
from methods.plan import Plan
from methods.placement import check_resource_names
from tests.conftest import copy_workflow, planted_punkt, snakemake

CONFIG = REPO_ROOT / "config" / "config.yaml"
ML_PAPER = "methods/papers/metric_learning.yaml"  # VSE++ and VSRN rows on flickr, coco and synthetic


def load(rel: str) -> dict:
    return yaml.safe_load((REPO_ROOT / rel).read_text())


def papers_with(work: Path, paper: dict | None = None, vsrn: dict | None = None) -> list[str]:
    """The configured paper files with the metric-learning one replaced by ``paper`` (default: a
    copy), whose VSRN rows read ``vsrn`` (default: config/methods/vsrn.yaml)."""
    paper = paper if paper is not None else load(ML_PAPER)
    paper["methods"] = {m: str(REPO_ROOT / f) for m, f in paper["methods"].items()}
    if vsrn is not None:
        (work / "vsrn.yaml").write_text(yaml.safe_dump(vsrn))
        paper["methods"]["vsrn"] = str(work / "vsrn.yaml")
    (work / "paper.yaml").write_text(yaml.safe_dump(paper))
    return [str(work / "paper.yaml") if p == ML_PAPER else p for p in load("config/config.yaml")["papers"]]


def row(paper: dict, row_id: str) -> dict:
    return next(r for r in paper["tables"]["metric_learning"]["rows"] if r["id"] == row_id)


# -- method files: every layer, every name --------------------------------------------------------
def m_variant_key(m):  # the example: the nt_xent row would run triplet_hardest
    m["variants"]["nt_xent"]["bsae"] = m["variants"]["nt_xent"].pop("base")
    return r"vsrn\.yaml: invalid method_file config: variants\.nt_xent: Additional properties are not allowed \('bsae'"


def m_preset_name(m):  # the example
    m["presets"]["flikr"] = m["presets"].pop("flickr")
    return r"vsrn\.yaml: presets\.flikr: no dataset 'flikr' is configured \(datasets: coco, cocolabelwise, flickr, mirflickr, nuswide, synthetic, synthtags\)"


def m_variant_preset_name(m):  # VSRN SmoothAP on Flickr30K would decay its lr at COCO's epoch 75
    m["variants"]["smooth_ap"]["presets"]["flikr"] = m["variants"]["smooth_ap"]["presets"].pop("flickr")
    return r"vsrn\.yaml: variants\.smooth_ap\.presets\.flikr: no dataset 'flikr' is configured"


def m_key_in_unused_variant(m):  # no row applies the variant, so no resolved config shows the key
    m["variants"]["nt_xent_t05"] = {"description": "x", "base": {"loss": {"kind": "nt_xent", "tua": 0.05}}}
    return (r"vsrn\.yaml: variants\.nt_xent_t05\.base: invalid method layer config: loss: "
            r"Additional properties are not allowed \('tua' was unexpected\)")


def m_key_in_replaced_list(m):  # every preset replaces the base's stages: the typo never reaches a run
    for preset in ("coco", "flickr", "synthetic"):
        m["presets"][preset].setdefault("training", {})["stages"] = m["presets"]["flickr"]["training"]["stages"]
    m["base"]["training"]["stages"][0]["warmup_epoch"] = 1
    return (r"vsrn\.yaml: base: invalid method layer config: training\.stages\.0: "
            r"Additional properties are not allowed \('warmup_epoch' was unexpected\)")


def m_model_key_of_another_kind(m):  # a VSE++ key in a VSRN preset
    m["presets"]["coco"]["model"] = {"pre_fc_l2norm": True}
    return r"vsrn\.yaml: presets\.coco: invalid method layer config: model: Additional properties .*'pre_fc_l2norm'"


def m_switch_by_dataset_name(m):  # the ledger would compare Flickr30K runs with COCO's source value
    m["source"]["switches"]["l2norm_after_fc"]["by_dataset"] = {"flikr": False}
    return r"vsrn\.yaml: source\.switches\.l2norm_after_fc\.by_dataset\.flikr: no dataset 'flikr' is configured"


def m_deviation_dataset_name(m):
    m["source"]["deviations"]["coco_validation_set"]["datasets"] = ["cocoo"]
    return r"vsrn\.yaml: source\.deviations\.coco_validation_set\.datasets: no dataset 'cocoo' is configured"


def m_variant_drops_undeclared_switch(m):  # the margin switch would stay in NT-Xent rows' ledgers
    m["variants"]["nt_xent"]["source"]["switches"] = {"margn": None}
    return (r"vsrn\.yaml: variants\.nt_xent\.source\.switches\.margn: the method's source block declares no "
            r"switch 'margn' to update \(declared: .*margin")


METHOD_CASES = [m_variant_key, m_preset_name, m_variant_preset_name, m_key_in_unused_variant, m_key_in_replaced_list,
                m_model_key_of_another_kind, m_switch_by_dataset_name, m_deviation_dataset_name,
                m_variant_drops_undeclared_switch]


@pytest.mark.parametrize("case", METHOD_CASES, ids=[c.__name__[2:] for c in METHOD_CASES])
def test_method_file_mistakes_stop_the_plan(tmp_path, case):
    vsrn = load("config/methods/vsrn.yaml")
    message = case(vsrn)
    cfg = load_harness_config(CONFIG, {"papers": papers_with(tmp_path, vsrn=vsrn)})
    with pytest.raises(HarnessError) as err:
        Plan(cfg)
    assert re.search(message, str(err.value)) and "\n" not in str(err.value), str(err.value)


# -- paper files: every level, every name ---------------------------------------------------------
def p_override_key(p):  # dotted override naming no config key
    row(p, "vsrn_triplet_hardest")["overrides"] = {"model.bsae": 1}
    return (r"paper\.yaml: table metric_learning row 'vsrn_triplet_hardest': overrides: invalid method layer config: "
            r"model: Additional properties are not allowed \('bsae' was unexpected\)")


def p_ensemble_override_key(p):
    r = row(p, "vsrn_triplet_hardest")
    del r["method"]
    r["ensemble"] = [{"method": "vsrn"}, {"method": "vsrn", "overrides": {"training.run_stage": ["train"]}}]
    return r"row 'vsrn_triplet_hardest': ensemble\.1\.overrides: invalid method layer config: training: .*'run_stage'"


def p_row_key(p):
    row(p, "vsrn_nt_xent")["varaints"] = row(p, "vsrn_nt_xent").pop("variants")
    return r"paper\.yaml: invalid paper config: tables\.metric_learning\.rows\.\d+: .*\('varaints' was unexpected\)"


def p_reported_key(p):
    row(p, "vsrn_triplet_hardest")["reported"]["coco"]["coco_5k"]["sourse"] = "x"
    return r"tables\.metric_learning\.rows\.\d+\.reported\.coco\.coco_5k: .*\('sourse' was unexpected\)"


def p_figure_key(p):
    p["figures"]["metric_learning"]["tilte"] = "x"
    return r"paper\.yaml: invalid paper config: figures\.metric_learning: .*\('tilte' was unexpected\)"


def p_table_dataset(p):  # the table would be left out of every dataset's targets
    p["tables"]["metric_learning"]["datasets"] = ["flickr", "coco", "synthtic"]
    return r"paper\.yaml: tables\.metric_learning\.datasets: no dataset 'synthtic' is configured"


def p_reported_unknown_dataset(p):  # the example: shown as "not reported"
    r = row(p, "vsrn_triplet_hardest")
    r["reported"]["flikr"] = r["reported"].pop("coco")
    return (r"paper\.yaml: table metric_learning row 'vsrn_triplet_hardest': reported numbers under dataset 'flikr', "
            r"which the table is not built for \(tables\.metric_learning\.datasets: flickr, coco, synthetic\)")


def p_reported_dataset_not_of_the_table(p):
    p["tables"]["metric_learning"]["datasets"] = ["flickr", "synthetic"]
    return r"row 'vsrn_triplet_hardest': reported numbers under dataset 'coco', which the table is not built for"


def p_reported_protocol_not_evaluated(p):  # the example: a protocol the table does not evaluate
    r = row(p, "vsrn_triplet_hardest")
    r["reported"]["flickr"] = r["reported"].pop("coco")
    return (r"row 'vsrn_triplet_hardest': reported numbers under protocol 'coco_5k' for flickr, which "
            r"datasets\.flickr\.protocols does not evaluate \(f30k_1k\)")


def p_reported_metric_not_computed(p):
    row(p, "vsrn_triplet_hardest")["reported"]["coco"]["coco_5k"]["metrics"]["i2t_r20"] = 90.0
    return r"row 'vsrn_triplet_hardest': reported metrics \['i2t_r20'\] under protocol coco_5k, which reports"


def p_duplicate_row_seeds(p):  # the example: the same run twice, std 0
    row(p, "vsrn_nt_xent")["seeds"] = [0, 0]
    return r"paper\.yaml: invalid paper config: tables\.metric_learning\.rows\.\d+\.seeds: \[0, 0\] has non-unique"


PAPER_CASES = [p_override_key, p_ensemble_override_key, p_row_key, p_reported_key, p_figure_key, p_table_dataset,
               p_reported_unknown_dataset, p_reported_dataset_not_of_the_table, p_reported_protocol_not_evaluated,
               p_reported_metric_not_computed, p_duplicate_row_seeds]


@pytest.mark.parametrize("case", PAPER_CASES, ids=[c.__name__[2:] for c in PAPER_CASES])
def test_paper_file_mistakes_stop_the_plan(tmp_path, case):
    paper = load(ML_PAPER)
    message = case(paper)
    cfg = load_harness_config(CONFIG, {"papers": papers_with(tmp_path, paper)})
    with pytest.raises(HarnessError) as err:
        Plan(cfg)
    assert re.search(message, str(err.value)) and "\n" not in str(err.value), str(err.value)


# -- the harness config: seeds and the names it gives ---------------------------------------------
CONFIG_CASES = {
    "dataset_seeds": ({"datasets": {"synthetic": {"seeds": [0, 0]}}},
                      r"config\.yaml: invalid config config: datasets\.synthetic\.seeds: \[0, 0\] has non-unique"),
    "table_seeds": ({"datasets": {"synthetic": {"table_seeds": {"sgraf_t3": [1, 1]}}}},
                    r"datasets\.synthetic\.table_seeds\.sgraf_t3: \[1, 1\] has non-unique elements"),
    "resources_rule": ({"resources": {"trian": {"threads": 4, "mem_mb": 8000, "runtime": 60, "gpus": 1}}},
                       r"config\.yaml: invalid config config: resources: Additional properties are not allowed "
                       r"\('trian' was unexpected\)"),  # the train jobs would keep the defaults
    "default_dataset": ({"default_datasets": ["synthtic"]},  # would build nothing
                        r"^default_datasets\.0: no dataset 'synthtic' is configured"),
    "stand_in_dataset": ({"datasets": {"synthetic": {"stands_in_for": {"dataset": "flikr", "protocol": "f30k_1k"}}}},
                         r"^datasets\.synthetic\.stands_in_for\.dataset: no dataset 'flikr' is configured"),
    "stand_in_protocol": ({"datasets": {"synthetic": {"stands_in_for": {"dataset": "flickr", "protocol": "coco_5k"}}}},
                          r"^datasets\.synthetic\.stands_in_for\.protocol: coco_5k is not a protocol of flickr"),
    "pretrain_dataset": ({"backbones": {"resnet18_synthetic": {"pretrain": {"dataset": "synthtic"}}}},
                         r"^backbones\.resnet18_synthetic\.pretrain\.dataset: no dataset 'synthtic' is configured"),
    "crop_over_resize": ({"datasets": {"flickr": {"features": {"resize": 256, "crop": 288}}}},
                         r"^datasets\.flickr\.features\.crop: 288 is larger than resize 256 \(the shorter image "
                         r"side after resizing\), so the centre crop would pad the images with black; set crop <= resize$"),
    "region_backbone": ({"datasets": {"synthetic": {"features": {"region": {"backbone": "resnet18"}}}}},
                        r"^datasets\.synthetic\.features\.region\.backbone: no backbone 'resnet18' is configured"),
}


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_config_mistakes_stop_the_plan(case):
    overrides, message = CONFIG_CASES[case]
    with pytest.raises(HarnessError) as err:
        Plan(load_harness_config(CONFIG, overrides))
    assert re.search(message, str(err.value)) and "\n" not in str(err.value), str(err.value)


def test_an_ensemble_seed_that_repeats_a_run_is_an_error(tmp_path):
    """A repeated member trains at seed + 1000: seeds [0, 1000] would give run seed1000 twice."""
    paper = load("tests/data/ensemble_paper.yaml")
    paper["methods"] = {m: str(REPO_ROOT / f) for m, f in paper["methods"].items()}
    (tmp_path / "ens.yaml").write_text(yaml.safe_dump(paper))
    cfg = load_harness_config(CONFIG, {"papers": [str(tmp_path / "ens.yaml")],
                                       "datasets": {"synthetic": {"table_seeds": {"ensembletest": [0, 1000]}}}})
    with pytest.raises(HarnessError, match=r"ens\.yaml: table ensembletest row 'pair' on synthetic: seeds \[0, 1000\] "
                                           r"give the run \S+/seed1000 more than once"):
        Plan(cfg)


def test_a_target_for_an_unknown_dataset_is_an_error():
    plan = Plan(load_harness_config(CONFIG))
    with pytest.raises(HarnessError, match=r"unknown dataset 'foo' in target figures/reproduced_vs_reported_foo\.png; "
                                           r"configured: coco, cocolabelwise, flickr, mirflickr, nuswide, synthetic, synthtags"):
        plan.dataset_tables("foo", "figures/reproduced_vs_reported_foo.png")
    assert "metric_learning" in plan.dataset_tables("flickr", "figures/reproduced_vs_reported_flickr.png")
    # the other targets named by dataset: a table, a paper figure
    with pytest.raises(HarnessError, match=r"^unknown dataset 'foo' in target table1_foo; "):
        plan.table_spec("table1", "foo")
    with pytest.raises(HarnessError, match=r"^unknown dataset 'foo' in target sgraf_saf_weights_foo; "):
        plan.figure("sgraf_saf_weights", "foo")


# -- precomputed splits -------------------------------------------------------------------------
SPLIT_IMAGES = {"train": 6, "val": 3, "test": 3}


def fake_flickr(root: Path) -> dict:
    """A Flickr30K layout in miniature (Karpathy file, image files, BUTD-style precomputed regions
    of 2 x 4-d per image, different for every image); returns its config overrides."""
    images, precomp = root / "images", root / "precomp"
    images.mkdir(parents=True)
    precomp.mkdir()
    entries, rng = [], np.random.default_rng(0)
    for split, n in SPLIT_IMAGES.items():
        for i in range(n):
            name = f"{split}{i}.jpg"
            (images / name).write_bytes(b"\xff\xd8 not decoded before jobs start")
            entries.append({"filename": name, "split": split, "imgid": len(entries),
                            "sentences": [{"raw": f"a picture {k} of {split} {i}"} for k in range(5)]})
    (root / "dataset_flickr30k.json").write_text(json.dumps({"images": entries}))
    for harness, karpathy in (("train", "train"), ("dev", "val"), ("test", "test")):
        np.save(precomp / f"{harness}_ims.npy", rng.random((SPLIT_IMAGES[karpathy], 2, 4), dtype=np.float32))
        (precomp / f"{harness}_caps.txt").write_text(
            "".join(f"a picture {k} of {karpathy} {i}\n" for i in range(SPLIT_IMAGES[karpathy]) for k in range(5)))
    return {"results_dir": str(root / "results"),
            "datasets": {"flickr": {"karpathy_json": str(root / "dataset_flickr30k.json"), "images_dir": str(images),
                                    "precomp_dir": str(precomp), "precomp": {"n_regions": 2, "feature_dim": 4},
                                    "nltk_data": str(planted_punkt(root / "nltk_data"))}}}


def drop_last_test_image(precomp: Path) -> str:
    np.save(precomp / "test_ims.npy", np.load(precomp / "test_ims.npy")[:-1])
    lines = (precomp / "test_caps.txt").read_text().splitlines(keepends=True)
    (precomp / "test_caps.txt").write_text("".join(lines[:-5]))
    return (r"datasets\.flickr\.precomp_dir: \S+/precomp/test_ims\.npy holds 2 images \(2 rows\), but split 'test' "
            r"\(Karpathy \['test'\]\) has 3 images")


def one_row_per_caption_of_too_many_images(precomp: Path) -> str:  # the old duplicated layout, 4 images
    ims = np.load(precomp / "test_ims.npy")
    np.save(precomp / "test_ims.npy", np.repeat(np.concatenate([ims, ims[:1] + 1]), 5, axis=0))
    (precomp / "test_caps.txt").write_text("a caption\n" * 20)
    return r"precomp/test_ims\.npy holds 4 images \(20 rows, one per caption\), but split 'test' .* has 3 images"


def dev_linked_to_test(precomp: Path) -> str:  # Flickr30K's val and test both hold ~1,000 images
    for suffix in ("_ims.npy", "_caps.txt"):
        (precomp / f"dev{suffix}").unlink()
        (precomp / f"dev{suffix}").symlink_to(precomp / f"test{suffix}")
    return (r"datasets\.flickr\.precomp_dir: \S+/precomp/test_ims\.npy is the same file as \S+/precomp/dev_ims\.npy "
            r"\(same path, or same size and bytes at both ends\), but split 'test' is Karpathy \['test'\] and 'dev' is")


def dev_copied_from_train(precomp: Path) -> str:
    for suffix in ("_ims.npy", "_caps.txt"):
        shutil.copy(precomp / f"train{suffix}", precomp / f"dev{suffix}")
    return r"precomp/dev_ims\.npy is the same file as \S+/precomp/train_ims\.npy"


PRECOMP_CASES = [drop_last_test_image, one_row_per_caption_of_too_many_images, dev_linked_to_test, dev_copied_from_train]


@pytest.mark.parametrize("case", PRECOMP_CASES, ids=[c.__name__ for c in PRECOMP_CASES])
def test_precomputed_splits_must_hold_their_own_images(tmp_path, case):
    cfg = load_harness_config(CONFIG, fake_flickr(tmp_path))
    check_dataset_inputs(cfg, "flickr")  # the control: the layout as built passes
    message = case(tmp_path / "precomp")
    with pytest.raises(HarnessError) as err:
        check_dataset_inputs(cfg, "flickr")
    assert re.search(message, str(err.value)) and "\n" not in str(err.value), str(err.value)


def test_splits_drawn_from_the_same_karpathy_images_may_share_a_file(tmp_path):
    cfg = load_harness_config(CONFIG, fake_flickr(tmp_path))
    cfg["datasets"]["flickr"]["splits"] = {"train": ["train"], "dev": ["test"], "test": ["test"]}
    dev_linked_to_test(tmp_path / "precomp")
    check_dataset_inputs(cfg, "flickr")


@pytest.mark.parametrize("raw, what", [("", "empty"), ("  \t", "blank")])
def test_a_caption_without_words_is_named_when_the_dag_is_built(tmp_path, raw, what):
    cfg = load_harness_config(CONFIG, fake_flickr(tmp_path))
    path = tmp_path / "dataset_flickr30k.json"
    data = json.loads(path.read_text())
    data["images"][4]["sentences"][3]["raw"] = raw
    path.write_text(json.dumps(data))
    with pytest.raises(HarnessError) as err:
        check_dataset_inputs(cfg, "flickr")
    name = data["images"][4]["filename"]
    assert str(err.value) == (f"{path}: images[4] ({name}): sentences[3] is {what}; every caption must hold "
                              f"words (fix or remove the sentence)")
    data["images"][4]["sentences"][3]["raw"] = "a picture"   # the control
    data["images"][4]["sentences"].append({"raw": ""})       # a sixth sentence is never read
    path.write_text(json.dumps(data))
    check_dataset_inputs(cfg, "flickr")


def test_a_resource_no_job_reads_is_named():
    """The SLURM profile's keys and the rules' pass; a misspelled one, in either place, is named."""
    profile = yaml.safe_load((REPO_ROOT / "workflow/profiles/slurm/config.v8+.yaml").read_text())
    check_resource_names(list(profile["default-resources"]) + ["slurm_account", "tmpdir", "disk_mb"],
                         {"train_synthetic": ["gpu", "mem_mb", "runtime", "slurm_extra", "cpus_per_task"]})
    with pytest.raises(HarnessError) as err:
        check_resource_names(["mem_mb", "slurm_partiton"], {})
    assert str(err.value).startswith("default-resources (workflow profile or command line): unknown resource "
                                     "'slurm_partiton' (did you mean 'slurm_partition'?); known: ")
    with pytest.raises(HarnessError) as err:
        check_resource_names([], {"train_synthetic": ["runtime", "memory"]})
    assert "set-resources of rule train_synthetic (workflow profile or command line): unknown resource 'memory'" \
        in str(err.value)


# -- every class fails at `snakemake -n`, before any job ------------------------------------------
def dag_variant_preset(work):
    vsrn = load("config/methods/vsrn.yaml")
    message = m_variant_preset_name(vsrn)
    return {"papers": papers_with(work, vsrn=vsrn)}, "tables/table1_synthetic.csv", message


def dag_duplicate_seeds(work):
    return ({"datasets": {"synthetic": {"seeds": [0, 0]}}}, "tables/table1_synthetic.csv",
            r"datasets\.synthetic\.seeds: \[0, 0\] has non-unique elements")


def dag_reported_unknown_dataset(work):
    paper = load(ML_PAPER)
    message = p_reported_unknown_dataset(paper)
    return {"papers": papers_with(work, paper)}, "tables/metric_learning_synthetic.csv", message


def dag_figure_unknown_dataset(work):
    return ({}, "figures/reproduced_vs_reported_foo.png",
            r"unknown dataset 'foo' in target figures/reproduced_vs_reported_foo\.png; configured: coco, cocolabelwise, flickr, mirflickr, nuswide, synthetic, synthtags")


def dag_dev_is_train(work):
    cfg = fake_flickr(work / "flickr")
    cfg["results_dir"] = "results"
    return cfg, "tables/sgraf_t1_flickr.csv", dev_copied_from_train(work / "flickr/precomp")


# one case per class (each run is a Snakemake start, ~20 s); the other instances are checked above
DAG_CASES = [dag_variant_preset, dag_duplicate_seeds, dag_reported_unknown_dataset, dag_figure_unknown_dataset,
             dag_dev_is_train]


@pytest.mark.e2e
@pytest.mark.parametrize("case", DAG_CASES, ids=[c.__name__[4:] for c in DAG_CASES])
def test_snakemake_dry_run_stops_with_one_line(tmp_path, case):
    work = copy_workflow(tmp_path)
    cfg, target, message = case(work)
    (work / "case.yaml").write_text(yaml.safe_dump(cfg))
    proc = snakemake(work, target, "-n", "--configfile=case.yaml", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert re.search(message, out), out[-3000:]
    assert not (work / "results").exists() and not (work / "tables").exists() and not (work / "figures").exists()
