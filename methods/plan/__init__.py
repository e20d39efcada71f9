"""The plan: harness config + paper files -> datasets, experiments, runs, ensembles, tables, figures.

``method_files``: a method file's layers -> one experiment's resolved config; ``datasets``: what a
dataset's config tells the plan (test splits, data kind, stand-ins); ``records``: the frozen
records (experiment, row, table, figure, claim); ``papers``: paper files loaded and checked into
those records; ``plan``: the ``Plan`` the Snakefile and the entry points query (rows, runs,
paths, the specs the report jobs read).
"""
from methods.plan.datasets import data_kind, reported_dataset, reported_shown, stand_in_protocols, test_splits
from methods.plan.method_files import apply_layer, check_method_file, resolve_method_config
from methods.plan.papers import ALL_TABLES_CONFIG, PaperCatalogue
from methods.plan.plan import Plan
from methods.plan.records import ENSEMBLE_SEED_STRIDE, Claim, Experiment, Figure, Row, Table

__all__ = ["ALL_TABLES_CONFIG", "ENSEMBLE_SEED_STRIDE", "Claim", "Experiment", "Figure", "PaperCatalogue", "Plan",
           "Row", "Table", "apply_layer", "check_method_file", "data_kind", "reported_dataset", "reported_shown",
           "resolve_method_config", "stand_in_protocols", "test_splits"]
