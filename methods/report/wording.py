"""What the tables, figures and reports say of a dataset whose numbers are not the paper's: the
data kinds (a spec's ``dataset_kind``, ``methods.plan.datasets.data_kind``) that are not
comparable, the scope of a smoke run, and the sentences and title notes built from them."""
from __future__ import annotations

# The data kinds whose numbers are not comparable with a paper's, and what the tables and figures say of them
INCOMPARABLE_DATA = {"synthetic": "synthetic data", "smoke": "smoke run"}
# what a smoke run (``methods.plan.datasets.smoke_dataset``) runs, as its tables and reports say it
SMOKE_SCOPE = "the first images of each split, a few batches per epoch, a few epochs per training stage"


def data_caveat(dataset_kind: str, reported_dataset: str) -> str:
    """The start of a sentence saying why a dataset's numbers are not the paper's ('' for real data)."""
    if dataset_kind == "synthetic":
        return f"The data is synthetic (standing in for {reported_dataset})"
    if dataset_kind == "smoke":
        return f"This is a smoke run of {reported_dataset} ({SMOKE_SCOPE})"
    return ""


def incomparable_note(dataset_kind: str) -> str:
    """What a figure's title adds for data whose numbers are not comparable with the paper's."""
    if dataset_kind not in INCOMPARABLE_DATA:
        return ""
    return f" — {INCOMPARABLE_DATA[dataset_kind]}, not comparable with the paper"
