"""A config made of sections: dotted, plain and section keys, refusals that name the fix, records of another shape."""

from __future__ import annotations

from typing import ClassVar

import pytest
from pydantic import StrictFloat, StrictInt

from esper.leyline.errors import UserInputError
from esper.leyline.sectioned_config import SectionedConfig
from esper.leyline.strict_config import StrictConfig


class Optimizer(StrictConfig):
    rate: StrictFloat = 0.1
    steps: StrictInt = 10


class Schedule(StrictConfig):
    rate: StrictFloat = 0.5
    warmup: StrictInt = 0


class Run(SectionedConfig):
    KIND: ClassVar[str] = "run config"
    seed: StrictInt = 1
    optimizer: Optimizer = Optimizer()
    schedule: Schedule = Schedule()


def test_settings_are_named_by_dotted_key_or_their_only_plain_name() -> None:
    assert list(Run.settings()) == ["seed", "optimizer.rate", "optimizer.steps", "schedule.rate", "schedule.warmup"]
    assert Run.plain_names()["rate"] == ["optimizer.rate", "schedule.rate"]
    config = Run.from_dict({"steps": 20, "schedule.rate": 0.7, "seed": 3})
    assert config.to_dict() == {"seed": 3, "optimizer": {"rate": 0.1, "steps": 20},
                                "schedule": {"rate": 0.7, "warmup": 0}}
    assert config.dotted_dict() == {"seed": 3, "optimizer.rate": 0.1, "optimizer.steps": 20, "schedule.rate": 0.7,
                                    "schedule.warmup": 0}


def test_a_section_object_changes_only_the_settings_it_names_and_a_later_change_wins() -> None:
    base = Run.from_dict({"optimizer": {"steps": 5}})
    changed = base.with_overrides(optimizer={"rate": 0.3}, warmup=2)
    assert (changed.optimizer.rate, changed.optimizer.steps, changed.schedule.warmup) == (0.3, 5, 2)
    assert Run.dotted({"steps": 1, "optimizer.steps": 2}) == {"optimizer.steps": 2}
    assert Run.dotted({"optimizer": Optimizer(steps=4)}) == {"optimizer.rate": 0.1, "optimizer.steps": 4}


@pytest.mark.parametrize(("changes", "message"), [
    ({"rate": 0.2}, r"'rate' is ambiguous in the run config: it names optimizer.rate, schedule.rate; use one of "
                    r"these dotted keys"),
    ({"stesp": 1}, r"Unknown run config keys: \['stesp'\] \(did you mean 'steps'\?\). Valid keys: seed, "),
    ({"schedule.steps": 1}, r"Unknown run config keys: \['schedule.steps'\] \(did you mean 'optimizer.steps'\?\)"),
    ({"optimizer": 0.2}, r"'optimizer' is a section of the run config: pass its settings as a JSON object"),
    ({"optimizer": {"steps": "many"}}, r"Invalid config: optimizer.steps: Input should be a valid integer"),
])
def test_a_key_that_names_no_one_setting_is_refused_naming_the_fix(changes: dict[str, object], message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        Run().with_overrides(**changes)


def test_a_record_of_another_shape_is_refused_with_the_callers_fix() -> None:
    assert Run.from_record(Run().to_dict(), where="r.json", fix="f") == Run()
    with pytest.raises(UserInputError, match=r"^r.json records a Run of another shape \(steps outside the sections "
                                             r"optimizer, schedule\): it was written by an esper whose config had no "
                                             r"sections. Rerun it\.$"):
        Run.from_record({"seed": 1, "steps": 3}, where="r.json", fix="Rerun it.")
    with pytest.raises(UserInputError, match=r"^r.json: Invalid config: optimizer.bogus: Extra inputs"):
        Run.from_record({"optimizer": {"bogus": 1}}, where="r.json", fix="Rerun it.")
