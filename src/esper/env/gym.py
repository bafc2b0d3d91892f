"""MorphoGymEnv: one morphogenetic training episode behind the Gymnasium API, for agents written outside esper.

    import gymnasium
    env = gymnasium.make("esper.env.gym:esper/Morpho-v0", task="synthetic", max_epochs=10)  # imports, then makes
    obs, info = env.reset(seed=0)                       # trains and observes epoch 1
    obs, reward, terminated, truncated, info = env.step(int(np.flatnonzero(env.action_masks())[0]))
    envs = gymnasium.make_vec("esper.env.gym:esper/Morpho-v0", num_envs=4, vectorization_mode="async",
                              vector_kwargs={"context": "spawn"}, task="synthetic")

A thin adapter over a `Lockstep` of one `MorphoEnv` and its twin, which takes the agent's action between the two
halves of every epoch (`measure`, `apply`), so an episode here is exactly the episode esper's own controllers run:
`reset` trains epoch 1 and returns its features (80 with the built-in CNN blueprints); each `step(a)` executes the
decision `a` (a joint action index), trains the next epoch and returns its features and the decision's `gap` reward
(the change in the accuracy gap to the static twin that trains beside the env, minus the parameter and intervention
costs). An episode of T epochs has T − 1 steps; the last one is `terminated`.

Invalid actions raise `InvalidActionError`, naming the action and the valid ones: silently replacing them (with a
WAIT, say) would hide a masking bug in the agent. Because of that, the action space samples among the actions valid
right now (`action_space.sample()` is a valid random action); `action_masks()` gives the same booleans to agents
that mask their own policy (sb3-contrib's MaskablePPO calls it by that name).

Gymnasium's wrappers do not pass methods through (`gymnasium.make` wraps the env in its checkers), so the registered
id ends with `ActionMasks`, a wrapper whose `action_masks()` asks the env beneath it: `gymnasium.make(...)` returns an
env with `action_masks()`. Under wrappers of your own, call `env.get_wrapper_attr("action_masks")()`.

Importing this module registers the id `esper/Morpho-v0` with Gymnasium (`"esper.env.gym:esper/Morpho-v0"` makes
Gymnasium import it first, so a spec recreates the env in a fresh process); its keyword arguments are
`GymEnvConfig`'s fields, `data_dir` and `data_path` (strings, so an env's spec serializes and Minari can recreate
it). The env pickles as its configuration and its
generator (an episode in progress does not travel: call `reset()`). Every env computes with one torch intra-op thread
(esper's float path), which also keeps a parent process free of OpenMP worker threads that a forked child would
inherit; still, prefer `context="spawn"` for `AsyncVectorEnv`: a parent that ran torch on several threads before
forking can leave its children hung.

Needs the optional `[gym]` extra (gymnasium); the rest of esper works without it.
"""

from __future__ import annotations

import dataclasses
import operator
from pathlib import Path
from typing import Any, ClassVar, SupportsFloat

import numpy as np
from pydantic import ConfigDict, Field, model_validator

try:
    import gymnasium
    from gymnasium import spaces
except ImportError as error:  # pragma: no cover - exercised by a subprocess test without the extra
    raise ImportError("MorphoGymEnv needs the optional [gym] extra: pip install 'esper[gym]'") from error

from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.env.charges import ParamCost
from esper.env.env import EnvSpec, MorphoEnv
from esper.env.features import FEATURE_RANGE, obs_dim, observation_features
from esper.env.lockstep import EpochData, Lockstep, MeasuredEpoch
from esper.env.rewards import RewardFamily, RewardFn, make_reward_fn
from esper.env.setting import EpisodeSetting
from esper.execution.devices import resolve_device
from esper.execution.plugins import load_plugins
from esper.execution.workers import intra_op_threads
from esper.leyline import ActionSpace, EnvObservation, SeedStage
from esper.leyline.constants import DEFAULT_GAMMA
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import derive_seed
from esper.leyline.strict_config import EpisodeLength, SampleCap
from esper.tamiyo import TamiyoDecision

__all__ = ["ENV_ID", "ActionMasks", "GymEnvConfig", "InvalidActionError", "MorphoGymEnv", "ValidActionSpace",
           "describe_actions", "register_envs"]

ENV_ID = "esper/Morpho-v0"

SEED_BOUND = 2**31  # seeds drawn for unseeded resets: plain non-negative ints every layer accepts


class GymEnvConfig(EpisodeSetting):
    """Everything that defines the episodes of a `MorphoGymEnv`: their setting (an `EpisodeSetting`, whose defaults
    here are the `quick` CPU setting), the device, the gap reward's λ_p, plugins and where the data lies.

    `param_cost` is the `gap` reward's λ_p (pp of accuracy per 100 % of added parameters); None takes the task's
    value measured at the sample cap nearest `max_train_samples`. `max_seeds` None allows one seed per enabled slot.
    `augment` is the training batches' augmentation (none, crop, flip or crop,flip; None: the task's own).
    `plugins` (module names or `.py` paths) register tasks and blueprints of one's own; they load with the config, so
    every process of a vector env loads them before it resolves the task.
    """

    model_config = ConfigDict(frozen=True)
    KIND: ClassVar[str] = "GymEnvConfig"
    FIX: ClassVar[str] = "pass it as a GymEnvConfig field or a gymnasium.make keyword"

    task: str = "synthetic"
    max_epochs: EpisodeLength = 10
    max_train_samples: SampleCap | None = 2048
    max_val_samples: SampleCap | None = 512
    device: str = "cpu"
    param_cost: ParamCost | None = None
    plugins: tuple[str, ...] = ()
    data: DataOptions = Field(default_factory=DataOptions)

    @model_validator(mode="before")
    @classmethod
    def _load_plugins(cls, data: Any) -> Any:
        """The plugins register their tasks and blueprints before the task is looked up."""
        if isinstance(data, dict):
            load_plugins(tuple(data.get("plugins", ())))
        return data


class InvalidActionError(UserInputError):
    """An action that is not a joint index, or one the current validity rules forbid."""


class ValidActionSpace(spaces.Discrete):
    """`Discrete(n)` over the joint action index (n = 43 with the built-in CNN blueprints) whose `sample()` draws
    among the actions valid right now.

    The env refreshes `valid` after every reset and step. Passing a `mask` or `probability` samples exactly as
    `Discrete` does. Generic tools that only know `action_space.sample()` (random agents, Gymnasium's env checker)
    thereby take valid actions, which the env requires.
    """

    def __init__(self, n: int, seed: int | None = None) -> None:
        super().__init__(n, seed=seed)
        self.valid = np.ones(n, dtype=np.int8)

    def sample(self, mask: Any = None, probability: Any = None) -> np.int64:
        if mask is None and probability is None:
            mask = self.valid
        return super().sample(mask=mask, probability=probability)


def describe_actions(indices: Any, space: ActionSpace) -> str:
    """Joint indices as readable runs of one op and slot, e.g. `0 WAIT; 1-12 GERMINATE early; 37 CULL early`."""
    runs: list[tuple[int, int, str]] = []
    for index in (int(i) for i in indices):
        command = space.from_joint_index(index).to_command(space)
        label = command.op.name if command.slot_id is None else f"{command.op.name} {command.slot_id}"
        if runs and runs[-1][2] == label and runs[-1][1] == index - 1:
            runs[-1] = (runs[-1][0], index, label)
        else:
            runs.append((index, index, label))
    return "; ".join(f"{a} {label}" if a == b else f"{a}-{b} {label}" for a, b, label in runs) or "none"


class MorphoGymEnv(gymnasium.Env[np.ndarray, np.int64]):
    """One morphogenetic episode per `reset`; one lifecycle decision per `step` (see the module docstring)."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012  (gymnasium's class attribute)

    def __init__(self, config: GymEnvConfig | None = None, *, data_dir: str | None = None,
                 data_path: str | None = None, **settings: Any) -> None:
        """`MorphoGymEnv(GymEnvConfig(...))`, or the same fields as keywords (what `gymnasium.make` passes):
        `MorphoGymEnv(task="fashion_mnist", max_epochs=25, max_train_samples=192, data_dir="data")`."""
        if config is not None and (settings or data_dir is not None or data_path is not None):
            raise UserInputError("Pass either a GymEnvConfig or its fields as keywords, not both")
        if config is None:
            keywords = sorted(set(GymEnvConfig.model_fields) - {"data"})
            unknown = sorted(set(settings) - set(keywords))
            if unknown:
                raise UserInputError(f"Unknown keywords {unknown}: MorphoGymEnv takes {', '.join(keywords)}, data_dir "
                                     f"and data_path")
            data = DataOptions(data_dir=Path("data") if data_dir is None else Path(data_dir),
                               data_path=None if data_path is None else Path(data_path))
            config = GymEnvConfig.from_dict({**settings, "data": data})
        self.config = config
        self.task = get_task_spec(self.config.task)
        self.device = resolve_device(self.config.device)
        self.esper_actions = self.task.action_space  # the task's action space, which the joint index enumerates
        self.observation_space = spaces.Box(*FEATURE_RANGE, shape=(obs_dim(self.esper_actions),), dtype=np.float32)
        self.action_space: ValidActionSpace = ValidActionSpace(self.esper_actions.num_joint_actions)
        self._reward_fn: RewardFn = make_reward_fn(
            RewardFamily.GAP, self.task, DEFAULT_GAMMA, param_cost=self.config.param_cost,
            max_train_samples=self.config.max_train_samples)
        self._cache = DataCache(self.config.data)
        self._episode: Lockstep | None = None
        self._measured: MeasuredEpoch | None = None  # the episode's latest epoch
        self._mask = np.zeros(self.esper_actions.num_joint_actions, dtype=bool)  # validity of the joint actions now
        self.env_seed: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        """The configuration and the generator: an episode in progress (models, data) does not travel."""
        return {"config": self.config, "np_random": self._np_random}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])  # type: ignore[misc]
        self._np_random = state["np_random"]

    # ------------------------------------------------------------------ the Gymnasium API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode on a fresh host and train its first epoch. `reset(seed=s)` builds the host esper's own
        runners build for env seed `s`, with seed initializations and a data order derived from `s`, so the episode
        replays exactly (on CPU); without a seed, one is drawn from the env's generator."""
        super().reset(seed=seed)
        if options:
            raise UserInputError(f"MorphoGymEnv.reset takes no options, got {sorted(options)}: configure the episodes "
                                 f"with GymEnvConfig")
        self.env_seed = seed if seed is not None else int(self.np_random.integers(SEED_BOUND))
        with intra_op_threads(1):  # esper's float path
            return self._start()

    def _start(self) -> tuple[np.ndarray, dict[str, Any]]:
        assert self.env_seed is not None
        cfg = self.config
        spec = EnvSpec(self.task, cfg.slots, cfg.max_epochs, self.env_seed, self.device, max_seeds=cfg.max_seeds,
                       amp=cfg.amp, lr_schedule=cfg.lr_schedule)
        twin = MorphoEnv(dataclasses.replace(spec, env_id=1, max_seeds=None), "twin")
        data = EpochData.build(self.task, self._cache, [self.device], batch_size=cfg.batch_size,
                               seed=derive_seed(self.env_seed, "data"),
                               max_train_samples=cfg.max_train_samples, max_val_samples=cfg.max_val_samples,
                               augment=cfg.augment)
        self._episode = Lockstep([MorphoEnv(spec, "gym", twin=twin)], data, self._reward_fn)
        self._measured = self._episode.measure()
        return self._observe(self._measured), self._info(self._measured)

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """Execute decision `action` after the current epoch, train the next one, and return its observation and
        the decision's reward; `terminated` once the final epoch is measured (there is no decision after it)."""
        measured, episode = self._measured, self._episode
        if measured is None or episode is None:
            raise RuntimeError("Call reset() before step(): there is no episode yet")
        if measured.last:
            raise RuntimeError(f"The episode ended after epoch {measured.epoch}: call reset() to start another")
        index = self._check_action(action, measured.observations[0])
        with intra_op_threads(1):  # esper's float path
            return self._step(index, episode)

    def _step(self, index: int, episode: Lockstep) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        factored = self.esper_actions.from_joint_index(index)
        decision = TamiyoDecision(factored.to_command(self.esper_actions), factored, reason="gym action",
                                  confidence=1.0)
        episode.apply([decision])
        following = episode.measure()
        [step] = following.steps
        if following.last:
            episode.apply(None)  # reports the final epoch and the episode
        self._measured = following
        info = self._info(following)
        info["action"] = {"index": index, "op": decision.command.op.name, "slot": decision.command.slot_id,
                          "blueprint": decision.command.blueprint_id, "blend": decision.command.blend_id}
        info["action_success"] = step.action_success
        info["reward_components"] = step.reward.to_dict()
        return self._observe(following), float(step.reward.total()), following.last, False, info

    def action_masks(self) -> np.ndarray:
        """Which joint actions are valid now (the sb3-contrib MaskablePPO convention)."""
        if self._measured is None:
            raise RuntimeError("Call reset() before action_masks(): there is no episode yet")
        return self._mask.copy()

    # ------------------------------------------------------------------ helpers

    def _check_action(self, action: Any, obs: EnvObservation) -> int:
        def valid() -> str:
            return describe_actions(np.flatnonzero(self._mask), obs.action_space)

        last = self.esper_actions.num_joint_actions - 1
        try:
            if isinstance(action, bool | np.bool_):
                raise TypeError
            index = operator.index(action)
        except TypeError:
            raise InvalidActionError(f"Action {action!r} is not an integer: actions are joint indices "
                                     f"0-{last}; valid after epoch {obs.epoch}: {valid()}") from None
        if not 0 <= index <= last:
            raise InvalidActionError(f"Action {index} is out of range 0-{last}; valid after epoch {obs.epoch}: "
                                     f"{valid()}")
        if not self._mask[index]:
            command = self.esper_actions.from_joint_index(index).to_command(self.esper_actions)
            raise InvalidActionError(f"Action {index} ({command.describe()}) is not valid after epoch {obs.epoch}: "
                                     f"valid actions are {valid()} (see action_masks())")
        return index

    def _observe(self, measured: MeasuredEpoch) -> np.ndarray:
        self._mask = np.array(measured.observations[0].validity.joint_mask(), dtype=bool)
        self.action_space.valid = self._mask.astype(np.int8)
        return np.array(observation_features(measured.observations[0]), dtype=np.float32)

    def _info(self, measured: MeasuredEpoch) -> dict[str, Any]:
        obs, measurement = measured.observations[0], measured.measurements[0]
        rollback = measured.stats[0].rolled_back
        return {
            "epoch": obs.epoch,
            "env_seed": self.env_seed,
            "val_accuracy": measurement.val_accuracy,
            "twin_val_accuracy": measurement.twin_val_accuracy,
            "stages": {slot: None if slot not in obs.slot_reports else SeedStage(obs.slot_reports[slot].stage).name
                       for slot in obs.enabled_slots},
            "host_params": obs.host_param_count,
            "seed_params": obs.total_param_count - obs.host_param_count,
            "rollback": rollback,
        }


class ActionMasks(gymnasium.Wrapper[np.ndarray, np.int64, np.ndarray, np.int64],
                  gymnasium.utils.RecordConstructorArgs):
    """`action_masks()` on the outside of a wrapped `MorphoGymEnv`: Gymnasium's wrappers do not forward methods, and
    maskable agents (sb3-contrib's MaskablePPO) call this one by name on the env they are given. `gymnasium.make`
    applies it last, so the env it returns has the method; it changes nothing else."""

    def __init__(self, env: gymnasium.Env[np.ndarray, np.int64]) -> None:
        gymnasium.utils.RecordConstructorArgs.__init__(self)  # its spec records it: Minari recreates it too
        gymnasium.Wrapper.__init__(self, env)

    def action_masks(self) -> np.ndarray:
        """`MorphoGymEnv.action_masks()` of the env beneath, through any wrappers between."""
        masks: np.ndarray = self.env.get_wrapper_attr("action_masks")()
        return masks


def register_envs() -> None:
    """Register `esper/Morpho-v0` with Gymnasium (importing this module does; calling it again is harmless)."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(ENV_ID, entry_point="esper.env.gym:MorphoGymEnv",
                           additional_wrappers=(ActionMasks.wrapper_spec(),))


register_envs()
