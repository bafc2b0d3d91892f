"""IQLConfig: the documented defaults, strict keys, finite and in-range values, resume rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from esper.simic.iql import IQLConfig


def test_defaults_are_the_documented_hyperparameters() -> None:
    cfg = IQLConfig()
    assert (cfg.expectile, cfg.beta, cfg.gamma, cfg.polyak, cfg.lr) == (0.7, 3.0, 0.99, 0.005, 3e-4)
    assert (cfg.batch_size, cfg.weight_clip, cfg.epochs, cfg.steps_per_epoch) == (256, 100.0, 100, 1000)
    assert cfg.hidden_sizes == [256, 256]


@pytest.mark.parametrize(("change", "message"), [
    ({"expectile": 1.0}, "expectile"),
    ({"beta": -1.0}, "beta"),
    ({"gamma": 0.0}, "gamma"),
    ({"polyak": 0.0}, "polyak"),
    ({"lr": float("nan")}, "lr"),
    ({"lr": float("inf")}, "lr"),
    ({"batch_size": 0}, "batch_size"),
    ({"hidden_sizes": []}, "hidden_sizes"),
    ({"hidden_sizes": [2]}, "hidden_sizes"),
    ({"weight_clip": 0.5}, "weight_clip"),
    ({"seed": -1}, "seed"),
    ({"expectilee": 0.7}, "Unknown IQL config keys"),
])
def test_bad_values_raise_one_value_error(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        IQLConfig.from_dict(change)
    assert info.value.__cause__ is None


def test_round_trip_json_and_overrides(tmp_path: Path) -> None:
    cfg = IQLConfig(beta=0.0, hidden_sizes=[16])
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg.to_dict()))
    assert IQLConfig.from_json(path) == cfg
    assert cfg.with_overrides(epochs=5).epochs == 5
    with pytest.raises(ValueError, match="not found"):
        IQLConfig.from_json(tmp_path / "missing.json")


def test_resume_may_change_only_epochs_and_device() -> None:
    saved = IQLConfig().to_dict()
    assert IQLConfig(epochs=200, device="cpu").resume_conflicts(saved) == []
    assert IQLConfig(beta=1.0, lr=1e-3).resume_conflicts(saved) == ["beta", "lr"]
