"""The host-sync diagnostic and the device scaling benchmark run end to end on CPU with tiny budgets."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--max-epochs", "2", "--train-samples", "64", "--val-samples", "32"]
TINY_STUDY = ("--runs 1 --seeds 1 --selection-seeds 0 --max-test-samples 32 --set n_episodes=2 --set n_envs=2 "
              "--set group_size=1 --set max_epochs=3 --set max_train_samples=64 --set max_val_samples=32 "
              "--set param_cost=1.0")


def _script(name: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args], capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_count_syncs_prints_the_reads_per_phase() -> None:
    out = _script("count_syncs.py", "--epochs", "2", "--controllers", "static", "ppo-init", "--calls")
    rows = {line.split("│")[1].strip(): line.split("│")[2:5] for line in out.splitlines() if line.count("│") == 5}
    assert {"train", "validation", "counterfactuals", "probes", "telemetry", "decision"} <= set(rows)
    syncs, per_env_epoch, per_group_epoch = (cell.strip() for cell in rows["all but decision, other"])
    assert (syncs, per_env_epoch, per_group_epoch) == ("2", "0.50", "1.00")  # one read per group-epoch
    assert "esper.runtime.readout" in out  # the call sites


def test_bench_gpu_names_the_device_and_prints_ratios_on_cpu() -> None:
    out = _script("bench_gpu.py", "--device", "cpu", "--envs", "1", "2", "--no-workers", *TINY)
    assert "device cpu (" in out and "× 1 env" in out
    rows = [line.split("│")[1:-1] for line in out.splitlines() if line.count("│") == 8]
    assert [(r[0].strip(), r[1].strip(), r[3].strip()) for r in rows] == [("1", "in process", "1.00"),
                                                                       ("2", "in process", rows[1][3].strip())]
    assert float(rows[1][2]) > 0


def test_study_phases_are_timed_from_the_previous_phases_last_write(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    bench_gpu = importlib.import_module("bench_gpu")
    for phase, last_write in (("selection/round-1", 110.0), ("train/run-0", 150.0), ("eval", 190.0)):
        (tmp_path / phase / "sub").mkdir(parents=True)
        for name, when in (("config.json", last_write - 5), ("sub/episodes.jsonl", last_write)):
            (tmp_path / phase / name).write_text("{}")
            os.utime(tmp_path / phase / name, (when, when))
    (tmp_path / "config.json").write_text("{}")  # the study's own directory is not a phase
    seconds = bench_gpu.phase_seconds(tmp_path, started=100.0, finished=200.0)
    assert seconds == {"selection/round-1": 10.0, "train/run-0": 40.0, "eval": 40.0, "report": 10.0}


@pytest.mark.slow
def test_bench_gpu_on_workers_and_a_tiny_study_on_cpu() -> None:
    out = _script("bench_gpu.py", "--device", "cpu", "--envs", "1", "2", *TINY, "--study", "quick",
                  "--study-args", TINY_STUDY)
    assert "2 workers" in out
    assert all(phase in out for phase in ("train/run-0", "replay-source/run-0", "eval", "report", "total"))


def test_epoch_costs_times_every_phase_in_both_memory_formats() -> None:
    out = _script("epoch_costs.py", "--epochs", "2", "--max-train-samples", "64", "--max-val-samples", "32")
    rows = {line.split("│")[1].strip(): line.split("│")[2:5] for line in out.splitlines() if line.count("│") == 5}
    assert {"train", "validation", "counterfactuals", "probes", "telemetry", "decision", "other", "all"} <= set(rows)
    shares = [float(cells[1].strip().rstrip("%")) for phase, cells in rows.items() if phase not in ("all", "phase")]
    assert abs(sum(shares) - 100.0) < 0.5  # every CPU second charged to exactly one phase
    assert float(rows["train"][0]) > 0 and float(rows["probes"][0]) > 0  # the grow: rule's TRAINING seeds probe
    assert "memory format: contiguous / channels_last" in out
