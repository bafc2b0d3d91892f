"""Heuristic records: `heuristic:PATH.json` runs a record's thresholds, `heuristic:tuned` the context's record, and a
record that is not one (unknown threshold, bad value, not JSON) is refused naming its file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esper.leyline.errors import UserInputError
from esper.tamiyo import (
    CONTROLLERS,
    THRESHOLD_FIELDS,
    ControllerContext,
    HeuristicPolicyConfig,
    HeuristicRecord,
    HeuristicTamiyo,
    SettingChangeError,
    read_heuristic_record,
)
from unit.tamiyo.helpers import space_of

SETTING = {"task": "synthetic", "max_epochs": 25, "max_train_samples": 1024, "max_val_samples": 512,
           "batch_size": 64, "lr_schedule": "constant", "augment": "crop,flip"}
THRESHOLDS = {"min_epochs_before_germinate": 4, "stall_training_epochs": 7, "cull_if_accuracy_drops_by": 0.75,
              "blend_id": "linear", "max_concurrent_seeds": 2,
              "blueprint_rotation": {"cnn": ["norm", "depthwise", "conv_light", "conv_heavy", "attention"]}}

TUNING = {"objective": {"name": "val_gap_to_static", "charge": None, "cost": None}, "budget_env_epochs": 100,
          "trials": 3, "best_trial": 1, "best_score": 1.0, "default_score": 0.0, "seeds": 1, "seed": 42,
          "seed_stream": "selection", "sampler": "TPE", "cost_env_epochs": 100, "cost_gflops": 1.0, "command": "",
          "esper_commit": "unknown", "esper_version": "0.1.0"}


def _context(**kwargs: Any) -> ControllerContext:
    kwargs = {"space": space_of("cnn"), "slots": ("early", "mid", "late"), "seed_training_epochs": 5,
              "seed_blending_epochs": 4, "setting": SETTING, **kwargs}
    return ControllerContext(**kwargs)


def _write(path: Path, record: dict[str, Any]) -> Path:
    path.write_text(json.dumps(record), encoding="utf-8")
    return path


def _record(**changes: Any) -> dict[str, Any]:
    return {"format": "esper-heuristic-record/1", "thresholds": THRESHOLDS, "setting": SETTING, **changes}


def _build(spec: str, context: ControllerContext | None = None) -> HeuristicTamiyo:
    heuristic = CONTROLLERS.build(spec, context or _context())
    assert isinstance(heuristic, HeuristicTamiyo)
    return heuristic


def test_a_record_sets_the_thresholds_and_the_task_sets_the_lifecycle(tmp_path: Path) -> None:
    record = _write(tmp_path / "r.json", _record())
    config = _build(f"heuristic:{record}").config
    assert config == HeuristicPolicyConfig.model_validate({**THRESHOLDS, "seed_training_epochs": 5,
                                                           "seed_blending_epochs": 4})
    assert config.blueprint_rotation["cnn"][0] == "norm" and config.blend_id == "linear"
    default = _build("heuristic").config
    assert default != config and default.stall_training_epochs == HeuristicPolicyConfig().stall_training_epochs


def test_heuristic_tuned_runs_the_record_the_context_names(tmp_path: Path) -> None:
    record = _write(tmp_path / "study-record.json", _record())
    assert _build("heuristic:tuned", _context(tuned_heuristic=record)).config.stall_training_epochs == 7
    with pytest.raises(UserInputError, match=r"heuristic:tuned runs the heuristic tuned for this study.*"
                                             r"heuristic:PATH\.json"):
        _build("heuristic:tuned")


def test_a_record_runs_only_in_the_setting_it_was_tuned_in_unless_allowed(tmp_path: Path) -> None:
    record = _write(tmp_path / "r.json", _record())
    other = {**SETTING, "max_epochs": 12}
    with pytest.raises(SettingChangeError, match=rf"{record} was tuned in another setting \(max_epochs 25 then, 12 "
                                                 r"now\): run it with --max-epochs 25"):
        _build(f"heuristic:{record}", _context(setting=other))
    assert _build(f"heuristic:{record}", _context(setting=other, allow_setting_change=True)).config.blend_id == "linear"


def test_a_record_runs_only_under_the_augmentation_it_was_tuned_with(tmp_path: Path) -> None:
    record = _write(tmp_path / "r.json", _record())
    with pytest.raises(SettingChangeError, match=r"\(augment crop,flip then, none now\): run it with --augment "
                                                 r"crop,flip"):
        _build(f"heuristic:{record}", _context(setting={**SETTING, "augment": "none"}))


BAD_RECORDS: dict[str, tuple[str, str]] = {
    "unknown threshold": (json.dumps(_record(thresholds={**THRESHOLDS, "stall_epochs": 3})),
                          r"unknown thresholds \['stall_epochs'\]"),
    "lifecycle in the record": (json.dumps(_record(thresholds={"seed_training_epochs": 3})),
                                r"unknown thresholds \['seed_training_epochs'\].*the seed lifecycle comes from the "
                                r"task"),
    "out of range": (json.dumps(_record(thresholds={"stall_training_epochs": 0})),
                     r"stall_training_epochs: Input should be greater than or equal to 1, got 0"),
    "a bool for an int": (json.dumps(_record(thresholds={"embargo_epochs_after_cull": True})),
                          r"embargo_epochs_after_cull: Input should be a valid integer"),
    "unknown blend": (json.dumps(_record(thresholds={"blend_id": "cubic"})), r"Unknown blend 'cubic'"),
    "unknown key": (json.dumps({**_record(), "notes": "x"}), r"Unknown heuristic record keys: \['notes'\]"),
    "other format": (json.dumps(_record(format="esper-heuristic-record/0")), r"format: Input should be"),
    "best trial not run": (json.dumps(_record(tuning={**TUNING, "best_trial": 3})),
                           r"best_trial 3 is not one of the 3 trials"),
    "corrupt JSON": ('{"thresholds": {', r"is not valid JSON"),
    "not an object": ("[1, 2]", r"must hold a JSON object"),
}


@pytest.mark.parametrize("name", list(BAD_RECORDS))
def test_a_bad_record_is_refused_naming_the_file_and_the_fix(name: str, tmp_path: Path) -> None:
    text, problem = BAD_RECORDS[name]
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserInputError, match=problem) as refused:
        _build(f"heuristic:{path}")
    message = str(refused.value)
    assert f"Heuristic record {path}" in message and "esper tune heuristic" in message


def test_a_missing_record_or_an_unbuildable_blueprint_is_refused_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match=rf"Heuristic record {tmp_path / 'none.json'} not found"):
        _build(f"heuristic:{tmp_path / 'none.json'}")
    record = _write(tmp_path / "r.json", _record(thresholds={"blueprint_rotation": {"cnn": ["norm", "mlp"]}}))
    with pytest.raises(UserInputError, match=rf"{record}: blueprint_rotation for 'cnn' names \['mlp'\], which this "
                                             r"task cannot build"):
        _build(f"heuristic:{record}")
    record = _write(tmp_path / "t.json", _record(thresholds={"blueprint_rotation": {"transformer": ["norm"]}}))
    with pytest.raises(UserInputError, match=rf"{record}: blueprint_rotation has no rotation for 'cnn'"):
        _build(f"heuristic:{record}")


@given(st.fixed_dictionaries({"min_epochs_before_germinate": st.integers(0, 1000),
                              "plateau_epochs_to_germinate": st.integers(0, 1000),
                              "stall_training_epochs": st.integers(1, 1000),
                              "cull_if_accuracy_drops_by": st.floats(0.0, 100.0),
                              "max_concurrent_seeds": st.none() | st.integers(1, 1000)}))
def test_any_valid_thresholds_round_trip_through_a_record_file(thresholds: dict[str, Any]) -> None:
    record = HeuristicRecord.from_dict(_record(thresholds=thresholds))
    again = HeuristicRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert again == record and set(record.thresholds) <= set(THRESHOLD_FIELDS)
    assert {k: getattr(HeuristicPolicyConfig.model_validate(again.thresholds), k) for k in thresholds} == thresholds


def test_read_heuristic_record_gives_the_record(tmp_path: Path) -> None:
    record = read_heuristic_record(_write(tmp_path / "r.json", _record()))
    assert record.tuning is None and record.setting.max_epochs == 25 and record.thresholds == THRESHOLDS
    tuned = read_heuristic_record(_write(tmp_path / "t.json", _record(tuning=TUNING)))
    assert tuned.tuning is not None and tuned.tuning.best_trial == 1
