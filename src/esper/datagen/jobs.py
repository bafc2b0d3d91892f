"""Datagen's workers: the actor that computes static twins and episodes, placed by `esper.execution.actors` like every
other command's workers. Workers only compute; the orchestrator process writes every file.

The job functions are `fn(job, options, device) -> record`, module-level (a worker imports them by name) and
deterministic for a fixed thread count, so a job computes the same record wherever it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from esper.datagen.plans import EpisodeTask, TwinPlan
from esper.execution.actors import ActorPool
from esper.execution.workers import WorkerFailed, WorkerOptions

__all__ = ["GenerationJobs", "JobHost", "computed", "generation_pool"]

J = TypeVar("J")
Record = Mapping[str, Any]


@dataclass(frozen=True)
class GenerationJobs:
    """What every job of a generation computes with: the twin and episode functions and their options."""

    episode_fn: Callable[[EpisodeTask, Any, str], Record]
    twin_fn: Callable[[TwinPlan, Any, str], Record]
    options: Any


class JobHost:
    """One worker's job runner; it computes on `device`."""

    def __init__(self, jobs: GenerationJobs, device: str) -> None:
        self.jobs = jobs
        self.device = device

    def twin(self, twin: TwinPlan) -> Record:
        return self.jobs.twin_fn(twin, self.jobs.options, self.device)

    def episode(self, task: EpisodeTask) -> Record:
        return self.jobs.episode_fn(task, self.jobs.options, self.device)


def generation_pool(workers: WorkerOptions, jobs: GenerationJobs, devices: Sequence[str] = ("cpu",)
                    ) -> ActorPool[JobHost]:
    """Job runners on the workers `workers` describes: worker i computes on `devices[i mod n]` (in this process, on
    the first); a Ray actor with a share of a GPU computes on its GPU, which it sees as cuda:0."""
    if not devices:
        raise ValueError("devices must name at least one device (e.g. ['cpu'] or ['cuda:0', 'cuda:1'])")

    def device_of(i: int) -> str:
        if workers.executor == "ray":
            return "cuda:0" if workers.gpus_per_worker > 0 else "cpu"
        return devices[i % len(devices)]

    return ActorPool(workers, JobHost, lambda i: (jobs, device_of(i)), role="datagen worker")


def computed(pool: ActorPool[JobHost], method: Callable[[JobHost, J], Record], jobs: Sequence[J],
             on_lost: Callable[[J, WorkerFailed], str]) -> Iterator[tuple[J, Record | Exception]]:
    """Each job with its record (or the exception it raised) as the workers complete them. A worker that dies
    stops the run: `on_lost` records the attempt of the job it held and names the job for the error."""
    try:
        for index, result in pool.unordered(method, [(job,) for job in jobs]):
            yield jobs[index], result
    except WorkerFailed as lost:
        if lost.job is None:
            raise
        raise WorkerFailed(f"{lost} while computing {on_lost(jobs[lost.job], lost)}", lost.actor, lost.job) from None
