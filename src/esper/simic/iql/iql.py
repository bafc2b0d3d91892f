"""Implicit Q-learning (IQL) over the 43 joint actions, as one file that reads top to bottom.

Offline data come from behaviour policies that are mostly wrong: cloning them copies their mistakes, and a plain
Q-learner's max over actions chases value errors on actions the data never tried. IQL avoids both. V regresses an
upper expectile of the critics' values *at the logged actions only* (so no unseen action is ever maximized over),
the critics learn r + γ·V(s'), and the policy clones the logged actions weighted by exp(β·advantage): good logged
actions are imitated, bad ones ignored. The policy is a softmax over the joint actions that are valid at s, so it
never puts mass on (or learns from) an action the environment would refuse.

Sections: networks and input scaling → the four losses and the target update → `IQLLearner` (one `update` step,
evaluation metrics, exact-resume state and the `esper-iql-v1` checkpoint) → `train_iql`, the epoch loop.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

import esper
from esper.datagen.transitions import TransitionBatch, TransitionDataset
from esper.env.features import obs_dim
from esper.execution.devices import resolve_device
from esper.leyline import OBS_SCHEMA, UNRECORDED_HEADS, ActionSpace, ordered_slots
from esper.leyline.constants import OBS_CLIP, OBS_EPSILON
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import derive_seed
from esper.simic.iql.config import RESUMABLE_FIELDS, IQLConfig
from esper.simic.masking import masked_logits
from esper.simic.normalization import standardize
from esper.storage.checkpoint import (
    CheckpointFormatError,
    atomic_save,
    blueprint_record,
    detached_copy,
    load_checkpoint,
    non_finite_tensors,
)
from esper.storage.rundir import checkpoint_file

__all__ = [
    "EPOCH_METRICS",
    "IQL_FORMAT",
    "FeatureScaler",
    "IQLLearner",
    "awr_weights",
    "expectile_loss",
    "load_iql_checkpoint",
    "masked_argmax",
    "masked_log_softmax",
    "polyak_update",
    "td_target",
    "train_iql",
]

IQL_FORMAT = "esper-iql-v1"
STEP_METRICS = ("v_loss", "q_loss", "policy_loss", "mean_weight", "frac_weight_clipped")
EPOCH_METRICS = (*STEP_METRICS, "agreement", "q_behavior", "q_policy")
"""Keys of the per-epoch metrics dict (besides `epoch` and `steps`)."""


# ------------------------------------------------------------------------------------ networks and input scaling
def mlp(in_dim: int, hidden_sizes: Sequence[int], out_dim: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden_sizes:
        layers += [nn.Linear(in_dim, width), nn.ReLU()]
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


@dataclass(frozen=True)
class FeatureScaler:
    """Fixed standardization by the dataset's per-feature mean and variance, clipped to ±OBS_CLIP.

    Offline data do not change, so the statistics are computed once and stored with the weights: the controller
    must scale live observations exactly as training scaled the logged ones.
    """

    mean: torch.Tensor
    var: torch.Tensor

    @classmethod
    def from_states(cls, states: torch.Tensor) -> FeatureScaler:
        x = states.to(torch.float64)
        return cls(x.mean(0).float(), x.var(0, correction=0).float())

    def to(self, device: torch.device) -> FeatureScaler:
        return FeatureScaler(self.mean.to(device), self.var.to(device))

    def __call__(self, states: torch.Tensor) -> torch.Tensor:
        """Standardized and clipped; a feature constant in the dataset maps to 0, as in PPO's normalizer: the policy
        never saw it change, so a change at deployment must not arrive as a ±OBS_CLIP outlier."""
        return standardize(states, self.mean, self.var, OBS_EPSILON, OBS_CLIP)


# ------------------------------------------------------------------------------------------- losses and targets
def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """Asymmetric squared error of diff = target − prediction: weight τ above the prediction, 1 − τ below.

    Its minimizer is the τ-expectile of the targets; τ > 0.5 leans towards the best logged actions' values.
    """
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff.square()).mean()


def td_target(rewards: torch.Tensor, dones: torch.Tensor, next_values: torch.Tensor, gamma: float) -> torch.Tensor:
    """r + γ·(1 − done)·V(s'): a terminal transition's value is its reward alone."""
    return rewards + gamma * (~dones).to(rewards.dtype) * next_values


def awr_weights(advantages: torch.Tensor, beta: float, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """exp(β·A) capped at `clip` (one lucky transition must not dominate a batch); also which entries were capped."""
    clipped = beta * advantages > math.log(clip)
    return torch.exp(beta * advantages).clamp(max=clip), clipped


def masked_log_softmax(logits: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """log π over the valid actions only: invalid ones get probability 0 and receive no gradient."""
    return masked_logits(logits, valid).log_softmax(dim=-1)


def masked_argmax(scores: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return masked_logits(scores, valid).argmax(dim=-1)


@torch.no_grad()
def polyak_update(target: nn.Module, online: nn.Module, rate: float) -> None:
    """target ← (1 − rate)·target + rate·online, parameter by parameter."""
    for t, o in zip(target.parameters(), online.parameters(), strict=True):
        t.lerp_(o, rate)


# ------------------------------------------------------------------------------------------------------ learner
class IQLLearner:
    """Twin Q (with Polyak targets), V and policy networks, their optimizers and the minibatch generator."""

    def __init__(self, config: IQLConfig, scaler: FeatureScaler, *, space: ActionSpace, slots: Sequence[str],
                 feature_schema: str = OBS_SCHEMA, device: str | torch.device | None = None) -> None:
        if feature_schema != OBS_SCHEMA:
            raise UserInputError(f"IQL reads feature schema {OBS_SCHEMA!r}, got {feature_schema!r}")
        self.config = config
        self.space = space
        self.topology = space.topology
        self.slots = ordered_slots(slots)
        self.feature_schema = feature_schema
        self.state_dim, self.action_dim = obs_dim(space), space.num_joint_actions
        self.device = resolve_device(config.device) if device is None else torch.device(device)
        self.scaler = scaler.to(self.device)
        with torch.random.fork_rng(devices=[]):  # weights depend on the seed only; global RNG is left untouched
            torch.manual_seed(config.seed)
            hidden = config.hidden_sizes
            states, actions = self.state_dim, self.action_dim
            self.q1, self.q2 = mlp(states, hidden, actions), mlp(states, hidden, actions)
            self.v = mlp(states, hidden, 1)
            self.policy = mlp(states, hidden, actions)
        self.q1_target, self.q2_target = copy.deepcopy(self.q1), copy.deepcopy(self.q2)
        for net in self.networks().values():
            net.to(self.device)
        for target in (self.q1_target, self.q2_target):
            target.requires_grad_(False)
        self.q_optimizer = torch.optim.Adam([*self.q1.parameters(), *self.q2.parameters()], lr=config.lr)
        self.v_optimizer = torch.optim.Adam(self.v.parameters(), lr=config.lr)
        self.policy_optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.lr)
        self.generator = torch.Generator().manual_seed(config.seed)  # CPU: minibatch order resumes on any device
        self.epochs_completed = 0
        self.steps_completed = 0

    @classmethod
    def for_dataset(cls, config: IQLConfig, dataset: TransitionDataset) -> IQLLearner:
        return cls(config, FeatureScaler.from_states(dataset.states), space=dataset.space,
                   slots=dataset.slots, feature_schema=dataset.feature_schema)

    def networks(self) -> dict[str, nn.Module]:
        return {"q1": self.q1, "q2": self.q2, "v": self.v, "policy": self.policy,
                "q1_target": self.q1_target, "q2_target": self.q2_target}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"q": self.q_optimizer, "v": self.v_optimizer, "policy": self.policy_optimizer}

    # ---------------------------------------------------------------------------------------------- one step
    def update(self, batch: TransitionBatch) -> dict[str, torch.Tensor]:
        """One IQL step on a minibatch; returns detached scalar tensors keyed by STEP_METRICS (no host sync)."""
        cfg = self.config
        states, next_states = self.scaler(batch.states), self.scaler(batch.next_states)
        actions = batch.actions.unsqueeze(1)
        with torch.no_grad():
            q_hat = torch.min(self.q1_target(states), self.q2_target(states)).gather(1, actions).squeeze(1)
            next_v = self.v(next_states).squeeze(1)

        # 1. V regresses the τ-expectile of the target critics' values at the logged actions.
        v = self.v(states).squeeze(1)
        v_loss = expectile_loss(q_hat - v, cfg.expectile)
        self.v_optimizer.zero_grad(set_to_none=True)
        v_loss.backward()
        self.v_optimizer.step()

        # 2. Both critics regress the one-step TD target through V (never a max over actions).
        target = td_target(batch.rewards, batch.dones, next_v, cfg.gamma)
        q1 = self.q1(states).gather(1, actions).squeeze(1)
        q2 = self.q2(states).gather(1, actions).squeeze(1)
        q_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)
        self.q_optimizer.zero_grad(set_to_none=True)
        q_loss.backward()
        self.q_optimizer.step()

        # 3. The policy clones logged actions, weighted by exp(β·advantage), over the valid actions of s.
        weights, clipped = awr_weights(q_hat - v.detach(), cfg.beta, cfg.weight_clip)
        log_probs = masked_log_softmax(self.policy(states), batch.valid).gather(1, actions).squeeze(1)
        policy_loss = -(weights * log_probs).mean()
        self.policy_optimizer.zero_grad(set_to_none=True)
        policy_loss.backward()
        self.policy_optimizer.step()

        # 4. The target critics trail the online ones.
        polyak_update(self.q1_target, self.q1, cfg.polyak)
        polyak_update(self.q2_target, self.q2, cfg.polyak)
        self.steps_completed += 1
        values = (v_loss, q_loss, policy_loss, weights.mean(), clipped.float().mean())
        return {name: value.detach() for name, value in zip(STEP_METRICS, values, strict=True)}

    # ---------------------------------------------------------------------------------------------- metrics
    @torch.no_grad()
    def evaluate(self, dataset: TransitionDataset, rows: torch.Tensor) -> dict[str, float]:
        """How the policy relates to the data on `rows`: agreement with the logged action, min-Q of both choices."""
        batch = dataset.batch(rows)
        states = self.scaler(batch.states)
        q = torch.min(self.q1(states), self.q2(states))
        greedy = masked_argmax(self.policy(states), batch.valid)
        row = torch.stack([(greedy == batch.actions).float().mean(),
                           q.gather(1, batch.actions.unsqueeze(1)).mean(),
                           q.gather(1, greedy.unsqueeze(1)).mean()]).tolist()
        return dict(zip(("agreement", "q_behavior", "q_policy"), row, strict=True))

    # ---------------------------------------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, Any]:
        """Everything an exact resume needs, as CPU tensors and plain values (`weights_only`-loadable)."""
        return {
            "feature_schema": self.feature_schema,
            "state_dim": self.state_dim,
            "action_dim": self.action_dim,
            "topology": self.topology,
            **blueprint_record(self.space),
            "slots": list(self.slots),
            "config": self.config.to_dict(),
            **{name: detached_copy(net.state_dict(), "cpu") for name, net in self.networks().items()},
            "optimizers": {name: detached_copy(opt.state_dict(), "cpu") for name, opt in self.optimizers().items()},
            "obs_mean": self.scaler.mean.detach().cpu().clone(),
            "obs_var": self.scaler.var.detach().cpu().clone(),
            "generator": self.generator.get_state(),
            "epochs_completed": self.epochs_completed,
            "steps_completed": self.steps_completed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, mine in (("feature_schema", self.feature_schema), ("state_dim", self.state_dim),
                          ("action_dim", self.action_dim), ("topology", self.topology), ("slots", list(self.slots))):
            if state[key] != mine:
                raise UserInputError(f"IQL state has {key} {state[key]!r}, this learner {mine!r}")
        for name, net in self.networks().items():
            net.load_state_dict(state[name])
        for name, opt in self.optimizers().items():
            opt.load_state_dict(state["optimizers"][name])
        self.scaler = FeatureScaler(state["obs_mean"].float(), state["obs_var"].float()).to(self.device)
        self.generator.set_state(state["generator"].cpu())
        self.epochs_completed = int(state["epochs_completed"])
        self.steps_completed = int(state["steps_completed"])

    def checkpoint(self) -> dict[str, Any]:
        """The `esper-iql-v1` payload: a plain dict of tensors and values."""
        return {"format": IQL_FORMAT, "esper_version": esper.__version__, **self.state_dict()}

    def save(self, path: str | Path) -> None:
        atomic_save(self.checkpoint(), path)

    @classmethod
    def from_checkpoint(cls, data: dict[str, Any], *, config: IQLConfig | None = None,
                        device: str | torch.device | None = None) -> IQLLearner:
        """Rebuild a learner from a payload; `config` (e.g. with more epochs) must agree on every other field."""
        saved = IQLConfig.from_dict(data["config"])
        if config is not None:
            conflicts = config.resume_conflicts(saved.to_dict())
            if conflicts:
                raise UserInputError(f"Cannot resume with changed {conflicts}: only {sorted(RESUMABLE_FIELDS)} "
                                     f"may change")
        learner = cls(config or saved, FeatureScaler(data["obs_mean"], data["obs_var"]), space=recorded_space(data),
                      slots=data["slots"], feature_schema=data["feature_schema"], device=device)
        learner.load_state_dict(data)
        return learner



def recorded_space(data: dict[str, Any]) -> ActionSpace:
    """The action space an IQL checkpoint was trained in (one that records no head: its topology's built-in one)."""
    topology = str(data.get("topology"))
    recorded = data.get("blueprints")
    head = tuple(recorded) if isinstance(recorded, list) else UNRECORDED_HEADS.get(topology)
    if head is None:
        raise CheckpointFormatError(f"The IQL checkpoint records no blueprint head for topology {topology!r}: retrain "
                                    f"it with this esper version")
    return ActionSpace(topology, head)


def load_iql_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read an `esper-iql-v1` file (a run directory means its checkpoints/final.pt) and reject broken ones."""
    path = Path(path)
    path = checkpoint_file(path, "final.pt")
    data = load_checkpoint(path, IQL_FORMAT)
    space = recorded_space(data)
    if data.get("state_dim") != obs_dim(space) or data.get("action_dim") != space.num_joint_actions:
        raise CheckpointFormatError(f"{path} has state_dim {data.get('state_dim')} and action_dim "
                                    f"{data.get('action_dim')}, but its blueprint head {list(space.head)} makes "
                                    f"{obs_dim(space)} and {space.num_joint_actions}: the file was altered")
    bad = non_finite_tensors(data)
    if bad:
        raise CheckpointFormatError(f"{path} holds non-finite values in {bad[:3]}: the run diverged; use an earlier "
                                    f"checkpoint or retrain with a lower lr")
    return data



# ------------------------------------------------------------------------------------------------ training loop
EpochCallback = Callable[[IQLLearner, dict[str, float]], None]


def agreement_rows(n: int, samples: int, seed: int) -> torch.Tensor:
    """A fixed subset of rows for the per-epoch metrics, drawn from the seed (not from the training stream)."""
    generator = torch.Generator().manual_seed(derive_seed(seed, "agreement-rows"))
    return torch.randperm(n, generator=generator)[: min(n, samples)]


def train_iql(config: IQLConfig, dataset: TransitionDataset, *, learner: IQLLearner | None = None,
              on_epoch: EpochCallback | None = None, should_stop: Callable[[], bool] | None = None) -> IQLLearner:
    """Train (or, given a restored `learner`, continue training) until `config.epochs` epochs are complete.

    After every epoch `on_epoch(learner, metrics)` runs (checkpoints, history lines, telemetry belong there), then
    `should_stop()` may end training early at that epoch boundary. Metrics hold `epoch`, `steps` and EPOCH_METRICS.
    Non-finite losses stop training with FloatingPointError rather than saving a diverged policy.
    """
    if learner is None:
        learner = IQLLearner.for_dataset(config, dataset)
    else:
        _check_resume(learner, config, dataset)
    data = dataset.to(learner.device)
    rows = agreement_rows(len(data), config.agreement_samples, config.seed)
    while learner.epochs_completed < config.epochs:
        steps = [torch.stack(list(learner.update(data.sample(config.batch_size, learner.generator)).values()))
                 for _ in range(config.steps_per_epoch)]
        means = torch.stack(steps).mean(0).tolist()
        metrics: dict[str, float] = dict(zip(STEP_METRICS, means, strict=True))
        metrics.update(learner.evaluate(data, rows))
        learner.epochs_completed += 1
        diverged = [k for k, v in metrics.items() if not math.isfinite(v)]
        if diverged:
            raise FloatingPointError(f"IQL diverged in epoch {learner.epochs_completed}: {diverged} are not finite; "
                                     f"lower lr or beta")
        metrics = {"epoch": float(learner.epochs_completed), "steps": float(learner.steps_completed), **metrics}
        if on_epoch is not None:
            on_epoch(learner, metrics)
        if should_stop is not None and should_stop():
            break
    return learner


def _check_resume(learner: IQLLearner, config: IQLConfig, dataset: TransitionDataset) -> None:
    conflicts = config.resume_conflicts(learner.config.to_dict())
    if conflicts:
        raise UserInputError(f"Cannot continue training with changed {conflicts}: only {sorted(RESUMABLE_FIELDS)} "
                             f"may change")
    if learner.space.head != dataset.space.head:
        raise UserInputError(f"The learner was trained on the blueprints {list(learner.space.head)}, the dataset has "
                             f"{list(dataset.space.head)}: continue on data of the same blueprints")
    for key in ("feature_schema", "topology", "slots"):
        if getattr(learner, key) != getattr(dataset, key):
            raise UserInputError(f"The learner was trained on {key} {getattr(learner, key)!r}, the dataset has "
                                 f"{getattr(dataset, key)!r}")
    learner.config = config
