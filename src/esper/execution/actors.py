"""Actors: one object that answers method calls, living in this process, in a spawned worker process, or in a Ray
actor on any machine of a cluster.

Parallel env work (PPO's env groups, a comparison's paired episodes) and datagen's twins and episodes run through
these. A caller names a method of the hosted class by the method itself (`pool.call(EnvHost.measure, ...)`), so readers
and type checkers follow it to its definition and its result type. `call` runs one call on every actor at once
(lockstep work); `unordered` hands independent jobs to whichever actor is free and yields their results as they
complete. Whatever the placement an actor computes the same numbers; only the wall time changes.

Every process of a run computes with the same number of torch intra-op threads (`WorkerOptions.threads`, one by
default): CPU kernels split their work by thread count, so their floats depend on it, and a run's numbers must not
depend on how many workers computed them. More cores are put to use by more workers, not more threads.

Every worker loads the plugins this process has loaded (`esper.execution.plugins`), in the same order, before it builds
its object, so user blueprints and tasks exist wherever the work runs.

A worker process ignores Ctrl+C from its start (the caller decides when to stop), exits on its own when its parent
disappears (so a killed run leaves no orphan), and a worker that dies makes the pending `result` raise `WorkerFailed`
at once, naming the worker. Every command that runs workers stops on it with one line, and its rerun resumes.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import signal
import threading
import traceback
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from types import ModuleType, TracebackType
from typing import Any, Concatenate, Generic, TypeVar

import torch

from esper.data.readers import DataWarning
from esper.execution.plugins import load_plugins, loaded_plugins
from esper.execution.ray_cluster import ensure_ray
from esper.execution.workers import WorkerFailed, WorkerOptions

__all__ = ["Actor", "ActorPool"]

T = TypeVar("T")
R = TypeVar("R")
_POLL_S = 0.5
_JOIN_S = 5.0


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

    @staticmethod
    def first_ready(actors: Sequence[Actor]) -> int:
        """The index among `actors` (of this class, each with a call submitted) of one whose `result` will not
        block, waiting for one. A local actor computes at `submit`, so each is ready."""
        return 0


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


@contextlib.contextmanager
def _children_ignore_ctrl_c() -> Iterator[None]:
    """Processes started inside the block ignore SIGINT from their first instruction.

    Ctrl+C at a terminal reaches the whole process group, and a worker still importing torch (before `_serve` can
    ignore it) would die printing a traceback. An ignored signal stays ignored across exec, and Python then installs
    no KeyboardInterrupt handler, so this process ignores SIGINT while it starts one (a few milliseconds; signal
    dispositions belong to the main thread, so elsewhere the worker is protected once `_serve` runs)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _serve(factory: Callable[..., Any], args: tuple[Any, ...], threads: int, conn: Connection, parent: int,
           plugins: tuple[str, ...]) -> None:
    """A worker process: load the run's plugins, build the object, then answer calls until told to stop or
    orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops its workers; Ctrl+C is for it alone
    warnings.simplefilter("ignore", DataWarning)  # the parent, reading the same data, has said it once
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
        with _children_ignore_ctrl_c():
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

    @staticmethod
    def first_ready(actors: Sequence[Actor]) -> int:
        """The first of `actors` to answer or to die."""
        index: dict[Any, int] = {}
        for i, actor in enumerate(actors):
            assert isinstance(actor, ProcessActor)
            index[actor._conn] = index[actor._process.sentinel] = i
        return index[wait(list(index))[0]]

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
        warnings.simplefilter("ignore", DataWarning)  # the driver, reading the same data, has said it once
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

    @staticmethod
    def first_ready(actors: Sequence[Actor]) -> int:
        """The first of `actors` whose call Ray has finished (or failed)."""
        refs = {actor._ref: i for i, actor in enumerate(actors) if isinstance(actor, RayActor)}
        ray = next(a._ray for a in actors if isinstance(a, RayActor))
        ready, _ = ray.wait(list(refs), num_returns=1)
        return refs[ready[0]]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ray.kill(self._handle)


class ActorPool(Generic[T]):
    """`options.workers` actors hosting `factory(*args)` (one local actor when the work stays in this process);
    `args` may instead be a function of the actor's index (e.g. to give each its device).

    Calls name a method of the hosted class by the method itself, and return what it returns. While the pool is
    open this process, too, computes with `options.threads` intra-op threads. Use as a context manager: leaving it
    stops every worker (and a Ray cluster it started) and restores this process's thread count, also on an error or
    Ctrl+C.
    """

    def __init__(self, options: WorkerOptions, factory: Callable[..., T],
                 args: tuple[Any, ...] | Callable[[int], tuple[Any, ...]] = (), *, role: str = "worker") -> None:
        self.options = options
        self._factory = factory
        self._ray: ModuleType | None = None
        self._started_ray = False
        self._threads_before: int | None = torch.get_num_threads()
        torch.set_num_threads(options.threads)
        args_of = args if callable(args) else lambda _: args
        self.actors: list[Actor] = []
        try:
            if options.in_process:
                self.actors.append(LocalActor(f"{role} (in process)", factory, args_of(0)))
            elif options.executor == "ray":
                self._ray, self._started_ray = ensure_ray(options.ray_address,
                                                          num_cpus=options.workers * options.threads)
                self.actors += [RayActor(self._ray, f"{role} {i}", factory, args_of(i), options.threads,
                                         options.gpus_per_worker) for i in range(options.workers)]
            else:
                self.actors += [ProcessActor(f"{role} {i}", factory, args_of(i), options.threads)
                                for i in range(options.workers)]
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self.actors)

    def _name(self, method: Callable[..., Any]) -> str:
        """The attribute of the hosted class that holds `method` (the name the actors call it by)."""
        if not isinstance(self._factory, type):
            return method.__name__
        for klass in self._factory.__mro__:
            for name, value in vars(klass).items():
                if value is method:
                    return name
        raise TypeError(f"{method.__qualname__} is not a method of {self._factory.__qualname__}, the class these "
                        "actors host")

    def call(self, method: Callable[Concatenate[T, ...], R], per_actor: Sequence[tuple[Any, ...]]) -> list[R]:
        """Call `method` on every actor at once (actor i with the arguments `per_actor[i]`) and return their
        results in actor order. The first failure raises, after every other actor has answered (or died)."""
        if len(per_actor) != len(self.actors):
            raise ValueError(f"{len(per_actor)} argument tuples for {len(self.actors)} actors")
        name = self._name(method)
        for actor, args in zip(self.actors, per_actor, strict=True):
            actor.submit(name, *args)
        results: list[R] = []
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

    def unordered(self, method: Callable[Concatenate[T, ...], R], jobs: Sequence[tuple[Any, ...]]
                  ) -> Iterator[tuple[int, R | Exception]]:
        """Call `method` once per argument tuple of `jobs`, each on whichever actor is free, and yield (index of
        the job, its result) as the calls complete; in this process, in job order. A call that raised yields its
        exception instead, so one failed job never stops the others; a worker that dies raises `WorkerFailed`
        naming the job it held."""
        name = self._name(method)
        queue = deque(enumerate(jobs))
        held: dict[int, int] = {}  # actor index -> the job it computes
        while queue or held:
            for i, actor in enumerate(self.actors):
                if i not in held and queue:
                    job, args = queue.popleft()
                    held[i] = job
                    try:
                        actor.submit(name, *args)
                    except WorkerFailed as error:
                        raise WorkerFailed(str(error), actor=i, job=job) from None
            busy = list(held)
            i = busy[type(self.actors[0]).first_ready([self.actors[b] for b in busy])]
            job = held.pop(i)
            outcome: R | Exception
            try:
                outcome = self.actors[i].result()
            except WorkerFailed as error:
                raise WorkerFailed(str(error), actor=i, job=job) from None
            except Exception as error:
                outcome = error
            yield job, outcome

    def close(self) -> None:
        for actor in self.actors:
            actor.close()
        if self._started_ray and self._ray is not None:
            self._ray.shutdown()
            self._started_ray = False
        if self._threads_before is not None:
            torch.set_num_threads(self._threads_before)
            self._threads_before = None

    def __enter__(self) -> ActorPool[T]:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
                 ) -> None:
        self.close()
