"""Where a number came from, as one line per environment: the harness commit, torch, CUDA and
cuDNN (on a GPU), the device, the precision the weights were trained in, the threads and the
numerics mode, from the provenance an evaluation records (``methods.runtime.provenance``; under
``training`` the training job's, read from its ``train_log.json``). Row aggregates list each
distinct one with its seeds, tables and reproduction reports show them."""
from __future__ import annotations

from methods.job_records import EnsembleEvaluation, Evaluation


def environment_text(provenance: dict) -> str:
    """One environment as a line. An evaluation that records its run's training describes that
    training; one of the authors' weights (``training`` None) describes the evaluation and says
    the weights were trained elsewhere; an older evaluation (no ``training`` key) ran at the end of
    its training job, so it describes both."""
    if "training" in provenance and provenance["training"] is None:
        return "authors' weights (trained elsewhere), evaluated with " + _text(provenance, None)
    trained = provenance.get("training") or provenance
    return "trained with " + _text(trained, trained.get("precision"))


def _text(p: dict, precision: str | None) -> str:
    commit = str(p.get("git_commit", "unknown"))
    short = commit if commit == "unknown" else commit[:7] + ("-dirty" if commit.endswith("-dirty") else "")
    device = str(p.get("device", "unknown device"))
    parts = [f"harness {short}", f"torch {p.get('torch', '?')}"]
    if not device.startswith("cpu"):   # the build's CUDA says nothing of a CPU run (the torch version names it)
        parts += [f"CUDA {p.get('cuda') or '?'}", f"cuDNN {p.get('cudnn') or '?'}"]
    parts += [device] + ([precision] if precision else [])
    threads = p.get("threads")
    parts += [f"{threads} thread{'s' if threads != 1 else ''}" if threads is not None else "threads ?",
              f"numerics {(p.get('numerics') or {}).get('mode', '?')}"]
    return ", ".join(parts)


def evaluation_environments(ev: Evaluation) -> list[str]:
    """The environment of each model behind an evaluation: an ensemble's members' (recorded with
    them; an older ensemble record, its own), a single run's."""
    if isinstance(ev, EnsembleEvaluation):
        return [environment_text(m.get("provenance") or ev.provenance) for m in ev.members]
    return [environment_text(ev.provenance)]


SEPARATOR = "; "   # between the environments of one row in a table's `environment` column


def row_environment_text(environments: list[dict] | None) -> str:
    """A row aggregate's environments as its table cell, ``SEPARATOR``-separated, each with its
    seeds where the row has several; empty for an aggregate written before they were recorded."""
    envs = environments or []
    if len(envs) == 1:
        return envs[0]["environment"]
    return SEPARATOR.join(f"{e['environment']} (seeds {' '.join(map(str, e['seeds']))})" for e in envs)


def split_environments(cell: str) -> list[str]:
    """The environments of a table cell written by ``row_environment_text``."""
    return [text for text in str(cell).split(SEPARATOR) if text]


def environment_lines(heading: str, found: dict[str, list[str]], joiner: str) -> list[str]:
    """A section of each environment with the rows from it (``joiner`` between their names);
    one line when every row shares one; nothing when none is known."""
    if not found:
        return []
    lines = [heading, ""]
    if len(found) == 1:
        return lines + [f"Every row: {next(iter(found))}.", ""]
    return lines + [f"- {env}: {joiner.join(rows)}" for env, rows in found.items()] + [""]
