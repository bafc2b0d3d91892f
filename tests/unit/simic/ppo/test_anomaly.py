"""AnomalyDetector thresholds, RatioExplosionDiagnostic and per-layer gradient stats."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import torch
from torch import nn

from esper.data.tasks import get_task_spec
from esper.simic.ppo.anomaly import AnomalyDetector, RatioExplosionDiagnostic, collect_per_layer_gradients

CNN = get_task_spec("synthetic").action_space


@pytest.mark.parametrize(
    ("episode", "expected"),
    [(0, -0.5), (9, -0.5), (10, -0.2), (24, -0.2), (25, 0.0), (74, 0.0), (75, 0.1), (100, 0.1)],
)
def test_ev_threshold_phases(episode: int, expected: float) -> None:
    assert AnomalyDetector.ev_threshold(episode, 100) == expected


@pytest.mark.parametrize("total", [0, -5])
def test_ev_threshold_rejects_non_positive_totals(total: int) -> None:
    with pytest.raises(ValueError, match="total_episodes"):
        AnomalyDetector().check_all(1.0, 1.0, 0.5, False, 0, total)


def test_healthy_update_has_no_anomaly() -> None:
    report = AnomalyDetector().check_all(1.5, 0.5, 0.3, False, 80, 100)
    assert not report.has_anomaly
    assert report.anomaly_types == []
    assert report.details == {}


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"ratio_max": 5.01}, ["ratio_explosion"]),
        ({"ratio_min": 0.09}, ["ratio_collapse"]),
        ({"explained_variance": 0.05}, ["value_collapse"]),  # late phase: bar is 0.1
        ({"skipped_update": True}, ["numerical_instability"]),
        ({"ratio_max": math.nan}, ["numerical_instability"]),
        (
            {"ratio_max": 9.0, "ratio_min": 0.01, "skipped_update": True},
            ["ratio_explosion", "ratio_collapse", "numerical_instability"],
        ),
    ],
)
def test_each_anomaly_type(kwargs: dict[str, Any], expected: list[str]) -> None:
    args: dict[str, Any] = {
        "ratio_max": 1.0,
        "ratio_min": 1.0,
        "explained_variance": 0.5,
        "skipped_update": False,
    }
    args.update(kwargs)
    report = AnomalyDetector().check_all(**args, current_episode=90, total_episodes=100)
    assert report.has_anomaly
    assert report.anomaly_types == expected
    assert set(report.details) == set(expected)


def test_value_collapse_depends_on_progress() -> None:
    detector = AnomalyDetector()
    assert not detector.check_all(1.0, 1.0, -0.3, False, 5, 100).has_anomaly
    assert detector.check_all(1.0, 1.0, -0.3, False, 20, 100).anomaly_types == ["value_collapse"]


def test_custom_ratio_thresholds_and_validation() -> None:
    detector = AnomalyDetector(max_ratio_threshold=2.0, min_ratio_threshold=0.5)
    assert detector.check_all(3.0, 0.4, 0.5, False, 0, 1).anomaly_types == ["ratio_explosion", "ratio_collapse"]
    with pytest.raises(ValueError):
        AnomalyDetector(max_ratio_threshold=0.5)


def _actions(n: int) -> dict[str, torch.Tensor]:
    idx = torch.arange(n)
    return {"op": idx % 4, "slot": idx % 3, "blueprint": idx % 5, "blend": idx % 3}


def test_ratio_diagnostic_flags_mocked_outliers() -> None:
    ratio = torch.tensor([1.0, 6.0, 0.05])
    old = torch.zeros(3)
    new = ratio.log()
    diag = RatioExplosionDiagnostic.from_batch(ratio, old, new, _actions(3), space=CNN)
    assert set(diag.worst_indices) == {1, 2}
    assert diag.worst_indices == (2, 1)  # |log 0.05| = 3.0 > |log 6| = 1.79
    assert diag.worst_ratios == pytest.approx((0.05, 6.0))
    assert diag.n_exploded == 1
    assert diag.n_collapsed == 1
    assert diag.worst_actions == (
        {"op": "CULL", "slot": "late", "blueprint": "attention", "blend": "gated"},
        {"op": "GERMINATE", "slot": "mid", "blueprint": "conv_light", "blend": "sigmoid"},
    )
    assert diag.logp_diff_mean == pytest.approx(float(new.mean()))
    assert diag.logp_diff_max == pytest.approx(math.log(20.0))


def test_ratio_diagnostic_ranks_flagged_before_extreme_unflagged_and_caps_at_ten() -> None:
    # 0.15 is inside the band but has a larger |log| than 5.5; it must not displace a flagged ratio.
    ratio = torch.cat([torch.full((20,), 0.15), torch.full((15,), 5.5), torch.tensor([100.0])])
    diag = RatioExplosionDiagnostic.from_batch(ratio, torch.zeros(36), ratio.log(), _actions(36), space=CNN)
    assert len(diag.worst_indices) == 10
    assert diag.worst_indices[0] == 35
    assert all(i >= 20 for i in diag.worst_indices)
    assert diag.n_exploded == 16
    assert diag.n_collapsed == 0


def test_ratio_diagnostic_transformer_names_nan_and_strict_json() -> None:
    ratio = torch.tensor([math.nan, 1.0, math.inf])
    actions = {k: torch.tensor([1, 1, 1]) for k in ("op", "slot", "blueprint", "blend")}
    diag = RatioExplosionDiagnostic.from_batch(ratio, torch.zeros(3), torch.zeros(3), actions,
                                               space=get_task_spec("synthetic_text").action_space)
    assert set(diag.worst_indices) == {0, 2}
    assert diag.worst_actions[0]["blueprint"] == "lora"
    encoded = json.dumps(diag.to_dict(), allow_nan=False)
    assert json.loads(encoded)["n_exploded"] == 1


def test_ratio_diagnostic_empty_batch_and_missing_heads() -> None:
    empty = torch.zeros(0)
    diag = RatioExplosionDiagnostic.from_batch(empty, empty, empty, _actions(0), space=CNN)
    assert diag.worst_indices == () and diag.n_exploded == 0
    with pytest.raises(ValueError, match="heads"):
        RatioExplosionDiagnostic.from_batch(torch.ones(2), torch.zeros(2), torch.zeros(2), {"op": torch.zeros(2)},
                                             space=CNN)


def test_per_layer_gradient_stats() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    weight, bias = model[0].weight, model[0].bias
    weight.grad = torch.tensor([[0.0, 3.0], [-4.0, 20.0]])
    bias.grad = torch.tensor([1e-8, math.nan])
    # model[1] has no gradient and is skipped.
    stats = collect_per_layer_gradients(model)
    assert list(stats) == ["0.weight", "0.bias"]
    w = stats["0.weight"]
    assert w["numel"] == 4
    assert w["norm"] == pytest.approx(math.sqrt(9 + 16 + 400))
    assert w["mean"] == pytest.approx(19 / 4)
    assert w["std"] == pytest.approx(float(weight.grad.std(unbiased=False)))
    assert (w["min"], w["max"]) == (-4.0, 20.0)
    assert w["zero_fraction"] == 0.25
    assert w["small_fraction"] == 0.25
    assert w["large_fraction"] == 0.25
    assert (w["nan_count"], w["inf_count"]) == (0, 0)
    b = stats["0.bias"]
    assert (b["nan_count"], b["inf_count"]) == (1, 0)
    assert b["mean"] == pytest.approx(1e-8)  # moments over finite entries only
    json.dumps(stats, allow_nan=False)


def test_per_layer_gradient_limit_and_empty() -> None:
    model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(6)])
    assert collect_per_layer_gradients(model) == {}
    model(torch.randn(3, 2)).sum().backward()
    assert len(collect_per_layer_gradients(model, max_layers=3)) == 3
    assert len(collect_per_layer_gradients(model)) == 8
    with pytest.raises(ValueError):
        collect_per_layer_gradients(model, max_layers=0)
