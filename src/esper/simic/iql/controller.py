"""IQLPolicy: a trained IQL policy as a Tamiyo controller (`iql:PATH`), and as a target policy for offline evaluation.

It scales the observation's features with the statistics stored at training time, restricts the policy's logits
to the joint actions valid right now, and takes the argmax: deployment is deterministic, and the executed action is
always one the environment accepts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from esper.env.features import observation_features
from esper.leyline import OBS_SCHEMA, ActionSpace, EnvObservation, ordered_slots
from esper.leyline.errors import UserInputError
from esper.simic.iql.iql import FeatureScaler, IQLLearner, load_iql_checkpoint, masked_argmax
from esper.simic.masking import masked_logits
from esper.storage.checkpoint import check_blueprint_head
from esper.storage.rundir import run_dir_of
from esper.tamiyo import ControllerContext, TamiyoDecision, check_trained_setting, register_controller

__all__ = ["IQLPolicy"]


class IQLPolicy:
    """Deterministic controller: argmax of the policy's logits over the observation's valid joint actions."""

    name = "iql"

    def __init__(self, policy: nn.Module, scaler: FeatureScaler, *, space: ActionSpace, slots: Sequence[str]) -> None:
        self.policy = policy.eval()
        self.scaler = scaler
        self.space = space
        self.topology = space.topology
        self.slots = ordered_slots(slots)
        self.device = next(policy.parameters()).device

    @classmethod
    def from_learner(cls, learner: IQLLearner) -> IQLPolicy:
        return cls(learner.policy, learner.scaler, space=learner.space, slots=learner.slots)

    @classmethod
    def from_checkpoint(cls, path: str | Path, *, device: str | torch.device = "cpu", space: ActionSpace | None = None,
                        slots: Sequence[str] | None = None) -> IQLPolicy:
        """Load an `esper-iql-v1` checkpoint (file or run directory), refusing one trained for another setup (another
        topology, blueprint head or slots than `space` and `slots`)."""
        data = load_iql_checkpoint(path)
        if data["feature_schema"] != OBS_SCHEMA:
            raise UserInputError(f"{path} was trained on feature schema {data['feature_schema']!r}, this version "
                                 f"observes {OBS_SCHEMA!r}; retrain on data of this version")
        if space is not None:
            if data["topology"] != space.topology:
                raise UserInputError(f"{path} was trained for topology {data['topology']!r}, not {space.topology!r}")
            check_blueprint_head(path, data, space)
        trained = list(ordered_slots(data["slots"]))
        if slots is not None and list(ordered_slots(slots)) != trained:
            raise UserInputError(f"{path} was trained with slots {trained}, not {list(ordered_slots(slots))}")
        return cls.from_learner(IQLLearner.from_checkpoint(data, device=device))

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        return self.decide_batch([obs])[0]

    @torch.no_grad()
    def decide_batch(self, observations: Sequence[EnvObservation]) -> list[TamiyoDecision]:
        for obs in observations:
            if obs.action_space.head != self.space.head or ordered_slots(obs.enabled_slots) != self.slots:
                raise UserInputError(f"IQL policy trained for {self.topology} blueprints {list(self.space.head)} with "
                                     f"slots {list(self.slots)} cannot drive env {obs.env_id} ({obs.topology} "
                                     f"blueprints {list(obs.action_space.head)}, slots {list(obs.enabled_slots)})")
        raw = torch.tensor([observation_features(o) for o in observations], dtype=torch.float32)
        valid = torch.tensor([o.validity.joint_mask() for o in observations], dtype=torch.bool)
        logits = self._logits(raw, valid)
        if not bool(torch.isfinite(logits.masked_fill(~valid, 0.0)).all()):
            raise FloatingPointError("IQL policy produced non-finite logits; the checkpoint is unusable")
        choice = masked_argmax(logits, valid)
        probs = masked_logits(logits, valid).softmax(-1).gather(1, choice.unsqueeze(1)).squeeze(1)
        decisions = []
        for j, p in zip(choice.tolist(), probs.tolist(), strict=True):
            factored = self.space.from_joint_index(j)
            command = factored.to_command(self.space)
            decisions.append(TamiyoDecision(command, factored, reason=f"IQL argmax: {command.describe()} (π={p:.2f})",
                                            confidence=min(1.0, max(0.0, p)), info={"joint_index": j}))
        return decisions

    @torch.no_grad()
    def action_probs(self, states: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Target-policy probabilities for offline evaluation: one-hot of the valid argmax, from raw features."""
        valid = valid.cpu()
        choice = masked_argmax(self._logits(states, valid), valid)
        return torch.nn.functional.one_hot(choice, valid.shape[1]).to("cpu", torch.float32)

    def _logits(self, raw_states: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        if not bool(valid.any(dim=1).all()):
            raise ValueError("A state with no valid joint action was given to the IQL policy; every state allows "
                             "at least WAIT, so the validity mask is corrupt")
        return self.policy(self.scaler(raw_states.to(self.device, torch.float32))).cpu()


@register_controller("iql", argument="PATH", summary="a trained IQL policy (checkpoint or run directory), argmax "
                     "over the valid joint actions")
def _iql(argument: str | None, context: ControllerContext) -> IQLPolicy:
    assert argument is not None  # the registry rejects `iql` without a path
    policy = IQLPolicy.from_checkpoint(argument, device=context.device, space=context.space, slots=context.slots)
    trained = trained_setting(Path(argument))
    if trained is not None:
        check_trained_setting(argument, trained, context)
    return policy


def trained_setting(source: Path) -> dict[str, Any] | None:
    """The setting (task, episode length, sample caps) of the datasets an IQL run learned from, read from the run's
    config.json; None for a checkpoint that lies outside a run directory."""
    record = run_dir_of(source) / "config.json"
    try:
        settings = json.loads(record.read_text(encoding="utf-8"))["config"]["dataset_settings"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return dict(settings) if isinstance(settings, dict) else None
