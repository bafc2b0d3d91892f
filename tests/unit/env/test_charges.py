"""The charges' one rule (given, else measured nearest the run's sample cap, else refused or left out) and the
calibrations it reads."""

from __future__ import annotations

import pytest

from esper.env.charges import CALIBRATIONS, charged_cost, measured_cost


def test_a_given_cost_wins_even_zero() -> None:
    assert charged_cost("param", "cifar10", 0.0, None) == 0.0
    assert charged_cost("compute", "synthetic", 0.8, 192) == 0.8


def test_without_one_the_cost_measured_nearest_the_sample_cap() -> None:
    by_cap = {c.max_train_samples: c for c in CALIBRATIONS["synthetic"].calibrations}
    assert charged_cost("param", "synthetic", None, 400) == by_cap[192].param_cost == measured_cost("param",
                                                                                                   "synthetic", 400)
    assert charged_cost("compute", "synthetic", None, None) == by_cap[2048].compute_cost


def test_none_measured_is_refused_unless_the_reward_is_only_logged() -> None:
    with pytest.raises(ValueError, match=r"no parameter cost .*none measured.*--param-cost C"):
        charged_cost("param", "cifar10", None, None)
    with pytest.raises(ValueError, match=r"no compute cost .*not near 40"):
        charged_cost("compute", "synthetic", None, 40)
    assert charged_cost("param", "cifar10", None, None, logged_only=True) is None
    assert charged_cost("param", "cifar10", 0.5, None, logged_only=True) == 0.5


def test_every_calibration_records_a_rerunnable_command_at_its_caps() -> None:
    for task, costs in CALIBRATIONS.items():
        for c in costs.calibrations:
            assert c.max_train_samples <= costs.train_set_size
            assert c.param_cost >= 0 and len(c.widths) == len(c.added_param_ratios) == len(c.mean_final_accuracy)
            assert len(c.added_flop_ratios) == len(c.widths) and c.added_flop_ratios[0] == 0.0
            # λ_c is the slope of the same accuracies against the widths' added training compute
            xs, ys = c.added_flop_ratios, c.mean_final_accuracy
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
            assert c.compute_cost == pytest.approx(max(slope, 0.0), abs=5e-4)
            assert f"--task {task} " in c.command
            assert f"--max-train-samples {c.max_train_samples} " in c.command
            assert c.command.endswith(f"--max-val-samples {c.max_val_samples}")
