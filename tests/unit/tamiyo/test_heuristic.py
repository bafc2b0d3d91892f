"""HeuristicTamiyo."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import pytest

from esper.leyline import UNRECORDED_HEADS, EnvObservation, LifecycleOp, SeedStage, SeedStateReport
from esper.tamiyo import HeuristicPolicyConfig, HeuristicTamiyo, TamiyoDecision, TamiyoPolicy, check_decision
from unit.tamiyo.helpers import make_obs, make_report

TRAINING, BLENDING, PROBATIONARY = SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY


def _ready(reports: Iterable[SeedStateReport] = (), *, epoch: int = 10, **kwargs: Any) -> EnvObservation:
    """An observation where every germination timing condition holds (plateau 3, epoch 10 of a 50-epoch episode)."""
    kwargs.setdefault("plateau", 3)
    kwargs.setdefault("max_epochs", 50)
    return make_obs(reports, epoch=epoch, **kwargs)


def _with_losses(obs: EnvObservation, *losses: float) -> EnvObservation:
    """`obs` with the given recent validation losses (oldest first) as its loss history."""
    return dataclasses.replace(obs, signals=dataclasses.replace(obs.signals, loss_history=losses))


def _decide(policy: HeuristicTamiyo, obs: EnvObservation) -> TamiyoDecision:
    decision = policy.decide(obs)
    check_decision(decision, obs)
    assert decision.reason
    return decision


def _describe(policy: HeuristicTamiyo, obs: EnvObservation) -> str:
    return _decide(policy, obs).command.describe()


def _stalled(slot: str, blueprint_id: str = "conv_light", **kwargs: Any) -> SeedStateReport:
    """A TRAINING seed that meets cull rule (b) with default thresholds."""
    return make_report(slot, TRAINING, blueprint_id=blueprint_id, epochs_in_stage=10, **kwargs)


def _heuristic(topology: str = "cnn", **config: Any) -> HeuristicTamiyo:
    return HeuristicTamiyo(HeuristicPolicyConfig(**config), topology=topology)


# -- configuration ------------------------------------------------------------------------------------------------


def test_config_defaults_follow_the_design() -> None:
    cfg = HeuristicPolicyConfig()
    assert cfg.model_dump() == {
        "min_epochs_before_germinate": 2,
        "plateau_epochs_to_germinate": 3,
        "min_epochs_between_germinations": 3,
        "seed_training_epochs": 3,
        "seed_blending_epochs": 5,
        "cull_after_epochs_without_improvement": 5,
        "cull_if_accuracy_drops_by": 2.0,
        "stall_training_epochs": 10,
        "embargo_epochs_after_cull": 5,
        "max_concurrent_seeds": None,
        "blend_id": "sigmoid",
        "blueprint_rotation": {
            "cnn": ("conv_light", "conv_heavy", "attention", "norm", "depthwise"),
            "transformer": ("norm", "mlp", "attention", "lora"),
        },
        "blueprint_penalty_on_cull": 2.0,
        "blueprint_penalty_decay": 0.5,
        "blueprint_penalty_threshold": 3.0,
    }


@pytest.mark.parametrize(
    "bad",
    [
        {"blend_id": "cosine"},
        {"blueprint_rotation": {"cnn": ()}},
        {"blueprint_rotation": {"cnn": ("noop", "norm")}},
        {"blueprint_rotation": {"cnn": ("norm", "norm")}},
        {"max_concurrent_seeds": 0},
        {"blueprint_penalty_decay": 1.0},
        {"seed_training_epochs": 0},
        {"seed_blending_epochs": 0},
    ],
)
def test_config_rejects_invalid_values(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        HeuristicPolicyConfig(**bad)


def test_topology_is_checked() -> None:
    with pytest.raises(ValueError, match="No blueprint rotation configured for topology 'rnn'"):
        HeuristicTamiyo(topology="rnn")
    with pytest.raises(ValueError, match="No blueprint rotation"):
        _heuristic(blueprint_rotation={"cnn": ("norm",)}, topology="transformer")
    with pytest.raises(ValueError, match="got a 'transformer' observation"):
        HeuristicTamiyo(topology="cnn").decide(_ready(topology="transformer"))
    assert isinstance(HeuristicTamiyo(topology="cnn"), TamiyoPolicy)


# -- waiting and germination --------------------------------------------------------------------------------------


def test_wait_reasons() -> None:
    policy = HeuristicTamiyo(topology="cnn")
    assert _decide(policy, make_obs()).reason == "Training progressing normally"
    assert _decide(policy, make_obs([make_report("mid", TRAINING)])).reason == "Seeds progressing normally"
    fossil_only = make_obs([make_report("mid", SeedStage.FOSSILIZED)])
    assert _decide(policy, fossil_only).reason == "Training progressing normally"


def test_germinates_first_free_slot_with_configured_blend() -> None:
    decision = _decide(HeuristicTamiyo(topology="cnn"), _ready())
    assert decision.command.describe() == "GERMINATE early conv_light/sigmoid"
    assert decision.factored is not None and decision.factored.is_germinate
    assert decision.reason == "Germinating conv_light in early: plateau of 3 epochs"
    assert decision.confidence == 1.0


@pytest.mark.parametrize(
    ("epoch", "losses", "plateau", "config", "germinates"),
    [
        (2, (2.4, 2.3), 0, {}, True),  # the host learns: germinate at the earliest allowed epoch
        (1, (2.4,), 0, {}, False),  # one epoch shows no progress yet
        (1, (2.4,), 3, {"min_epochs_before_germinate": 1}, True),
        (2, (2.4, 2.5), 0, {}, False),  # the loss has not come down
        (2, (2.4, 2.4), 0, {}, False),
        (5, (2.4, 2.6, 2.5, 2.45, 2.39), 0, {}, True),  # any recent loss below the oldest one counts
        (4, (2.4, 2.6, 2.5, 2.45), 2, {}, False),  # nor learning, nor a 3-epoch plateau
        (4, (2.4, 2.6, 2.5, 2.45), 3, {}, True),  # a short plateau: the host has stalled
        (4, (2.4, 2.6, 2.5, 2.45), 2, {"plateau_epochs_to_germinate": 2}, True),
        (2, (2.4, 2.3), 0, {"min_epochs_before_germinate": 3}, False),
    ],
)
def test_germinates_early_once_the_host_learns_or_stalls(
    epoch: int, losses: tuple[float, ...], plateau: int, config: dict[str, Any], germinates: bool
) -> None:
    obs = _with_losses(make_obs(epoch=epoch, plateau=plateau), *losses)
    decision = _decide(_heuristic(**config), obs)
    assert (decision.command.op == LifecycleOp.GERMINATE) is germinates


def test_germination_reason_names_the_trigger() -> None:
    learning = _with_losses(make_obs(epoch=2), 2.4, 2.3)
    assert _decide(HeuristicTamiyo(topology="cnn"), learning).reason == (
        "Germinating conv_light in early: host learning (val loss 2.400 -> 2.300)"
    )


@pytest.mark.parametrize(
    ("config", "max_epochs", "latest"),
    [
        ({}, 25, 15),  # 1 + 3 TRAINING + 5 BLENDING decisions, then the first PROBATIONARY one at epoch 24
        ({"seed_training_epochs": 5}, 25, 13),  # the LM tasks train seeds 5 epochs
        ({"seed_blending_epochs": 3}, 25, 17),
        ({}, 40, 30),
        ({}, 12, 2),  # one lifecycle fits, from the earliest allowed epoch
    ],
)
def test_latest_germination_epoch_leaves_room_for_the_lifecycle(
    config: dict[str, Any], max_epochs: int, latest: int
) -> None:
    assert _heuristic(**config).latest_germination_epoch(max_epochs) == latest

    def decision(epoch: int) -> str:
        return _describe(_heuristic(**config), _ready(epoch=epoch, max_epochs=max_epochs))

    assert decision(latest).startswith("GERMINATE")
    assert [decision(e) for e in range(latest + 1, max_epochs)] == ["WAIT"] * (max_epochs - latest - 1)


def test_an_episode_too_short_for_a_lifecycle_never_germinates() -> None:
    assert HeuristicTamiyo(topology="cnn").latest_germination_epoch(10) == 0
    assert {_describe(HeuristicTamiyo(topology="cnn"), _ready(epoch=e, max_epochs=10)) for e in range(1, 10)} == {
        "WAIT"
    }


def test_never_germinates_after_the_latest_useful_epoch_even_when_a_slot_reopens() -> None:
    policy = HeuristicTamiyo(topology="cnn")
    slots, mid = ["early", "mid"], make_report("mid", TRAINING)
    assert _describe(policy, make_obs([_stalled("early"), mid], epoch=12, enabled=slots)) == "CULL early"
    assert policy.embargoed_slots(17) == ("early",) and policy.embargoed_slots(18) == ()
    decisions = [_describe(policy, _ready([mid], epoch=e, max_epochs=25, enabled=slots)) for e in range(13, 25)]
    assert decisions == ["WAIT"] * 12  # early reopens at 18, after the latest useful epoch (15)
    assert _describe(policy, _ready([mid], epoch=18, max_epochs=40, enabled=slots)).startswith("GERMINATE early")


def test_early_germination_keeps_one_live_seed_per_slot_and_the_embargo() -> None:
    policy = HeuristicTamiyo(topology="cnn")

    def learning(reports: list[SeedStateReport], epoch: int) -> str:
        """The decision at `epoch` of a 25-epoch episode whose host is learning, in slots early and mid."""
        return _describe(policy, _with_losses(make_obs(reports, epoch=epoch, enabled=["early", "mid"]), 2.4, 2.3))

    mid = make_report("mid", TRAINING)
    assert learning([], 2).startswith("GERMINATE early")
    assert learning([make_report("early", TRAINING)], 5).startswith("GERMINATE mid")
    assert learning([make_report("early", TRAINING), mid], 8) == "WAIT"  # every slot holds a live seed
    assert learning([_stalled("early"), mid], 9) == "CULL early"
    assert [learning([mid], e) for e in range(10, 15)] == ["WAIT"] * 5  # early is embargoed through epoch 14
    assert learning([mid], 15).startswith("GERMINATE early")  # the latest useful epoch


def test_min_epochs_between_germinations() -> None:
    policy = HeuristicTamiyo(topology="cnn")
    assert _describe(policy, _ready(epoch=10)).startswith("GERMINATE early")
    seed = make_report("early", TRAINING)
    assert _describe(policy, _ready([seed], epoch=11)) == "WAIT"
    assert _describe(policy, _ready([seed], epoch=12)) == "WAIT"
    assert _describe(policy, _ready([seed], epoch=13)).startswith("GERMINATE mid")


def test_manages_all_slots_in_canonical_order() -> None:
    early = make_report("early", TRAINING)
    assert _describe(HeuristicTamiyo(topology="cnn"), _ready([early])).startswith("GERMINATE mid")
    fossil = make_report("early", SeedStage.FOSSILIZED)
    mid = make_report("mid", BLENDING)
    assert _describe(HeuristicTamiyo(topology="cnn"), _ready([fossil, mid])).startswith("GERMINATE late")
    assert _describe(HeuristicTamiyo(topology="cnn"), _ready(enabled=["late", "mid"])).startswith("GERMINATE mid")
    assert _describe(HeuristicTamiyo(topology="cnn"), _ready([early], enabled=["early"])) == "WAIT"


def test_max_concurrent_seeds_counts_live_seeds_only() -> None:
    two_live = [make_report("early", TRAINING), make_report("mid", BLENDING)]
    assert _describe(_heuristic(max_concurrent_seeds=2), _ready(two_live)) == "WAIT"
    assert _describe(_heuristic(), _ready(two_live)).startswith("GERMINATE late")  # None = number of enabled slots
    assert _describe(_heuristic(max_concurrent_seeds=1), _ready([make_report("early", TRAINING)])) == "WAIT"
    fossil = make_report("early", SeedStage.FOSSILIZED)
    assert _describe(_heuristic(max_concurrent_seeds=1), _ready([fossil])).startswith("GERMINATE mid")


def test_respects_max_seeds_through_validity() -> None:
    fossil = make_report("early", SeedStage.FOSSILIZED)
    assert _describe(HeuristicTamiyo(topology="cnn"), _ready([fossil], max_seeds=1)) == "WAIT"
    assert _describe(HeuristicTamiyo(topology="cnn"), _ready([fossil], max_seeds=2)).startswith("GERMINATE mid")


def test_rotation_walks_the_cnn_blueprints() -> None:
    policy = HeuristicTamiyo(topology="cnn")
    decisions = [_decide(policy, _ready(epoch=10 + 3 * k)) for k in range(6)]
    blueprints = [d.command.blueprint_id for d in decisions]
    assert blueprints == ["conv_light", "conv_heavy", "attention", "norm", "depthwise", "conv_light"]
    assert decisions[1].factored is None  # conv_heavy is outside the policy head; the command is still valid


def test_transformer_topology_uses_transformer_blueprints() -> None:
    policy = HeuristicTamiyo(topology="transformer")
    decisions = [_decide(policy, _ready(epoch=10 + 3 * k, topology="transformer")) for k in range(4)]
    assert [d.command.blueprint_id for d in decisions] == ["norm", "mlp", "attention", "lora"]
    assert all(d.factored is not None and d.command.blueprint_id in UNRECORDED_HEADS["transformer"] for d in decisions)


# -- fossilize and cull -------------------------------------------------------------------------------------------


def test_fossilizes_the_highest_counterfactual_first() -> None:
    reports = [
        make_report("early", PROBATIONARY, counterfactual=2.0),
        make_report("mid", PROBATIONARY, counterfactual=0.5),  # below the G5 threshold: not valid
        make_report("late", PROBATIONARY, counterfactual=5.0),
    ]
    assert _describe(HeuristicTamiyo(topology="cnn"), _ready(reports)) == "FOSSILIZE late"


def test_priorities_fossilize_then_cull_then_germinate() -> None:
    ready = make_report("early", PROBATIONARY, counterfactual=3.0)
    harmful = make_report("mid", PROBATIONARY, counterfactual=-1.0)
    assert _describe(HeuristicTamiyo(topology="cnn"), _ready([ready, harmful])) == "FOSSILIZE early"
    assert _describe(HeuristicTamiyo(topology="cnn"), _ready([harmful])) == "CULL mid"  # germination was possible


@pytest.mark.parametrize(
    ("report", "culled"),
    [
        # (a) sustained drop in TRAINING or BLENDING: epochs_in_stage >= 5 and improvement < -2.0
        (make_report("mid", TRAINING, epochs_in_stage=5, improvement=-2.01), True),
        (make_report("mid", TRAINING, epochs_in_stage=4, improvement=-5.0), False),
        (make_report("mid", TRAINING, epochs_in_stage=5, improvement=-2.0), False),
        (make_report("mid", BLENDING, epochs_in_stage=5, counterfactual=-2.5, improvement=1.0), True),
        (make_report("mid", BLENDING, epochs_in_stage=5, improvement=-3.0), True),  # no counterfactual yet
        (make_report("mid", BLENDING, epochs_in_stage=5, counterfactual=1.0, improvement=-5.0), False),
        # (b) stalled TRAINING: epochs_in_stage >= 10
        (make_report("mid", TRAINING, epochs_in_stage=10), True),
        (make_report("mid", TRAINING, epochs_in_stage=9), False),
        (make_report("mid", BLENDING, epochs_in_stage=10), False),
        # (c) PROBATIONARY with counterfactual <= 0
        (make_report("mid", PROBATIONARY, counterfactual=0.0), True),
        (make_report("mid", PROBATIONARY, counterfactual=0.01), False),
        (make_report("mid", PROBATIONARY, counterfactual=None), False),
    ],
)
def test_cull_rules_and_boundaries(report: SeedStateReport, culled: bool) -> None:
    decision = _decide(HeuristicTamiyo(topology="cnn"), make_obs([report]))
    assert decision.command.describe() == ("CULL mid" if culled else "WAIT")


def test_stall_threshold_is_configurable() -> None:
    report = make_report("mid", TRAINING, epochs_in_stage=6)
    assert _describe(_heuristic(stall_training_epochs=6), make_obs([report])) == "CULL mid"


def test_culls_the_worst_seed_and_breaks_ties_in_canonical_order() -> None:
    reports = [_stalled("early", improvement=-1.0), _stalled("mid", improvement=-4.0), _stalled("late")]
    assert _describe(HeuristicTamiyo(topology="cnn"), make_obs(reports)) == "CULL mid"
    tied = [_stalled("late", improvement=-1.0), _stalled("mid", improvement=-1.0)]
    assert _describe(HeuristicTamiyo(topology="cnn"), make_obs(tied)) == "CULL mid"


def test_never_culls_when_validity_forbids_it() -> None:
    too_young = _stalled("mid", epochs_total=0)  # age below MIN_CULL_AGE
    assert _describe(HeuristicTamiyo(topology="cnn"), make_obs([too_young])) == "WAIT"


# -- embargo and penalties ----------------------------------------------------------------------------------------


def test_cull_embargoes_the_slot_for_five_epochs() -> None:
    policy = HeuristicTamiyo(topology="cnn")
    assert _describe(policy, _ready([_stalled("early")], enabled=["early"])) == "CULL early"
    assert [_describe(policy, _ready(epoch=e, enabled=["early"])) for e in range(11, 16)] == ["WAIT"] * 5
    assert _describe(policy, _ready(epoch=16, enabled=["early"])).startswith("GERMINATE early")


def test_embargo_is_per_slot() -> None:
    policy = HeuristicTamiyo(topology="cnn")
    assert _describe(policy, _ready([_stalled("early")])) == "CULL early"
    assert policy.embargoed_slots(11) == ("early",)
    assert _describe(policy, _ready(epoch=11)).startswith("GERMINATE mid")


def test_seeds_culled_by_kasmina_are_treated_as_culls_at_the_previous_decision() -> None:
    policy = HeuristicTamiyo(topology="cnn")
    waiting = make_report("early", PROBATIONARY, counterfactual=0.5, blueprint_id="norm")
    assert _describe(policy, make_obs([waiting], epoch=10, enabled=["early"])) == "WAIT"
    assert _describe(policy, _ready(epoch=11, enabled=["early"])) == "WAIT"  # vanished: probation timeout
    assert policy.penalties == {"norm": 2.0}  # charged at epoch 10; no germination since, so not decayed
    assert policy.embargoed_slots(15) == ("early",) and policy.embargoed_slots(16) == ()
    fossilized = make_report("early", SeedStage.FOSSILIZED, seed_id="seed-early")
    other = HeuristicTamiyo(topology="cnn")
    _decide(other, make_obs([waiting], epoch=10))
    _decide(other, make_obs([fossilized], epoch=11))
    assert other.penalties == {} and other.embargoed_slots(11) == ()


def test_penalty_decays_by_half_per_germination_and_is_dropped_below_point_one() -> None:
    policy = HeuristicTamiyo(topology="cnn")
    assert _describe(policy, make_obs([_stalled("mid")], epoch=10)) == "CULL mid"
    for epoch in (11, 12):  # epochs without a germination do not decay penalties
        assert _describe(policy, make_obs(epoch=epoch)) == "WAIT"
    history = [policy.penalties]
    for epoch in range(13, 28, 3):
        assert _describe(policy, _ready(epoch=epoch)).startswith("GERMINATE early")
        assert _describe(policy, make_obs(epoch=epoch + 1)) == "WAIT"  # nor does a WAIT between germinations
        history.append(policy.penalties)
    assert history == [
        {"conv_light": 2.0},
        {"conv_light": 1.0},
        {"conv_light": 0.5},
        {"conv_light": 0.25},
        {"conv_light": 0.125},
        {},  # 0.0625 < 0.1 is forgotten
    ]


def test_two_consecutive_culls_of_a_blueprint_reach_the_threshold() -> None:
    policy = HeuristicTamiyo(topology="cnn")
    _decide(policy, make_obs([_stalled("early"), make_report("mid", TRAINING)], epoch=10))
    assert _describe(policy, make_obs([_stalled("mid")], epoch=11)) == "CULL mid"
    assert policy.penalties == {"conv_light": 4.0}  # no germination in between: 2.0 + 2.0 >= 3.0


def test_at_default_config_a_blueprint_culled_twice_between_germinations_is_skipped() -> None:
    # conv_light (rotation head) is culled twice -> 4.0 >= 3.0; conv_heavy once -> 2.0 < 3.0.
    policy = HeuristicTamiyo(topology="cnn")
    late = make_report("late", TRAINING, blueprint_id="conv_heavy")
    assert _describe(policy, make_obs([_stalled("early"), make_report("mid", TRAINING), late], epoch=10)) == (
        "CULL early"
    )
    assert _describe(policy, make_obs([_stalled("mid"), late], epoch=11)) == "CULL mid"
    assert _describe(policy, make_obs([_stalled("late", "conv_heavy")], epoch=12)) == "CULL late"
    assert policy.penalties == {"conv_light": 4.0, "conv_heavy": 2.0}
    assert _describe(policy, _ready(epoch=15)) == "WAIT"  # every slot still embargoed
    assert _describe(policy, _ready(epoch=16)) == "GERMINATE early conv_heavy/sigmoid"
    assert policy.penalties == {"conv_light": 2.0, "conv_heavy": 1.0}  # decayed right after the germination
    # A single cull (2.0) of the rotation head does not make the next germination skip it.
    once = HeuristicTamiyo(topology="cnn")
    assert _describe(once, make_obs([_stalled("early")], epoch=10)) == "CULL early"
    assert _describe(once, _ready(epoch=11)) == "GERMINATE mid conv_light/sigmoid"
    assert once.penalties == {"conv_light": 1.0}


def test_heavily_penalized_blueprint_is_skipped_until_it_decays() -> None:
    # Penalty 10 decays 10 -> 5 -> 2.5 over germinations: skipped at 10 and 5 (>= 3), used again at 2.5.
    policy = _heuristic(
        blueprint_rotation={"cnn": ("conv_light", "norm")}, blueprint_penalty_on_cull=10.0, embargo_epochs_after_cull=0
    )
    _decide(policy, make_obs([_stalled("early")], epoch=10))
    chosen, penalties = [], []
    for epoch in (11, 14, 17):
        decision = _decide(policy, _ready(epoch=epoch))
        assert decision.command.slot_id == "early"
        chosen.append(decision.command.blueprint_id)
        penalties.append(policy.penalties)
    assert chosen == ["norm", "norm", "conv_light"]
    assert penalties == [{"conv_light": 5.0}, {"conv_light": 2.5}, {"conv_light": 1.25}]


def test_penalty_exactly_at_the_threshold_is_skipped() -> None:
    policy = _heuristic(blueprint_penalty_on_cull=3.0, embargo_epochs_after_cull=0)
    _decide(policy, make_obs([_stalled("early")], epoch=10))
    assert policy.penalties == {"conv_light": 3.0}
    assert _describe(policy, _ready(epoch=11)) == "GERMINATE early conv_heavy/sigmoid"
    assert policy.penalties == {"conv_light": 1.5}


def test_when_every_blueprint_is_penalized_the_least_penalized_is_used() -> None:
    policy = _heuristic(
        blueprint_rotation={"cnn": ("norm", "conv_light")},
        blueprint_penalty_on_cull=10.0,
        blueprint_penalty_threshold=1.0,
        embargo_epochs_after_cull=0,
    )
    late = make_report("late", TRAINING, blueprint_id="conv_light")
    _decide(policy, make_obs([_stalled("early", "norm"), make_report("mid", TRAINING, blueprint_id="norm"), late]))
    _decide(policy, make_obs([_stalled("mid", "norm"), late], epoch=11))
    _decide(policy, make_obs([_stalled("late", "conv_light")], epoch=12))
    assert policy.penalties == {"norm": 20.0, "conv_light": 10.0}
    assert _describe(policy, _ready(epoch=13)) == "GERMINATE early conv_light/sigmoid"  # not the rotation head
    assert policy.penalties == {"norm": 10.0, "conv_light": 5.0}


def test_a_new_instance_starts_without_rotation_penalties_embargoes_or_counters() -> None:
    policy = HeuristicTamiyo(topology="cnn")
    _decide(policy, _ready([_stalled("early")], epoch=10))
    _decide(policy, _ready(epoch=11))  # germinates conv_light into mid
    _decide(policy, make_obs([make_report("mid", TRAINING)], epoch=12))
    assert policy.penalties != {} or policy.embargoed_slots(12) != ()
    fresh = HeuristicTamiyo(topology="cnn")  # one instance per episode
    assert fresh.penalties == {} and fresh.embargoed_slots(12) == ()
    assert _describe(fresh, _ready(epoch=12)) == "GERMINATE early conv_light/sigmoid"
