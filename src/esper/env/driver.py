"""`EnvPool`: env groups spread over actors, advanced together one epoch at a time, with decisions made here.

The caller (a PPO learner, a comparison) keeps its controllers; the groups' envs live in `EnvHost`s on the actors of
an `ActorPool` (this process, worker processes or Ray actors). Per epoch every host measures its envs at once, the
observations come back in env order, every controller decides for all of its envs in one batch (so a policy samples
exactly as it would with every env in one process), and the hosts execute the decisions. Groups go to actors in
contiguous runs and come back in the order they were given, so the logs a run writes do not depend on how many
workers computed them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, TypeVar

from esper.env.groups import EnvHost, EpisodeSetting, GroupPlan, StepOutcome, wanted_events
from esper.env.logs import EpisodeResult
from esper.env.loop import decide_all
from esper.leyline import TelemetrySink
from esper.runtime.actors import ActorPool
from esper.runtime.tasks import DataCache
from esper.runtime.workers import WorkerFailed, WorkerOptions, intra_op_threads
from esper.tamiyo import TamiyoDecision, TamiyoPolicy

__all__ = ["EnvPool", "OutcomeCallback", "PoolRun"]

R = TypeVar("R")
OutcomeCallback = Callable[[list[tuple[StepOutcome, TamiyoDecision]]], None]
"""Receives the transitions an epoch completed, each with the decision (as the controller made it) it credits."""


@dataclass
class PoolRun:
    """The envs' episode results in group order, their final models when the setting kept them, and how many batches
    the hosts materialized (once per host and device: it grows with the number of workers)."""

    results: list[EpisodeResult]
    models: list[dict[str, Any] | None]
    batch_loads: int


def _split(groups: Sequence[GroupPlan], parts: int) -> list[list[GroupPlan]]:
    """Contiguous, balanced runs of groups, one per actor (the first actors take one more when it does not divide)."""
    n = len(groups)
    bounds = [round(i * n / parts) for i in range(parts + 1)]
    return [list(groups[bounds[i]:bounds[i + 1]]) for i in range(parts)]


class EnvPool:
    """Env hosts on the actors `options` describes. `cache` serves an in-process host (workers load their own data
    with the cache's options). Use as a context manager: leaving it stops the workers."""

    def __init__(self, options: WorkerOptions, cache: DataCache, *, role: str = "env worker") -> None:
        gpu_actor = options.executor == "ray" and options.gpus_per_worker > 0
        args: tuple[Any, ...] = (cache,) if options.in_process else (cache.options, "cuda:0" if gpu_actor else None)
        self.actors = ActorPool(options, EnvHost, args, role=role)

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.actors.close()

    def run(self, setting: EpisodeSetting, groups: Sequence[GroupPlan], controllers: Sequence[TamiyoPolicy], *,
            sink: TelemetrySink | None = None, on_steps: OutcomeCallback | None = None,
            should_stop: Callable[[], bool] | None = None) -> PoolRun | None:
        """Run the groups' episodes to the end (None when `should_stop` ended them early); `controllers[i]` drives
        the i-th env in group order."""
        parts = _split(groups, len(self.actors))
        n_envs = sum(len(g.members) for g in groups)
        if len(controllers) != n_envs:
            raise ValueError(f"{n_envs} envs but {len(controllers)} controllers")
        self._call(parts, EnvHost.start, [(setting, part) for part in parts])
        offsets = [0]
        for part in parts:
            offsets.append(offsets[-1] + sum(len(g.members) for g in part))
        decided: list[TamiyoDecision] = []
        for epoch in range(1, setting.max_epochs + 1):
            wanted = wanted_events(sink)
            measured = self._call(parts, EnvHost.measure, [(wanted,)] * len(parts))
            observations = [o for m in measured for o in m.observations]
            steps = [dataclasses.replace(s, position=offsets[i] + s.position)
                     for i, m in enumerate(measured) for s in m.steps]
            _emit_all(sink, [e for m in measured for e in m.events])
            if on_steps is not None and steps:
                on_steps([(s, decided[s.position]) for s in steps])
            shipped: list[list[TamiyoDecision] | None] = [None] * len(parts)
            if epoch < setting.max_epochs:
                with intra_op_threads(1):  # a policy forward on a few dozen rows; idle threads would spin on the
                    decided = decide_all(controllers, observations)  # workers' cores, and its floats stay put
                lean = [dataclasses.replace(d, info={}) for d in decided]  # a policy's tensors stay here
                shipped = [lean[offsets[i]:offsets[i + 1]] for i in range(len(parts))]
            events = self._call(parts, EnvHost.conclude, [(d, wanted) for d in shipped])
            _emit_all(sink, [e for part_events in events for e in part_events])
            if sink is not None:
                sink.tick()
            if should_stop is not None and should_stop() and epoch < setting.max_epochs:
                return None
        finished = self._call(parts, EnvHost.finish, [()] * len(parts))
        return PoolRun([r for f in finished for r in f.results], [m for f in finished for m in f.models],
                       sum(f.batch_loads for f in finished))

    def _call(self, parts: list[list[GroupPlan]], method: Callable[Concatenate[EnvHost, ...], R],
              args: list[tuple[Any, ...]]) -> list[R]:
        try:
            return self.actors.call(method, args)
        except WorkerFailed as error:
            held = parts[error.actor] if error.actor is not None else [g for part in parts for g in part]
            raise WorkerFailed(f"{error} while running the env group(s) of envs {_env_range(held)}",
                               actor=error.actor) from None


def _env_range(groups: Sequence[GroupPlan]) -> str:
    ids = [i for g in groups for i in g.env_ids]
    if not ids:
        return "(none)"
    return f"{min(ids)}-{max(ids)}" if len(ids) > 1 else str(ids[0])


def _emit_all(sink: TelemetrySink | None, events: Sequence[Any]) -> None:
    if sink is None:
        return
    for event in events:
        if sink.wants(event.event_type):
            sink.emit(event)
