"""Off-policy evaluation: what a controller would score, estimated from episodes other policies logged.

Two estimators with different failure modes, reported side by side with the behaviour policies' own returns:

* **PDWIS** (per-decision weighted importance sampling) reweights each logged reward by how much more (or less)
  likely the target policy was to take the logged actions up to that decision. Unbiased in the limit and
  model-free, but it only sees episodes whose actions the target would also take: a deterministic target gets
  weight from matching episodes alone (the effective sample size says how many).
* **FQE** (fitted-Q evaluation) regresses Q^π(s, a) onto r + γ·(1 − done)·Σ_a' π(a'|s')·Q^π(s', a') and averages
  Σ_a π(a|s₀)·Q^π(s₀, a) over the logged initial states. It uses every transition but inherits the network's bias.

Confidence intervals come from a seeded bootstrap over whole episodes (decisions within an episode are dependent).
FQE's bootstrap fits one Q-network per resample, all trained side by side as one batched network, so its interval
includes the fitting noise, not just the spread of initial states.

A target policy is any function `(states, valid) -> probabilities`: states are the **raw** features as stored in
the dataset (each controller applies its own input scaling), valid the [n, J] joint-action masks, and the result
[n, J] probabilities that sum to 1 over the valid actions (one-hot for a deterministic controller).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, ClassVar

import torch
from pydantic import ConfigDict, Field, StrictFloat, StrictInt

from esper.datagen.transitions import TransitionDataset
from esper.evaluation.stats import bootstrap_counts, percentile_interval
from esper.execution.devices import resolve_device
from esper.leyline.seeding import MAX_BASE_SEED, derive_seed
from esper.leyline.strict_config import BatchSize, StrictConfig
from esper.simic.iql.iql import FeatureScaler

__all__ = ["OPEConfig", "OPEEstimate", "OfflineEvaluation", "ReturnSummary", "TargetPolicy", "behavior_returns",
           "episode_returns", "evaluate_offline", "fqe", "pdwis", "target_probabilities"]

MAX_STEPS = 10**6
Width = Annotated[StrictInt, Field(ge=4, le=4096)]

TargetPolicy = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(raw states [n, F] float32, valid [n, J] bool), both on CPU → action probabilities [n, J] (F features and J joint
actions of the dataset's action space: 80 and 43 for the built-in blueprints)."""


class OPEConfig(StrictConfig):
    """Settings of one offline evaluation; `gamma` discounts every estimate and the discounted returns."""

    model_config = ConfigDict(frozen=True)
    KIND: ClassVar[str] = "OPE config"

    gamma: StrictFloat = Field(default=1.0, gt=0.0, le=1.0,
                               description="discount of the estimated return (1: the undiscounted gap return `esper "
                                           "compare` measures live)")
    confidence: StrictFloat = Field(default=0.95, ge=0.5, lt=1.0, description="coverage of the bootstrap intervals")
    n_bootstrap: StrictInt = Field(default=1000, ge=10, le=100_000, description="bootstrap resamples of episodes")
    seed: StrictInt = Field(default=0, ge=0, le=MAX_BASE_SEED, description="seed of the resamples and the Q-networks")
    fqe_bootstrap: StrictInt = Field(default=20, ge=2, le=1000, description="fitted-Q resamples, one Q-network each")
    fqe_iterations: StrictInt = Field(default=40, ge=1, le=MAX_STEPS, description="fitted-Q regression rounds")
    fqe_steps_per_iteration: StrictInt = Field(default=100, ge=1, le=MAX_STEPS, description="gradient steps per round")
    fqe_batch_size: BatchSize = Field(default=128, description="transitions per fitted-Q step")
    fqe_lr: StrictFloat = Field(default=1e-3, gt=0.0, le=1.0, description="fitted-Q learning rate")
    fqe_hidden_sizes: tuple[Width, ...] = Field(default=(64, 64), min_length=1, max_length=4,
                                                description="layer widths of the Q-networks")
    device: str = Field(default="auto", description="'auto', 'cpu' or 'cuda:N'")


@dataclass(frozen=True)
class OPEEstimate:
    """A policy value estimate with its bootstrap interval; `details` holds estimator diagnostics."""

    method: str
    value: float
    ci_low: float
    ci_high: float
    confidence: float
    gamma: float
    n_episodes: int
    details: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ReturnSummary:
    """Empirical returns of the episodes one behaviour policy logged ("all": every episode)."""

    policy: str
    n_episodes: int
    mean_return: float
    return_ci: tuple[float, float]
    mean_discounted_return: float
    discounted_return_ci: tuple[float, float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class OfflineEvaluation:
    pdwis: OPEEstimate
    fqe: OPEEstimate
    behavior: list[ReturnSummary]

    def to_dict(self) -> dict[str, Any]:
        return {"pdwis": self.pdwis.to_dict(), "fqe": self.fqe.to_dict(),
                "behavior": [b.to_dict() for b in self.behavior]}


def evaluate_offline(dataset: TransitionDataset, target: TargetPolicy, config: OPEConfig,
                     progress: Callable[[str, int, int], None] | None = None) -> OfflineEvaluation:
    """Both estimates of `target`'s value, next to the behaviour policies' empirical returns; `progress(phase,
    done, total)` follows fitted-Q evaluation, the long part, round by round."""
    return OfflineEvaluation(pdwis(dataset, target, config), fqe(dataset, target, config, progress),
                             behavior_returns(dataset, config))


# ------------------------------------------------------------------------------------------------------- helpers
def target_probabilities(target: TargetPolicy, states: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Call a target policy and check its answer: a distribution over the valid actions of each row (float64)."""
    probs = target(states.cpu(), valid.cpu())
    if tuple(probs.shape) != tuple(valid.shape):
        raise ValueError(f"The target policy returned shape {tuple(probs.shape)}, expected {tuple(valid.shape)}")
    probs = probs.detach().to("cpu", torch.float64)
    valid = valid.cpu()
    if not bool(torch.isfinite(probs).all()) or bool((probs < 0).any()):
        raise ValueError("The target policy returned negative or non-finite probabilities")
    if bool(probs.masked_select(~valid).gt(1e-6).any()):
        raise ValueError("The target policy puts probability on invalid actions; mask its choices with `valid`")
    if not bool(torch.allclose(probs.sum(1), torch.ones(len(probs), dtype=torch.float64), atol=1e-4)):
        raise ValueError("The target policy's probabilities do not sum to 1 in every row")
    return probs


def episode_returns(dataset: TransitionDataset, gamma: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(episode ids, undiscounted returns, γ-discounted returns) per episode, in episode-id order (float64)."""
    index = dataset.episode_index()
    rewards = torch.where(index.rows >= 0, dataset.rewards.cpu().double()[index.rows.clamp(min=0)], 0.0)
    discounts = gamma ** torch.arange(rewards.shape[1], dtype=torch.float64)
    return index.episode_ids, rewards.sum(1), (rewards * discounts).sum(1)


def behavior_returns(dataset: TransitionDataset, config: OPEConfig) -> list[ReturnSummary]:
    """Mean returns (with bootstrap CIs) of all episodes, then of each behaviour policy's episodes."""
    ids, plain, discounted = episode_returns(dataset, config.gamma)
    groups: dict[str, torch.Tensor] = {"all": torch.ones(len(ids), dtype=torch.bool)}
    labels = [dataset.behavior_policies.get(int(i), "") for i in ids.tolist()]
    for name in sorted(set(labels) - {""}):
        groups[name] = torch.tensor([label == name for label in labels])
    summaries = []
    for name, members in groups.items():
        counts = bootstrap_counts(int(members.sum()), config.n_bootstrap, derive_seed(config.seed, "returns", name))
        means = [counts @ x[members] / counts.sum(1) for x in (plain, discounted)]
        summaries.append(ReturnSummary(name, int(members.sum()), float(means[0][0]), percentile_interval(means[0][1:],
                                       config.confidence), float(means[1][0]), percentile_interval(means[1][1:],
                                       config.confidence)))
    return summaries


# ---------------------------------------------------------------------------------------------------------- PDWIS
def pdwis(dataset: TransitionDataset, target: TargetPolicy, config: OPEConfig) -> OPEEstimate:
    """Per-decision weighted importance sampling with the logged behaviour probabilities.

    The reward of decision t is weighted by the product of π/b ratios of decisions 0 … t and normalized by the
    sum of those weights over episodes. An episode that has ended keeps its last weight and earns nothing more,
    so episodes of different lengths share the normalizers.
    """
    index = dataset.episode_index()
    present, rows = index.rows >= 0, index.rows.clamp(min=0)
    probs = target_probabilities(target, dataset.states, dataset.valid)
    ratio = probs.gather(1, dataset.actions.cpu().unsqueeze(1)).squeeze(1) / dataset.behavior_logp.cpu().double().exp()
    weights = torch.cumprod(torch.where(present, ratio[rows], 1.0), dim=1)  # [E, T]
    rewards = torch.where(present, dataset.rewards.cpu().double()[rows], 0.0)
    discounts = config.gamma ** torch.arange(rewards.shape[1], dtype=torch.float64)
    counts = bootstrap_counts(len(index.episode_ids), config.n_bootstrap, derive_seed(config.seed, "pdwis"))
    values = (discounts * (counts @ (weights * rewards)) / (counts @ weights)).sum(1)  # 0/0 → NaN: no support
    final = weights[:, -1]
    if not math.isfinite(float(values[0])):
        # No logged episode has positive probability under the target at every decision: importance sampling
        # has no support here, which is itself the finding to report (FQE still estimates).
        return OPEEstimate("pdwis", math.nan, math.nan, math.nan, config.confidence, config.gamma,
                           len(index.episode_ids), {"ess": 0.0, "matched_episodes": 0.0,
                                                    "undefined_resamples": 1.0})
    low, high = percentile_interval(values[1:], config.confidence)
    details = {"ess": float(final.sum() ** 2 / final.square().sum()), "matched_episodes": float((final > 0).sum()),
               "undefined_resamples": float((~torch.isfinite(values[1:])).double().mean())}
    return OPEEstimate("pdwis", float(values[0]), low, high, config.confidence, config.gamma,
                       len(index.episode_ids), details)


# ------------------------------------------------------------------------------------------------------------ FQE
class _BatchedMLP(torch.nn.Module):
    """H independent MLPs evaluated in one batched matmul per layer: x [H, n, in] → [H, n, out]."""

    def __init__(self, heads: int, sizes: list[int], generator: torch.Generator) -> None:
        super().__init__()
        self.weights = torch.nn.ParameterList()
        self.biases = torch.nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(sizes):
            bound = 1.0 / math.sqrt(fan_in)  # the default Linear initialization scale
            self.weights.append(torch.nn.Parameter((torch.rand(heads, fan_in, fan_out, generator=generator) * 2 - 1)
                                                   * bound))
            self.biases.append(torch.nn.Parameter((torch.rand(heads, 1, fan_out, generator=generator) * 2 - 1)
                                                  * bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = torch.baddbmm(b, x, w)
            x = x if i == last else torch.relu(x)
        return x


@torch.no_grad()
def _policy_values(q: _BatchedMLP, states: torch.Tensor, probs: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """Σ_a π(a|s)·Q_h(s, a) for every head h and row: [H, N], computed in row chunks to bound memory."""
    heads = q.weights[0].shape[0]
    parts = [(q(states[i:i + chunk].unsqueeze(0).expand(heads, -1, -1)) * probs[i:i + chunk]).sum(-1)
             for i in range(0, len(states), chunk)]
    return torch.cat(parts, dim=1)


def fqe(dataset: TransitionDataset, target: TargetPolicy, config: OPEConfig,
        progress: Callable[[str, int, int], None] | None = None) -> OPEEstimate:
    """Fitted-Q evaluation: one Q-network on the data and one per episode resample, for the interval.

    Each of `fqe_iterations` rounds freezes a copy of the networks and takes `fqe_steps_per_iteration` Adam steps
    towards r + γ·(1 − done)·Σ_a' π(a'|s')·Q_frozen(s', a'); a network samples only its own resample's transitions.
    """
    device = resolve_device(config.device)
    index = dataset.episode_index()
    heads = 1 + config.fqe_bootstrap
    counts = bootstrap_counts(len(index.episode_ids), config.fqe_bootstrap, derive_seed(config.seed, "fqe"))
    # Each head's pool of rows: every row of every resampled episode, as often as the episode was drawn.
    row_counts = torch.zeros(heads, len(dataset), dtype=torch.long)
    row_counts[:, index.rows[index.rows >= 0]] = counts.long().repeat_interleave(index.lengths, dim=1)
    pools = [torch.repeat_interleave(torch.arange(len(dataset)), c) for c in row_counts]
    sizes = torch.tensor([len(p) for p in pools], device=device)
    pool = torch.nn.utils.rnn.pad_sequence(pools, batch_first=True).to(device)

    data = dataset.to(device)
    scaler = FeatureScaler.from_states(data.states)
    states, next_states = scaler(data.states), scaler(data.next_states)
    live = ~dataset.dones.cpu()
    next_probs = torch.zeros(len(dataset), dataset.valid.shape[1], dtype=torch.float64)
    if bool(live.any()):  # terminal rows never bootstrap, and their next masks may be empty
        next_probs[live] = target_probabilities(target, dataset.next_states[live.to(dataset.device)],
                                                dataset.next_valid[live.to(dataset.device)])
    next_probs_d = next_probs.float().to(device)
    not_done = (~data.dones).float()

    g = torch.Generator().manual_seed(derive_seed(config.seed, "fqe-init"))
    q = _BatchedMLP(heads, [dataset.state_dim, *config.fqe_hidden_sizes, dataset.valid.shape[1]], g).to(device)
    frozen = _BatchedMLP(heads, [dataset.state_dim, *config.fqe_hidden_sizes, dataset.valid.shape[1]], g).to(device)
    frozen.requires_grad_(False)
    optimizer = torch.optim.Adam(q.parameters(), lr=config.fqe_lr)
    losses = torch.zeros((), device=device)
    for iteration in range(config.fqe_iterations):
        if progress is not None:
            progress("fitted-Q evaluation", iteration, config.fqe_iterations)
        frozen.load_state_dict(q.state_dict())
        next_v = _policy_values(frozen, next_states, next_probs_d)  # [H, N], fixed for the whole round
        targets = data.rewards + config.gamma * not_done * next_v
        losses = torch.zeros((), device=device)
        for _ in range(config.fqe_steps_per_iteration):
            u = torch.rand(heads, config.fqe_batch_size, generator=g).to(device)
            rows = pool.gather(1, (u * sizes.unsqueeze(1)).long().clamp(max=pool.shape[1] - 1))  # [H, n]
            pred = q(states[rows]).gather(-1, data.actions[rows].unsqueeze(-1)).squeeze(-1)
            loss = (pred - targets.gather(1, rows)).square().mean(dim=1).sum()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses = losses + loss.detach()
    if progress is not None:
        progress("fitted-Q evaluation", config.fqe_iterations, config.fqe_iterations)
    first = index.first_rows
    start_probs = target_probabilities(target, dataset.states[first.to(dataset.device)],
                                       dataset.valid[first.to(dataset.device)])
    start_values = _policy_values(q, states[first.to(device)], start_probs.float().to(device)).double().cpu()
    values = (counts * start_values).sum(1) / counts.sum(1)
    if not bool(torch.isfinite(values).all()):
        raise FloatingPointError("FQE diverged (non-finite Q-values); lower fqe_lr or gamma")
    low, high = percentile_interval(values[1:], config.confidence)
    details = {"final_td_loss": float(losses) / (heads * config.fqe_steps_per_iteration)}
    return OPEEstimate("fqe", float(values[0]), low, high, config.confidence, config.gamma,
                       len(index.episode_ids), details)
