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
