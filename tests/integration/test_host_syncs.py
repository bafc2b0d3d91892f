"""An env group's epoch makes at most two host reads outside the decision, whatever its envs do: training,
validation, counterfactuals, probes, seed telemetry and governor snapshots stay on the device, and the group's
measurements reach the host in one read (counted on CPU by `SyncCounter`, as a GPU would wait for them)."""

from __future__ import annotations

import torch

from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.env.groups import EnvHost, EpisodeRecipe, GroupPlan, MemberPlan
from esper.env.loop import decide_all
from esper.env.rewards import reward_config
from esper.env.setting import EpisodeSetting
from esper.evaluation.comparison import parse_controllers
from esper.evaluation.episodes import EpisodePlan, build_controller
from esper.execution.syncs import SyncCounter
from esper.leyline import SeedStage, TelemetryEventType
from esper.leyline.constants import GOVERNOR_SNAPSHOT_INTERVAL
from esper.tamiyo import host_variant

CONTROLLERS = ["static", "heuristic", "fixed:norm@early", "grow:conv_light@mid", "random"]
EPOCHS = 8
READS_PER_GROUP_EPOCH = 2  # one observation read, and room for one more


def test_a_group_epoch_reads_the_host_at_most_twice_outside_the_decision() -> None:
    task = get_task_spec("synthetic")
    episode = EpisodeSetting(task=task.name, max_epochs=EPOCHS, batch_size=64, max_train_samples=192,
                             max_val_samples=96)
    plan = EpisodePlan(episode=episode, seed=5, devices=[torch.device("cpu")])
    controllers = [build_controller(spec, plan, episode=0, index=i)
                   for i, spec in enumerate(parse_controllers(CONTROLLERS))]
    members = tuple(MemberPlan(i, name, "cpu", host_width=host_variant(c)[0], fixed_modules=host_variant(c)[1])
                    for i, (name, c) in enumerate(zip(CONTROLLERS, controllers, strict=True)))
    setting = EpisodeRecipe(episode, reward_config("gap", task, param_cost=1.0), 0.99)
    host = EnvHost(DataCache(DataOptions()))
    host.start(setting, [GroupPlan(seed=11, data_seed=12, members=members, twin=0)])  # static is its own twin
    every_event = frozenset(TelemetryEventType)
    measured: list[int] = []
    with SyncCounter() as counter:
        for epoch in range(1, EPOCHS + 1):
            before = counter.total
            observations = host.measure(every_event).observations
            measured.append(counter.total - before)
            with counter.phase("decision"):
                decisions = decide_all(controllers, observations) if epoch < EPOCHS else None
                host.conclude(decisions, every_event)
    assert max(measured) <= READS_PER_GROUP_EPOCH, (measured, counter.counts)
    # Not vacuous: the epochs measured a TRAINING seed's probe, a blended seed's counterfactual, seed gradient
    # telemetry and a governor snapshot.
    grown = host.runs[0][0].envs[3].model.slot("mid").state
    assert grown is not None and grown.stage == SeedStage.BLENDING, grown
    assert grown.metrics.counterfactual_contribution is not None and grown.metrics.probe_contribution is not None
    assert grown.metrics.epochs_total > 1 and grown.telemetry.gradient_norm > 0
    assert EPOCHS >= GOVERNOR_SNAPSHOT_INTERVAL
