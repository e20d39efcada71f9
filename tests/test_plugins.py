"""A model of one's own from a folder outside the package (``methods.plugins``): the worked example of
docs/adding-a-method.md, laid out as a plug-in folder, is planned, trained, evaluated and tabled by the workflow
and found by the generic tests, while no file of the package changes."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import methods.model_kinds
from methods.errors import HarnessError
from methods.plugins import PLUGINS_ENV, check_loaded, load_plugin_modules, resolve_folders
from tests.conftest import REPO, SNAKEMAKE, copy_workflow, local_snakemake_env
from tests.test_readme import worked_example_files

DECLARATION = "methods/model_kinds/mean_regions.py"
# what a region model's table needs of the synthetic dataset's jobs: data, backbone, features,
# regions, vocabulary and the dataset's config
SYNTHETIC_DATA = [f"results/synthetic/{name}" for name in
                  ("data", "backbones", "features", "precomp", "vocab.json", "dataset.json")]


ORACLE = "tests/oracles/mean_regions.py"


def plugin_folder(root: Path, oracle: bool = True) -> Path:
    """The worked example's files in a folder of one's own, at the paths they have in the repository;
    without the model's oracle file unless ``oracle``."""
    for path, text in worked_example_files().items():
        if path == ORACLE and not oracle:
            continue
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return root


def package_files() -> dict[str, tuple[int, int]]:
    """Every file of the package, workflow and config: path -> (size, mtime)."""
    out = {}
    for folder in ("methods", "workflow", "config", "tests"):
        for path in (REPO / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                out[str(path.relative_to(REPO))] = (path.stat().st_size, path.stat().st_mtime_ns)
    return out


def test_the_worked_example_is_four_files_and_its_oracle_at_their_paths_in_the_repository():
    files = worked_example_files()
    assert sorted(files) == ["config/methods/mean_regions.yaml", DECLARATION, "methods/models/mean_regions.py",
                             "methods/papers/mean_regions.yaml", ORACLE]


def test_a_plugin_module_may_not_take_the_name_of_a_module_of_the_package(tmp_path, monkeypatch):
    (tmp_path / "methods" / "model_kinds").mkdir(parents=True)
    (tmp_path / "methods" / "model_kinds" / "sgraf.py").write_text("raise AssertionError('must not run')\n")
    monkeypatch.setenv(PLUGINS_ENV, str(tmp_path))
    with pytest.raises(HarnessError, match=r"sgraf\.py: methods\.model_kinds already has a module 'sgraf'"):
        load_plugin_modules("methods.model_kinds", methods.model_kinds.__path__)


def test_the_plan_refuses_plugin_folders_this_process_did_not_load(tmp_path):
    """The registries were imported without the folder: the config's models would be unknown here."""
    with pytest.raises(HarnessError, match=f"plugins: the config names .* imported with {PLUGINS_ENV}=\\(unset\\)"):
        check_loaded([str(tmp_path)], "methods.model_kinds")
    with pytest.raises(HarnessError, match="plugins: plug-in folder 'nowhere/at_all' is not a directory"):
        resolve_folders(["nowhere/at_all"])


@pytest.mark.e2e
def test_a_model_from_a_folder_of_ones_own_is_trained_and_tabled_without_a_file_of_the_package(tiny_dag, tmp_path):
    """The worked example's files in a temporary folder: the workflow (a copy of its rules and config, the
    package imported from the repository) plans and builds the new table on the tiny synthetic
    data (the session DAG's, copied with its times: the model's run and table are all there is to
    do), its training and evaluation jobs building the model in their own processes; the generic
    model tests find the model; without its oracle the lookup the float64 and description tests make
    names the missing file, and with it they pass."""
    before = package_files()
    plugin = plugin_folder(tmp_path / "my_models", oracle=False)
    (tmp_path / "work").mkdir()
    work = copy_workflow(tmp_path / "work")
    for data in SYNTHETIC_DATA:
        copy = shutil.copytree if (tiny_dag / data).is_dir() else shutil.copy2
        (work / data).parent.mkdir(parents=True, exist_ok=True)
        copy(tiny_dag / data, work / data)
    paper = plugin / "methods" / "papers" / "mean_regions.yaml"
    config = ["--configfile", str(REPO / "tests" / "data" / "tiny.yaml"),
              "--config", f'plugins=["{plugin}"]', f'papers=["{paper}"]']
    table = "tables/mean_regions_t1_synthetic.csv"

    def snakemake(*args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([*SNAKEMAKE, *args, *config], cwd=work,
                              env=local_snakemake_env(), capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        return proc

    planned = snakemake("-n", table)
    assert re.search(r"^train_synthetic\s+1\b", planned.stdout, re.M), planned.stdout[-4000:]
    assert not re.search(r"^(generate_synthetic|pretrain_backbone|features_synthetic|region_features|vocab)\s",
                         planned.stdout, re.M), planned.stdout[-4000:]
    assert "results/synthetic/runs/mean_regions-" in planned.stdout   # its run, named by the model's method
    snakemake(table)
    rows = pd.read_csv(work / table)
    rsum = rows[(rows["row"] == "mean_regions") & (rows["metric"] == "rsum")]
    assert len(rsum) == 1 and 0 <= rsum["reproduced"].iloc[0] <= 600, rows.to_string()[:2000]
    runs = list((work / "results" / "synthetic" / "runs").glob("mean_regions-*/seed0/eval_test.json"))
    assert len(runs) == 1

    env = {**os.environ, PLUGINS_ENV: str(plugin)}
    # the oracle it still lacks: found by the registered name, its absence is named (test_float64 and
    # test_descriptions ask for it through tests.oracles.oracle_part)
    lookup = subprocess.run([sys.executable, "-c", "from tests.oracles import oracle_of; oracle_of('mean_regions')"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert lookup.returncode != 0, lookup.stdout
    assert "model 'mean_regions' is registered but has no oracle file tests/oracles/mean_regions.py" in lookup.stderr
    # with its oracle in the folder, the generic tests find the model by its registered name and pass
    plugin_folder(plugin, oracle=True)
    tested = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", "-rA",
                             "-k", "mean_regions", "tests/test_registries.py", "tests/test_architecture.py",
                             "tests/test_float64.py", "tests/test_descriptions.py"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=900)
    out = tested.stdout + tested.stderr
    passed = ["tests/test_registries.py::test_model_forward_backward_and_block_scoring[mean_regions]",
              "tests/test_architecture.py::test_a_models_constructor_takes_its_declared_settings[mean_regions]",
              "tests/test_float64.py::test_float64_scores_equal_the_per_pair_reference[mean_regions]",
              "tests/test_descriptions.py::test_description_of_a_hand_built_config[mean_regions]"]
    assert all(f"PASSED {test}" in out for test in passed), out[-4000:]
    assert package_files() == before
