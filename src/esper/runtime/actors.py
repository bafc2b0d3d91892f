"""Actors: one object that answers method calls, living in this process, in a spawned worker process, or in a Ray
actor on any machine of a cluster.

Parallel env work (PPO's env groups, a comparison's paired episodes) and datagen's jobs run through these. A caller
`submit`s a call to every actor and then collects each `result`, so the actors compute side by side while the caller
waits. Whatever the placement the calls are the same and run in the same order, so an actor computes the same numbers
wherever it lives; only the wall time changes.

Every process of a run computes with the same number of torch intra-op threads (`WorkerOptions.threads`, one by
default): CPU kernels split their work by thread count, so their floats depend on it, and a run's numbers must not
depend on how many workers computed them. More cores are put to use by more workers, not more threads.

Every worker loads the plugins this process has loaded (`esper.runtime.plugins`), in the same order, before it builds
its object, so user blueprints and tasks exist wherever the work runs.

A worker process ignores Ctrl+C (the caller decides when to stop), exits on its own when its parent disappears (so a
killed run leaves no orphan), and a worker that dies makes the pending `result` raise `WorkerFailed` at once, naming
the worker.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import signal
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from types import ModuleType, TracebackType
from typing import Any, Literal

import torch

from esper.leyline.errors import UserInputError
from esper.runtime.plugins import load_plugins, loaded_plugins
from esper.runtime.ray_cluster import ensure_ray

__all__ = ["Actor", "ActorPool", "WorkerFailed", "WorkerOptions", "intra_op_threads"]

Executor = Literal["process", "ray"]
_POLL_S = 0.5
_JOIN_S = 5.0


@contextlib.contextmanager
def intra_op_threads(threads: int) -> Iterator[None]:
    """torch computes with `threads` intra-op threads inside the block, and as before it afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class WorkerFailed(RuntimeError):
    """A worker died (killed, out of memory, a crash) or could not be reached; the message names it and `actor` is
    its index in its pool (None until the pool knows it)."""

    def __init__(self, message: str, actor: int | None = None) -> None:
        super().__init__(message)
        self.actor = actor


@dataclass(frozen=True)
class WorkerOptions:
    """Where parallel env work runs: `workers` = 0 keeps it in this process; otherwise that many worker processes
    (`executor="process"`) or Ray actors (`executor="ray"`, on the cluster at `ray_address` or a local one), under
    Ray with `gpus_per_worker` of a GPU each. `threads`: the intra-op threads of every process of the run, this one
    included (it decides the float path, so it is the same wherever the work runs)."""

    workers: int = 0
    executor: Executor = "process"
    ray_address: str | None = None
    threads: int = 1
    gpus_per_worker: float = 0.0

    def __post_init__(self) -> None:
        if self.workers < 0:
            raise UserInputError(f"workers must be >= 0 (0: in this process), got {self.workers}")
        if self.executor not in ("process", "ray"):
            raise UserInputError(f"executor must be 'process' or 'ray', got {self.executor!r}")
        if self.executor == "ray" and self.workers < 1:
            raise UserInputError("The Ray executor needs workers >= 1 (--workers N): the actors it starts")
        if self.ray_address is not None and self.executor != "ray":
            raise UserInputError("--ray-address needs --executor ray")
        if self.threads < 1:
            raise UserInputError(f"threads must be >= 1, got {self.threads}")
        if self.gpus_per_worker < 0:
            raise UserInputError(f"gpus_per_worker must be >= 0, got {self.gpus_per_worker}")

    @property
    def in_process(self) -> bool:
        return self.workers == 0

    def describe(self) -> str:
        if self.in_process:
            return "in process"
        where = f"Ray actors ({self.ray_address or 'local cluster'})" if self.executor == "ray" else "processes"
        return f"{self.workers} worker {where}, {self.threads} thread(s) each"


def _exception_payload(error: BaseException) -> bytes:
    """The error as it can cross a process boundary: itself with the worker's traceback as a note, or, when it
    cannot be pickled, a RuntimeError carrying its text."""
    text = "".join(traceback.format_exception(error))
    try:
        error.add_note(f"In the worker:\n{text}")
        return pickle.dumps(error)
    except Exception:
        return pickle.dumps(RuntimeError(f"{type(error).__name__}: {error}\nIn the worker:\n{text}"))


def _answer(obj: Any, method: str, args: tuple[Any, ...]) -> tuple[bool, Any]:
    try:
        return True, getattr(obj, method)(*args)
    except Exception as error:
        return False, _exception_payload(error)


def _unwrap(ok: bool, payload: Any) -> Any:
    if ok:
        return payload
    raise pickle.loads(payload)


class Actor:
    """One hosted object: `submit` a call, then `result` returns its value (or raises what the call raised)."""

    name: str

    def submit(self, method: str, *args: Any) -> None:
        raise NotImplementedError

    def result(self) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        """Stop hosting the object (idempotent)."""


class LocalActor(Actor):
    """The object in this process: a call runs at `submit` (so local actors run one after another)."""

    def __init__(self, name: str, factory: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.name = name
        self._obj = factory(*args)
        self._pending: tuple[bool, Any] | None = None

    def submit(self, method: str, *args: Any) -> None:
        try:
            self._pending = True, getattr(self._obj, method)(*args)
        except Exception as error:
            self._pending = False, error

    def result(self) -> Any:
        assert self._pending is not None, "result() without a submitted call"
        (ok, value), self._pending = self._pending, None
        if ok:
            return value
        raise value


def _serve(factory: Callable[..., Any], args: tuple[Any, ...], threads: int, conn: Connection, parent: int,
           plugins: tuple[str, ...]) -> None:
    """A worker process: load the run's plugins, build the object, then answer calls until told to stop or
    orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops its workers; Ctrl+C is for it alone
    torch.set_num_threads(threads)
    try:
        load_plugins(plugins, installed=False)
        obj = factory(*args)
        conn.send((True, None))
    except Exception as error:
        conn.send((False, _exception_payload(error)))
        return
    while True:
        try:
            if not conn.poll(_POLL_S):
                if os.getppid() != parent:
                    return  # the run was killed: do not outlive it
                continue
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        method, call_args = message
        answer = _answer(obj, method, call_args)
        try:
            conn.send(answer)
        except OSError:
            return
        except Exception as error:  # the result cannot be pickled
            conn.send((False, _exception_payload(error)))


class ProcessActor(Actor):
    """The object in a spawned worker process, reached through a pipe."""

    def __init__(self, name: str, factory: Callable[..., Any], args: tuple[Any, ...], threads: int) -> None:
        self.name = name
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(factory, args, threads, child, os.getpid(), loaded_plugins()),
                                    daemon=True, name=f"esper-{name}")
        self._process.start()
        child.close()
        self._waiting = True  # for the constructor's answer

    def submit(self, method: str, *args: Any) -> None:
        if self._waiting:
            self.result()  # the object must exist before it is called
        try:
            self._conn.send((method, args))
        except OSError:
            raise self._died() from None
        self._waiting = True

    def result(self) -> Any:
        assert self._waiting, "result() without a submitted call"
        self._waiting = False
        ready = wait([self._conn, self._process.sentinel])
        if self._conn in ready:
            with contextlib.suppress(EOFError, OSError):
                ok, payload = self._conn.recv()
                return _unwrap(ok, payload)
        raise self._died()

    def _died(self) -> WorkerFailed:
        self._process.join(timeout=_JOIN_S)
        return WorkerFailed(f"{self.name} died (exit code {self._process.exitcode})")

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def close(self) -> None:
        if self._process.is_alive():
            with contextlib.suppress(OSError):
                self._conn.send(None)
            self._process.join(timeout=_JOIN_S)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=_JOIN_S)
        self._conn.close()


class _RayHosted:
    """What a Ray actor holds: the object, answering calls as `_serve` does."""

    def __init__(self, factory: Callable[..., Any], args: tuple[Any, ...], threads: int,
                 plugins: tuple[str, ...]) -> None:
        torch.set_num_threads(threads)
        load_plugins(plugins, installed=False)
        self.obj = factory(*args)

    def call(self, method: str, args: tuple[Any, ...]) -> tuple[bool, Any]:
        return _answer(self.obj, method, args)

    def pid(self) -> int:
        return os.getpid()


class RayActor(Actor):
    """The object in a Ray actor (`num_cpus` = its threads, a fraction of a GPU if asked)."""

    def __init__(self, ray: ModuleType, name: str, factory: Callable[..., Any], args: tuple[Any, ...],
                 threads: int, gpus: float) -> None:
        self.name = name
        self._ray = ray
        remote = ray.remote(num_cpus=threads, num_gpus=gpus, max_restarts=0)(_RayHosted)
        self._handle = remote.remote(factory, args, threads, loaded_plugins())
        self._ref: Any = None

    def submit(self, method: str, *args: Any) -> None:
        self._ref = self._handle.call.remote(method, args)

    def result(self) -> Any:
        ref, self._ref = self._ref, None
        try:
            ok, payload = self._ray.get(ref)
        except self._ray.exceptions.RayError as error:
            raise WorkerFailed(f"{self.name} (a Ray actor) failed: {type(error).__name__}: "
                               f"{str(error).splitlines()[0] if str(error) else ''}") from None
        return _unwrap(ok, payload)

    @property
    def pid(self) -> int:
        return int(self._ray.get(self._handle.pid.remote()))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ray.kill(self._handle)


class ActorPool:
    """`options.workers` actors hosting `factory(*args)` (one local actor when the work stays in this process).

    While it is open this process, too, computes with `options.threads` intra-op threads. Use as a context manager:
    leaving it stops every worker (and a Ray cluster it started) and restores this process's thread count, also on
    an error or Ctrl+C.
    """

    def __init__(self, options: WorkerOptions, factory: Callable[..., Any], args: tuple[Any, ...] = (),
                 *, role: str = "worker") -> None:
        self.options = options
        self._ray: ModuleType | None = None
        self._started_ray = False
        self._threads_before: int | None = torch.get_num_threads()
        torch.set_num_threads(options.threads)
        self.actors: list[Actor] = []
        try:
            if options.in_process:
                self.actors.append(LocalActor(f"{role} (in process)", factory, args))
            elif options.executor == "ray":
                self._ray, self._started_ray = ensure_ray(options.ray_address)
                self.actors += [RayActor(self._ray, f"{role} {i}", factory, args, options.threads,
                                         options.gpus_per_worker) for i in range(options.workers)]
            else:
                self.actors += [ProcessActor(f"{role} {i}", factory, args, options.threads)
                                for i in range(options.workers)]
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self.actors)

    def call(self, method: str, per_actor: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Call `method` on every actor at once (actor i with the arguments `per_actor[i]`) and return their
        results in actor order. The first failure raises, after every other actor has answered (or died)."""
        if len(per_actor) != len(self.actors):
            raise ValueError(f"{len(per_actor)} argument tuples for {len(self.actors)} actors")
        for actor, args in zip(self.actors, per_actor, strict=True):
            actor.submit(method, *args)
        results: list[Any] = []
        failure: BaseException | None = None
        for i, actor in enumerate(self.actors):
            try:
                results.append(actor.result())
            except WorkerFailed as error:
                failure = failure or WorkerFailed(str(error), actor=i)
            except Exception as error:
                failure = failure or error
        if failure is not None:
            raise failure
        return results

    def close(self) -> None:
        for actor in self.actors:
            actor.close()
        if self._started_ray and self._ray is not None:
            self._ray.shutdown()
            self._started_ray = False
        if self._threads_before is not None:
            torch.set_num_threads(self._threads_before)
            self._threads_before = None

    def __enter__(self) -> ActorPool:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
                 ) -> None:
        self.close()
