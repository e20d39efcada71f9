"""The figure kinds a paper file can declare (``figures: {<name>: {kind: ...}}``) and what the DAG
must give each beyond the figure spec and the table's row aggregates (``needs``): ``train_logs``
(every run's ``train_log.json``), ``trained_run`` (the first run of the figure's row: its model,
score matrix, image input, vocabulary and dataset config) or ``trained_runs`` (the first run's
model of each of the figure's rows, with their image input, vocabulary and dataset config), and
``positives`` (the dataset's extended-positives file, where it has one: what a true match is).

Declarations only: the Snakefile plans figures from these at every start, without importing
matplotlib or torch; ``methods.report.paper_figures`` draws each kind (one drawing per kind).
"""
from __future__ import annotations

from dataclasses import dataclass

from methods.registry import Registry

NEEDS = ("train_logs", "trained_run", "trained_runs", "positives")


@dataclass(frozen=True)
class FigureKind:
    name: str
    needs: tuple[str, ...] = ()


FIGURE_KINDS: Registry[FigureKind] = Registry("figure kind")


def declare(name: str, needs: tuple[str, ...] = ()) -> FigureKind:
    unknown = set(needs) - set(NEEDS)
    if unknown:
        raise ValueError(f"figure kind {name}: unknown needs {sorted(unknown)} (known: {NEEDS})")
    return FIGURE_KINDS.register(name, FigureKind(name, needs))


declare("rsum_by_loss")
declare("gradient_counts", needs=("train_logs",))
declare("saf_weights", needs=("trained_run", "positives"))
declare("text_retrieval_examples", needs=("trained_run", "positives"))
declare("image_retrieval_examples", needs=("trained_run", "positives"))
declare("asa_attention", needs=("trained_run",))
declare("rsum_by_setting")
declare("set_element_projection", needs=("trained_runs",))
declare("label_training_curves", needs=("train_logs",))
declare("ndcg_by_loss_weight")
