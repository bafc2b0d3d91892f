"""`param_cost: "auto"` (the reference presets' `compute_cost: "auto"` moved by `--set charge=param`): a learning
command measures λ_p for its own setting, caches it under the data directory,
and every later run of that setting reuses it without measuring again; a run across a family measures one per
training type."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from esper.cli.main import main
from esper.data.families import Family, InstanceType, register_family
from esper.data.tasks import DataCache, DataOptions, TaskSpec, get_task_spec
from esper.evaluation import param_cost as param_cost_module
from esper.evaluation.comparison import host_params
from esper.evaluation.param_cost import ParamCostSetting, measure_param_cost
from esper.storage.rundir import read_jsonl

CAPS = ["--set", "max_train_samples=64", "--set", "max_val_samples=32", "--set", "max_epochs=3"]
RUN = ["--set", "n_envs=2", "--set", "group_size=2", "--set", "n_episodes=2", "--no-tui", "--no-tensorboard",
       "--telemetry-level", "minimal", "--device", "cpu"]
TINY = [*CAPS, *RUN]


def _train(tmp_path: Path, name: str) -> int:
    return main(["train", "ppo", "--preset", "synthetic", "--set", "charge=param", *TINY, "--data-dir",
                 str(tmp_path / "data"), "--run-dir", str(tmp_path / name)])


def test_the_first_run_measures_and_caches_and_the_second_reuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    measurements = []
    measure = param_cost_module.measure_param_cost

    def counted(*args: object, **kwargs: object) -> param_cost_module.ParamCostMeasurement:
        result = measure(*args, **kwargs)  # type: ignore[arg-type]
        measurements.append(result)
        return result

    monkeypatch.setattr(param_cost_module, "measure_param_cost", counted)
    assert _train(tmp_path, "first") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "measuring λ_p: paired episode 5/5" in out and "measured now and cached in" in out
    [cached] = (tmp_path / "data" / "param_costs").glob("synthetic_*_e3_train64_val32_*.json")
    value = json.loads(cached.read_text())["param_cost"]
    assert len(measurements) == 1 and value == measurements[0].param_cost >= 0.0
    config = json.loads((tmp_path / "first" / "config.json").read_text())
    assert config["config"]["reward"]["param_cost"] == value and config["runtime"]["param_cost"] == value

    assert _train(tmp_path, "second") == 0
    # the second run measured nothing (counted at the measurement itself) and said where it read λ_p from; the
    # console may wrap the long path at any column, so the text is compared without whitespace
    squeezed = "".join(capsys.readouterr().out.split())
    assert len(measurements) == 1 and f"reusedfrom{cached}" in squeezed
    assert json.loads((tmp_path / "second" / "config.json").read_text())["config"]["reward"]["param_cost"] == value


def test_the_measurement_is_the_static_hosts_slope_and_is_repeatable(tmp_path: Path) -> None:
    setting = ParamCostSetting("synthetic", 3, 64, 32, 128, episodes=3)
    cache = DataCache(DataOptions(data_dir=tmp_path))
    a = measure_param_cost(get_task_spec("synthetic"), setting, cache)
    b = measure_param_cost(get_task_spec("synthetic"), setting, cache)
    assert a.slope == b.slope and a.mean_final_accuracy == b.mean_final_accuracy
    assert a.param_cost == max(a.slope, 0.0) and a.ci95[0] <= a.ci95[1]
    ratios = a.added_param_ratios
    assert ratios[0] == 0.0 < ratios[1] < ratios[2]


def test_a_measurement_is_cached_per_augmentation_in_force(tmp_path: Path) -> None:
    """λ_p depends on how the host trains: a run with another augmentation measures its own."""
    task, setting = get_task_spec("synthetic"), ParamCostSetting("synthetic", 3, 64, 32, 64)
    own = setting.cache_file(tmp_path, task)
    assert f"_h{host_params(task, 1.0)}_" in own.name and "_aug-crop-flip_" in own.name  # the task's own
    assert setting.cache_file(tmp_path, task) == dataclasses.replace(setting, augment="crop,flip").cache_file(
        tmp_path, task)
    assert "_aug-none_" in dataclasses.replace(setting, augment="none").cache_file(tmp_path, task).name


def test_an_unreadable_cache_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    setting = ParamCostSetting("synthetic", 3, 64, 32, 64, "cosine")  # the synthetic preset's batch and schedule
    path = setting.cache_file(tmp_path / "data", get_task_spec("synthetic"))
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert _train(tmp_path, "run") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert str(path) in err and "delete it" in err
    assert path.read_text() == "{not json"  # the user's file is left as it was


FAMILY = register_family(Family("auto-probe", 1, "synthetic", (
    InstanceType("plain", "synthetic", 64), InstanceType("narrow", "synthetic", 96, width=0.5),
    InstanceType("held", "synthetic", 64, corruption=("fog", 2)),
), held_out=("held",)))


def test_a_run_across_a_family_measures_one_lambda_per_training_type_in_its_own_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    measured: dict[str, ParamCostSetting] = {}

    def cached(task: TaskSpec, setting: ParamCostSetting, *args: object, **kwargs: object
               ) -> tuple[dict[str, float], Path, bool]:
        measured[task.name] = setting
        param = {"plain": 0.5, "narrow": 3.0}[task.name.rsplit("/", 1)[1]]
        return {"param": param, "compute": 9.0}, tmp_path / "cached.json", True

    monkeypatch.setattr(param_cost_module, "cached_costs", cached)
    run = tmp_path / "run"
    assert main(["train", "ppo", "--family", FAMILY.key, "--set", 'param_cost="auto"', "--set", "max_epochs=2",
                 "--set", "max_val_samples=32", *RUN, "--data-dir", str(tmp_path / "data"), "--run-dir",
                 str(run)]) == 0
    assert {name: (s.max_train_samples, s.max_epochs) for name, s in measured.items()} == {
        "family:auto-probe-v1/plain": (64, 2), "family:auto-probe-v1/narrow": (96, 2)}  # never the held-out type
    recorded = json.loads((run / "config.json").read_text())
    reward = recorded["config"]["reward"]
    assert reward["param_cost"] is None and recorded["runtime"]["preset"] == "synthetic"
    assert reward["type_param_costs"] == recorded["runtime"]["param_cost"] == {"plain": 0.5, "narrow": 3.0}


def test_the_reference_preset_measures_lambda_c_for_its_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The synthetic preset asks for λ_c "auto": one measurement of the setting (the one λ_p comes from too), its λ_c
    charged, recorded and described."""
    settings: list[ParamCostSetting] = []

    def cached(task: TaskSpec, setting: ParamCostSetting, *args: object, **kwargs: object
               ) -> tuple[dict[str, float], Path, bool]:
        settings.append(setting)
        return {"param": 0.3, "compute": 0.8}, tmp_path / "cached.json", False

    monkeypatch.setattr(param_cost_module, "cached_costs", cached)
    run = tmp_path / "run"
    assert main(["train", "ppo", "--preset", "synthetic", *TINY, "--data-dir",
                 str(tmp_path / "data"), "--run-dir", str(run)]) == 0
    assert [(s.task, s.max_epochs, s.max_train_samples, s.max_val_samples) for s in settings] == [
        ("synthetic", 3, 64, 32)]
    assert "λ_c 0.800 for synthetic" in " ".join(capsys.readouterr().out.split())
    recorded = json.loads((run / "config.json").read_text())
    reward = recorded["config"]["reward"]
    assert reward["charge"] == "compute" and reward["param_cost"] is None
    assert reward["compute_cost"] == recorded["runtime"]["compute_cost"] == 0.8
    assert reward["gamma"] == 1.0
    [started] = [e for e in read_jsonl(run / "events.jsonl") if e["event_type"] == "TRAINING_STARTED"]
    assert started["data"]["reward"] == "gap, λ_c 0.8 per 100 % training compute"
    steps = read_jsonl(run / "steps.jsonl")
    assert steps and all(s["reward_components"]["param_cost"] == 0.0 == s["reward_components"]["action_shaping"]
                         for s in steps)
    assert any(s["reward_components"]["rent"] < 0.0 for s in steps)  # a germinated seed costs training compute
