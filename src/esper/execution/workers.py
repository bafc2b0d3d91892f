"""What every command that runs workers shares: where the work runs (`WorkerOptions`), the error a lost worker
raises (`WorkerFailed`), and the intra-op thread count every process of a run computes with.

`esper.execution.actors` places the work these options describe.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Annotated, ClassVar, Literal, Self

import torch
from pydantic import Field, StrictInt, model_validator

from esper.leyline.strict_config import StrictConfig

__all__ = ["MAX_THREADS", "MAX_WORKERS", "Executor", "Threads", "WorkerFailed", "WorkerOptions", "Workers",
           "cuda_device_count", "intra_op_threads", "placement_problem"]

Executor = Literal["process", "ray"]
MAX_WORKERS = 256
MAX_THREADS = 1024
Workers = Annotated[StrictInt, Field(ge=0, le=MAX_WORKERS)]
"""Worker processes or Ray actors; 0 keeps the work in this process."""
Threads = Annotated[StrictInt, Field(ge=1, le=MAX_THREADS)]


def placement_problem(workers: int, executor: Executor, ray_address: str | None) -> str | None:
    """What makes a placement impossible (None: nothing): the one check every config holding these settings runs."""
    if executor == "ray" and workers < 1:
        return "The Ray executor needs workers >= 1 (--workers N): the actors it starts"
    if ray_address is not None and executor != "ray":
        return "--ray-address needs --executor ray"
    return None


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
    """A worker died (killed, out of memory, a crash) or could not be reached; the message names it, `actor` is its
    index in its pool (None until the pool knows it) and `job` the index of the job it held in an `unordered` run."""

    def __init__(self, message: str, actor: int | None = None, job: int | None = None) -> None:
        super().__init__(message)
        self.actor = actor
        self.job = job


class WorkerOptions(StrictConfig):
    """Where parallel work runs: `workers` = 0 keeps it in this process; otherwise that many worker processes
    (`executor="process"`) or Ray actors (`executor="ray"`, on the cluster at `ray_address` or a local one).
    `threads`: the intra-op threads of every process of the run, this one included (it decides the float path, so
    it is the same wherever the work runs). `device`: a learner's device (and the envs' where `devices` names none);
    `devices`: the env devices, round-robin. Ray actors share the CUDA devices among them (`gpus_per_worker`), worker
    processes address them by name.

    The one place these settings are checked: every command's flags and `TrainingConfig` build one.
    """

    KIND: ClassVar[str] = "worker options"
    FIX: ClassVar[str] = "set them with --workers N, --executor {process,ray}, --ray-address and --threads N"
    workers: Workers = Field(default=0, description="worker processes (or Ray actors) the env groups spread over; 0: "
                                                    "all in this process")
    executor: Executor = Field(default="process", description="where workers run: local processes or Ray actors")
    ray_address: str | None = Field(default=None, description="an existing Ray cluster (default: a local one "
                                                               "started for the run)")
    threads: Threads = Field(default=1, description="intra-op threads of every process of the run (its floats depend "
                                                    "on it; placement does not)")
    device: str = Field(default="auto", description="policy device: 'auto', 'cpu' or 'cuda:N'")
    devices: list[str] | None = Field(default=None, description="env devices, round-robin (default: --device)")

    @model_validator(mode="after")
    def _placement(self) -> Self:
        problem = placement_problem(self.workers, self.executor, self.ray_address)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def cuda_devices(self) -> int:
        """How many CUDA devices the work runs on."""
        return cuda_device_count(self.devices or [self.device])

    @property
    def in_process(self) -> bool:
        return self.workers == 0

    @property
    def gpus_per_worker(self) -> float:
        """A Ray actor's share of the CUDA devices (at most one each; none for processes, which name theirs)."""
        if self.executor != "ray" or not self.cuda_devices:
            return 0.0
        return min(1.0, self.cuda_devices / self.workers)

    def describe(self) -> str:
        if self.in_process:
            return "in process"
        where = f"Ray actors ({self.ray_address or 'local cluster'})" if self.executor == "ray" else "processes"
        return f"{self.workers} worker {where}, {self.threads} thread(s) each"


def cuda_device_count(devices: Iterable[str | torch.device]) -> int:
    """How many distinct CUDA devices `devices` names: the `cuda_devices` of work that runs on them."""
    return len({str(d) for d in devices if str(d).startswith("cuda")})
