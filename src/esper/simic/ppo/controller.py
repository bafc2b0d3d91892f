"""PPOPolicy: the learned Tamiyo policy as a controller (training rollouts and deterministic evaluation).

One batched network forward decides for all envs that share the controller. Observations are normalized with frozen
running statistics; `act` returns the raw features beside the decisions (a `PolicyStep`) so the trainer can update
the normalizer once per rollout batch and store exactly what the policy saw. A residual policy decides on top of its
envs' teachers (`teach`: one per env, fresh for each episode), whose choices the step carries.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from esper.data.families import FAMILY_PREFIX
from esper.data.tasks import get_task_spec
from esper.env.features import obs_dim, observation_features
from esper.env.masks import HEAD_KEYS, compute_batch_masks, masks_from_joint
from esper.env.setting import EpisodeSetting
from esper.leyline import ActionSpace, EnvObservation, FactoredAction, LifecycleOp, ordered_slots
from esper.leyline.errors import UserInputError
from esper.simic.normalization import RunningMeanStd
from esper.simic.ppo.agent import PPOAgent
from esper.simic.ppo.buffer import PolicyStep
from esper.simic.ppo.checkpoint import load_policy_state, read_policy_checkpoint, saved_config
from esper.simic.ppo.teacher import DETERMINISTIC_TEACHERS, UNSET, Teachers, teacher_rows
from esper.storage.rundir import checkpoint_file
from esper.tamiyo import (
    ControllerContext,
    SettingChangeError,
    StatefulPolicy,
    TamiyoDecision,
    check_trained_setting,
    register_controller,
)

AS_TEACHER = "as its teacher"
OVERRIDES_TEACHER = "overrides its teacher"
"""A residual policy's decision reasons say whether it took its teacher's choice: counting them in an evaluation's
steps measures how often the policy decides otherwise than the teacher it started as."""


def follows_teacher(actions: Mapping[str, torch.Tensor], teacher: torch.Tensor) -> torch.Tensor:
    """[B] bool: each action takes the teacher's choice on every head the teacher chose on (`teacher_rows`)."""
    chosen = torch.stack([actions[head] for head in HEAD_KEYS], 1)
    return ((teacher == UNSET) | (chosen == teacher)).all(dim=1)


class NonFinitePolicyError(RuntimeError):
    """The policy produced NaN or infinite outputs: acting on them would silently pick the first action forever."""


class PPOPolicy:
    """Decides with a PPOAgent's policy; `deterministic` takes the mode of every head (evaluation)."""

    name = "ppo"

    def __init__(self, agent: PPOAgent, obs_normalizer: RunningMeanStd, *, use_telemetry: bool,
                 deterministic: bool = False, blueprints: frozenset[int] | None = None) -> None:
        """`blueprints`: the blueprint indices the policy may germinate (None: every one the env allows)."""
        space = agent.space
        dim = obs_dim(space, use_telemetry)
        if obs_normalizer.shape != (dim,) or agent.state_dim != dim:
            raise ValueError(f"Policy expects {agent.state_dim} features, normalizer {obs_normalizer.shape}, "
                             f"observation has {dim}")
        self.agent = agent
        self.obs_normalizer = obs_normalizer
        self.use_telemetry = use_telemetry
        self.deterministic = deterministic
        self.blueprints = blueprints
        self._joint_allowed = torch.tensor([_allows(space.from_joint_index(i), blueprints)
                                            for i in range(space.num_joint_actions)], device=agent.device)
        self.teachers: Teachers | None = None

    def teach(self, teachers: Teachers) -> None:
        """The teachers of the episodes about to run (env i of `act`'s observations is `teachers.policies[i]`'s)."""
        if not self.agent.network.residual:
            raise ValueError("only a residual policy decides on top of teachers")
        self.teachers = teachers

    def state_dict(self) -> dict[str, Any]:
        """What a residual policy's teachers remember of their episodes (the network is the checkpoint's)."""
        policies = [] if self.teachers is None else self.teachers.policies
        return {"teachers": [p.state_dict() if isinstance(p, StatefulPolicy) else None for p in policies]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        policies = [] if self.teachers is None else self.teachers.policies
        for policy, saved in zip(policies, state["teachers"], strict=True):
            if saved is not None and isinstance(policy, StatefulPolicy):
                policy.load_state_dict(saved)

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        return self.decide_batch([obs])[0]

    def decide_batch(self, observations: Sequence[EnvObservation]) -> list[TamiyoDecision]:
        return self.act(observations).decisions

    def act(self, observations: Sequence[EnvObservation]) -> PolicyStep:
        """One forward for all `observations`: the decisions, and what PPO stores of them."""
        device, space = self.agent.device, self.agent.space
        for obs in observations:
            if obs.action_space.head != space.head:
                raise UserInputError(f"The policy chooses among the {space.topology} blueprints {list(space.head)}, "
                                     f"env {obs.env_id} offers {list(obs.action_space.head)}: load the same plugins "
                                     f"(--plugin MODULE) in every process")
        raw = torch.tensor([observation_features(o, use_telemetry=self.use_telemetry) for o in observations],
                           dtype=torch.float32, device=device)
        states = self.obs_normalizer.normalize(raw)
        validities = [o.validity if self.blueprints is None else o.validity.restricted_to_blueprints(self.blueprints)
                      for o in observations]
        masks = compute_batch_masks(validities, device=device)
        if not bool(torch.isfinite(states).all()):
            raise NonFinitePolicyError(f"non-finite observation features for env(s) {_bad_rows(states)}: the "
                                       f"environment measured NaN or infinity; rerun with --debug to see where")
        teacher = None
        if self.agent.network.residual:
            if self.teachers is None:
                raise ValueError("a residual policy needs its envs' teachers (PPOPolicy.teach) before it acts")
            teacher = teacher_rows(self.teachers.decide(observations), device)
        try:
            actions, log_probs, values, used = self.agent.act(states, masks, self.deterministic, teacher)
        except RuntimeError as exc:  # sampling from NaN probabilities fails inside torch.multinomial
            if "nan" not in str(exc).lower() and "inf" not in str(exc).lower():
                raise
            raise NonFinitePolicyError(f"the policy produced non-finite action probabilities ({exc}): its weights "
                                       f"diverged; use an earlier checkpoint") from exc
        if not bool(torch.isfinite(log_probs).all() & torch.isfinite(values).all()):
            raise NonFinitePolicyError(f"the policy produced non-finite outputs for env(s) "
                                       f"{_bad_rows(torch.stack([log_probs, values], 1))} (NaN or infinite logits or "
                                       f"value): its weights diverged; use an earlier checkpoint")
        rows = torch.stack([actions["slot"], actions["blueprint"], actions["blend"], actions["op"]], 1).tolist()
        lp, v = log_probs.tolist(), values.tolist()
        follows = [None] * len(rows) if teacher is None else follows_teacher(actions, teacher).tolist()
        decisions = []
        for i, (slot, blueprint, blend, op) in enumerate(rows):
            factored = space.action(slot, blueprint, blend, op)
            aside = "" if follows[i] is None else f", {AS_TEACHER if follows[i] else OVERRIDES_TEACHER}"
            decisions.append(TamiyoDecision(factored.to_command(space), factored, reason=f"policy (value "
                                            f"{v[i]:+.2f}{aside})", confidence=min(1.0, math.exp(lp[i]))))
        return PolicyStep(raw, states, actions, log_probs, values, used, decisions, teacher)

    @torch.no_grad()
    def action_probs(self, raw_states: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """The greedy policy as target-policy probabilities over the joint actions, for offline evaluation: one-hot
        at the action each head's mode gives (what `esper compare` evaluates), from raw features and the joint
        validity that datasets store."""
        if self.agent.network.residual:
            raise UserInputError(f"a residual policy decides on top of its teacher ({self.agent.config.teacher}), "
                                 f"whose choices depend on its episode so far, which datasets do not store: evaluate "
                                 f"it with `esper compare` instead")
        states = self.obs_normalizer.normalize(raw_states.to(self.agent.device, torch.float32))
        allowed = valid.to(self.agent.device) & self._joint_allowed
        space = self.agent.space
        actions, _, _, _ = self.agent.act(states, masks_from_joint(allowed, space), deterministic=True)
        rows = torch.stack([actions["slot"], actions["blueprint"], actions["blend"], actions["op"]], 1).tolist()
        joint = [space.joint_index(space.action(*row)) for row in rows]
        return torch.nn.functional.one_hot(torch.tensor(joint), space.num_joint_actions).to(torch.float32)

    @classmethod
    def from_checkpoint(cls, path: Path, *, device: str | torch.device = "cpu", deterministic: bool = True,
                        space: ActionSpace | None = None, slots: Sequence[str] | None = None,
                        context: ControllerContext | None = None) -> PPOPolicy:
        """Load a trained policy, rejecting one trained for another topology, blueprint set, slots or schema, and
        (through `context`) for another task, episode length or sample caps unless the context allows the change.

        The episode length matters: the policy sees the fraction of the episode elapsed, and never saw the end of
        an episode come at another epoch; the caps decide how far a host gets in an episode.
        """
        data = read_policy_checkpoint(path)  # refuses a blueprint head other than this registry's
        config = saved_config(data, path)
        episode = config.episode
        trained = get_task_spec(episode.task).action_space
        if space is not None and trained.topology != space.topology:
            raise UserInputError(f"{path} was trained for topology '{trained.topology}' (task {episode.task}), not "
                                 f"'{space.topology}': evaluate it with --task {episode.task}")
        if space is not None and trained.head != space.head:
            raise UserInputError(f"{path} chooses among the {trained.topology} blueprints {list(trained.head[1:])}, "
                                 f"where it runs they are {list(space.head[1:])}: a policy runs only where its "
                                 f"blueprint head is offered (esper.wrap: leave blueprints= out, or name those)")
        if slots is not None and ordered_slots(slots) != episode.slots:
            raise UserInputError(f"{path} was trained with slots {list(episode.slots)}, not {list(slots)}: evaluate it "
                                 f"with --slots {' '.join(episode.slots)}")
        if context is not None:
            _check_family(path, config.family, context)
            check_trained_setting(str(path), trained_setting(episode, config.family), context)
        dim = obs_dim(trained, config.ppo.use_telemetry)
        agent = PPOAgent(config.ppo, seed=config.seed, state_dim=dim, space=trained, device=device)
        normalizer = RunningMeanStd(dim, device=device)
        load_policy_state(agent, normalizer, data, path)
        return cls(agent, normalizer, use_telemetry=config.ppo.use_telemetry, deterministic=deterministic,
                   blueprints=config.blueprint_indices())


def decides_as_its_teacher(path: Path) -> bool:
    """Whether the policy at `path`, evaluated greedily, takes its teacher's decision in every state, so that its
    paired episodes are that teacher's bit for bit and need not be run again: its residual is zero on every head (the
    logits are the smoothed teacher's, whose mode is the teacher's choice), it may germinate every blueprint (its
    teacher is then the teacher run on its own), and the teacher decides from the episode alone (heuristic, grow:
    a behaviour policy samples from a stream of its own). Those teachers only ever choose legal actions of the
    policy's heads, so no head falls back to a uniform prior."""
    policy = PPOPolicy.from_checkpoint(path)
    kind = policy.agent.config.teacher.partition(":")[0]
    return (kind in DETERMINISTIC_TEACHERS and policy.blueprints is None
            and policy.agent.network.residual_is_zero())


def _allows(action: FactoredAction, blueprints: frozenset[int] | None) -> bool:
    return blueprints is None or action.op != LifecycleOp.GERMINATE or action.blueprint in blueprints


def _bad_rows(values: torch.Tensor) -> list[int]:
    rows = ~torch.isfinite(values.reshape(values.shape[0], -1)).all(dim=1)
    return rows.nonzero().flatten().tolist()


@register_controller("ppo", argument="PATH", summary="a PPO policy: checkpoint file or run directory (final.pt)")
def _ppo(argument: str | None, context: ControllerContext) -> PPOPolicy:
    assert argument is not None
    path = checkpoint_file(Path(argument), "final.pt")
    policy = PPOPolicy.from_checkpoint(path, device=context.device, space=context.space, slots=context.slots,
                                       context=context)
    if policy.agent.network.residual:  # its teacher runs beside it, built for the same episode
        policy.teach(Teachers.build(policy.agent.config.teacher, [context], policy.blueprints))
    return policy


def trained_setting(episode: EpisodeSetting, family: str | None) -> dict[str, Any]:
    """The setting a PPO policy learned in: its task, episode length, sample caps, batch size, schedule and
    augmentation (across a family, the types set task, training cap and the augmentation of their own, so
    `_check_family` checks the task)."""
    setting = episode.controller_setting()
    if family is not None:
        del setting["task"], setting["max_train_samples"], setting["augment"]
    return setting


def _check_family(path: Path, family: str | None, context: ControllerContext) -> None:
    """A policy trained across a family runs on any type of that family (its held-out types are what it is measured
    on), and on no other task unless the context allows the change."""
    if family is None or context.setting is None or context.allow_setting_change:
        return
    task = str(context.setting["task"])
    if not task.startswith(f"{FAMILY_PREFIX}:{family}/"):
        raise SettingChangeError(f"{path} was trained across family {family}, not on {task}: run it on a "
                                 f"type of that family (--task {FAMILY_PREFIX}:{family}/TYPE), or pass "
                                 f"--allow-setting-change to evaluate it there anyway")
