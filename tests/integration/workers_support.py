"""What the worker tests share: tiny PPO and compare commands, a subprocess that runs one, and its logs without the
fields that say where and how fast the work ran."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from esper.storage.rundir import read_jsonl

PPO = ["train", "ppo", "--preset", "quick", "--device", "cpu", "--set", "n_episodes=8", "--set", "n_envs=4",
       "--set", "group_size=2", "--set", "max_epochs=3", "--set", "max_train_samples=128", "--set",
       "max_val_samples=64", "--no-tui", "--no-tensorboard", "--telemetry-level", "minimal"]
COMPARE = ["compare", "--controllers", "static", "heuristic", "random", "fixed:norm@early", "static:matched",
           "--task", "fashion_mnist", "--episodes", "2", "--max-epochs", "4", "--max-train-samples", "128",
           "--max-val-samples", "64", "--max-test-samples", "100", "--device", "cpu",
           "--no-tui", "--no-tensorboard", "--telemetry-level", "minimal"]
TIMING = {"rollout_seconds", "update_seconds", "env_epochs_per_second", "wall_seconds", "batch_loads"}
"""Wall-clock fields, and how many batches were materialized (once per worker and device): placement, not results."""


def run_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}


def run_esper(argv: list[str], run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "esper", *argv, *extra, "--run-dir", str(run_dir)]
    return subprocess.run(command, env=run_env(), capture_output=True, text=True, timeout=600)


def clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def logs(run_dir: Path, names: tuple[str, ...]) -> dict[str, list[Any]]:
    return {name: clean(read_jsonl(run_dir / name)) for name in names}


PPO_LOGS = ("history.jsonl", "episodes.jsonl", "steps.jsonl")

