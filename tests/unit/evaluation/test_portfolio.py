"""SBS and VBS of a task family, the gap between them, and the share of it a policy closes."""

from __future__ import annotations

import pytest

from esper.evaluation.portfolio import gap_closed, portfolio

SCORES = {
    "clean": {"static": 80.0, "fixed:norm@early": 84.0, "fixed:conv_light@late": 81.0},
    "bright": {"static": 60.0, "fixed:norm@early": 75.0, "fixed:conv_light@late": 61.0},
    "thin": {"static": 70.0, "fixed:norm@early": 71.0, "fixed:conv_light@late": 78.0},
    "held": {"static": 50.0, "fixed:conv_light@late": 58.0},
}


def test_sbs_is_best_on_average_over_the_training_types_and_vbs_best_per_type() -> None:
    p = portfolio(SCORES, ["clean", "bright", "thin"])
    assert p.sbs == "fixed:norm@early"  # 76.7 on average, against 73.3 and 70.0
    assert p.vbs == {"clean": "fixed:norm@early", "bright": "fixed:norm@early", "thin": "fixed:conv_light@late",
                     "held": "fixed:conv_light@late"}
    assert p.gap("thin") == pytest.approx(7.0) and p.gap("clean") == 0.0
    assert p.mean_gap(["clean", "bright", "thin"]) == pytest.approx(7.0 / 3)


def test_sbs_only_among_candidates_scored_on_every_training_type() -> None:
    scores = {"a": {"x": 1.0, "y": 9.0}, "b": {"x": 2.0}}
    assert portfolio(scores, ["a", "b"]).sbs == "x"
    with pytest.raises(ValueError, match="every training type"):
        portfolio({"a": {"x": 1.0}, "b": {"y": 2.0}}, ["a", "b"])


def test_gap_closed() -> None:
    assert gap_closed(policy=77.0, sbs=75.0, vbs=79.0) == pytest.approx(0.5)
    assert gap_closed(policy=74.0, sbs=75.0, vbs=79.0) == pytest.approx(-0.25)
    assert gap_closed(policy=80.0, sbs=75.0, vbs=75.0) is None
