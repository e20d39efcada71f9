"""``pytest -n auto`` runs a worker per CPU the tests may use (tests/conftest.py), not
pytest-xdist's psutil count of physical cores."""
import os

import psutil

from tests.conftest import pytest_xdist_auto_num_workers, usable_cpus


def test_a_worker_per_usable_cpu_whatever_psutil_counts_as_physical(monkeypatch, tmp_path):
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 1 if not logical else 2)   # 2 hyperthreads, 1 core
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    no_quota = tmp_path / "cpu.max"
    no_quota.write_text("max 100000\n")
    assert usable_cpus(no_quota) == 3
    quota = tmp_path / "quota"
    quota.write_text("150000 100000\n")          # 1.5 CPUs of quota: 2 workers
    assert usable_cpus(quota) == 2
    assert usable_cpus(tmp_path / "absent") == 3
    assert pytest_xdist_auto_num_workers(None) == usable_cpus()
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "5")
    assert pytest_xdist_auto_num_workers(None) == 5
