"""Job records as the harness writes them (``methods.job_records``), for tests that plant their own:
the fields a test sets, and neutral values for the others (a record missing a key is refused)."""
from methods.job_records import RunEvaluation, TableRowSpec, TableSpec
from methods.untrusted.sandbox import ReaderLimits

# the bounds the tests read released files within (config untrusted_files)
READER_LIMITS = ReaderLimits(memory_mb=256, seconds=30)


def run_evaluation(seed: int, results: list[dict], config_hash: str = "cfg", split: str = "test",
                   ensemble_size: int = 1, provenance: dict | None = None) -> dict:
    """An ``eval_<split>.json`` of one run (JSON), as ``methods.evaluate`` writes it."""
    return RunEvaluation(kind="single", ensemble_size=ensemble_size, dataset="toy", split=split, view=None, config={},
                         config_hash=config_hash, seed=seed, best_epoch=0, results=results,
                         provenance=provenance or {}, wall_seconds={}).to_json()


def ensemble_evaluation(seed: int, results: list[dict], members: list[dict], split: str = "test") -> dict:
    """An ensemble's ``eval_<split>.json`` (JSON), as ``methods.ensemble`` writes it."""
    return {"kind": "ensemble", "ensemble_size": len(members), "dataset": "toy", "split": split, "members": members,
            "seed": seed, "results": results, "provenance": {}, "wall_seconds": {}}


ROW_DEFAULTS = {"label": "", "paper": "p", "seeds": [0], "ensemble_size": 1, "members": [], "reported": {},
                "not_reported": None, "ledger": [], "compare_to": None, "ran": "", "view": None, "reported_only": None}


def table_row(**fields) -> dict:
    """A table spec's row (JSON) with ``fields``, the others at neutral values."""
    return TableRowSpec.from_json({**ROW_DEFAULTS, **fields}, "test row").to_json()


def table_spec(rows: list[dict], **fields) -> TableSpec:
    """A table spec of ``rows`` (each completed by ``table_row``) with ``fields``."""
    defaults = {"table": "t", "dataset": "toy", "dataset_kind": "real", "titles": [], "tolerance": {},
                "training_check": {}, "protocols": []}
    return TableSpec.from_json({**defaults, **fields, "rows": [table_row(**r) for r in rows]}, "test spec")


CLAIM_TRAINING_CHECK = {"min_gain_share": 0.05, "min_score_spread": 1e-4, "saturated_share": 0.99}
CLAIM_BOOTSTRAP = {"n_resamples": 500, "confidence": 0.95, "method": "BCa", "seed": 0}


def planted_claim_row(root, row_id: str, scores, protocol, reported: dict | None = None) -> dict:
    """A claims spec's row (JSON) of one seed whose test score matrix is ``scores`` (written under
    ``root`` with its evaluation and aggregate, as the DAG would), with ``reported`` numbers."""
    import numpy as np

    from methods.io import save_npy
    from methods.metrics.evaluation import evaluate_protocol
    from methods.report.aggregate import aggregate
    save_npy(root / f"{row_id}.npy", np.asarray(scores, dtype=np.float32))
    ev = RunEvaluation.from_json(run_evaluation(0, [evaluate_protocol(np.asarray(scores), protocol)]), "test")
    aggregate([ev]).write(root / f"{row_id}.agg.json")
    return {"table": "t", "id": row_id, "label": row_id, "seeds": [0], "ensemble_size": 1, "view": None,
            "scores": {protocol.name: [[str(root / f"{row_id}.npy")]]}, "evaluations": {},
            "aggregate": str(root / f"{row_id}.agg.json"), "reported": reported or {}}


def claim_record(claim_id: str, compare: str, protocol: str, printed: dict | None = None, bound_reason: str = "") -> dict:
    """A claims spec's claim (JSON) of the machine form ``compare`` on table ``t``."""
    from methods.report.claim_form import parse_comparison
    c = parse_comparison(compare, claim_id)
    return {"id": claim_id, "words": "w", "paraphrased": False, "where": "Table 1", "table": "t", "form": c.text(),
            "left": list(c.left), "right": list(c.right), "left_reduce": c.left_reduce, "right_reduce": c.right_reduce,
            "best": c.best, "rank": c.rank, "bound": c.bound, "bound_reason": bound_reason, "printed": printed or {},
            "reported_only": [], "metric": c.metric, "margin": 0.0, "protocols": [protocol]}


def claims_spec_record(rows: dict, claims: list[dict], dataset_kind: str = "real") -> dict:
    """A claims spec (JSON) of planted ``rows`` and ``claims``."""
    return {"paper": "toy", "paper_name": "Toy paper", "dataset": "toy", "dataset_kind": dataset_kind,
            "reported_dataset": "toy", "rows": rows, "training_check": CLAIM_TRAINING_CHECK,
            "bootstrap": CLAIM_BOOTSTRAP, "claims": claims}
