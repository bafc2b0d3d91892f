"""PPOController: the learned Tamiyo policy as a controller (training rollouts and deterministic evaluation).

One batched network forward decides for all envs that share the controller. Observations are normalized with frozen
running statistics; the raw features travel in the decision's `info` so the trainer can update the normalizer once
per rollout batch and store exactly what the policy saw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from esper.env.features import obs_dim, observation_features
from esper.env.masks import compute_batch_masks
from esper.leyline import OBS_SCHEMA, EnvObservation, FactoredAction, ordered_slots
from esper.runtime.checkpoint import load_checkpoint
from esper.simic.normalization import RunningMeanStd
from esper.simic.ppo.agent import PPOAgent
from esper.tamiyo import TamiyoDecision

PPO_FORMAT = "esper-ppo-v1"


class PPOController:
    """Decides with a PPOAgent's policy; `deterministic` takes the mode of every head (evaluation)."""

    name = "ppo"

    def __init__(self, agent: PPOAgent, obs_normalizer: RunningMeanStd, *, use_telemetry: bool,
                 deterministic: bool = False) -> None:
        if obs_normalizer.shape != (obs_dim(use_telemetry),) or agent.state_dim != obs_dim(use_telemetry):
            raise ValueError(f"Policy expects {agent.state_dim} features, normalizer {obs_normalizer.shape}, "
                             f"observation has {obs_dim(use_telemetry)}")
        self.agent = agent
        self.obs_normalizer = obs_normalizer
        self.use_telemetry = use_telemetry
        self.deterministic = deterministic

    def reset(self, seed: int) -> None:
        """Nothing per episode: the policy is feed-forward and its sampling generator is the agent's."""

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        return self.decide_batch([obs])[0]

    def decide_batch(self, observations: Sequence[EnvObservation]) -> list[TamiyoDecision]:
        device = self.agent.device
        raw = torch.tensor([observation_features(o, use_telemetry=self.use_telemetry) for o in observations],
                           dtype=torch.float32, device=device)
        states = self.obs_normalizer.normalize(raw)
        masks = compute_batch_masks([o.validity for o in observations], device=device)
        actions, log_probs, values, used = self.agent.get_action_batch(states, masks, self.deterministic)
        rows = torch.stack([actions["slot"], actions["blueprint"], actions["blend"], actions["op"]], 1).tolist()
        lp, v = log_probs.tolist(), values.tolist()
        decisions = []
        for i, (obs, (slot, blueprint, blend, op)) in enumerate(zip(observations, rows, strict=True)):
            factored = FactoredAction.from_indices(slot, blueprint, blend, op)
            info: dict[str, Any] = {
                "raw_features": raw[i], "state": states[i],
                "action": {"slot": slot, "blueprint": blueprint, "blend": blend, "op": op},
                "log_prob": lp[i], "value": v[i], "used_masks": {k: m[i] for k, m in used.items()},
            }
            decisions.append(TamiyoDecision(factored.to_command(obs.topology), factored,
                                            reason=f"policy (value {v[i]:+.2f})",
                                            confidence=min(1.0, math.exp(lp[i])), info=info))
        return decisions

    @classmethod
    def from_checkpoint(cls, path: str | Path, *, device: str | torch.device = "cpu", deterministic: bool = True,
                        topology: str | None = None, slots: Sequence[str] | None = None) -> PPOController:
        """Load a trained policy (`esper-ppo-v1`), rejecting one trained for another topology, slots or schema."""
        path = Path(path)
        if path.is_dir():
            path = path / "checkpoints" / "final.pt"
        data = load_checkpoint(path, PPO_FORMAT, map_location="cpu")
        if data.get("obs_schema") != OBS_SCHEMA:
            raise ValueError(f"{path} uses observation schema {data.get('obs_schema')!r}, expected {OBS_SCHEMA!r}")
        if topology is not None and data["agent"]["hparams"]["topology"] != topology:
            raise ValueError(f"{path} was trained for topology '{data['agent']['hparams']['topology']}', "
                             f"not '{topology}'")
        trained_slots = list(ordered_slots(data["config"]["slots"]))
        if slots is not None and list(ordered_slots(slots)) != trained_slots:
            raise ValueError(f"{path} was trained with slots {trained_slots}, not {list(slots)}")
        agent = PPOAgent(**data["agent"]["hparams"], device=device)
        agent.load_state_dict(data["agent"])
        use_telemetry = bool(data["config"]["use_telemetry"])
        normalizer = RunningMeanStd(obs_dim(use_telemetry), device=device)
        normalizer.load_state_dict(data["obs_normalizer"])
        return cls(agent, normalizer, use_telemetry=use_telemetry, deterministic=deterministic)
