"""Parallel workers change where the work runs, never what a run computes: a fixed-seed CPU run writes the same
history, episodes and steps in process and with one or two worker processes (Ray actors: test_workers_ray.py; a
worker killed, Ctrl+C and a killed run: test_worker_faults.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper.data.readers import FASHION_MNIST_VAL_SIZE
from integration.workers_support import COMPARE, PPO, PPO_LOGS, clean, logs, run_esper
from unit.data.fake_datasets import write_fashion


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ppo_with_workers_writes_the_in_process_logs(in_process_ppo: Path, tmp_path: Path, workers: str) -> None:
    done = run_esper(PPO, tmp_path / "run", "--workers", workers)
    assert done.returncode == 0, done.stderr
    expected, actual = logs(in_process_ppo, PPO_LOGS), logs(tmp_path / "run", PPO_LOGS)
    assert len(actual["episodes.jsonl"]) == 8 and len(actual["steps.jsonl"]) == 8 * 2
    assert actual == expected


def test_compare_with_workers_writes_the_in_process_logs(tmp_path: Path) -> None:
    """On a task read from files (a stand-in Fashion-MNIST with random images): each worker loads its own data."""
    write_fashion(tmp_path / "data" / "fashion-mnist", gz=True, n=FASHION_MNIST_VAL_SIZE + 200, n_test=150)
    runs = {w: tmp_path / f"w{w}" for w in ("0", "2")}
    for workers, run_dir in runs.items():
        done = run_esper(COMPARE, run_dir, "--workers", workers, "--data-dir", str(tmp_path / "data"))
        assert done.returncode == 0, done.stderr
    expected, actual = (logs(runs[w], ("episodes.jsonl", "steps.jsonl")) for w in ("0", "2"))
    assert len(actual["episodes.jsonl"]) == 2 * 5
    assert actual == expected
    results = [clean(json.loads((runs[w] / "results.json").read_text())) for w in ("0", "2")]
    assert results[0] == results[1]

