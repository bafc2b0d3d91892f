"""What every command that runs workers shares: where the work runs (`WorkerOptions`), the error a lost worker
raises (`WorkerFailed`), and the intra-op thread count every process of a run computes with.

`esper.runtime.actors` places the work these options describe.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

import torch

from esper.leyline.errors import UserInputError

__all__ = ["MAX_THREADS", "MAX_WORKERS", "Executor", "WorkerFailed", "WorkerOptions", "cuda_device_count",
           "intra_op_threads"]

Executor = Literal["process", "ray"]
MAX_WORKERS = 256
MAX_THREADS = 1024


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


@dataclass(frozen=True)
class WorkerOptions:
    """Where parallel work runs: `workers` = 0 keeps it in this process; otherwise that many worker processes
    (`executor="process"`) or Ray actors (`executor="ray"`, on the cluster at `ray_address` or a local one).
    `threads`: the intra-op threads of every process of the run, this one included (it decides the float path, so
    it is the same wherever the work runs). `cuda_devices`: how many CUDA devices the work runs on; Ray actors share
    them (`gpus_per_worker`), worker processes address them by name.

    The one place these settings are checked: every command's flags and `TrainingConfig` build one.
    """

    workers: int = 0
    executor: Executor = "process"
    ray_address: str | None = None
    threads: int = 1
    cuda_devices: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not 0 <= self.workers <= MAX_WORKERS:
            raise UserInputError(f"workers must be an integer in [0, {MAX_WORKERS}] (0: in this process), got "
                                 f"{self.workers}")
        if self.executor not in ("process", "ray"):
            raise UserInputError(f"executor must be 'process' or 'ray', got {self.executor!r}")
        if self.executor == "ray" and self.workers < 1:
            raise UserInputError("The Ray executor needs workers >= 1 (--workers N): the actors it starts")
        if self.ray_address is not None and self.executor != "ray":
            raise UserInputError("--ray-address needs --executor ray")
        if isinstance(self.threads, bool) or not 1 <= self.threads <= MAX_THREADS:
            raise UserInputError(f"threads must be an integer in [1, {MAX_THREADS}], got {self.threads}")
        if self.cuda_devices < 0:
            raise UserInputError(f"cuda_devices must be >= 0, got {self.cuda_devices}")

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
