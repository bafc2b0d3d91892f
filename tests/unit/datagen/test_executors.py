"""Executors: identical files from serial, process-pool and Ray runs; failures and crashes stay per job; threads;
and a generation killed with SIGKILL resumes without losing, duplicating or corrupting anything."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from esper.datagen.executors import (
    EpisodeExecutor,
    ProcessPoolEpisodeExecutor,
    RayEpisodeExecutor,
    SerialExecutor,
    WorkerError,
)

import esper
from esper.datagen.orchestrator import PROGRESS_FILE, GenerationOrchestrator
from esper.datagen.plans import create_generation_matrix
from esper.datagen.schema import validate_episode
from unit.datagen.support import (
    KILL_MATRIX,
    FakeOptions,
    crash_or_echo,
    episode_ids,
    fake_episode_fn,
    fake_twin_fn,
    logged_runs,
    without_timestamps,
)

SRC = Path(esper.__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join([str(SRC), str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])])


def generate(out: Path, executor: EpisodeExecutor) -> dict[str, Any]:
    """Two plans (one shared twin) through the orchestrator; the written files without their timestamps."""
    with GenerationOrchestrator(out, ["baseline"], ["baseline", "random"], 1, settings={"max_epochs": 5}) as orch:
        assert orch.run(executor, fake_episode_fn, fake_twin_fn, FakeOptions())["completed"] == 2
    files = sorted(p for p in out.rglob("*.json") if p.name not in ("manifest.json",))
    return {str(p.relative_to(out)): without_timestamps(json.loads(p.read_text())) for p in files}


@pytest.fixture(scope="module")
def serial_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    files = generate(tmp_path_factory.mktemp("serial"), SerialExecutor())
    assert len(files) == 4  # two episodes, one twin, the progress file
    return files


@pytest.fixture(scope="module")
def ray_executor() -> Iterator[RayEpisodeExecutor]:
    """One local Ray cluster (2 CPUs) for the module; its workers find esper and the test helpers."""
    pytest.importorskip("ray")
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = PYTHONPATH
    try:
        with RayEpisodeExecutor(num_cpus=2) as executor:
            yield executor
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous


def test_process_pool_writes_the_serial_files(tmp_path: Path, serial_files: dict[str, Any]) -> None:
    assert generate(tmp_path, ProcessPoolEpisodeExecutor(2)) == serial_files


def test_ray_writes_the_serial_files(tmp_path: Path, serial_files: dict[str, Any],
                                     ray_executor: RayEpisodeExecutor) -> None:
    assert generate(tmp_path, ray_executor) == serial_files


def test_every_episode_ran_with_one_thread(serial_files: dict[str, Any]) -> None:
    workers = [v["worker"] for k, v in serial_files.items() if "worker" in v]
    assert workers == [{"device": "cpu", "threads": 1}] * 2


def test_ray_reports_job_failures(ray_executor: RayEpisodeExecutor) -> None:
    results = dict(ray_executor.run(["a", "fail"], crash_or_echo, None))
    assert results["a"] == "a@cpu"
    assert isinstance(results["fail"], WorkerError) and "ValueError: asked to fail" in str(results["fail"])


def test_pool_survives_failures_and_worker_crashes() -> None:
    executor = ProcessPoolEpisodeExecutor(2, devices=("dev0", "dev1"))
    results = list(executor.run(["a", "fail", "crash", "b", "c", "d"], crash_or_echo, None))
    by_job = dict(results)
    assert sorted(by_job) == ["a", "b", "c", "crash", "d", "fail"] and len(results) == 6
    assert by_job["a"] == "a@dev0"  # the first job goes to worker 0, which uses devices[0]
    assert {by_job[j] for j in "bcd"} <= {f"{j}@dev{i}" for j in "bcd" for i in (0, 1)}
    assert isinstance(by_job["fail"], WorkerError) and "asked to fail" in str(by_job["fail"])
    assert isinstance(by_job["crash"], WorkerError) and "died with exit code 3" in str(by_job["crash"])


def test_serial_executor_threads_and_errors() -> None:
    plan = create_generation_matrix(["baseline"], ["baseline"], 1)[0]
    executor = SerialExecutor(device="cpu", threads_per_episode=2)
    (job, result), = executor.run([plan.twin], lambda j, o, d: torch.get_num_threads(), None)
    assert job == plan.twin and result == 2
    assert torch.get_num_threads() == 1  # restored
    (_, error), = SerialExecutor().run(["fail"], crash_or_echo, None)
    assert isinstance(error, WorkerError) and "Traceback" in str(error)
    assert list(ProcessPoolEpisodeExecutor(2).run([], crash_or_echo, None)) == []


def test_executor_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="workers must be >= 1"):
        ProcessPoolEpisodeExecutor(0)
    with pytest.raises(ValueError, match="devices must name at least one device"):
        ProcessPoolEpisodeExecutor(1, devices=())
    with pytest.raises(ValueError, match="threads_per_episode"):
        SerialExecutor(threads_per_episode=0)
    assert [ProcessPoolEpisodeExecutor(4, ("d0", "d1")).device_of(i) for i in range(4)] == ["d0", "d1", "d0", "d1"]
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"optional \[dist\] extra"):
        RayEpisodeExecutor()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


# The pool variant also proves orphaned workers exit; it spawns workers four times, so it runs with the slow tests.
@pytest.mark.parametrize("kind", ["serial", pytest.param("pool", marks=pytest.mark.slow)])
def test_kill_during_generation_then_resume(tmp_path: Path, kind: str) -> None:
    out, log1, log2 = tmp_path / "out", tmp_path / "log1", tmp_path / "log2"
    log1.mkdir()
    log2.mkdir()
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    command = [sys.executable, "-m", "unit.datagen.support", str(out)]
    with open(tmp_path / "stderr.txt", "w") as stderr:
        process = subprocess.Popen([*command, str(log1), kind], env=env, stderr=stderr)
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
    assert (kind == "pool") == bool(worker_pids)
    deadline = time.monotonic() + 15
    while any(_alive(pid) for pid in worker_pids):  # orphaned pool workers exit on their own
        assert time.monotonic() < deadline, "pool workers outlived the killed orchestrator"
        time.sleep(0.1)

    subprocess.run([*command, str(log2), kind], env=env, check=True, timeout=300, capture_output=True)

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
