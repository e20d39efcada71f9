"""Layering and registries: lower layers never import higher ones, no import of the package is
hidden inside a function, and every schema enum of a registered kind lists exactly the registry."""
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from methods.config import load_schema
from methods.model_kinds.method_schema import method_schema

PACKAGE = Path(__file__).resolve().parents[1] / "methods"

# data -> features -> models -> losses/metrics -> training/evaluation -> report -> plan/CLI,
# above a base of helpers every layer may use.
LAYERS = [
    ("base", ("methods", "methods.errors", "methods.io", "methods.paths", "methods.config", "methods.registry",
              "methods.runtime", "methods.cli", "methods.retries", "methods.placement", "methods.plugins",
              "methods.job_records", "methods.untrusted")),   # untrusted: reading files from the internet
    ("data", ("methods.data",)),
    ("features", ("methods.features",)),
    ("model kinds", ("methods.model_kinds",)),   # what the plan knows of a model, torch-free
    ("models", ("methods.models",)),
    ("losses/metrics", ("methods.losses", "methods.metrics")),
    ("training/evaluation", ("methods.training", "methods.scoring", "methods.released")),   # released: the authors' weights as a trained model
    ("report", ("methods.report",)),
    ("plan/CLI", ("methods.plan", "methods.fidelity", "methods.estimate", "methods.dry_run", "methods.api", "methods.train",
                  "methods.import_released",
                  "methods.evaluate", "methods.ensemble", "methods.benchmarks")),
]


def module_names() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def layer_of(module: str) -> int:
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    if best is None:
        raise AssertionError(f"module {module} has no layer: add it to LAYERS in tests/test_architecture.py")
    return best[0]


def test_every_module_has_a_layer():
    for name in module_names():
        layer_of(name)


def test_no_upward_import_in_a_fresh_interpreter():
    """Import every module in layer order in one fresh interpreter; a module whose import loads
    a module of a higher layer (directly or through others) is an upward import."""
    order = sorted(module_names(), key=lambda m: (layer_of(m), m))
    script = (
        "import importlib, json, sys\n"
        f"order = {order!r}\n"
        "loaded = {}\n"
        "for name in order:\n"
        "    before = set(sys.modules)\n"
        "    importlib.import_module(name)\n"
        "    loaded[name] = sorted(m for m in set(sys.modules) - before if m.startswith('methods'))\n"
        "print(json.dumps(loaded))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    upward = [f"{name} ({LAYERS[layer_of(name)][0]}) imports {dep} ({LAYERS[layer_of(dep)][0]})"
              for name, deps in loaded.items() for dep in deps if layer_of(dep) > layer_of(name)]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_package_import_hidden_in_a_function():
    hidden = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("methods"):
                        hidden.append(f"{path.relative_to(PACKAGE.parent)}:{inner.lineno} from {inner.module}")
                    if isinstance(inner, ast.Import) and any(a.name.startswith("methods") for a in inner.names):
                        hidden.append(f"{path.relative_to(PACKAGE.parent)}:{inner.lineno} import")
    assert not hidden, "imports inside functions:\n" + "\n".join(hidden)


def schema_enum(schema: dict, *path: str) -> list[str]:
    node = schema
    for key in path:
        node = node[key]
    return sorted(node["enum"])


@pytest.mark.parametrize("registry_path, schema_path", [
    (("methods.model_kinds", "MODEL_KINDS"), ("method", "properties", "model", "properties", "kind")),
    (("methods.losses.term_kinds", "TERM_KINDS"), ("method", "$defs", "loss_term", "properties", "kind")),
    (("methods.data.word_vectors", "WORD_INITS"), ("method", "$defs", "text_gru", "properties", "word_init")),
    (("methods.report.figure_kinds", "FIGURE_KINDS"),
     ("paper", "properties", "figures", "additionalProperties", "properties", "kind")),
])
def test_schema_enums_list_exactly_the_registered_names(registry_path, schema_path):
    import importlib

    registry = getattr(importlib.import_module(registry_path[0]), registry_path[1])
    schema = method_schema() if schema_path[0] == "method" else load_schema(schema_path[0])
    assert schema_enum(schema, *schema_path[1:]) == registry.names()


def test_the_other_registry_backed_schema_enums_follow_their_registries():
    """Set similarities, protocols, tokenizers and selection metrics are named in the schemas too."""
    from methods.data.tokenizers import SOURCE_TOKENIZERS, TOKENIZERS
    from methods.metrics.protocols import PROTOCOLS, STATISTICS_PROTOCOL
    from methods.metrics.declarations import METRICS
    from methods.models.set_similarity import SET_SIMILARITIES

    method, config = load_schema("method"), load_schema("config")
    assert schema_enum(method, "$defs", "set_similarity", "properties", "kind") == SET_SIMILARITIES.names()
    # every protocol a dataset can list; the embedding statistics are a table's, not a dataset's
    assert schema_enum(config, "$defs", "dataset", "properties", "protocols", "items") == \
        sorted(set(PROTOCOLS.names()) - {STATISTICS_PROTOCOL})
    assert set(schema_enum(config, "$defs", "stood_in_protocol")) <= set(PROTOCOLS.names())
    assert schema_enum(config, "$defs", "dataset", "properties", "tokenizer") == sorted(TOKENIZERS)
    assert schema_enum(load_schema("method_file"), "$defs", "tokenizer", "properties", "value") == sorted(SOURCE_TOKENIZERS)
    # a selection metric is a registered metric, or `last` (keep the final epoch)
    selection = schema_enum(method, "properties", "training", "properties", "selection_metric")
    assert set(selection) - {"last"} <= set(METRICS.names()) and "last" in selection


@pytest.mark.parametrize("kind", sorted(method_schema()["properties"]["model"]["properties"]["kind"]["enum"]))
def test_a_models_constructor_takes_its_declared_settings(kind):
    """A model config's keys are its constructor's keywords (``from_config`` passes them as they
    are): the declared settings, whose schema block is generated, are exactly the keywords the
    build context does not give; each keyword without a default is required, and a setting a
    config may leave out has the constructor's default as its declared default."""
    from methods.model_kinds import MODEL_KINDS
    from methods.models import MODELS, BuildContext, constructor_keywords

    block = method_schema()["$defs"][kind]
    declared = MODEL_KINDS.get(kind).declaration(kind)
    cls = MODELS.get(kind)
    cfg = {"kind": kind, "backbone": "cnn", "text": {"word_dim": 4, "hidden_dim": 4, "num_layers": 1,
                                                        "bidirectional": True, "word_init": "random"}}
    ctx = BuildContext(10, {"dim": 8, "regions": 3, "scales": {}}, {"cnn": {"arch": "resnet18", "weights": "none"}},
                       cnn=False)
    given = set(cls.context_arguments({k: v for k, v in cfg.items() if k in block["properties"]}, ctx))
    keywords = constructor_keywords(cls)
    assert set(keywords) == (set(block["properties"]) - {"kind"}) | given
    no_default = {name for name, p in keywords.items() if p.default is p.empty}
    assert no_default - given <= set(block["required"])
    assert set(block["properties"]) - {"kind"} == set(declared.settings)
    assert declared.defaults() == {name: keywords[name].default for name in declared.defaults()}


def test_the_text_blocks_keys_are_the_text_encoders_keywords():
    import inspect

    from methods.models.text import GRUTextEncoder

    block = method_schema()["$defs"]["text_gru"]
    keywords = set(inspect.signature(GRUTextEncoder.__init__).parameters) - {"self"}
    # word_init chooses the word vectors; the vocabulary's size and the source's epsilon come from the model
    assert keywords == (set(block["properties"]) - {"word_init"}) | {"vocab_size", "word_vectors", "l2norm_eps"}


def test_every_declared_figure_kind_has_one_drawing():
    from methods.report.figure_kinds import FIGURE_KINDS
    from methods.report.paper_figures import DRAWINGS

    assert DRAWINGS.names() == FIGURE_KINDS.names()


def test_the_snakefile_plans_figures_without_matplotlib():
    """The figure kinds the plan reads are declarations: a Snakemake start does not pay matplotlib's import."""
    code = "import sys, methods.report.figure_kinds; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent)
    assert out.stdout.strip() == "False"


def test_the_snakefile_builds_its_dag_without_torch():
    """Every module the workflow's rules import loads without torch (or torchvision): the DAG build
    of every snakemake process, a cluster job's included, would pay its ~2 s and ~500 MB. The
    modules are read from the rule files, so a new import there is checked too."""
    rules = sorted((PACKAGE.parent / "workflow" / "rules").glob("*.smk")) + [PACKAGE.parent / "Snakefile"]
    modules = sorted({a or b for path in rules
                      for a, b in re.findall(r"^\s*(?:from ([\w.]+) import|import ([\w.]+))", path.read_text(), re.M)})
    assert "methods.plan" in modules
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('torch', 'torchvision'):\n"
            "            raise ImportError('the DAG build imports ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            f"for m in {modules!r}:\n"
            "    __import__(m)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent)
    assert out.returncode == 0, out.stderr[-3000:]


def test_the_workflow_passes_snakemakes_linter():
    """``snakemake --lint`` (Snakemake's best practices for a workflow) finds nothing: it exits 1 on any lint."""
    from tests.conftest import local_snakemake_env

    out = subprocess.run([sys.executable, "-m", "snakemake", "--lint"], capture_output=True, text=True,
                         cwd=PACKAGE.parent, env=local_snakemake_env(), timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]


def test_model_schema_has_a_block_for_every_registered_model():
    from methods.models import MODELS

    schema = method_schema()
    assert set(MODELS.names()) <= set(schema["$defs"])


MUTABLE_AT_TOP = re.compile(r"^[A-Za-z_]\w*[ \t]*(?::[^=\n]+)?=[ \t]*(?:\{[ \t]*\}|\[[ \t]*\]|set\(\)|dict\(\)|list\(\)|"
                            r"(?:collections\.)?(?:defaultdict|Counter|OrderedDict)\()|^[ \t]*global[ \t]", re.M)


def test_the_rules_keep_no_mutable_state_of_their_own():
    """The workflow's files bind the plan's pure lookups; a module-level dict, list or set that an
    input function fills (a memo, a record of what was announced) belongs in ``methods/plan``."""
    files = sorted((PACKAGE.parent / "workflow" / "rules").glob("*.smk")) + [PACKAGE.parent / "Snakefile"]
    found = [f"{path.name}: {m.group(0).strip()}" for path in files for m in MUTABLE_AT_TOP.finditer(path.read_text())]
    assert found == []
    assert MUTABLE_AT_TOP.search("_SEEN = set()\n") and MUTABLE_AT_TOP.search("X: dict = {}\n") \
        and MUTABLE_AT_TOP.search("def f():\n    global X\n") and not MUTABLE_AT_TOP.search("X = [a for a in b]\n")
