"""The heuristic completes seed lifecycles: within one 25-epoch episode at small sample caps it germinates early
enough for a seed to train, blend, pass probation and be fossilized, on both synthetic tasks."""

from __future__ import annotations

from pathlib import Path

import pytest

from esper.cli.main import main
from esper.runtime.rundir import read_jsonl


@pytest.mark.parametrize(
    ("task", "max_train_samples", "max_val_samples"),
    [("synthetic", 192, 96), ("synthetic_text", 256, 64)],
)
def test_heuristic_fossilizes_a_seed_within_a_25_epoch_episode(
    tmp_path: Path, task: str, max_train_samples: int, max_val_samples: int
) -> None:
    run = tmp_path / task
    argv = [
        "train", "heuristic", "--task", task, "--episodes", "1", "--max-epochs", "25", "--seed", "42",
        "--max-train-samples", str(max_train_samples), "--max-val-samples", str(max_val_samples),
        "--reward-family", "contribution",  # the heuristic ignores its reward; this one needs no static twin
        "--run-dir", str(run), "--no-tui", "--no-tensorboard", "--telemetry-level", "minimal",
    ]
    assert main(argv) == 0
    [episode] = read_jsonl(run / "episodes.jsonl")
    assert episode["seeds_fossilized"] >= 1
    germinations = [s["epoch"] for s in read_jsonl(run / "steps.jsonl") if s["op"] == "GERMINATE"]
    assert germinations and germinations[0] <= 5  # early, not after a plateau
