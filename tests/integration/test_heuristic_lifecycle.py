"""The heuristic completes seed lifecycles: within 25-epoch episodes at small sample caps it germinates early enough
for a seed to train, blend, pass probation and be fossilized, on both synthetic tasks.

Whether one particular seed passes probation is decided on a few dozen validation samples, so a single episode's
outcome can flip with the CPU's float rounding; a few episodes are run and at least one fossilization is required.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from esper.cli.main import main
from esper.storage.rundir import read_jsonl


@pytest.mark.parametrize(
    ("task", "episodes", "max_train_samples", "max_val_samples"),
    [("synthetic", 3, 192, 96), ("synthetic_text", 2, 128, 64)],
)
def test_heuristic_fossilizes_seeds_within_25_epoch_episodes(
    tmp_path: Path, task: str, episodes: int, max_train_samples: int, max_val_samples: int
) -> None:
    run = tmp_path / task
    argv = [
        "train", "heuristic", "--task", task, "--episodes", str(episodes), "--max-epochs", "25", "--seed", "42",
        "--max-train-samples", str(max_train_samples), "--max-val-samples", str(max_val_samples),
        "--reward-family", "contribution",  # the heuristic ignores its reward; this one needs no static twin
        "--run-dir", str(run), "--no-tui", "--no-tensorboard", "--telemetry-level", "minimal",
    ]
    assert main(argv) == 0
    results = read_jsonl(run / "episodes.jsonl")
    assert len(results) == episodes
    assert sum(e["seeds_fossilized"] for e in results) >= 1
    steps = read_jsonl(run / "steps.jsonl")
    for episode in range(episodes):
        germinations = [s["epoch"] for s in steps if s["episode"] == episode and s["op"] == "GERMINATE"]
        assert germinations and germinations[0] <= 8  # while the host is learning, not after a plateau
