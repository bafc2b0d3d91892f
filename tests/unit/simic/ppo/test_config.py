"""TrainingConfig: sections, keys, defaults, presets, validation, strict JSON, precedence and serialization."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from esper.data.families import get_family
from esper.env.reward_setting import RewardSetting
from esper.env.rewards import RewardFamily
from esper.env.setting import EpisodeSetting
from esper.execution.workers import WorkerOptions
from esper.leyline.errors import UserInputError
from esper.leyline.strict_config import StrictConfig
from esper.simic.ppo.config import PRESETS, TrainingConfig, charge_fields, family_fields
from esper.simic.ppo.ppo_config import PPOConfig

# The defaults, spelled out literally (not imported from constants) so a changed default fails here.
SPEC_DEFAULTS: dict[str, Any] = {
    "task": "cifar10", "slots": ["early", "mid", "late"], "max_seeds": None, "max_epochs": 25, "batch_size": 128,
    "lr_schedule": "constant", "augment": None, "max_train_samples": None, "max_val_samples": None, "n_episodes": 200,
    "n_envs": 4,
    "seed": 42,
    "device": "auto", "devices": None, "amp": False, "checkpoint_every": 1, "lr": 3e-4, "gamma": 0.995,
    "gae_lambda": 0.97, "clip_ratio": 0.2, "value_coef": 0.5, "value_clip": 10.0, "max_grad_norm": 0.5,
    "n_epochs": 10, "minibatch_size": 64, "target_kl": 0.015, "ppo_updates_per_batch": 1, "entropy_coef": 0.05,
    "entropy_coef_min": 0.01, "entropy_anneal_episodes": 0, "hidden_dim": 256,
    "initial_op_bias": {}, "blueprints": None, "use_telemetry": True,
    "reward_family": "gap", "param_cost": None, "charge": "param", "compute_cost": None, "family": None,
    "type_param_costs": None,
    "group_size": 4, "advantage": "gae", "param_budget": 500000,
    "param_penalty_weight": 0.1, "sparse_reward_scale": 1.0, "init_from": None, "init_datasets": None,
    "teacher": "none", "teacher_epsilon": 0.1, "critic_warmup_batches": 1, "actor_warmup_updates": 4,
    "teacher_kl_start": 0.1, "teacher_kl_end": 0.01,
    "workers": 0, "threads": 1, "executor": "process", "ray_address": None,
}
_CPU_SYNTHETIC = {"task": "synthetic", "max_train_samples": 2048, "max_val_samples": 512, "n_epochs": 4,
                  "minibatch_size": 64}

_TRAINING_RUN = {"max_train_samples": 1024, "max_val_samples": 512, "batch_size": 64, "max_epochs": 30,
                 "lr_schedule": "cosine", "charge": "compute", "compute_cost": "auto", "gamma": 1.0,
                 "n_episodes": 96, "n_envs": 8, "n_epochs": 4, "minibatch_size": 64}

# Which section holds each setting (the rest are the run's own: seed, family, checkpoint_every).
SPEC_SECTIONS: dict[str, tuple[type[StrictConfig], set[str]]] = {
    "episode": (EpisodeSetting, {"task", "slots", "max_seeds", "max_epochs", "batch_size", "lr_schedule", "augment",
                                 "max_train_samples", "max_val_samples", "amp"}),
    "ppo": (PPOConfig, {"n_episodes", "n_envs", "lr", "gae_lambda", "clip_ratio", "value_coef", "value_clip",
                        "max_grad_norm", "n_epochs", "minibatch_size", "target_kl", "ppo_updates_per_batch",
                        "entropy_coef", "entropy_coef_min", "entropy_anneal_episodes", "hidden_dim", "initial_op_bias",
                        "blueprints", "use_telemetry", "group_size", "advantage", "init_from", "init_datasets",
                        "teacher", "teacher_epsilon", "critic_warmup_batches", "actor_warmup_updates",
                        "teacher_kl_start", "teacher_kl_end"}),
    "reward": (RewardSetting, {"reward_family", "param_cost", "charge", "compute_cost", "type_param_costs",
                               "param_budget", "param_penalty_weight", "sparse_reward_scale", "gamma"}),
    "execution": (WorkerOptions, {"workers", "threads", "executor", "ray_address", "device", "devices"}),
}

SPEC_PRESETS: dict[str, dict[str, Any]] = {
    "quick": {**_CPU_SYNTHETIC, "n_episodes": 16, "n_envs": 4, "max_epochs": 10, "minibatch_size": 32},
    "synthetic": {**_TRAINING_RUN, "task": "synthetic"},
    "fashion_mnist": {**_TRAINING_RUN, "task": "fashion_mnist"},
    "cifar10": {"task": "cifar10", "entropy_coef": 0.1},
    "cifar10_deep": {"task": "cifar10_deep", "entropy_coef": 0.08},
    "tinystories": {"task": "tinystories", "batch_size": 32, "entropy_anneal_episodes": 40},
}


def _plain(config: TrainingConfig) -> dict[str, Any]:
    """Every setting by its plain name (each is unique: see `test_every_plain_name_names_one_setting`)."""
    return {k.rpartition(".")[2]: v for k, v in config.dotted_dict().items()}


def _diff_from_defaults(config: TrainingConfig) -> dict[str, Any]:
    return {k: v for k, v in _plain(config).items() if v != SPEC_DEFAULTS[k]}


def test_defaults_equal_the_spec_table() -> None:
    assert _plain(TrainingConfig()) == SPEC_DEFAULTS
    assert TrainingConfig().reward.reward_family is RewardFamily.GAP


def test_the_sections_hold_the_listed_settings() -> None:
    assert {name: (cls, set(cls.model_fields)) for name, cls in TrainingConfig.sections().items()} == SPEC_SECTIONS
    assert set(TrainingConfig.model_fields) - set(SPEC_SECTIONS) == {"seed", "family", "checkpoint_every"}
    assert TrainingConfig().to_dict()["ppo"]["lr"] == 3e-4  # it records itself nested


def test_every_plain_name_names_one_setting() -> None:
    """`--set lr=...` works because no two sections share a setting's name."""
    assert all(len(keys) == 1 for keys in TrainingConfig.plain_names().values())
    assert list(TrainingConfig.dotted({"lr": 1, "ppo.gae_lambda": 2, "seed": 3, "devices": 4})) == [
        "ppo.lr", "ppo.gae_lambda", "seed", "execution.devices"]


@pytest.mark.parametrize(("key", "hint"), [("lrr", "lr"), ("ppo.lrr", "ppo.lr"), ("reward.lr", "ppo.lr"),
                                           ("episod.task", "episode.task")])
def test_an_unknown_key_gets_a_did_you_mean(key: str, hint: str) -> None:
    with pytest.raises(UserInputError, match=rf"Unknown training config keys: \['{key}'\] \(did you mean '{hint}'"):
        TrainingConfig().with_overrides(**{key: 1})


def test_a_section_is_given_as_an_object_of_its_settings() -> None:
    """A section's object changes only the settings it names; a section given anything else is refused."""
    config = TrainingConfig.from_json('{"ppo": {"lr": 0.001}, "episode": {"task": "synthetic"}, "gamma": 1.0}')
    assert (config.ppo.lr, config.ppo.n_envs, config.episode.task, config.reward.gamma) == (0.001, 4, "synthetic", 1.0)
    assert config.with_overrides(ppo=PPOConfig(n_envs=8)).ppo.lr == 3e-4  # a whole section replaces it
    with pytest.raises(UserInputError, match="'ppo' is a section of the training config: pass its settings as a JSON"):
        config.with_overrides(ppo=0.001)


@pytest.mark.parametrize("name", sorted(SPEC_PRESETS))
def test_preset_has_exactly_the_listed_differences(name: str) -> None:
    expected = SPEC_PRESETS[name]
    # The cifar10 preset repeats the default task; only real differences show up in the diff.
    assert _diff_from_defaults(TrainingConfig.preset(name)) == {k: v for k, v in expected.items()
                                                                if v != SPEC_DEFAULTS[k]}
    assert _plain(TrainingConfig.preset(name)) == {**SPEC_DEFAULTS, **expected}


def test_preset_names() -> None:
    assert set(PRESETS) == set(SPEC_PRESETS)
    with pytest.raises(ValueError, match="Unknown preset 'nope'"):
        TrainingConfig.preset("nope")


@pytest.mark.parametrize(("changes", "field"), [
    ({"max_epochs": 1}, "max_epochs"),
    ({"hidden_dim": 7}, "hidden_dim"),
    ({"hidden_dim": 9}, "hidden_dim"),
    ({"lr": 0}, "lr"),
    ({"lr": -1e-3}, "lr"),
    ({"gamma": 0}, "gamma"),
    ({"gamma": 1.5}, "gamma"),
    ({"gae_lambda": 1.5}, "gae_lambda"),
    ({"gae_lambda": -0.1}, "gae_lambda"),
    ({"clip_ratio": 0}, "clip_ratio"),
    ({"n_envs": 1, "group_size": 1, "devices": ["cpu", "cpu"]}, "n_envs"),
    ({"n_envs": 0}, "n_envs"),
    ({"n_envs": 6}, "group_size"),
    ({"n_episodes": 10}, "group_size"),
    ({"group_size": 0}, "group_size"),
    ({"advantage": "group", "group_size": 1, "n_envs": 1, "n_episodes": 1}, "group"),
    ({"advantage": "vtrace"}, "advantage"),
    ({"param_cost": -1.0}, "param_cost"),
    ({"param_cost": 1.0, "reward_family": "loss"}, "param_cost"),
    ({"charge": "flops"}, "charge"),
    ({"charge": "compute", "reward_family": "loss"}, "charge"),
    ({"compute_cost": 1.0}, "compute_cost"),
    ({"charge": "compute", "compute_cost": -1.0}, "compute_cost"),
    ({"charge": "compute", "compute_cost": "automatic"}, "compute_cost"),
    ({"charge": "compute", "param_cost": 1.0}, "param_cost"),
    ({"entropy_coef": 0.01, "entropy_coef_min": 0.02}, "entropy_coef_min"),
    ({"entropy_anneal_episodes": -1}, "entropy_anneal_episodes"),
    ({"task": "imagenet"}, "task"),
    ({"slots": ["early", "early"]}, "slots"),
    ({"slots": ["early", "deep"]}, "slots"),
    ({"slots": []}, "slots"),
    ({"max_seeds": 0}, "max_seeds"),
    ({"max_train_samples": 0}, "max_train_samples"),
    ({"batch_size": 0}, "batch_size"),
    ({"checkpoint_every": 0}, "checkpoint_every"),
    ({"ppo_updates_per_batch": 0}, "ppo_updates_per_batch"),
    ({"reward_family": "accuracy"}, "reward_family"),
    ({"param_budget": 1000}, "param_budget"),
    ({"param_penalty_weight": 0.5, "reward_family": "loss"}, "param_penalty_weight"),
    ({"sparse_reward_scale": 2.0}, "sparse_reward_scale"),
])
def test_validation_rejects(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field) as info:
        TrainingConfig.from_dict(changes)
    assert "Value error" not in str(info.value) and "--set KEY=VALUE" in str(info.value)
    with pytest.raises(ValueError):  # the pydantic error is a ValueError too
        TrainingConfig(**TrainingConfig.nested(TrainingConfig.dotted(changes)))


@pytest.mark.parametrize("changes", [
    {"max_epochs": 2}, {"hidden_dim": 8}, {"gamma": 1.0}, {"gae_lambda": 0.0}, {"gae_lambda": 1.0},
    {"entropy_coef": 0.02, "entropy_coef_min": 0.02}, {"n_envs": 2, "group_size": 2, "devices": ["cpu", "cpu"]},
    {"param_cost": 0.0}, {"charge": "compute"}, {"charge": "compute", "compute_cost": 0.0},
    {"charge": "compute", "compute_cost": "auto"}, {"advantage": "group"},
    {"group_size": 1, "n_envs": 3, "n_episodes": 7},
    {"value_clip": None, "target_kl": None}, {"max_seeds": 1},
    {"reward_family": "sparse", "param_budget": 1000, "param_penalty_weight": 0.5, "sparse_reward_scale": 2.0},
])
def test_boundary_values_are_accepted(changes: dict[str, Any]) -> None:
    config = TrainingConfig.from_dict(changes)
    assert all(_plain(config)[k] == v for k, v in changes.items())


def test_a_config_is_immutable_a_change_is_a_new_checked_config() -> None:
    config = TrainingConfig()
    with pytest.raises(ValueError, match="frozen"):
        config.ppo.lr = 0.01
    with pytest.raises(ValueError, match="lr"):
        config.with_overrides(lr=0.0)
    assert config.with_overrides(lr=0.01).ppo.lr == 0.01 and config.ppo.lr != 0.01


def test_slots_are_stored_in_canonical_order() -> None:
    assert EpisodeSetting(slots=("late", "early")).slots == ("early", "late")
    assert TrainingConfig.from_dict({"slots": ["late", "mid", "early"]}).episode.slots == ("early", "mid", "late")


def test_task_is_case_insensitive() -> None:
    assert TrainingConfig.from_dict({"task": "SYNTHETIC"}).episode.task == "synthetic"


def test_unknown_keys_are_listed() -> None:
    with pytest.raises(ValueError) as info:
        TrainingConfig.from_dict({"lr": 1e-3, "learning_rate": 1e-3, "batchsize": 4})
    message = str(info.value)
    assert message.startswith("Unknown training config keys: ['learning_rate', 'batchsize'] (did you mean")
    assert "Valid keys: seed, family, checkpoint_every, episode.task," in message
    assert all(key in message for key in TrainingConfig.settings())
    with pytest.raises(ValueError, match=r"Unknown training config keys: \['nope'\]"):
        TrainingConfig().with_overrides(nope=1)


def test_json_unknown_keys_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"n_envs": 2, "entropy": 0.1}))
    with pytest.raises(ValueError, match=r"Unknown training config keys: \['entropy'\]"):
        TrainingConfig.from_json(path)


@pytest.mark.parametrize("text", ["[1, 2]", "3", '"cifar10"', "null"])
def test_json_must_be_an_object(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="object"):
        TrainingConfig.from_json(path)


def test_invalid_json_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"lr": 0.001,}')
    with pytest.raises(ValueError, match="not valid JSON"):
        TrainingConfig.from_json(bad)
    with pytest.raises(ValueError, match="not found"):
        TrainingConfig.from_json(tmp_path / "missing.json")


def test_json_may_be_given_inline() -> None:
    """--config-json takes the object itself as well as a file holding it; text that is neither names both fixes."""
    assert TrainingConfig.from_json(' {"seed": 7, "lr": 0.001}').seed == 7
    with pytest.raises(ValueError, match="inline JSON object is not valid JSON"):
        TrainingConfig.from_json('{"lr": 0.001')
    with pytest.raises(ValueError, match=r"not found: seed=7, and it is not an inline JSON object"):
        TrainingConfig.from_json("seed=7")


def test_json_invalid_value_is_a_value_error(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"gamma": 2.0}))
    with pytest.raises(ValueError, match="gamma"):
        TrainingConfig.from_json(path)


def test_precedence_preset_then_json_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"n_envs": 8, "lr": 1e-3, "max_epochs": 5}))
    config = TrainingConfig.from_json(path, base=TrainingConfig.preset("quick")).with_overrides(lr=5e-4)
    assert config.episode.task == "synthetic" and config.ppo.minibatch_size == 32  # preset
    assert config.ppo.n_envs == 8 and config.episode.max_epochs == 5  # JSON over preset
    assert config.ppo.lr == 5e-4  # override over JSON
    assert config.ppo.n_episodes == 16 and config.ppo.entropy_coef == 0.05  # untouched preset value and default


def test_cli_precedence_preset_then_json_then_flags(tmp_path: Path) -> None:
    from esper.cli.main import build_parser
    from esper.cli.train_ppo import effective_config

    path = tmp_path / "c.json"
    path.write_text(json.dumps({"n_envs": 8, "lr": 1e-3, "n_episodes": 32, "seed": 5}))
    args = build_parser().parse_args([
        "train", "ppo", "--preset", "quick", "--config-json", str(path), "--set", "lr=0.002", "--episodes", "12",
        "--set", 'episode.slots=["late","early"]', "--set", "task=synthetic_text", "--seed", "9", "--no-amp",
        "--set", "ppo.n_episodes=40"])
    config = effective_config(args)
    assert config.ppo.minibatch_size == 32 and config.ppo.n_envs == 8
    assert config.ppo.lr == 0.002 and config.ppo.n_episodes == 12 and config.seed == 9 and config.episode.amp is False
    assert config.episode.slots == ("early", "late") and config.episode.task == "synthetic_text"
    # No flags: the preset and JSON values stand (the seed default comes from the config, not the parser).
    plain = effective_config(build_parser().parse_args(["train", "ppo", "--preset", "quick", "--config-json",
                                                        str(path)]))
    assert plain.seed == 5 and plain.ppo.lr == 1e-3 and plain.ppo.n_episodes == 32


def test_cli_refuses_an_unknown_key_before_any_work() -> None:
    from esper.cli.main import build_parser
    from esper.cli.train_ppo import effective_config

    args = build_parser().parse_args(["train", "ppo", "--preset", "quick", "--set", "ppo.gama=0.9"])
    with pytest.raises(UserInputError, match=r"Unknown training config keys: \['ppo.gama'\] \(did you mean"):
        effective_config(args)


def test_to_dict_is_json_safe_and_round_trips() -> None:
    config = TrainingConfig.preset("tinystories").with_overrides(
        slots=["mid", "late"], devices=["cpu", "cpu"], value_clip=None, reward_family="sparse", param_budget=1234)
    text = json.dumps(config.to_dict())
    data = json.loads(text)
    assert data["reward"]["reward_family"] == "sparse" and data["episode"]["slots"] == ["mid", "late"]
    assert TrainingConfig.from_dict(data) == config
    assert TrainingConfig.from_record(data, where="x", fix="y") == config
    assert TrainingConfig.from_dict(data).to_dict() == config.to_dict()


def test_a_record_of_another_shape_is_refused_naming_the_fix() -> None:
    """A config recorded before TrainingConfig had sections (every setting at the top level) is not read as today's:
    its reader names the fix."""
    flat = {**SPEC_DEFAULTS, "task": "synthetic"}
    with pytest.raises(UserInputError, match=r"^Checkpoint c.pt records a TrainingConfig of another shape \(.*outside "
                                             r"the sections episode, ppo, reward, execution\): .* Retrain it\.$"):
        TrainingConfig.from_record(flat, where="Checkpoint c.pt", fix="Retrain it.")
    with pytest.raises(UserInputError, match=r"Checkpoint c.pt: Invalid config: ppo.lr"):
        TrainingConfig.from_record({"ppo": {"lr": 0.0}}, where="Checkpoint c.pt", fix="Retrain it.")




@pytest.mark.parametrize(("changes", "field"), [
    ({"lr": float("inf")}, "lr"),
    ({"lr": float("nan")}, "lr"),
    ({"lr": 2.0}, "lr"),
    ({"max_grad_norm": -1.0}, "max_grad_norm"),
    ({"max_grad_norm": float("inf")}, "max_grad_norm"),
    ({"value_coef": -1.0}, "value_coef"),
    ({"value_coef": float("nan")}, "value_coef"),
    ({"entropy_coef": float("inf")}, "entropy_coef"),
    ({"hidden_dim": 1_000_000}, "hidden_dim"),
    ({"hidden_dim": 9}, "hidden_dim"),
    ({"n_envs": 100_000}, "n_envs"),
    ({"n_envs": True}, "n_envs"),
    ({"seed": -1}, "seed"),
    ({"seed": 10**23}, "seed"),
    ({"max_epochs": 100_000}, "max_epochs"),
    ({"n_episodes": 10**9}, "n_episodes"),
    ({"batch_size": 10**7}, "batch_size"),
    ({"max_train_samples": 10**12}, "max_train_samples"),
    ({"max_seeds": 4}, "max_seeds"),
    ({"param_cost": float("inf")}, "param_cost"),
    ({"target_kl": float("nan")}, "target_kl"),
    ({"value_clip": 0.0}, "value_clip"),
])
def test_numbers_must_be_finite_and_in_range(changes: dict[str, Any], field: str) -> None:
    """Non-finite or absurd values fail validation, naming the field, before any memory is allocated."""
    with pytest.raises(ValueError, match=field) as info:
        TrainingConfig.from_dict(changes)
    assert "--set KEY=VALUE" in str(info.value)


@pytest.mark.parametrize(("changes", "message"), [
    ({"workers": -1}, r"workers: Input should be greater than or equal to 0"),
    ({"workers": True}, "workers"),
    ({"threads": 0}, r"threads: Input should be greater than or equal to 1"),
    ({"executor": "ray"}, "The Ray executor needs workers >= 1"),
    ({"ray_address": "head:6379"}, "--ray-address needs --executor ray"),
])
def test_worker_fields_are_checked_by_the_worker_options(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainingConfig.from_dict(changes)
    assert TrainingConfig.from_dict({"workers": 2, "executor": "ray", "devices": ["cuda:0"], "n_envs": 4}
                                    ).execution.gpus_per_worker == 0.5


def test_initial_op_bias_is_keyed_by_op_name_and_becomes_one_value_per_op() -> None:
    assert PPOConfig().op_bias() == ()  # none set: the network keeps its zero bias
    assert PPOConfig(initial_op_bias={"CULL": -2.0, "WAIT": 0.5}).op_bias() == (0.5, 0.0, -2.0, 0.0)
    with pytest.raises(ValueError, match=r"unknown op\(s\) \['KILL'\]; initial_op_bias is keyed by \['WAIT'"):
        PPOConfig(initial_op_bias={"KILL": -2.0})
    for bad in (math.inf, math.nan):
        with pytest.raises(ValueError, match="finite number"):
            PPOConfig(initial_op_bias={"CULL": bad})
    with pytest.raises(ValueError, match=r"ppo.initial_op_bias.CULL: Input should be greater than or equal to -20, "):
        TrainingConfig.from_dict({"initial_op_bias": {"CULL": -21.0}})


def test_blueprints_name_the_topologys_germinable_blueprints() -> None:
    assert TrainingConfig().blueprint_indices() is None  # none set: every blueprint
    assert TrainingConfig.from_dict({"task": "synthetic", "blueprints": ["norm", "conv_light"]}
                                    ).blueprint_indices() == frozenset({3, 1})
    assert PPOConfig(blueprints=["lora"]).blueprint_indices("synthetic_text") == frozenset({1})
    for bad in (["lora"], ["noop"], [], ["norm", "nrom"]):  # lora is a transformer blueprint; noop never germinates
        with pytest.raises(ValueError, match=r"blueprints must name at least one of \['conv_light', 'attention'"):
            TrainingConfig.from_dict({"task": "synthetic", "blueprints": bad})


def test_whole_numbers_stored_without_a_fraction_still_load_as_floats() -> None:
    """A JSON writer may store 1.0 as 1: a checkpoint's config that does still loads, its floats as floats."""
    config = TrainingConfig.from_dict({"value_coef": 1, "initial_op_bias": {"CULL": -2}, "param_cost": 3})
    ppo, reward = config.ppo, config.reward
    assert (ppo.value_coef, ppo.initial_op_bias, reward.param_cost) == (1.0, {"CULL": -2.0}, 3.0)
    assert all(isinstance(v, float) for v in (ppo.value_coef, ppo.initial_op_bias["CULL"], reward.param_cost))
    with pytest.raises(ValueError, match=r"ppo.n_envs: Input should be a valid integer, got 8.0"):
        TrainingConfig.from_dict({"n_envs": 8.0})  # an integer field stays one


@pytest.mark.parametrize(("changes", "fix"), [
    ({"compute_cost": 0.8}, "add --set charge=compute, or drop compute_cost"),
    ({"charge": "compute", "param_cost": 1.0}, "drop param_cost"),
    ({"charge": "compute", "param_cost": "auto"}, "compute_cost 'auto'"),
    ({"charge": "compute", "reward_family": "loss"}, "drop charge or set reward_family gap"),
])
def test_a_charge_inconsistency_names_its_fix(changes: dict[str, Any], fix: str) -> None:
    with pytest.raises(ValueError, match=fix):
        TrainingConfig.from_dict(changes)


def test_the_compute_charge_is_refused_across_a_family() -> None:
    family = get_family("synthetic-shift-v1")
    base = TrainingConfig.preset(family.preset)
    with pytest.raises(ValueError, match="drop charge=compute"):
        base.with_overrides(**family_fields(family, base.reward, {"reward.charge": "compute"}))
    given = base.with_overrides(compute_cost=0.5)  # e.g. from --config-json: a given λ_c is never replaced
    with pytest.raises(ValueError, match="drop charge=compute"):
        given.with_overrides(**family_fields(family, given.reward, {}))


def _charged(base: TrainingConfig, **changes: Any) -> RewardSetting:
    """`base`'s reward after `--set` `changes`, completed as the commands complete them."""
    return base.with_overrides(**charge_fields(base.reward, TrainingConfig.dotted(changes))).reward


def test_naming_the_other_charge_alone_moves_a_presets_auto_cost_to_it() -> None:
    synthetic, quick = TrainingConfig.preset("synthetic"), TrainingConfig.preset("quick")
    assert (synthetic.reward.charge, synthetic.reward.compute_cost) == ("compute", "auto")  # the reference presets
    switched = _charged(synthetic, charge="param")
    assert (switched.charge, switched.param_cost, switched.compute_cost) == ("param", "auto", None)
    back = synthetic.with_overrides(charge="param", param_cost="auto", compute_cost=None)
    assert _charged(back, charge="compute") == synthetic.reward
    assert _charged(quick, charge="compute").compute_cost is None  # the task's
    assert charge_fields(synthetic.reward, {"reward.charge": "compute"}) == {"reward.charge": "compute"}  # no switch
    assert charge_fields(synthetic.reward, {"seed": 1}) == {"seed": 1}


def test_a_given_cost_stands_and_is_never_read_as_the_other_charges() -> None:
    synthetic = TrainingConfig.preset("synthetic")
    given = _charged(synthetic, charge="param", param_cost=0.8)  # the other charge's "auto" is cleared
    assert (given.charge, given.param_cost, given.compute_cost) == ("param", 0.8, None)
    with pytest.raises(ValueError, match="compute_cost only applies"):
        _charged(synthetic, charge="param", compute_cost=0.5)
    with pytest.raises(ValueError, match="add --set charge=param beside param_cost"):  # a λ_p alone names the fix
        _charged(synthetic, param_cost=0.5)


def test_a_reward_family_that_is_not_charged_clears_the_presets_charge() -> None:
    loss = _charged(TrainingConfig.preset("synthetic"), reward_family="loss")
    assert (loss.reward_family, loss.charge, loss.param_cost, loss.compute_cost) == ("loss", "param", None, None)


def test_a_family_run_charges_parameters_per_type_on_a_compute_charged_preset() -> None:
    family = get_family("synthetic-shift-v1")
    base = TrainingConfig.preset(family.preset)

    def reward(overrides: dict[str, Any], on: TrainingConfig = base) -> RewardSetting:
        return on.with_overrides(**family_fields(family, on.reward, overrides)).reward

    plain = reward({})
    assert (plain.charge, plain.param_cost, plain.compute_cost) == ("param", "auto", None)
    assert reward({"reward.charge": "param"}) == plain
    costs = {t.name: 1.0 for t in family.training}
    for named in ({}, {"reward.charge": "param"}):  # given λ_p per type replace the measurement
        per_type = reward({**named, "reward.type_param_costs": costs})
        assert (per_type.charge, per_type.param_cost, per_type.type_param_costs) == ("param", None, costs)
    json_given = base.with_overrides(charge="param", param_cost=None, compute_cost=None)  # as --config-json sets it
    assert reward({"reward.type_param_costs": costs}, json_given).type_param_costs == costs


def test_an_auto_cost_is_refused_where_a_number_is_needed() -> None:
    reward = RewardSetting(charge="compute", compute_cost="auto")
    with pytest.raises(ValueError, match="cached_costs"):
        reward.charged_compute_cost()
    assert RewardSetting(charge="compute", compute_cost=0.8).charged_compute_cost() == 0.8
    assert RewardSetting().charged_compute_cost() is None
