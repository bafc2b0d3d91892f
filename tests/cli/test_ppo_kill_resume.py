"""Kill a PPO run mid-way (SIGKILL, no cleanup) and rerun the same command: it resumes from the last checkpoint and
ends bit-identical to an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

from esper.storage.rundir import read_jsonl

ARGS = ["train", "ppo", "--preset", "quick", "--device", "cpu", "--set", "n_episodes=6", "--set", "max_epochs=3",
        "--set", "max_train_samples=256", "--set", "max_val_samples=128", "--set", "n_envs=2", "--set",
        "group_size=1", "--reward-family", "contribution", "--no-tui", "--no-tensorboard"]


def _command(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "esper", *ARGS, "--run-dir", str(run_dir)]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}


@pytest.mark.slow
def test_sigkill_then_rerun_resumes_exactly(tmp_path: Path) -> None:
    straight = tmp_path / "straight"
    subprocess.run(_command(straight), check=True, env=_env(), capture_output=True)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(_command(killed), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    latest = killed / "checkpoints" / "latest.pt"
    deadline = time.monotonic() + 300
    while not latest.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert latest.exists() and proc.poll() is None, "the run should still be going after its first checkpoint"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = torch.load(latest, weights_only=True)["batches_completed"]
    assert done_before < 3

    rerun = subprocess.run(_command(killed), env=_env(), capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert "Resuming from" in rerun.stdout

    a = torch.load(straight / "checkpoints" / "final.pt", weights_only=True)
    b = torch.load(killed / "checkpoints" / "final.pt", weights_only=True)
    assert a["batches_completed"] == b["batches_completed"] == 3
    for name, tensor in a["agent"]["network"].items():
        assert torch.equal(tensor, b["agent"]["network"][name]), name
    episodes_a, episodes_b = read_jsonl(straight / "episodes.jsonl"), read_jsonl(killed / "episodes.jsonl")
    for row in (*episodes_a, *episodes_b):
        row.pop("wall_seconds")  # the one field no two runs share
    assert episodes_a == episodes_b
    # events.jsonl: the killed batch's events were dropped on resume, so every epoch is recorded once
    epochs = Counter((e["data"]["batch"], e["env_id"], e["epoch"]) for e in read_jsonl(killed / "events.jsonl")
                     if e["event_type"] == "EPOCH_COMPLETED")
    assert epochs == Counter([(b, env, k) for b in range(3) for env in range(2) for k in (1, 2, 3)])
