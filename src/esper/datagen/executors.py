"""Executors: where datagen jobs (static twins, episodes) are computed — in process, in a local process pool, or on
a Ray cluster.

Every executor calls `fn(job, options, device)` with torch limited to `threads_per_episode` intra-op threads (one
by default), so a job computes the same numbers whichever executor runs it, and yields `(job, result)` pairs as
results arrive; a failed job yields a `WorkerError` carrying the worker's traceback instead of raising, so one bad
job never stops the others. Workers only compute: the orchestrator process writes every file.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import signal
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Any, Protocol, TypeVar

import torch

from esper.leyline.errors import UserInputError
from esper.runtime.plugins import load_plugins, loaded_plugins
from esper.runtime.ray_cluster import ensure_ray, import_ray

__all__ = [
    "EpisodeExecutor",
    "JobFn",
    "ProcessPoolEpisodeExecutor",
    "RayEpisodeExecutor",
    "SerialExecutor",
    "WorkerError",
]

J = TypeVar("J")
Opt = TypeVar("Opt")
R = TypeVar("R")
JobFn = Callable[[J, Opt, str], R]
"""`fn(job, options, device) -> result`; must be a module-level (picklable) function for the pool and Ray."""

_POLL_S = 0.5
_SEND_ATTEMPTS = 3


class WorkerError(RuntimeError):
    """A job raised (or its worker died); the message holds the worker-side traceback."""


class EpisodeExecutor(Protocol):
    """Runs jobs and yields each with its result (or a `WorkerError`) in completion order."""

    def run(self, jobs: Sequence[J], fn: JobFn[J, Opt, R], options: Opt) -> Iterator[tuple[J, R | Exception]]: ...


def _check_threads(threads: int) -> None:
    if threads < 1:
        raise UserInputError(f"threads_per_episode must be >= 1, got {threads}")


def _call(fn: JobFn[J, Opt, R], job: J, options: Opt, device: str, threads: int, plugins: tuple[str, ...]
          ) -> tuple[bool, Any]:
    """Run one job with a fixed intra-op thread count, in a process that has loaded the orchestrator's plugins (their
    tasks and blueprints); (True, result) or (False, formatted traceback)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        load_plugins(plugins, installed=False)
        return True, fn(job, options, device)
    except Exception as error:
        return False, f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
    finally:
        torch.set_num_threads(previous)


class SerialExecutor:
    """Runs jobs one after another in this process (debugging, tests, single-device runs)."""

    def __init__(self, device: str = "cpu", threads_per_episode: int = 1) -> None:
        _check_threads(threads_per_episode)
        self.device = device
        self.threads_per_episode = threads_per_episode

    def run(self, jobs: Sequence[J], fn: JobFn[J, Opt, R], options: Opt) -> Iterator[tuple[J, R | Exception]]:
        for job in jobs:
            ok, payload = _call(fn, job, options, self.device, self.threads_per_episode, loaded_plugins())
            yield job, payload if ok else WorkerError(payload)


def _worker_main(device: str, threads: int, fn: JobFn[Any, Any, Any], options: Any, conn: Connection,
                 parent_pid: int, plugins: tuple[str, ...]) -> None:
    """Pool worker: run the jobs its parent sends until told to stop, or until the parent is gone. Ctrl+C is the
    orchestrator's to handle (it stops the pool): a worker ignores it, so an interrupt prints no worker tracebacks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(threads)
    while True:
        if not conn.poll(_POLL_S):
            if os.getppid() != parent_pid:
                return  # orphaned: the orchestrator was killed
            continue
        try:
            item = conn.recv()
        except (EOFError, OSError):
            return
        if item is None:
            return
        index, job = item
        ok, payload = _call(fn, job, options, device, threads, plugins)
        try:
            data = pickle.dumps((index, ok, payload))
        except Exception as error:
            data = pickle.dumps((index, False, f"the result of job {index} cannot be pickled: {error!r}"))
        try:
            conn.send_bytes(data)
        except OSError:
            return


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    job: int | None = None  # index of the job it holds


class ProcessPoolEpisodeExecutor:
    """`workers` spawned processes; worker i runs its jobs on `devices[i mod len(devices)]`.

    Each worker has its own pipe and holds one job at a time, so no lock is shared between processes and the
    parent always knows which job a worker holds: a worker that dies (out of memory, segfault) fails only that job,
    and a fresh worker takes its place. Workers exit on their own when the orchestrator is killed.
    """

    def __init__(self, workers: int, devices: Sequence[str] = ("cpu",), threads_per_episode: int = 1) -> None:
        if workers < 1:
            raise UserInputError(f"workers must be >= 1, got {workers}")
        if not devices:
            raise UserInputError("devices must name at least one device (e.g. ['cpu'] or ['cuda:0', 'cuda:1'])")
        _check_threads(threads_per_episode)
        self.workers = workers
        self.devices = tuple(devices)
        self.threads_per_episode = threads_per_episode

    def device_of(self, slot: int) -> str:
        return self.devices[slot % len(self.devices)]

    def run(self, jobs: Sequence[J], fn: JobFn[J, Opt, R], options: Opt) -> Iterator[tuple[J, R | Exception]]:
        jobs = list(jobs)
        if not jobs:
            return
        ctx = mp.get_context("spawn")

        def start(slot: int) -> _Worker:
            parent_end, child_end = ctx.Pipe()
            process = ctx.Process(
                target=_worker_main, daemon=True,
                args=(self.device_of(slot), self.threads_per_episode, fn, options, child_end, os.getpid(),
                      loaded_plugins()),
            )
            process.start()
            child_end.close()
            return _Worker(process, parent_end)

        workers = [start(slot) for slot in range(min(self.workers, len(jobs)))]
        pending = deque(range(len(jobs)))

        def assign(slot: int) -> None:
            for _ in range(_SEND_ATTEMPTS):
                if not pending:
                    return
                if not workers[slot].process.is_alive():
                    workers[slot].conn.close()
                    workers[slot] = start(slot)
                try:
                    workers[slot].conn.send((pending[0], jobs[pending[0]]))
                except OSError:  # it died between the liveness check and the send: replace it, send again
                    workers[slot].process.join(timeout=5)
                    continue
                workers[slot].job = pending.popleft()
                return
            raise WorkerError(f"pool worker {slot} ({self.device_of(slot)}) keeps dying before taking a job")

        try:
            for slot in range(len(workers)):
                assign(slot)
            while any(w.job is not None for w in workers):
                busy = {s: w for s, w in enumerate(workers) if w.job is not None}
                waitables: list[Any] = [w.conn for w in busy.values()] + [w.process.sentinel for w in busy.values()]
                ready = set(wait(waitables))
                for slot, worker in busy.items():
                    if worker.conn not in ready and worker.process.sentinel not in ready:
                        continue
                    result = _receive(worker)
                    lost = worker.job
                    assert lost is not None
                    worker.job = None
                    if result is None:  # died before answering
                        worker.process.join(timeout=5)
                        yield jobs[lost], WorkerError(f"worker {slot} ({self.device_of(slot)}) died with exit code "
                                                      f"{worker.process.exitcode} while running this job")
                    else:
                        index, ok, payload = result
                        yield jobs[index], payload if ok else WorkerError(payload)
                    assign(slot)  # a dead worker is replaced only when a job is left for it
        finally:
            _stop(workers)


def _receive(worker: _Worker) -> tuple[int, bool, Any] | None:
    """The worker's answer, or None when it died without one."""
    try:
        if worker.conn.poll():
            answer: tuple[int, bool, Any] = pickle.loads(worker.conn.recv_bytes())
            return answer
    except (EOFError, OSError):
        pass
    return None


def _stop(workers: Sequence[_Worker]) -> None:
    for worker in workers:
        if worker.process.is_alive():
            with contextlib.suppress(OSError):
                worker.conn.send(None)
    for worker in workers:
        worker.process.join(timeout=5)
        if worker.process.is_alive():
            worker.process.terminate()
            worker.process.join(timeout=5)
        worker.conn.close()


class RayEpisodeExecutor:
    """Ray tasks, on the cluster at `address` or on a local cluster started here (never Ray's local mode).

    Each job reserves `threads_per_episode` CPUs and `num_gpus_per_episode` GPUs (fractions share a GPU); a GPU
    job sees its GPU as "cuda". Ray retries nothing: failed jobs come back as `WorkerError` and the orchestrator
    decides. Use as a context manager (or call `close`) to stop a local cluster this executor started.
    """

    def __init__(
        self,
        address: str | None = None,
        num_gpus_per_episode: float = 0.0,
        *,
        num_cpus: int | None = None,
        threads_per_episode: int = 1,
    ) -> None:
        _check_threads(threads_per_episode)
        if num_gpus_per_episode < 0:
            raise UserInputError(f"num_gpus_per_episode must be >= 0, got {num_gpus_per_episode}")
        if address is not None and num_cpus is not None:
            raise UserInputError("num_cpus sizes a local cluster; an existing cluster at an address has its own")
        self._ray = import_ray()
        self.address = address
        self.num_gpus_per_episode = num_gpus_per_episode
        self.num_cpus = num_cpus
        self.threads_per_episode = threads_per_episode
        self._started_here = False
        self._remote: Any = None

    @property
    def device(self) -> str:
        return "cuda" if self.num_gpus_per_episode > 0 else "cpu"

    def _ensure_started(self) -> Any:
        ray = self._ray
        if not ray.is_initialized():
            _, self._started_here = ensure_ray(self.address, self.num_cpus)
        if self._remote is None:
            self._remote = ray.remote(
                num_cpus=self.threads_per_episode, num_gpus=self.num_gpus_per_episode, max_retries=0
            )(_call)
        return ray

    def run(self, jobs: Sequence[J], fn: JobFn[J, Opt, R], options: Opt) -> Iterator[tuple[J, R | Exception]]:
        jobs = list(jobs)
        if not jobs:
            return
        ray = self._ensure_started()
        options_ref = ray.put(options)
        refs = {
            self._remote.remote(fn, job, options_ref, self.device, self.threads_per_episode, loaded_plugins()): i
            for i, job in enumerate(jobs)
        }
        try:
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1)
                for ref in ready:
                    index = refs.pop(ref)
                    try:
                        ok, payload = ray.get(ref)
                    except Exception as error:  # the task's worker died, or Ray lost the task
                        yield jobs[index], WorkerError(f"Ray task failed: {error}")
                        continue
                    yield jobs[index], payload if ok else WorkerError(payload)
        finally:
            for ref in refs:
                ray.cancel(ref, force=True)

    def close(self) -> None:
        if self._started_here:
            self._ray.shutdown()
            self._started_here = False
            self._remote = None

    def __enter__(self) -> RayEpisodeExecutor:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
                 ) -> None:
        self.close()
