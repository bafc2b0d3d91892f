"""Random and heuristic controllers only propose actions valid under `compute_action_validity`."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from esper.leyline import CANONICAL_SLOTS, EnvObservation, LifecycleOp, SeedStage, SeedStateReport
from esper.tamiyo import HeuristicPolicyConfig, HeuristicTamiyo, RandomPolicy, TamiyoPolicy, check_decision
from unit.tamiyo.helpers import make_obs, make_report

PRESENT_STAGES = (
    SeedStage.GERMINATED,
    SeedStage.TRAINING,
    SeedStage.BLENDING,
    SeedStage.PROBATIONARY,
    SeedStage.FOSSILIZED,
)
# Small configs make every rule reachable in short random sequences.
EAGER = HeuristicPolicyConfig(
    min_epochs_before_germinate=1,
    plateau_epochs_to_germinate=0,
    min_epochs_between_germinations=0,
    stall_training_epochs=3,
    max_concurrent_seeds=2,
)


def _random_report(draw: Callable[[Any], Any], slot: str) -> SeedStateReport:
    """Any lifecycle state a slot can report: stage, ages, contributions, improvement, health."""
    epochs_in_stage = draw(st.integers(0, 15))
    return make_report(
        slot,
        draw(st.sampled_from(PRESENT_STAGES)),
        seed_id=f"s{draw(st.integers(0, 3))}-{slot}",
        blueprint_id=draw(st.sampled_from(["conv_light", "conv_heavy", "norm", "lora"])),
        epochs_in_stage=epochs_in_stage,
        epochs_total=epochs_in_stage + draw(st.integers(0, 5)),
        counterfactual=draw(st.none() | st.floats(-5.0, 5.0)),
        improvement=draw(st.floats(-6.0, 6.0)),
        healthy=draw(st.booleans()),
    )


@st.composite
def observations(draw: Callable[[Any], Any], topology: str, epoch: int) -> EnvObservation:
    enabled = draw(st.lists(st.sampled_from(CANONICAL_SLOTS), min_size=1, max_size=3, unique=True))
    reports = [_random_report(draw, s) for s in enabled if draw(st.booleans())]
    return make_obs(
        reports,
        enabled=enabled,
        epoch=epoch,
        plateau=draw(st.integers(0, 6)),
        stabilized=draw(st.booleans()),
        max_seeds=draw(st.integers(0, 4)),
        topology=topology,
    )


@st.composite
def episodes(draw: Callable[[Any], Any]) -> tuple[str, list[EnvObservation]]:
    """A short sequence of unrelated random states, so stateful rules (embargo, penalties) also get exercised."""
    topology = draw(st.sampled_from(["cnn", "transformer"]))
    length = draw(st.integers(1, 8))
    return topology, [draw(observations(topology, epoch)) for epoch in range(1, length + 1)]


def _check_all(policy: TamiyoPolicy, observations: list[EnvObservation]) -> None:
    for obs in observations:
        check_decision(policy.decide(obs), obs)


@given(episodes(), st.integers(0, 2**31 - 1))
def test_random_policy_decisions_are_valid(episode: tuple[str, list[EnvObservation]], seed: int) -> None:
    _check_all(RandomPolicy(seed), episode[1])


@given(episodes(), st.sampled_from([None, EAGER]))
def test_heuristic_decisions_are_valid(
    episode: tuple[str, list[EnvObservation]], config: HeuristicPolicyConfig | None
) -> None:
    topology, observations = episode
    _check_all(HeuristicTamiyo(config, topology=topology), observations)


def _seeded_states(rng: random.Random, topology: str, epoch: int) -> EnvObservation:
    enabled = [s for s in CANONICAL_SLOTS if rng.random() < 0.7] or [rng.choice(CANONICAL_SLOTS)]
    reports = []
    for slot in enabled:
        if rng.random() < 0.5:
            eis = rng.randint(0, 15)
            reports.append(
                make_report(
                    slot,
                    rng.choice(PRESENT_STAGES),
                    seed_id=f"s{epoch}-{slot}",
                    epochs_in_stage=eis,
                    epochs_total=eis + rng.randint(0, 3),
                    counterfactual=None if rng.random() < 0.3 else rng.uniform(-3.0, 4.0),
                    improvement=rng.uniform(-5.0, 3.0),
                    healthy=rng.random() < 0.9,
                )
            )
    return make_obs(
        reports,
        enabled=enabled,
        epoch=epoch,
        plateau=rng.randint(0, 6),
        stabilized=rng.random() < 0.7,
        max_seeds=rng.randint(0, 4),
        topology=topology,
    )


def test_seeded_five_thousand_states() -> None:
    """5,000 random states through both controllers; every op must occur so the check is not vacuous."""
    rng = random.Random(1234)
    ops: dict[str, Counter[LifecycleOp]] = {"random": Counter(), "heuristic": Counter()}
    for episode in range(200):
        topology = "cnn" if episode % 2 else "transformer"
        policies: dict[str, TamiyoPolicy] = {
            "random": RandomPolicy(episode),
            "heuristic": HeuristicTamiyo(topology=topology),
        }
        for epoch in range(1, 26):
            obs = _seeded_states(rng, topology, epoch)
            for name, policy in policies.items():
                decision = policy.decide(obs)
                check_decision(decision, obs)
                ops[name][decision.command.op] += 1
    for counts in ops.values():
        assert set(counts) == set(LifecycleOp), counts
