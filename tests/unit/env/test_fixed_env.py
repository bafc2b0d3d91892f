"""A `fixed:` episode: the env builds the host with the module in, trains it like static and never grows a seed."""

from __future__ import annotations

import torch

from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.env import EnvSpec, EnvStep, EpochData, MorphoEnv, run_episodes
from esper.env.rewards import make_reward_fn
from esper.kasmina import DEFAULT_REGISTRY, FixedModulesHost
from esper.tamiyo import CONTROLLERS, ControllerContext, StaticPolicy, TamiyoPolicy, host_variant

TASK = get_task_spec("synthetic")
SLOTS = ("early", "mid", "late")
MAX_EPOCHS = 2


def _env(controller: TamiyoPolicy, env_id: int) -> MorphoEnv:
    width, fixed_modules = host_variant(controller)
    spec = EnvSpec(TASK, SLOTS, MAX_EPOCHS, env_seed=3, device=torch.device("cpu"), env_id=env_id,
                   host_width=width, fixed_modules=fixed_modules)
    return MorphoEnv(spec, controller.name)


def test_a_fixed_episode_trains_the_module_as_host_and_never_touches_the_seed_slots() -> None:
    fixed_policy = CONTROLLERS.build("fixed:norm@early", ControllerContext(space=TASK.action_space, slots=SLOTS))
    fixed, static = _env(fixed_policy, 0), _env(StaticPolicy(), 1)
    host = fixed.model.host
    assert isinstance(host, FixedModulesHost) and list(host.fixed) == ["early"]
    assert all(torch.equal(a, b) for a, b in zip(host.inner.state_dict().values(),
                                                 static.model.host.state_dict().values(), strict=True))
    module_before = [p.detach().clone() for p in host.fixed["early"].parameters()]

    slot_states: list[list[object]] = []

    def record(steps: list[EnvStep]) -> None:
        slot_states.append([s.state for s in fixed.model.slots()])

    data = EpochData.build(TASK, DataCache(DataOptions()), [torch.device("cpu")], batch_size=32, seed=9,
                           max_train_samples=64, max_val_samples=64)
    result, static_result = run_episodes([fixed, static], [fixed_policy, StaticPolicy()], data,
                                         make_reward_fn("loss", TASK, 0.99), on_step=record)

    assert slot_states == [[None, None, None]] * (MAX_EPOCHS - 1)
    assert result.seeds_created == 0 and result.params_added == 0
    assert result.action_counts["WAIT"] == MAX_EPOCHS - 1 and sum(result.action_counts.values()) == MAX_EPOCHS - 1
    norm_params = DEFAULT_REGISTRY.get("cnn", "norm").param_count(host.segment_channels["early"])
    assert result.host_params == static_result.host_params + norm_params
    assert any(not torch.equal(a, b) for a, b in zip(module_before, host.fixed["early"].parameters(), strict=True))
    assert len(result.accuracy_curve) == MAX_EPOCHS
