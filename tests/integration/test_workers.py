"""Parallel env workers change where envs run, never what a run computes: a fixed-seed CPU run writes the same
history, episodes and steps in process, with one or two worker processes, and with Ray actors; a worker killed
mid-run stops the run with one line naming its envs, leaves no process behind, and the same command then resumes to
the same logs as an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from esper.runtime.readers import FASHION_MNIST_VAL_SIZE
from esper.runtime.rundir import read_jsonl
from unit.runtime.fake_datasets import write_fashion

PPO = ["train", "ppo", "--preset", "quick", "--device", "cpu", "--set", "n_episodes=8", "--set", "n_envs=4",
       "--set", "group_size=2", "--set", "max_epochs=3", "--set", "max_train_samples=128", "--set",
       "max_val_samples=64", "--no-tui", "--no-tensorboard", "--telemetry-level", "minimal"]
COMPARE = ["compare", "--controllers", "static", "heuristic", "random", "fixed:norm@early", "static:matched",
           "--task", "fashion_mnist", "--episodes", "2", "--max-epochs", "4", "--max-train-samples", "128",
           "--max-val-samples", "64", "--max-test-samples", "100", "--device", "cpu",
           "--no-tui", "--no-tensorboard", "--telemetry-level", "minimal"]
TIMING = {"rollout_seconds", "update_seconds", "env_epochs_per_second", "wall_seconds", "batch_loads"}
"""Wall-clock fields, and how many batches were materialized (once per worker and device): placement, not results."""


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}


def _run(argv: list[str], run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "esper", *argv, *extra, "--run-dir", str(run_dir)]
    return subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=600)


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _logs(run_dir: Path, names: tuple[str, ...]) -> dict[str, list[Any]]:
    return {name: _clean(read_jsonl(run_dir / name)) for name in names}


PPO_LOGS = ("history.jsonl", "episodes.jsonl", "steps.jsonl")


@pytest.fixture(scope="module")
def in_process_ppo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("ppo") / "in_process"
    done = _run(PPO, run_dir)
    assert done.returncode == 0, done.stderr
    return run_dir


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ppo_with_workers_writes_the_in_process_logs(in_process_ppo: Path, tmp_path: Path, workers: str) -> None:
    done = _run(PPO, tmp_path / "run", "--workers", workers)
    assert done.returncode == 0, done.stderr
    expected, actual = _logs(in_process_ppo, PPO_LOGS), _logs(tmp_path / "run", PPO_LOGS)
    assert len(actual["episodes.jsonl"]) == 8 and len(actual["steps.jsonl"]) == 8 * 2
    assert actual == expected


def test_compare_with_workers_writes_the_in_process_logs(tmp_path: Path) -> None:
    """On a task read from files (a stand-in Fashion-MNIST with random images): each worker loads its own data."""
    write_fashion(tmp_path / "data" / "fashion-mnist", gz=True, n=FASHION_MNIST_VAL_SIZE + 200, n_test=150)
    runs = {w: tmp_path / f"w{w}" for w in ("0", "2")}
    for workers, run_dir in runs.items():
        done = _run(COMPARE, run_dir, "--workers", workers, "--data-dir", str(tmp_path / "data"))
        assert done.returncode == 0, done.stderr
    expected, actual = (_logs(runs[w], ("episodes.jsonl", "steps.jsonl")) for w in ("0", "2"))
    assert len(actual["episodes.jsonl"]) == 2 * 5
    assert actual == expected
    results = [_clean(json.loads((runs[w] / "results.json").read_text())) for w in ("0", "2")]
    assert results[0] == results[1]


def test_ray_actors_write_the_in_process_logs(in_process_ppo: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    done = _run(PPO, tmp_path / "ray", "--workers", "2", "--executor", "ray")
    assert done.returncode == 0, done.stderr
    assert _logs(tmp_path / "ray", PPO_LOGS) == _logs(in_process_ppo, PPO_LOGS)


def _workers_of(pid: int) -> list[int]:
    """The spawned worker processes of `pid` (its children running multiprocessing's spawn entry point)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for(predicate: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds worker processes through /proc")
def test_killed_worker_stops_the_run_and_the_rerun_resumes_exactly(in_process_ppo: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "killed"
    command = [sys.executable, "-m", "esper", *PPO, "--workers", "2", "--run-dir", str(run_dir)]
    proc = subprocess.Popen(command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    latest = run_dir / "checkpoints" / "latest.pt"
    assert _wait_for(lambda: latest.exists() or proc.poll() is not None, 300)
    workers = _workers_of(proc.pid)
    assert proc.poll() is None and len(workers) == 2, "the run should still be going, with its two workers"
    os.kill(workers[1], signal.SIGKILL)
    killed_at = time.monotonic()
    _, stderr = proc.communicate(timeout=120)
    assert time.monotonic() - killed_at < 30
    assert proc.returncode not in (0, None)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "died" in lines[0] and "envs 2-3" in lines[0], stderr
    assert _wait_for(lambda: not any(_alive(p) for p in workers), 15), "a worker outlived its run"
    completed = torch.load(latest, weights_only=True)["batches_completed"]
    assert len(read_jsonl(run_dir / "episodes.jsonl")) == 4 * completed  # nothing of the broken batch

    rerun = _run(PPO, run_dir, "--workers", "2")
    assert rerun.returncode == 0, rerun.stderr
    assert "Resuming from" in rerun.stdout
    assert _logs(run_dir, PPO_LOGS) == _logs(in_process_ppo, PPO_LOGS)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds worker processes through /proc")
def test_workers_do_not_outlive_a_killed_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "esper", *PPO, "--workers", "2", "--run-dir", str(run_dir)]
    proc = subprocess.Popen(command, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert _wait_for(lambda: len(_workers_of(proc.pid)) == 2 or proc.poll() is not None, 120)
    workers = _workers_of(proc.pid)
    assert len(workers) == 2
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _wait_for(lambda: not any(_alive(p) for p in workers), 30), "workers outlived their killed parent"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds worker processes through /proc")
def test_ctrl_c_stops_workers_cleanly(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "esper", *PPO, "--workers", "2", "--run-dir", str(run_dir)]
    proc = subprocess.Popen(command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert _wait_for(lambda: len(_workers_of(proc.pid)) == 2 or proc.poll() is not None, 120)
    workers = _workers_of(proc.pid)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert _wait_for(lambda: not any(_alive(p) for p in workers), 15)
