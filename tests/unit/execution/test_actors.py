"""Actors: the same calls give the same answers in this process and in a worker process; errors keep their type; a
worker that dies is reported at once, by index (and by job in an unordered run); unordered jobs come back as they
complete, a failed one as its exception; options that cannot work are refused."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import pytest
import torch

from esper.execution.actors import ActorPool, ProcessActor
from esper.execution.workers import WorkerFailed, WorkerOptions
from esper.leyline.errors import UserInputError


class Counter:
    """A hosted object with state, an error, a slow call and its process id."""

    def __init__(self, start: int) -> None:
        self.value = start

    def add(self, n: int) -> int:
        self.value += n
        return self.value

    def fail(self, message: str) -> None:
        raise ValueError(message)

    def nap(self, seconds: float) -> int:
        time.sleep(seconds)
        return os.getpid()

    def pid(self) -> int:
        return os.getpid()

    def threads(self) -> int:
        return torch.get_num_threads()

    def job(self, name: str) -> str:
        """An unordered job: "crash" kills the worker, "fail" raises, "slow" naps, anything else is echoed with the
        actor's starting value."""
        if name == "crash":
            os._exit(3)
        if name == "fail":
            raise ValueError("asked to fail")
        if name == "slow":
            time.sleep(2.0)
        return f"{name}@{self.value}"


class Other:
    def pid(self) -> int:
        return os.getpid()


@pytest.mark.parametrize("workers", [0, 2])
def test_calls_keep_state_and_come_back_in_actor_order(workers: int) -> None:
    with ActorPool(WorkerOptions(workers=workers, threads=1), Counter, (10,)) as pool:
        n = len(pool)
        assert n == max(1, workers)
        assert pool.call(Counter.add, [(i,) for i in range(n)]) == [10 + i for i in range(n)]
        assert pool.call(Counter.add, [(1,)] * n) == [11 + i for i in range(n)]
        pids = pool.call(Counter.pid, [()] * n)
        assert (pids == [os.getpid()]) == (workers == 0) and len(set(pids)) == n


@pytest.mark.parametrize("workers", [0, 1])
def test_an_error_in_a_call_arrives_as_itself(workers: int) -> None:
    with ActorPool(WorkerOptions(workers=workers, threads=1), Counter, (0,)) as pool:
        with pytest.raises(ValueError, match="bad input"):
            pool.call(Counter.fail, [("bad input",)] * len(pool))
        assert pool.call(Counter.add, [(2,)] * len(pool)) == [2] * len(pool)  # the actor lives on


def test_a_killed_worker_is_reported_at_once_with_its_index() -> None:
    with ActorPool(WorkerOptions(workers=2, threads=1), Counter, (0,)) as pool:
        victim = pool.call(Counter.pid, [(), ()])[1]
        threading.Timer(0.5, os.kill, (victim, signal.SIGKILL)).start()
        started = time.monotonic()
        with pytest.raises(WorkerFailed, match=r"worker 1 died \(exit code -9\)") as failure:
            pool.call(Counter.nap, [(0.1,), (60.0,)])
        assert failure.value.actor == 1
        assert time.monotonic() - started < 10


def test_a_worker_ignores_ctrl_c_from_its_start() -> None:
    """Ctrl+C at a terminal reaches every process of the group, a worker still importing torch included: here it
    comes every 20 ms from the worker's start until it has answered."""
    with ActorPool(WorkerOptions(workers=1, threads=1), Counter, (0,)) as pool:
        worker = pool.actors[0]
        assert isinstance(worker, ProcessActor) and worker.pid is not None
        answered = threading.Event()

        def interrupt(pid: int) -> None:
            while not answered.wait(0.02):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGINT)

        thread = threading.Thread(target=interrupt, args=(worker.pid,))
        thread.start()
        try:
            assert pool.call(Counter.add, [(1,)]) == [1]
        finally:
            answered.set()
            thread.join()


def test_leaving_the_pool_stops_its_workers() -> None:
    with ActorPool(WorkerOptions(workers=2, threads=1), Counter, (0,)) as pool:
        pids = pool.call(Counter.pid, [(), ()])
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.parametrize(("options", "message"), [
    ({"workers": -1}, r"workers: Input should be greater than or equal to 0, got -1 \(set them with --workers N"),
    ({"workers": 257}, "workers: Input should be less than or equal to 256, got 257"),
    ({"workers": True}, "workers: Input should be a valid integer, got true"),
    ({"workers": 0, "executor": "ray"}, "The Ray executor needs workers >= 1"),
    ({"workers": 2, "ray_address": "host:6379"}, "--ray-address needs --executor ray"),
    ({"workers": 2, "threads": 0}, "threads: Input should be greater than or equal to 1, got 0"),
    ({"workers": 2, "executor": "thread"}, "executor: Input should be 'process' or 'ray'"),
])
def test_options_that_cannot_work_are_refused_naming_the_flags(options: dict[str, object], message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        WorkerOptions.from_dict(options)


@pytest.mark.parametrize("workers", [0, 2])
def test_every_process_of_the_pool_uses_the_threads_asked_for(workers: int) -> None:
    before = torch.get_num_threads()
    with ActorPool(WorkerOptions(workers=workers, threads=2), Counter, (0,)) as pool:
        assert torch.get_num_threads() == 2
        assert pool.call(Counter.threads, [()] * len(pool)) == [2] * len(pool)
    assert torch.get_num_threads() == before


def test_a_call_names_a_method_of_the_hosted_class() -> None:
    with ActorPool(WorkerOptions(), Counter, (0,)) as pool, pytest.raises(TypeError, match="not a method of Counter"):
        pool.call(Other.pid, [()])  # type: ignore[arg-type]


def test_each_actor_can_be_built_with_its_own_arguments() -> None:
    with ActorPool(WorkerOptions(workers=2, threads=1), Counter, lambda i: (100 * i,)) as pool:
        assert pool.call(Counter.add, [(1,), (1,)]) == [1, 101]


def test_unordered_jobs_in_process_come_back_in_job_order_with_failures_as_exceptions() -> None:
    with ActorPool(WorkerOptions(), Counter, (7,)) as pool:
        results = list(pool.unordered(Counter.job, [("a",), ("fail",), ("b",)]))
    assert [i for i, _ in results] == [0, 1, 2]
    assert results[0][1] == "a@7" and results[2][1] == "b@7"
    assert isinstance(results[1][1], ValueError) and "asked to fail" in str(results[1][1])


def test_unordered_jobs_on_workers_come_back_as_they_complete() -> None:
    with ActorPool(WorkerOptions(workers=2, threads=1), Counter, lambda i: (i,)) as pool:
        results = list(pool.unordered(Counter.job, [("slow",), ("a",), ("fail",), ("b",), ("c",)]))
        assert sorted(i for i, _ in results) == [0, 1, 2, 3, 4]
        assert results[-1] == (0, "slow@0")  # worker 0 naps while worker 1 takes every other job
        assert dict(results)[1] == "a@1" and isinstance(dict(results)[2], ValueError)
        assert pool.call(Counter.add, [(1,), (1,)]) == [1, 2]  # the pool is ready for more work


def test_a_worker_dying_in_an_unordered_run_names_its_job() -> None:
    with ActorPool(WorkerOptions(workers=2, threads=1), Counter, (0,)) as pool:
        done: list[int] = []
        with pytest.raises(WorkerFailed, match=r"worker 1 died \(exit code 3\)") as failure:
            for job, _ in pool.unordered(Counter.job, [("slow",), ("crash",), ("a",)]):
                done.append(job)
        assert (failure.value.actor, failure.value.job) == (1, 1) and done == []


@pytest.mark.parametrize(("executor", "workers", "cuda", "share"), [
    ("ray", 4, 2, 0.5), ("ray", 1, 2, 1.0), ("ray", 2, 0, 0.0), ("process", 2, 2, 0.0)])
def test_ray_actors_share_the_cuda_devices(executor: str, workers: int, cuda: int, share: float) -> None:
    devices = [f"cuda:{i}" for i in range(cuda)] or ["cpu"]
    options = WorkerOptions(workers=workers, executor=executor, devices=devices)  # type: ignore[arg-type]
    assert options.cuda_devices == cuda and options.gpus_per_worker == share
