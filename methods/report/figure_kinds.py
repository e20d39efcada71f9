"""The figure kinds a paper file can declare (``figures: {<name>: {kind: ...}}``) and what the DAG
must give each beyond the figure spec and the table's row aggregates (``needs``): ``train_logs``
(every run's ``train_log.json``), ``trained_run`` (the first run of the figure's row: its model,
score matrix, image input, vocabulary and dataset config) or ``trained_runs`` (the first run's
model of each of the figure's rows, with their image input, vocabulary and dataset config), and
``positives`` (the dataset's extended-positives file, where it has one: what a true match is).

A kind also says what its spec holds beyond every figure's (``methods.plan.Plan.figure_spec``):
``row_details`` adds to each row of the table what the drawing compares (the setting the rows
vary, the weights of the loss terms), from the row and its first member's resolved config; and
``ordered_rows`` says that a figure's ``rows`` list orders the rows it draws (otherwise it names
the trained models the figure reads). A kind that draws one model's insides names them
(``internal``): the row's model must show them (``methods.model_kinds.ModelKind.internals``), or
the plan refuses the figure.

Declarations only: the Snakefile plans figures from these at every start, without importing
matplotlib or torch; ``methods.report.paper_figures`` draws each kind (one drawing per kind).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from methods.config import dotted_value
from methods.errors import HarnessError
from methods.losses.term_kinds import term_configs
from methods.model_kinds import model_kind
from methods.registry import Registry

NEEDS = ("train_logs", "trained_run", "trained_runs", "positives")

# (the table's rows that run models, each row's first member's resolved config, where) -> per row,
# the fields it adds to the row's entry of the spec
RowDetails = Callable[[list, list[dict], str], list[dict]]


@dataclass(frozen=True)
class FigureKind:
    name: str
    needs: tuple[str, ...] = ()
    row_details: RowDetails | None = None
    ordered_rows: bool = False
    internal: str | None = None

    def check_model(self, model_cfg: dict, where: str) -> None:
        """A row's ``model`` config block shows what this kind draws of a model's insides."""
        if self.internal is not None and self.internal not in model_kind(model_cfg["kind"]).internals(model_cfg):
            raise HarnessError(f"{where}: a {self.name} figure draws a model's {self.internal.replace('_', ' ')}, "
                               f"which this {model_cfg['kind']} model config does not have")


FIGURE_KINDS: Registry[FigureKind] = Registry("figure kind")


def declare(name: str, needs: tuple[str, ...] = (), row_details: RowDetails | None = None,
            ordered_rows: bool = False, internal: str | None = None) -> FigureKind:
    unknown = set(needs) - set(NEEDS)
    if unknown:
        raise ValueError(f"figure kind {name}: unknown needs {sorted(unknown)} (known: {NEEDS})")
    return FIGURE_KINDS.register(name, FigureKind(name, needs, row_details, ordered_rows, internal))


def settings(rows: list, configs: list[dict], where: str) -> list[dict]:
    """Each row's value of every key some row of the table overrides, beside its overrides and its
    reported numbers."""
    keys = list(dict.fromkeys(k for row in rows for k in row.overrides))
    out = []
    for row, cfg in zip(rows, configs):
        try:
            setting = {k: dotted_value(cfg, k) for k in keys}
        except KeyError as missing:
            raise HarnessError(f"{where}: key '{missing.args[0]}' is not in the resolved config of row "
                               f"'{row.id}'") from None
        out.append({"overrides": sorted(row.overrides), "reported": row.reported, "setting": setting})
    return out


def loss_weights(rows: list, configs: list[dict], where: str) -> list[dict]:
    """Each row's weight of every loss term it trains with."""
    return [{"loss_weights": {t["kind"]: float(t.get("weight", 1.0)) for t in term_configs(cfg["loss"])}}
            for cfg in configs]


declare("rsum_by_loss")
declare("gradient_counts", needs=("train_logs",))
declare("saf_weights", needs=("trained_run", "positives"), internal="saf_weights")
declare("text_retrieval_examples", needs=("trained_run", "positives"))
declare("image_retrieval_examples", needs=("trained_run", "positives"))
declare("asa_attention", needs=("trained_run",), internal="asa_attention")
declare("rsum_by_setting", row_details=settings)
declare("set_element_projection", needs=("trained_runs",))
declare("label_training_curves", needs=("train_logs",), ordered_rows=True)
declare("ndcg_by_loss_weight", row_details=loss_weights)
