"""One PPO update against an independent, plainly written reference of the same objective.

The rollout is built so that every part of the objective binds: stored log-probabilities are shifted so ratios leave
the clip range on both sides with advantages of both signs (the upper and the lower clip bound each change the
gradient), stored values are shifted so value clipping binds, masks leave several heads with invalid actions (masked,
normalized entropy), and the target KL stops the update part-way. The reference recomputes GAE, minibatch order,
log-probabilities, entropies and losses with its own code and steps its own copy of the network with its own Adam.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import pytest
import torch
import torch.nn.functional as F

from esper.data.tasks import get_task_spec
from esper.simic.ppo.agent import PPOAgent
from esper.simic.ppo.buffer import PolicyStep, RolloutBuffer
from esper.simic.ppo.ppo_config import PPOConfig

D, N = 12, 24
HEADS = ("op", "slot", "blueprint", "blend")
SIZES = {"op": 4, "slot": 3, "blueprint": 5, "blend": 3}


GAMMA, SEED = 0.9, 3


def _config(**overrides: object) -> PPOConfig:
    fields: dict[str, object] = {
        "hidden_dim": 16, "n_epochs": 3, "minibatch_size": 8, "clip_ratio": 0.2, "value_clip": 0.2,
        "value_coef": 0.5, "entropy_coef": 0.05, "max_grad_norm": 0.5, "gae_lambda": 0.8,
        "lr": 0.01, "target_kl": None, "n_envs": 1, "group_size": 1, "n_episodes": 1,
    }
    fields.update(overrides)
    return PPOConfig.from_dict(fields)


@dataclass
class _Plain:
    """The rollout as plain env-major lists (env 0's steps, then env 1's), what the reference reads."""

    states: list[torch.Tensor] = field(default_factory=list)
    actions: list[dict[str, int]] = field(default_factory=list)
    masks: list[dict[str, torch.Tensor]] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    dones: list[bool] = field(default_factory=list)
    envs: list[int] = field(default_factory=list)


def _rollout(agent: PPOAgent) -> tuple[RolloutBuffer, _Plain]:
    """Two envs × 12 steps; each env's last step is terminal. Masks vary; log-probs and values are shifted."""
    g = torch.Generator().manual_seed(0)
    plain = _Plain()
    for i in range(N):
        env, t = divmod(i, N // 2)
        masks = {h: torch.rand(SIZES[h], generator=g) > 0.4 for h in HEADS}
        for h in HEADS:
            masks[h][i % SIZES[h]] = True  # at least one valid action per head
        state = torch.randn(D, generator=g)
        batched = {h: m.unsqueeze(0) for h, m in masks.items()}
        actions, log_probs, values, used = agent.act(state.unsqueeze(0), batched)
        logp_shift = (0.6, -0.6, 0.0)[i % 3]  # ratios start at e^∓0.6 ≈ 0.55 / 1.8: outside [0.8, 1.2]
        value_shift = (1.0, -1.0)[i % 2]  # stored values far from the network's: value clipping binds
        plain.states.append(state)
        plain.actions.append({h: int(v[0]) for h, v in actions.items()})
        plain.masks.append({h: u[0] for h, u in used.items()})
        plain.log_probs.append(float(log_probs[0] + logp_shift))
        plain.values.append(float(values[0] + value_shift))
        plain.rewards.append(float(torch.randn((), generator=g)))
        plain.dones.append(t == N // 2 - 1)
        plain.envs.append(env)
    steps = N // 2
    buffer = RolloutBuffer(steps, 2, D, SIZES["blueprint"])
    for t in range(steps):
        rows = [t, steps + t]  # env 0's and env 1's step t
        buffer.add(t, PolicyStep(
            raw=torch.stack([plain.states[i] for i in rows]), states=torch.stack([plain.states[i] for i in rows]),
            actions={h: torch.tensor([plain.actions[i][h] for i in rows]) for h in HEADS},
            log_probs=torch.tensor([plain.log_probs[i] for i in rows]),
            values=torch.tensor([plain.values[i] for i in rows]),
            masks={h: torch.stack([plain.masks[i][h] for i in rows]) for h in HEADS}, decisions=[]))
        buffer.credit(t, [0, 1], [plain.rewards[i] for i in rows], [plain.dones[i] for i in rows])
    return buffer, plain


def _gae(rewards: list[float], values: list[float], dones: list[bool], gamma: float, lam: float) -> list[float]:
    advantages = [0.0] * len(rewards)
    next_value, next_adv = 0.0, 0.0
    for t in reversed(range(len(rewards))):
        if dones[t]:
            next_value, next_adv = 0.0, 0.0
        delta = rewards[t] + gamma * next_value - values[t]
        advantages[t] = delta + gamma * lam * next_adv
        next_value, next_adv = values[t], advantages[t]
    return advantages


def _masked_log_softmax(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return F.log_softmax(logits.masked_fill(~mask, torch.finfo(logits.dtype).min), dim=-1)


def _reference(agent: PPOAgent, plain: _Plain, network: torch.nn.Module, generator: torch.Generator,
               clip_bounds: tuple[float, float] | None = None) -> dict[str, object]:
    """The update written out plainly; returns the final network parameters and the per-minibatch records.

    `clip_bounds` replaces (1 − ε, 1 + ε), to show that a wrong bound would be caught.
    """
    c = agent.config
    low, high = clip_bounds or (1 - c.clip_ratio, 1 + c.clip_ratio)
    n = len(plain.states)  # env-major order, the index space of the minibatches
    advantages: list[float] = []
    for env in sorted(set(plain.envs)):
        rows = [i for i in range(n) if plain.envs[i] == env]
        advantages += _gae([plain.rewards[i] for i in rows], [plain.values[i] for i in rows],
                           [plain.dones[i] for i in rows], GAMMA, c.gae_lambda)
    adv = torch.tensor(advantages)
    old_values = torch.tensor(plain.values)
    returns = adv + old_values
    states = torch.stack(plain.states)
    actions = {h: torch.tensor([a[h] for a in plain.actions]) for h in HEADS}
    masks = {h: torch.stack([m[h] for m in plain.masks]) for h in HEADS}
    old_logp = torch.tensor(plain.log_probs)
    optimizer = torch.optim.Adam(network.parameters(), lr=c.lr, eps=1e-5)
    records = []
    for _epoch in range(c.n_epochs):
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, c.minibatch_size):
            idx = order[start:start + c.minibatch_size]
            logits, new_values = network(states[idx])
            op = actions["op"][idx]
            relevant = {"op": torch.ones_like(op, dtype=torch.bool), "slot": op != 0, "blueprint": op == 1,
                        "blend": op == 1}
            logp = torch.zeros(len(idx))
            entropy = torch.zeros(len(idx))
            for h in HEADS:
                log_all = _masked_log_softmax(logits[h], masks[h][idx])
                chosen = log_all.gather(1, actions[h][idx].unsqueeze(1)).squeeze(1)
                n_valid = masks[h][idx].sum(1)
                h_raw = -(log_all.exp() * log_all).masked_fill(~masks[h][idx], 0.0).sum(1)
                h_norm = torch.where(n_valid > 1, h_raw / torch.log(n_valid.clamp(min=2).float()), 0.0)
                logp = logp + torch.where(relevant[h], chosen, 0.0)
                entropy = entropy + torch.where(relevant[h], h_norm, 0.0)
            ratio = torch.exp(logp - old_logp[idx])
            a = adv[idx]
            a = (a - a.mean()) / (a.std() + 1e-8)
            surrogate = torch.min(ratio * a, torch.clamp(ratio, low, high) * a)
            policy_loss = -surrogate.mean()
            assert c.value_clip is not None
            v_clip = old_values[idx] + torch.clamp(new_values - old_values[idx], -c.value_clip, c.value_clip)
            value_loss = 0.5 * torch.max((new_values - returns[idx]) ** 2, (v_clip - returns[idx]) ** 2).mean()
            loss = policy_loss + c.value_coef * value_loss - c.entropy_coef * entropy.mean()
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(network.parameters(), c.max_grad_norm)
            optimizer.step()
            with torch.no_grad():
                log_ratio = logp - old_logp[idx]
                kl = float(((log_ratio.exp() - 1) - log_ratio).mean())
                clipped = float(((ratio - 1).abs() > c.clip_ratio).float().mean())
            records.append({"policy_loss": float(policy_loss.detach()), "value_loss": float(value_loss.detach()),
                            "entropy": float(entropy.mean().detach()), "approx_kl": kl, "clip_fraction": clipped})
            if c.target_kl is not None and kl > 1.5 * c.target_kl:
                return {"params": list(network.parameters()), "records": records, "stopped": _epoch + 1}
    return {"params": list(network.parameters()), "records": records, "stopped": None}


def _run_both(config: PPOConfig, clip_bounds: tuple[float, float] | None = None
              ) -> tuple[PPOAgent, dict[str, object], dict[str, object]]:
    torch.manual_seed(0)
    agent = PPOAgent(config, seed=SEED, state_dim=D, space=get_task_spec("synthetic").action_space)
    buffer, plain = _rollout(agent)
    network = copy.deepcopy(agent.network)
    generator = torch.Generator()
    generator.set_state(agent.minibatch_generator.get_state())
    reference = _reference(agent, plain, network, generator, clip_bounds)
    metrics = agent.update(buffer, *buffer.advantages("gae", GAMMA, config.gae_lambda, config.group_size))
    return agent, metrics, reference


def _mean(records: list[dict[str, float]], key: str) -> float:
    return sum(r[key] for r in records) / len(records)


def _max_param_difference(agent: PPOAgent, reference: dict[str, object]) -> float:
    params = reference["params"]
    assert isinstance(params, list)
    return max(float((p - q).detach().abs().max()) for p, q in zip(agent.network.parameters(), params, strict=True))


@pytest.mark.parametrize("target_kl", [None, 0.02])
def test_update_matches_the_plain_reference(target_kl: float | None) -> None:
    agent, metrics, reference = _run_both(_config(target_kl=target_kl))
    records = reference["records"]
    assert isinstance(records, list)
    assert metrics["n_minibatch_updates"] == len(records)
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"):
        assert metrics[key] == pytest.approx(_mean(records, key), abs=1e-6), key
    assert _max_param_difference(agent, reference) < 1e-6
    if target_kl is None:
        assert "early_stopped" not in metrics and reference["stopped"] is None
        assert len(records) == 3 * math.ceil(N / 8)
    else:  # the stop must fall inside the update, not at its natural end
        assert metrics["early_stopped"] == 1.0 and metrics["early_stop_epoch"] == reference["stopped"]
        assert len(records) < 3 * math.ceil(N / 8)


@pytest.mark.parametrize("bounds", [(0.8, 1.4), (0.6, 1.2)], ids=["upper-doubled", "lower-doubled"])
def test_a_wrong_clip_bound_would_be_caught(bounds: tuple[float, float]) -> None:
    """The rollout makes both clip bounds bind, so either one moved changes the update far beyond 1e-6."""
    agent, metrics, reference = _run_both(_config(), clip_bounds=bounds)
    assert metrics["ratio_max"] > 1.2 and metrics["ratio_min"] < 0.8
    assert _max_param_difference(agent, reference) > 1e-4
