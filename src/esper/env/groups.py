"""Env groups as plain recipes, and `EnvHost`, the object that builds and steps them wherever it lives.

A group is the unit that cannot be split: envs that share one host seed, one data subset and (for the `gap` reward)
one static twin. A caller describes its groups with `GroupPlan`s (picklable: no models, no callables), hands them to
`EnvHost`s (in this process, in worker processes or in Ray actors; see `esper.execution.actors`), and then advances
every host one epoch at a time through the `Lockstep`s of its envs: `measure` trains, validates and observes, and
returns the observations and the transitions the epoch completed; the caller decides; `conclude` executes the
decisions. Envs never leave their host,
so only observations, decisions, step rows, rewards, telemetry and results cross a process boundary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from esper.data.batches import SharedBatchIterator
from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.env.env import EnvSpec, MorphoEnv
from esper.env.lockstep import EpochData, Lockstep
from esper.env.logs import EpisodeResult
from esper.env.rewards import RewardConfig, RewardFn, compute_reward
from esper.env.setting import EpisodeSetting
from esper.env.step_record import ShapedRewardComponents
from esper.execution.readout import Readout
from esper.leyline import EnvObservation, TelemetryEvent, TelemetryEventType
from esper.storage.checkpoint import model_checkpoint
from esper.tamiyo import TamiyoDecision
from esper.tolaria import queue_validation, validate_batch

__all__ = ["EnvHost", "EpisodeRecipe", "Finished", "GroupPlan", "Measured", "MemberPlan", "StepOutcome", "TwinEnvPlan",
           "wanted_events"]


@dataclass(frozen=True)
class EpisodeRecipe:
    """What a group's episodes share: their `setting` (task, slots, seed budget, length, batch, caps, schedule,
    augmentation, precision), the reward computed per step and its discount (the call's recipe, or the group's own: a
    run across a task family gives each group its type's). `score_test` scores each final model once on the test split
    (on `max_test_samples` of it; None: all); `keep_models` returns the final models."""

    setting: EpisodeSetting
    reward: RewardConfig
    gamma: float
    max_test_samples: int | None = None
    score_test: bool = False
    keep_models: bool = False


@dataclass(frozen=True)
class MemberPlan:
    """One env of a group: who drives it and which host variant it trains."""

    env_id: int
    controller: str
    device: str
    episode: int = 0
    host_width: float = 1.0
    fixed_modules: tuple[tuple[str, str], ...] = ()
    telemetry: bool = True


@dataclass(frozen=True)
class TwinEnvPlan:
    """The group's static twin when no member can serve as one (a seedless host trained beside the members)."""

    env_id: int
    device: str
    controller: str = "twin"
    episode: int = 0
    telemetry: bool = False


@dataclass(frozen=True)
class GroupPlan:
    """Envs sharing one host seed, one data seed (their subsets and batch order) and their static twin.

    `twin` is None when the reward needs no twin, the index of the member (a plain static host) that is its own and
    its peers' twin, or a `TwinEnvPlan` for a twin env of its own. `recipe` is the group's own episode recipe where
    it is not the call's (a family's instance type: its task, sample cap and λ_p); its episode length must be the
    call's, since every env of a call advances one epoch at a time.
    """

    seed: int
    data_seed: int
    members: tuple[MemberPlan, ...]
    twin: TwinEnvPlan | int | None = None
    batch: int = 0
    recipe: EpisodeRecipe | None = None

    @property
    def env_ids(self) -> list[int]:
        return [m.env_id for m in self.members]


@dataclass(frozen=True)
class StepOutcome:
    """A transition an epoch completed, as a learner needs it: the env (its id, and its position among the envs
    of the call), its steps.jsonl row and its reward."""

    env_id: int
    position: int
    row: dict[str, Any]
    reward: ShapedRewardComponents
    terminal: bool


@dataclass(frozen=True)
class Measured:
    """What `EnvHost.measure` answers: its envs' observations (in env order), the transitions the epoch completed,
    and the telemetry it produced."""

    observations: list[EnvObservation]
    steps: list[StepOutcome]
    events: list[TelemetryEvent]


@dataclass(frozen=True)
class Finished:
    """What `EnvHost.finish` answers: every env's episode result and final model (None unless the recipe keeps
    models), and how many train and validation batches the host materialized."""

    results: list[EpisodeResult]
    models: list[dict[str, Any] | None]
    batch_loads: int


class _Relay:
    """The envs' telemetry sink inside a host: keeps the events the caller's sink wants, for the caller to emit."""

    def __init__(self) -> None:
        self.wanted: frozenset[TelemetryEventType] = frozenset()
        self.events: list[TelemetryEvent] = []

    def wants(self, event_type: TelemetryEventType) -> bool:
        return event_type in self.wanted

    def emit(self, event: TelemetryEvent) -> None:
        self.events.append(event)

    def escalate(self, epochs: int) -> None:
        """The caller's sink owns the level; it sends what it wants with every call."""

    def tick(self) -> None:
        """The caller's sink counts the epochs."""

    def drain(self) -> list[TelemetryEvent]:
        events, self.events = self.events, []
        return events


def wanted_events(sink: Any) -> frozenset[TelemetryEventType]:
    """The event types `sink` would take now (none without a sink)."""
    if sink is None:
        return frozenset()
    return frozenset(t for t in TelemetryEventType if sink.wants(t))


class EnvHost:
    """Builds the envs of its groups and steps them one epoch per call; data loads once per host and device."""

    def __init__(self, data: DataCache | DataOptions, device_override: str | None = None) -> None:
        self.cache = data if isinstance(data, DataCache) else DataCache(data)  # a host in this process shares the run's
        self.device_override = device_override  # a Ray GPU actor sees its GPU as cuda:0, whatever the caller named
        self.relay = _Relay()
        self.recipe: EpisodeRecipe | None = None
        # one (lockstep, recipe) per run of consecutive groups sharing a data seed and a recipe
        self.runs: list[tuple[Lockstep, EpisodeRecipe]] = []

    def _device(self, name: str) -> torch.device:
        return torch.device(self.device_override or name)

    def start(self, recipe: EpisodeRecipe, groups: Sequence[GroupPlan]) -> None:
        """Build fresh envs for `groups`, kept in group order (consecutive groups of one data seed and recipe train
        on one shared batch stream)."""
        self.recipe, self.runs = recipe, []
        runs: list[tuple[int, EpisodeRecipe, list[MorphoEnv]]] = []
        for group in groups:
            own = group.recipe or recipe
            if own.setting.max_epochs != recipe.setting.max_epochs:
                raise ValueError(f"a group's episodes last {own.setting.max_epochs} epochs, the call's "
                                 f"{recipe.setting.max_epochs}")
            envs = self._build_group(own.setting, group)
            if runs and runs[-1][0] == group.data_seed and runs[-1][1] == own:
                runs[-1][2].extend(envs)
            else:
                runs.append((group.data_seed, own, envs))
        for data_seed, own, envs in runs:
            devices = sorted({env.spec.device for env in envs}, key=str)
            setting = own.setting
            data = EpochData.build(get_task_spec(setting.task), self.cache, devices, batch_size=setting.batch_size,
                                   seed=data_seed, max_train_samples=setting.max_train_samples,
                                   max_val_samples=setting.max_val_samples, augment=setting.augment)
            self.runs.append((Lockstep(envs, data, _reward_fn(own)), own))

    def _build_group(self, setting: EpisodeSetting, group: GroupPlan) -> list[MorphoEnv]:
        task = get_task_spec(setting.task)

        def spec(env_id: int, device: str, *, telemetry: bool, episode: int, max_seeds: int | None = None,
                 width: float = 1.0, fixed: tuple[tuple[str, str], ...] = ()) -> EnvSpec:
            return EnvSpec(task, setting.slots, setting.max_epochs, group.seed, self._device(device), env_id=env_id,
                           episode=episode, batch=group.batch, max_seeds=max_seeds, amp=setting.amp,
                           sink=self.relay if telemetry else None, host_width=width, fixed_modules=fixed,
                           lr_schedule=setting.lr_schedule)

        def member_spec(m: MemberPlan) -> EnvSpec:
            return spec(m.env_id, m.device, telemetry=m.telemetry, episode=m.episode, max_seeds=setting.max_seeds,
                        width=m.host_width, fixed=m.fixed_modules)

        twin: MorphoEnv | None = None
        if isinstance(group.twin, int):
            own = group.members[group.twin]
            twin = MorphoEnv(member_spec(own), own.controller)
            twin.twin = twin  # a plain static env is its own twin: its gap is zero by construction
        elif isinstance(group.twin, TwinEnvPlan):
            t = group.twin
            twin = MorphoEnv(spec(t.env_id, t.device, telemetry=t.telemetry, episode=t.episode), t.controller)
        return [twin if twin is not None and i == group.twin else MorphoEnv(member_spec(m), m.controller, twin=twin)
                for i, m in enumerate(group.members)]

    def measure(self, wanted: frozenset[TelemetryEventType]) -> Measured:
        """Train, validate and observe every env for the next epoch."""
        assert self.recipe is not None, "start() before measure()"
        self.relay.wanted = wanted
        measured = [run.measure() for run, _ in self.runs]
        observations = [o for m in measured for o in m.observations]
        position = {id(env): i for i, env in enumerate(env for run, _ in self.runs for env in run.envs)}
        steps = [StepOutcome(s.env.env_id, position[id(s.env)], s.row().to_dict(), s.reward, s.record.is_terminal)
                 for m in measured for s in m.steps]
        return Measured(observations, steps, self.relay.drain())

    def conclude(self, decisions: Sequence[TamiyoDecision] | None, wanted: frozenset[TelemetryEventType]
                 ) -> list[TelemetryEvent]:
        """Execute one decision per env (in env order; None after the last epoch) and report the epoch."""
        n_envs = sum(len(run.envs) for run, _ in self.runs)
        if decisions is not None and len(decisions) != n_envs:
            raise ValueError(f"{len(decisions)} decisions for {n_envs} envs")
        self.relay.wanted = wanted
        offset = 0
        for run, _ in self.runs:
            n = len(run.envs)
            run.apply(None if decisions is None else decisions[offset:offset + n])
            offset += n
        return self.relay.drain()

    def finish(self) -> Finished:
        """End the episodes: results test-scored when the recipe asks, final models when it keeps them."""
        assert self.recipe is not None
        results: list[EpisodeResult] = []
        models: list[dict[str, Any] | None] = []
        loads = 0
        for run, recipe in self.runs:
            data = run.data
            loads += sum(data.train.materializations.values()) + sum(data.val.materializations.values())
            finished = [env.result() for env in run.envs]
            results += _score_test(run.envs, finished, recipe, self.cache, data.seed) \
                if recipe.score_test else finished
            models += [model_checkpoint(env.model, task=recipe.setting.task) if recipe.keep_models else None
                       for env in run.envs]
        self.runs = []
        return Finished(results, models, loads)


def _reward_fn(recipe: EpisodeRecipe) -> RewardFn:
    config, gamma = recipe.reward, recipe.gamma
    return lambda record: compute_reward(record, config, gamma)


def _score_test(envs: Sequence[MorphoEnv], results: Sequence[EpisodeResult], recipe: EpisodeRecipe,
                cache: DataCache, seed: int) -> list[EpisodeResult]:
    """The envs' results with their final models' test accuracy and loss (one forward pass per test batch, each
    batch materialized once per device for every env on it). Nothing reads the test split before this."""
    task = get_task_spec(recipe.setting.task)
    keys = sorted({env.device_key for env in envs})
    test = SharedBatchIterator({k: cache.get(task, "test", k, recipe.max_test_samples, seed=seed) for k in keys},
                               task.val_batch_size, shuffle=False)
    for batch in test:
        for env in envs:
            x, y = batch[env.device_key]
            validate_batch(env.ts, x, y)
    readout = Readout()
    scored = [queue_validation(env.ts, readout) for env in envs]
    readout.read()
    return [dataclasses.replace(r, final_test_accuracy=s.value.val_accuracy, final_test_loss=s.value.val_loss)
            for r, s in zip(results, scored, strict=True)]
