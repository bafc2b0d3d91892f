"""`EnvPool`: env groups spread over actors, advanced together one epoch at a time, with decisions made here.

The caller (a PPO learner, a comparison) keeps its controllers; the groups' envs live in `EnvHost`s on the actors of
an `ActorPool` (this process, worker processes or Ray actors). `epochs` measures every host's envs at once and yields
the epoch's observations in env order; the caller decides for all of them (so a policy samples exactly as it would
with every env in one process) and hands the decisions to `apply`, which the hosts execute; `finish` collects the
results:

    for m in pool.epochs(recipe, groups):
        ...  # m.steps: the transitions the epoch completed
        if not m.last:
            pool.apply(decide(m.observations))
    results = pool.finish()

Groups go to actors in contiguous runs and come back in the order they were given, so the logs a run writes do not
depend on how many workers computed them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, TypeVar

from esper.data.tasks import DataCache
from esper.env.groups import EnvHost, EpisodeRecipe, GroupPlan, StepOutcome, wanted_events
from esper.env.lockstep import EpochOrderError
from esper.env.logs import EpisodeResult
from esper.env.loop import decide_all
from esper.execution.actors import ActorPool
from esper.execution.workers import WorkerFailed, WorkerOptions, intra_op_threads
from esper.leyline import EnvObservation, TelemetryEventType, TelemetrySink
from esper.tamiyo import TamiyoDecision, TamiyoPolicy

__all__ = ["EnvPool", "OutcomeCallback", "PoolEpoch", "PoolRun"]

R = TypeVar("R")
OutcomeCallback = Callable[[list[tuple[StepOutcome, TamiyoDecision]]], None]
"""Receives the transitions an epoch completed, each with the decision (as the controller made it) it credits."""


@dataclass
class PoolRun:
    """The envs' episode results in group order, their final models when the recipe kept them, and how many batches
    the hosts materialized (once per host and device: it grows with the number of workers)."""

    results: list[EpisodeResult]
    models: list[dict[str, Any] | None]
    batch_loads: int


@dataclass(frozen=True)
class PoolEpoch:
    """One measured epoch of every env of the call, in group order: the observations to decide on (the last epoch
    takes no decision) and the transitions the epoch completed, each crediting the decision taken on its env after
    the previous epoch (`StepOutcome.position` is the env's index among the observations)."""

    epoch: int
    last: bool
    observations: list[EnvObservation]
    steps: list[StepOutcome]

    @property
    def decision_step(self) -> int:
        """The index, among the episode's T − 1 decisions, of the one taken on `observations` (epoch 1's is 0; the
        last epoch takes none)."""
        return self.epoch - 1

    @property
    def credited_step(self) -> int:
        """The index of the decision `steps` credit: the one taken after the previous epoch (epoch 1 credits none)."""
        return self.decision_step - 1


@dataclass
class _Call:
    """The episodes `epochs` is running: where their groups live and what the caller's sink wants this epoch."""

    parts: list[list[GroupPlan]]
    offsets: list[int]
    sink: TelemetrySink | None
    wanted: frozenset[TelemetryEventType] = frozenset()
    awaiting: bool = False  # measured, its decisions not applied yet
    done: bool = False  # every epoch concluded: `finish` may collect


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
        self._open: _Call | None = None

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.actors.close()

    def epochs(self, recipe: EpisodeRecipe, groups: Sequence[GroupPlan], *,
               sink: TelemetrySink | None = None) -> Iterator[PoolEpoch]:
        """Start fresh episodes for `groups` and measure them one epoch at a time; after every epoch but the last,
        `apply` its decisions before the loop goes on. Leaving the loop early abandons the episodes."""
        parts = _split(groups, len(self.actors))
        self._call(parts, EnvHost.start, [(recipe, part) for part in parts])
        max_epochs = recipe.setting.max_epochs
        offsets = [0]
        for part in parts:
            offsets.append(offsets[-1] + sum(len(g.members) for g in part))
        self._open = call = _Call(parts, offsets, sink)
        for epoch in range(1, max_epochs + 1):
            call.wanted = wanted_events(sink)
            measured = self._call(parts, EnvHost.measure, [(call.wanted,)] * len(parts))
            steps = [dataclasses.replace(s, position=offsets[i] + s.position)
                     for i, m in enumerate(measured) for s in m.steps]
            _emit_all(sink, [e for m in measured for e in m.events])
            last = epoch == max_epochs
            call.awaiting = not last
            yield PoolEpoch(epoch, last, [o for m in measured for o in m.observations], steps)
            if call.awaiting:
                raise EpochOrderError(f"Epoch {epoch} of {max_epochs} takes decisions: apply() them before "
                                      f"measuring the next one")
        self._conclude(call, [None] * len(parts))
        call.done = True

    def apply(self, decisions: Sequence[TamiyoDecision]) -> None:
        """Execute one decision per env of the epoch `epochs` just yielded, in the order of its observations."""
        call = self._open
        if call is None or not call.awaiting:
            raise EpochOrderError("apply() follows an epoch that takes decisions, yielded by epochs()")
        if len(decisions) != call.offsets[-1]:
            raise ValueError(f"{len(decisions)} decisions for {call.offsets[-1]} envs")
        lean = [dataclasses.replace(d, info={}) for d in decisions]  # a controller's extras stay in this process
        self._conclude(call, [lean[call.offsets[i]:call.offsets[i + 1]] for i in range(len(call.parts))])
        call.awaiting = False

    def finish(self) -> PoolRun:
        """The results of the episodes `epochs` ran to their end."""
        call, self._open = self._open, None
        if call is None or not call.done:
            raise EpochOrderError("finish() follows an epochs() loop that ran to the end")
        finished = self._call(call.parts, EnvHost.finish, [()] * len(call.parts))
        return PoolRun([r for f in finished for r in f.results], [m for f in finished for m in f.models],
                       sum(f.batch_loads for f in finished))

    def run(self, recipe: EpisodeRecipe, groups: Sequence[GroupPlan], controllers: Sequence[TamiyoPolicy], *,
            sink: TelemetrySink | None = None, on_steps: OutcomeCallback | None = None) -> PoolRun:
        """Run the groups' episodes to the end; `controllers[i]` drives the i-th env in group order."""
        n_envs = sum(len(g.members) for g in groups)
        if len(controllers) != n_envs:
            raise ValueError(f"{n_envs} envs but {len(controllers)} controllers")
        decided: list[TamiyoDecision] = []
        for m in self.epochs(recipe, groups, sink=sink):
            if on_steps is not None and m.steps:
                on_steps([(s, decided[s.position]) for s in m.steps])
            if not m.last:
                with intra_op_threads(1):  # a policy forward on a few dozen rows; idle threads would spin on the
                    decided = decide_all(controllers, m.observations)  # workers' cores, and its floats stay put
                self.apply(decided)
        return self.finish()

    def _conclude(self, call: _Call, shipped: list[list[TamiyoDecision]] | list[None]) -> None:
        events = self._call(call.parts, EnvHost.conclude, [(d, call.wanted) for d in shipped])
        _emit_all(call.sink, [e for part_events in events for e in part_events])
        if call.sink is not None:
            call.sink.tick()

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
