"""The peer benchmark runs end to end on tiny settings and reports both learners (needs the [sb3] extra)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_peer_trains_both_learners_and_evaluates_them_on_paired_seeds(tmp_path: Path) -> None:
    pytest.importorskip("sb3_contrib")
    out = tmp_path / "bench"
    args = ["--max-epochs", "3", "--env-epochs", "24", "--n-envs", "4", "--eval-seeds", "2", "--train-samples", "64",
            "--val-samples", "32", "--threads", "1", "--out", str(out)]
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_peer.py"), *args], capture_output=True,
                            text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert result.returncode == 0, result.stderr
    assert "maskable ppo / esper ppo" in result.stdout
    report = json.loads((out / "bench_peer.json").read_text())
    assert {r["env_epochs"] for r in report["training"].values()} == {24}
    episodes = report["comparison"]["episodes"]
    labels = ["static", "esper ppo (init)", "esper ppo (final)", "maskable ppo (init)", "maskable ppo (final)"]
    assert report["comparison"]["controllers"] == labels
    seeds = {label: sorted(e["env_seed"] for e in episodes if e["controller"] == label) for label in labels}
    assert len(set(map(tuple, seeds.values()))) == 1 and len(seeds["static"]) == 2  # the same paired seeds for all
