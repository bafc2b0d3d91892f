"""Datagen on the worker layer: identical files in process, on worker processes and on Ray actors; one thread per
job; a job that fails spends an attempt while the others go on; a worker that dies stops the run naming its job; and
a generation killed with SIGKILL resumes without losing, duplicating or corrupting anything."""

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
from esper.datagen.jobs import GenerationJobs
from esper.datagen.orchestrator import PROGRESS_FILE, GenerationOrchestrator
from esper.datagen.plans import create_generation_matrix
from esper.datagen.schema import validate_episode
from esper.execution.workers import WorkerFailed, WorkerOptions
from unit.datagen.support import (
    KILL_MATRIX,
    FakeOptions,
    episode_ids,
    fake_episode_fn,
    fake_pool,
    fake_twin_fn,
    generated_files,
    logged_runs,
)

SRC = Path(esper.__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join([str(SRC), str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])])
MATRIX = (["baseline"], ["baseline", "random"], 1)  # two plans sharing one twin


def generate(out: Path, workers: WorkerOptions, devices: tuple[str, ...] = ("cpu",)) -> dict[str, Any]:
    """The matrix through the orchestrator; the written files without their timestamps."""
    jobs = GenerationJobs(fake_episode_fn, fake_twin_fn, FakeOptions())
    return generated_files(out, jobs, MATRIX, {"max_epochs": 5}, workers, devices)


@pytest.fixture(scope="module")
def in_process_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    files = generate(tmp_path_factory.mktemp("in_process"), WorkerOptions())
    assert len(files) == 4  # two episodes, one twin, the progress file
    return files


def test_worker_processes_write_the_in_process_files(tmp_path: Path, in_process_files: dict[str, Any]) -> None:
    assert generate(tmp_path, WorkerOptions(workers=2)) == in_process_files


def test_ray_actors_write_the_in_process_files(tmp_path: Path, in_process_files: dict[str, Any],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    monkeypatch.setenv("PYTHONPATH", PYTHONPATH)  # Ray's workers find esper and the test helpers
    assert generate(tmp_path, WorkerOptions(workers=2, executor="ray")) == in_process_files


def test_every_job_ran_with_one_thread_on_its_workers_device(tmp_path: Path,
                                                            in_process_files: dict[str, Any]) -> None:
    workers = [v["worker"] for k, v in in_process_files.items() if "worker" in v]
    assert workers == [{"device": "cpu", "threads": 1}] * 2
    placed = generate(tmp_path, WorkerOptions(), devices=("dev0", "dev1"))  # in process: the first device
    assert [v["worker"]["device"] for v in placed.values() if "worker" in v] == ["dev0"] * 2


def test_a_dead_worker_stops_the_run_naming_its_episode_and_the_rerun_finishes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    crashing = "baseline_random-eps1.0_0000"
    with GenerationOrchestrator(out, *MATRIX, settings={"max_epochs": 5}) as orch:
        with fake_pool(FakeOptions(crash_ids=frozenset({crashing})), workers=1) as pool, \
                pytest.raises(WorkerFailed, match=rf"datagen worker 0 died \(exit code 3\) while computing episode "
                                                  rf"{crashing}"):
            orch.run(pool)
        assert orch.attempts(crashing) == 1  # the attempt is spent: a job that always kills its worker ends up failed
        with fake_pool(FakeOptions(), workers=1) as pool:
            assert orch.run(pool)["completed"] == 2
    assert json.loads((out / f"{crashing}.json").read_text())["attempts"] == 2


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


# The worker variant also proves orphaned workers exit; it spawns workers four times, so it runs with the slow tests.
@pytest.mark.parametrize("workers", ["0", pytest.param("2", marks=pytest.mark.slow)])
def test_kill_during_generation_then_resume(tmp_path: Path, workers: str) -> None:
    out, log1, log2 = tmp_path / "out", tmp_path / "log1", tmp_path / "log2"
    log1.mkdir()
    log2.mkdir()
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    command = [sys.executable, "-m", "unit.datagen.support", str(out)]
    with open(tmp_path / "stderr.txt", "w") as stderr:
        process = subprocess.Popen([*command, str(log1), workers], env=env, stderr=stderr)
        deadline = time.monotonic() + 180
        while len(episode_ids(out)) < 3 if out.exists() else True:
            assert process.poll() is None, (tmp_path / "stderr.txt").read_text()
            assert time.monotonic() < deadline, "generation made no progress"
            time.sleep(0.02)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()

    # Right after the kill: every file parses, and progress never claims an episode that is not on disk.
    before = set(episode_ids(out))
    for path in out.rglob("*.json"):
        json.loads(path.read_text())
    progress = json.loads((out / PROGRESS_FILE).read_text())
    assert set(progress["completed"]) <= before
    worker_pids = {pid for _, pid in logged_runs(log1)} - {process.pid}
    assert (workers != "0") == bool(worker_pids)
    deadline = time.monotonic() + 15
    while any(_alive(pid) for pid in worker_pids):  # orphaned workers exit on their own
        assert time.monotonic() < deadline, "workers outlived the killed orchestrator"
        time.sleep(0.1)

    subprocess.run([*command, str(log2), workers], env=env, check=True, timeout=300, capture_output=True)

    planned = [p.episode_id for p in create_generation_matrix(*KILL_MATRIX)]
    assert episode_ids(out) == sorted(planned)
    progress = json.loads((out / PROGRESS_FILE).read_text())
    assert progress["completed"] == planned and progress["failed"] == {}
    assert not list(out.rglob("*.tmp"))
    rerun = {name for name, _ in logged_runs(log2)}
    assert not rerun & before  # nothing already on disk was generated again
    for episode_id in planned:
        episode = json.loads((out / f"{episode_id}.json").read_text())
        assert validate_episode(episode) == [] and episode["attempts"] == 1
