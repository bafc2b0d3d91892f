"""MorphoGymEnv: the Gymnasium API contract, masks, seeding, bad actions, and sameness with esper's own loop.

Episodes are tiny (3–6 epochs, a few dozen samples) so the whole file runs in well under a minute on one CPU thread.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

gymnasium = pytest.importorskip("gymnasium")

from gymnasium.utils.env_checker import check_env  # noqa: E402

import esper.env.gym  # noqa: E402
from esper.data.tasks import TASKS, DataCache, DataOptions, get_task_spec  # noqa: E402
from esper.env import (  # noqa: E402
    EnvSpec,
    EnvStep,
    EpochData,
    MorphoEnv,
    make_reward_fn,
    run_episodes,
)
from esper.env.gym import (  # noqa: E402
    ENV_ID,
    GymEnvConfig,
    InvalidActionError,
    MorphoGymEnv,
    ValidActionSpace,
    describe_actions,
)
from esper.env.masks import build_slot_states, masks_from_validity  # noqa: E402
from esper.kasmina.state import LifecycleConfig  # noqa: E402
from esper.leyline import (  # noqa: E402
    EnvObservation,
    LifecycleOp,
    compute_action_validity,
)
from esper.leyline.seeding import derive_seed  # noqa: E402
from esper.tamiyo import TamiyoDecision  # noqa: E402

CNN = get_task_spec("synthetic").action_space
TINY = GymEnvConfig(max_epochs=3, max_train_samples=32, max_val_samples=16, batch_size=32, param_cost=1.0)
# Seeds train one epoch, blend in two and reach probation quickly, so CULL and FOSSILIZE masks are exercised.
FAST_LIFECYCLE = LifecycleConfig(min_training_epochs=1, min_probe_contribution=-100.0, min_seed_gradient_ratio=0.0,
                                 blending_steps=2, min_blending_epochs=1, max_probation_epochs=3)


@pytest.fixture
def fast_task(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`synthetic` with a fast lifecycle, registered under its own name for the test's duration."""
    spec = dataclasses.replace(get_task_spec("synthetic"), name="synthetic_fast", lifecycle=FAST_LIFECYCLE)
    monkeypatch.setitem(TASKS._factories, "synthetic_fast", lambda: spec)
    monkeypatch.setitem(TASKS._built, "synthetic_fast", spec)
    yield "synthetic_fast"


def _masked_choice(env: MorphoGymEnv, rng: np.random.Generator) -> int:
    return int(rng.choice(np.flatnonzero(env.action_masks())))


def _play(env: MorphoGymEnv, seed: int, actions_seed: int) -> list[tuple[Any, ...]]:
    """One episode with masked random actions; everything the agent sees, in order."""
    rng = np.random.default_rng(actions_seed)
    obs, info = env.reset(seed=seed)
    seen: list[tuple[Any, ...]] = [(obs, info, env.action_masks())]
    terminated = False
    while not terminated:
        obs, reward, terminated, truncated, info = env.step(_masked_choice(env, rng))
        assert truncated is False
        seen.append((obs, reward, terminated, info, env.action_masks()))
    return seen


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


# ------------------------------------------------------------------------------------------------ the API contract


def test_check_env_passes_without_warnings() -> None:
    env = MorphoGymEnv(TINY)
    env.action_space.seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    assert [str(w.message) for w in caught] == []


def test_spaces_and_episode_shape() -> None:
    env = MorphoGymEnv(TINY)
    assert env.observation_space.shape == (80,) and env.observation_space.dtype == np.float32
    assert isinstance(env.action_space, gymnasium.spaces.Discrete) and env.action_space.n == 43
    seen = _play(env, seed=1, actions_seed=0)
    assert len(seen) == TINY.max_epochs  # reset observes epoch 1; T − 1 steps follow
    assert [s[3]["epoch"] for s in seen[1:]] == list(range(2, TINY.max_epochs + 1))
    assert [s[2] for s in seen[1:]] == [False] * (TINY.max_epochs - 2) + [True]
    for s in seen:
        assert s[0] in env.observation_space


def test_info_names_action_stages_accuracy_and_parameters() -> None:
    env = MorphoGymEnv(TINY.with_overrides(slots=("mid", "late")))
    _, info = env.reset(seed=2)
    assert info["stages"] == {"mid": None, "late": None} and info["seed_params"] == 0
    assert info["val_accuracy"] == info["twin_val_accuracy"]  # nothing has grown yet
    germinate_late = next(i for i in np.flatnonzero(env.action_masks())
                          if CNN.from_joint_index(int(i)).to_command(CNN).slot_id == "late")
    _, reward, _, _, info = env.step(germinate_late)
    command = CNN.from_joint_index(int(germinate_late)).to_command(CNN)
    assert info["action"] == {"index": germinate_late, "op": "GERMINATE", "slot": "late",
                              "blueprint": command.blueprint_id, "blend": command.blend_id}
    assert info["action_success"] is True
    assert info["stages"]["mid"] is None and info["stages"]["late"] == "TRAINING"
    assert info["seed_params"] > 0 and info["host_params"] > 0
    assert reward == pytest.approx(info["reward_components"]["total"])
    assert info["reward_components"]["family"] == "gap"


# ------------------------------------------------------------------------------------------------------- masks


def _independent_joint_mask(obs: EnvObservation, env: MorphoEnv) -> np.ndarray:
    """Joint validity rebuilt from the env's live model through the factored (dependent) head masks."""
    model = env.model
    validity = compute_action_validity(
        build_slot_states(model.get_slot_reports(), model.slot_ids, env.spec.task.lifecycle.min_fossilize_contribution),
        total_seeds=model.seeds_present(), max_seeds=env.max_seeds, space=model.action_space)
    masks = masks_from_validity(validity)
    joint = []
    for i in range(CNN.num_joint_actions):
        a = CNN.from_joint_index(i)
        ok = bool(masks["op"][a.op])
        if ok and a.op != LifecycleOp.WAIT:
            ok = bool(masks["op_slot"][a.op, a.slot])
        if ok and a.op == LifecycleOp.GERMINATE:
            ok = bool(masks["slot_blueprint"][a.slot, a.blueprint]) and bool(masks["blend"][a.blend])
        joint.append(ok and obs.validity.is_valid_command(a.to_command(obs.action_space)))
    return np.array(joint)


def test_action_masks_equal_the_envs_validity_and_masked_actions_raise(fast_task: str) -> None:
    env = MorphoGymEnv(TINY.with_overrides(task=fast_task, max_epochs=6))
    rng = np.random.default_rng(0)
    valid_ops: set[LifecycleOp] = set()
    for episode in range(3):
        env.reset(seed=episode)
        terminated = False
        while not terminated:
            mask = env.action_masks()
            assert mask.dtype == np.bool_ and mask.shape == (CNN.num_joint_actions,)
            assert env._episode is not None and env._measured is not None
            obs = env._measured.observations[0]
            assert np.array_equal(mask, _independent_joint_mask(obs, env._episode.envs[0]))
            valid_ops |= {CNN.from_joint_index(int(i)).op for i in np.flatnonzero(mask)}
            epoch = obs.epoch
            for invalid in rng.permutation(np.flatnonzero(~mask))[:3]:
                with pytest.raises(InvalidActionError, match=rf"Action {invalid} \(.*\) is not valid"):
                    env.step(invalid)
                assert env._measured.epoch == epoch  # a refused action changes nothing
            _, _, terminated, _, _ = env.step(_masked_choice(env, rng))
    assert {LifecycleOp.WAIT, LifecycleOp.GERMINATE, LifecycleOp.CULL} <= valid_ops


def test_random_masked_agent_never_takes_an_invalid_action_in_200_steps() -> None:
    """Half the episodes sample with `action_masks()`, half with the mask-aware `action_space.sample()` (the mask
    property itself is tested exhaustively, without training, in tests/property/test_simic_masks.py)."""
    env = MorphoGymEnv(TINY.with_overrides(max_epochs=6, max_train_samples=16, batch_size=16))
    env.action_space.seed(0)
    rng = np.random.default_rng(0)
    steps, episode = 0, 0
    while steps < 200:
        env.reset(seed=episode)
        terminated, use_space = False, episode % 2 == 1
        while not terminated and steps < 200:
            mask = env.action_masks()
            action = int(env.action_space.sample()) if use_space else _masked_choice(env, rng)
            assert mask[action]
            _, _, terminated, _, info = env.step(action)
            assert info["action"]["index"] == action
            steps += 1
        episode += 1
    assert steps == 200


def test_space_sampling_follows_the_current_mask_unless_given_one() -> None:
    space = ValidActionSpace(5, seed=0)
    space.valid = np.array([0, 1, 0, 1, 0], dtype=np.int8)
    assert {int(space.sample()) for _ in range(50)} == {1, 3}
    assert {int(space.sample(mask=np.array([1, 0, 0, 0, 0], dtype=np.int8))) for _ in range(10)} == {0}


# ----------------------------------------------------------------------------------------------------- seeding


def test_reset_with_a_seed_replays_an_episode_exactly() -> None:
    env = MorphoGymEnv(TINY.with_overrides(max_epochs=4))
    first = _play(env, seed=5, actions_seed=1)
    other = _play(env, seed=6, actions_seed=1)  # another episode in between must not leak into the replay
    again = _play(env, seed=5, actions_seed=1)
    assert _same(first, again)
    assert not _same(first[0][0], other[0][0])  # a different seed is a different host


def test_unseeded_resets_follow_the_seeded_stream() -> None:
    env = MorphoGymEnv(TINY)
    env.reset(seed=3)
    _, a = env.reset()
    env.reset(seed=3)
    _, b = env.reset()
    assert a["env_seed"] == b["env_seed"] and a["env_seed"] != 3


def test_episodes_leave_torch_global_generator_alone() -> None:
    """An agent's own torch sampling must not be re-seeded by every episode's host initialization."""
    env = MorphoGymEnv(TINY)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    env.reset(seed=9)
    env.step(0)
    assert torch.equal(torch.rand(3), expected)


class _Script:
    """The gym episode's actions, replayed as an esper controller."""

    name = "script"

    def __init__(self, actions: dict[int, int]) -> None:
        self.actions = actions

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        factored = obs.action_space.from_joint_index(self.actions[obs.epoch])
        return TamiyoDecision(factored.to_command(obs.action_space), factored, reason="script", confidence=1.0)


def test_a_gym_episode_is_the_episode_esper_runs_itself() -> None:
    """Same seed, same actions: the adapter's episode equals `run_episodes` with a static twin, reward for reward."""
    config = TINY.with_overrides(max_epochs=4)
    env = MorphoGymEnv(config)
    rng = np.random.default_rng(3)
    env.reset(seed=21)
    actions, rewards, accuracies = {}, [], []
    for epoch in range(1, config.max_epochs):
        actions[epoch] = _masked_choice(env, rng)
        _, reward, _, _, info = env.step(actions[epoch])
        rewards.append(reward)
        accuracies.append(info["val_accuracy"])

    task, device = get_task_spec(config.task), torch.device("cpu")
    spec = EnvSpec(task, config.slots, config.max_epochs, 21, device)
    twin = MorphoEnv(dataclasses.replace(spec, env_id=1), "twin")
    own = MorphoEnv(spec, "script", twin=twin)
    data = EpochData.build(task, DataCache(DataOptions()), [device], batch_size=config.batch_size,
                           seed=derive_seed(21, "data"), max_train_samples=config.max_train_samples,
                           max_val_samples=config.max_val_samples)
    steps: list[EnvStep] = []
    reward_fn = make_reward_fn("gap", task, 1.0, param_cost=config.param_cost)
    [result] = run_episodes([own], [_Script(actions)], data, reward_fn, on_step=steps.extend)
    assert [s.reward.total() for s in steps] == rewards
    assert result.accuracy_curve[1:] == accuracies


# ------------------------------------------------------------------------------------------------- bad input


def test_bad_actions_raise_naming_the_action_and_the_valid_ones() -> None:
    env = MorphoGymEnv(TINY)
    with pytest.raises(RuntimeError, match=r"reset\(\) before step"):
        env.step(0)
    with pytest.raises(RuntimeError, match=r"reset\(\) before action_masks"):
        env.action_masks()
    env.reset(seed=0)
    valid = "valid .*0 WAIT; 1-12 GERMINATE early; 13-24 GERMINATE mid; 25-36 GERMINATE late"
    for action, problem in ((43, "Action 43 is out of range 0-42"), (-1, "Action -1 is out of range"),
                            (1.5, "Action 1.5 is not an integer"), (True, "Action True is not an integer"),
                            ("3", "Action '3' is not an integer"),
                            (40, r"Action 40 \(FOSSILIZE early\) is not valid after epoch 1"),
                            (np.int64(38), r"Action 38 \(CULL mid\) is not valid")):
        with pytest.raises(InvalidActionError, match=f"{problem}.*{valid}"):
            env.step(action)
    env.step(np.int64(0))  # numpy integers (what vectorized agents hand over) are fine
    env.step(np.array(0))
    with pytest.raises(RuntimeError, match="episode ended after epoch 3: call reset"):
        env.step(0)
    with pytest.raises(ValueError, match="takes no options"):
        env.reset(options={"max_epochs": 5})


@pytest.mark.parametrize(("changes", "problem"), [
    ({"task": "nope"}, "Unknown task 'nope'"),
    ({"slots": ()}, "at least one slot"),
    ({"slots": ("middle",)}, "Unknown slot"),
    ({"max_epochs": 1}, "max_epochs: Input should be greater than or equal to 2, got 1"),
    ({"max_train_samples": 0}, "max_train_samples: Input should be greater than or equal to 1, got 0"),
    ({"batch_size": 0}, "batch_size: Input should be greater than or equal to 1, got 0"),
    ({"batch_size": True}, "batch_size: Input should be a valid integer, got true"),
    ({"param_cost": -1.0}, "param_cost: Input should be greater than or equal to 0"),
    ({"param_cost": float("nan")}, "param_cost: Input should be a finite number"),
])
def test_config_rejects_bad_values(changes: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as info:
        GymEnvConfig().with_overrides(**changes)
    assert "pass it as a GymEnvConfig field or a gymnasium.make keyword" in str(info.value)


def test_config_orders_slots_canonically() -> None:
    assert GymEnvConfig(slots=("late", "early")).slots == ("early", "late")


def test_describe_actions_groups_runs_of_one_op_and_slot() -> None:
    assert describe_actions([0, 1, 2, 3, 13, 37, 39, 42], CNN) == \
        "0 WAIT; 1-3 GERMINATE early; 13 GERMINATE mid; 37 CULL early; 39 CULL late; 42 FOSSILIZE late"
    assert describe_actions([], CNN) == "none"


def test_without_gymnasium_the_adapter_names_the_extra_and_esper_still_imports() -> None:
    code = ("import sys; sys.modules['gymnasium'] = None\n"
            "import esper.env, esper.evaluation.comparison\n"
            "try:\n    import esper.env.gym\nexcept ImportError as e:\n    print(e)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "pip install 'esper[gym]'" in result.stdout


def test_the_docs_example_is_short_and_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    """docs/gymnasium.md's agent loop, run as written on tiny episodes (its config is shrunk, nothing else)."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "gymnasium.md").read_text(encoding="utf-8")
    example = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    assert len(example.strip().splitlines()) < 30
    monkeypatch.setattr(esper.env.gym, "GymEnvConfig",
                        lambda **kw: TINY.with_overrides(**{k: v for k, v in kw.items() if k != "max_epochs"}))
    exec(compile(example, "docs/gymnasium.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["episode 0", "episode 1", "episode 2"]
    assert all("static twin" in line for line in lines)


def test_the_default_parameter_cost_is_the_one_measured_near_the_env_sample_cap() -> None:
    with pytest.raises(ValueError, match="not near 32"):  # 32 samples: no calibration within 4×
        MorphoGymEnv(TINY.with_overrides(param_cost=None))
    MorphoGymEnv(TINY.with_overrides(param_cost=None, max_train_samples=128))  # served by the 192 calibration


KEYWORDS = {"task": "synthetic", "max_epochs": 3, "max_train_samples": 32, "max_val_samples": 16, "batch_size": 32,
            "param_cost": 1.0}


def _first_observations(env: gymnasium.Env[Any, Any], seeds: list[int]) -> list[np.ndarray]:
    return [env.reset(seed=s)[0] for s in seeds]


def test_gymnasium_make_builds_the_registered_env_from_keywords_and_its_spec_recreates_it() -> None:
    """`gymnasium.make("esper.env.gym:esper/Morpho-v0", **settings)`: the settings are GymEnvConfig's fields, the
    spec serializes (what Minari stores) and recreates the same env."""
    env = gymnasium.make(f"esper.env.gym:{ENV_ID}", **KEYWORDS)
    assert isinstance(env.unwrapped, MorphoGymEnv) and env.unwrapped.config == TINY
    assert env.spec is not None and env.spec.kwargs == KEYWORDS
    again = gymnasium.make(gymnasium.envs.registration.EnvSpec.from_json(env.spec.to_json()))
    assert [o.tolist() for o in _first_observations(env, [3])] == [o.tolist() for o in _first_observations(again, [3])]
    with pytest.raises(ValueError, match=r"Unknown keywords \['max_epoch'\]: MorphoGymEnv takes .*max_epochs"):
        gymnasium.make(ENV_ID, max_epoch=3)


def test_action_masks_is_reachable_through_gymnasium_make_and_further_wrappers() -> None:
    """`gymnasium.make` wraps the env in checkers that do not forward methods: its outermost wrapper is ActionMasks,
    so `env.action_masks()` works as maskable agents call it; under wrappers of one's own, `get_wrapper_attr`."""
    env = gymnasium.make(ENV_ID, **KEYWORDS)
    env.reset(seed=3)
    masks = env.action_masks()  # type: ignore[attr-defined]
    assert masks.dtype == bool and masks.tolist() == env.unwrapped.action_masks().tolist()  # type: ignore[attr-defined]
    env.step(int(np.flatnonzero(masks)[-1]))
    wrapped = gymnasium.wrappers.RecordEpisodeStatistics(env)
    assert wrapped.get_wrapper_attr("action_masks")().tolist() == env.unwrapped.action_masks().tolist()  # type: ignore[attr-defined]


def test_the_env_pickles_as_its_configuration_and_generator() -> None:
    env = MorphoGymEnv(TINY)
    env.reset(seed=5)
    copy = pickle.loads(pickle.dumps(env))
    assert copy.config == env.config
    assert copy.reset(seed=5)[0].tolist() == env.reset(seed=5)[0].tolist()
    assert int(copy.np_random.integers(1000)) == int(env.np_random.integers(1000))  # the same stream


def test_async_vector_env_with_spawn_steps_the_episodes_a_single_env_runs() -> None:
    envs = gymnasium.make_vec(f"esper.env.gym:{ENV_ID}", num_envs=2, vectorization_mode="async",
                              vector_kwargs={"context": "spawn"}, **KEYWORDS)
    try:
        observations, _ = envs.reset(seed=[0, 1])
        stepped, rewards, terminated, _, _ = envs.step(np.zeros(2, dtype=np.int64))  # WAIT is always valid
    finally:
        envs.close()
    single = MorphoGymEnv(TINY)
    for i in range(2):
        assert observations[i].tolist() == single.reset(seed=i)[0].tolist()
        obs, reward, done, _, _ = single.step(0)
        assert stepped[i].tolist() == obs.tolist() and rewards[i] == reward and terminated[i] == done
