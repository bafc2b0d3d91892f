"""Actors: the same calls give the same answers in this process and in a worker process; errors keep their type; a
worker that dies is reported at once, by index; options that cannot work are refused."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch

from esper.runtime.actors import ActorPool, WorkerFailed, WorkerOptions


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


@pytest.mark.parametrize("workers", [0, 2])
def test_calls_keep_state_and_come_back_in_actor_order(workers: int) -> None:
    with ActorPool(WorkerOptions(workers, threads=1), Counter, (10,)) as pool:
        n = len(pool)
        assert n == max(1, workers)
        assert pool.call("add", [(i,) for i in range(n)]) == [10 + i for i in range(n)]
        assert pool.call("add", [(1,)] * n) == [11 + i for i in range(n)]
        pids = pool.call("pid", [()] * n)
        assert (pids == [os.getpid()]) == (workers == 0) and len(set(pids)) == n


@pytest.mark.parametrize("workers", [0, 1])
def test_an_error_in_a_call_arrives_as_itself(workers: int) -> None:
    with ActorPool(WorkerOptions(workers, threads=1), Counter, (0,)) as pool:
        with pytest.raises(ValueError, match="bad input"):
            pool.call("fail", [("bad input",)] * len(pool))
        assert pool.call("add", [(2,)] * len(pool)) == [2] * len(pool)  # the actor lives on


def test_a_killed_worker_is_reported_at_once_with_its_index() -> None:
    with ActorPool(WorkerOptions(2, threads=1), Counter, (0,)) as pool:
        victim = pool.call("pid", [(), ()])[1]
        threading.Timer(0.5, os.kill, (victim, signal.SIGKILL)).start()
        started = time.monotonic()
        with pytest.raises(WorkerFailed, match=r"worker 1 died \(exit code -9\)") as failure:
            pool.call("nap", [(0.1,), (60.0,)])
        assert failure.value.actor == 1
        assert time.monotonic() - started < 10


def test_leaving_the_pool_stops_its_workers() -> None:
    with ActorPool(WorkerOptions(2, threads=1), Counter, (0,)) as pool:
        pids = pool.call("pid", [(), ()])
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.parametrize(("options", "message"), [
    ({"workers": -1}, "workers must be >= 0"),
    ({"workers": 0, "executor": "ray"}, "needs workers >= 1"),
    ({"workers": 2, "ray_address": "host:6379"}, "needs --executor ray"),
    ({"workers": 2, "threads": 0}, "threads must be >= 1"),
    ({"workers": 2, "executor": "thread"}, "'process' or 'ray'"),
])
def test_options_that_cannot_work_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WorkerOptions(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize("workers", [0, 2])
def test_every_process_of_the_pool_uses_the_threads_asked_for(workers: int) -> None:
    before = torch.get_num_threads()
    with ActorPool(WorkerOptions(workers, threads=2), Counter, (0,)) as pool:
        assert torch.get_num_threads() == 2
        assert pool.call("threads", [()] * len(pool)) == [2] * len(pool)
    assert torch.get_num_threads() == before
