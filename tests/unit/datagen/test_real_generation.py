"""Real episodes on every placement of the workers and through a SIGKILL: the same files wherever an episode is
computed, and a killed generation resumes with every file complete and nothing generated twice."""

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

import esper
from esper.datagen.generate import GenerateOptions, generate_episode, generate_twin
from esper.datagen.jobs import GenerationJobs
from esper.datagen.orchestrator import PROGRESS_FILE
from esper.datagen.reader import read_episodes
from esper.execution.workers import WorkerOptions
from unit.datagen.support import episode_ids, generated_files

SRC = Path(esper.__file__).resolve().parents[1]
OPTIONS = GenerateOptions.for_task("synthetic", max_epochs=3, max_train_samples=64, max_val_samples=32)
MATRIX = (["baseline"], ["random", "aggressive"], 1)  # two real plans sharing one twin


def generate(out: Path, workers: WorkerOptions) -> dict[str, Any]:
    return generated_files(out, GenerationJobs(generate_episode, generate_twin, OPTIONS), MATRIX, OPTIONS.settings(),
                           workers)


@pytest.fixture(scope="module")
def in_process_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    files = generate(tmp_path_factory.mktemp("in_process"), WorkerOptions())
    assert len(files) == 4  # two episodes, one twin, the progress file
    return files


def test_worker_processes_write_the_in_process_files(tmp_path: Path, in_process_files: dict[str, Any]) -> None:
    assert generate(tmp_path, WorkerOptions(workers=2)) == in_process_files


@pytest.mark.slow
def test_ray_actors_write_the_in_process_files(tmp_path: Path, in_process_files: dict[str, Any],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]))
    assert generate(tmp_path, WorkerOptions(workers=2, executor="ray")) == in_process_files


@pytest.mark.slow
def test_kill_9_during_a_real_generation_then_rerun(tmp_path: Path) -> None:
    """`esper datagen` killed with SIGKILL once the first episode is on disk; the same command then finishes the
    matrix, keeps the episodes written before the kill as they were, and leaves only complete files."""
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "esper", "datagen", "--output-dir", str(out), "--task", "synthetic",
            "--envs", "baseline", "--policies", "random", "aggressive", "periodic", "--episodes-per-combo", "2",
            "--max-epochs", "4", "--max-train-samples", "64", "--max-val-samples", "32"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])}
    with open(tmp_path / "log.txt", "w") as log:
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while not (out.exists() and episode_ids(out)):
            assert process.poll() is None, (tmp_path / "log.txt").read_text()
            assert time.monotonic() < deadline, "generation made no progress"
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    written = {name: (out / f"{name}.json").read_text() for name in episode_ids(out)}
    assert 1 <= len(written) < 6
    for path in out.rglob("*.json"):
        json.loads(path.read_text())  # every file on disk is complete

    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode in (0, 1), rerun.stdout + rerun.stderr  # 1: three policies fail the diversity check
    assert len(read_episodes(out)) == 6
    assert {name: (out / f"{name}.json").read_text() for name in written} == written  # not generated again
    progress = json.loads((out / PROGRESS_FILE).read_text())
    assert len(progress["completed"]) == 6 and progress["failed"] == {}
    assert not list(out.rglob("*.tmp"))
