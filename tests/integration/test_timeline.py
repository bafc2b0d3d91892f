"""The verified 25-epoch lifecycle timeline as an executable test (scripted controller, stubbed measurements).

Loop order per epoch: train -> validate (+ablation) -> record_accuracy -> observe -> act -> step_epoch.
"""

from __future__ import annotations

import pytest

from esper.kasmina.hosts import CNNHost
from esper.kasmina.model import MorphogeneticModel
from esper.kasmina.state import LifecycleConfig
from esper.leyline import SeedStage

SIGMOID_ALPHAS = [0.0242, 0.2301, 0.7699, 0.9758, 1.0]


def _run(blend: str, fossilize_at: int | None) -> dict[int, tuple[SeedStage | None, float, SeedStage | None]]:
    """Returns per epoch: (stage during training, alpha in forward, stage at end of epoch)."""
    model = MorphogeneticModel(CNNHost(channels=(8, 16, 32)), slots=["early", "mid", "late"],
                               lifecycle=LifecycleConfig())
    slot = model.slot("mid")
    rows = {}
    for epoch in range(1, 26):
        during = slot.state.stage if slot.state else None
        alpha = slot.state.alpha if slot.state else 0.0
        acc = 50.0 + epoch  # stubbed: +1 pp per epoch
        if slot.state is not None:
            slot.update_gradient_ratio(0.1)  # stubbed gradient ratio (train pass)
            if slot.state.stage == SeedStage.TRAINING:
                slot.set_probe_contribution(0.5)  # stubbed probe (validation pass)
            if slot.state.alpha > 0:
                slot.set_counterfactual(2.0)  # stubbed counterfactual (validation pass)
        model.record_accuracy(acc)
        if epoch == 5:
            model.germinate_seed("conv_light", "s", slot="mid", blend_id=blend, baseline_accuracy=acc, epoch=epoch)
        if fossilize_at is not None and epoch == fossilize_at:
            assert model.fossilize_seed(slot="mid", epoch=epoch).passed
        model.step_epoch(epoch)
        rows[epoch] = (during, alpha, slot.state.stage if slot.state else None)
    return rows


def test_timeline_linear_with_fossilization() -> None:
    rows = _run("linear", fossilize_at=16)
    for e in range(1, 5):
        assert rows[e] == (None, 0.0, None)
    assert rows[5] == (None, 0.0, SeedStage.TRAINING)  # germinate + G1 in the same epoch
    for e in (6, 7):
        assert rows[e] == (SeedStage.TRAINING, 0.0, SeedStage.TRAINING)
    assert rows[8] == (SeedStage.TRAINING, 0.0, SeedStage.BLENDING)  # G2 after 3 training epochs
    for e, a in zip(range(9, 14), (0.2, 0.4, 0.6, 0.8, 1.0), strict=True):
        assert rows[e][0] == SeedStage.BLENDING and rows[e][1] == pytest.approx(a)
    assert rows[13][2] == SeedStage.PROBATIONARY  # G3 after exactly 5 blending epochs
    for e in (14, 15, 16):
        assert rows[e][0] == SeedStage.PROBATIONARY and rows[e][1] == 1.0
    assert rows[16][2] == SeedStage.FOSSILIZED
    for e in range(17, 26):
        assert rows[e] == (SeedStage.FOSSILIZED, 1.0, SeedStage.FOSSILIZED)


def test_timeline_probation_timeout_without_fossilize() -> None:
    rows = _run("linear", fossilize_at=None)
    for e in range(14, 19):
        assert rows[e][0] == SeedStage.PROBATIONARY
    assert rows[17][2] == SeedStage.PROBATIONARY
    assert rows[18][2] is None  # end of 18: 5 epochs in probation -> probation_timeout cull
    assert rows[19] == (None, 0.0, None)


def test_timeline_sigmoid_alphas() -> None:
    rows = _run("sigmoid", fossilize_at=18)
    assert [rows[e][1] for e in range(9, 14)] == pytest.approx(SIGMOID_ALPHAS, abs=1e-4)
    assert rows[13][1] == 1.0
    assert rows[18][2] == SeedStage.FOSSILIZED  # last decision opportunity still fossilizes


def test_latest_germination_that_can_fossilize_is_16() -> None:
    model = MorphogeneticModel(CNNHost(channels=(8, 16, 32)), slots=["mid"], lifecycle=LifecycleConfig())
    slot = model.slot("mid")
    fossilized_epoch = None
    for epoch in range(1, 26):
        if slot.state is not None:
            slot.update_gradient_ratio(0.1)
            if slot.state.stage == SeedStage.TRAINING:
                slot.set_probe_contribution(0.5)
            if slot.state.alpha > 0:
                slot.set_counterfactual(2.0)
        model.record_accuracy(50.0 + epoch)
        if epoch == 16:
            model.germinate_seed("norm", "s", slot="mid", baseline_accuracy=50.0 + epoch, epoch=epoch)
        if slot.state is not None and slot.state.stage == SeedStage.PROBATIONARY:
            assert model.fossilize_seed(slot="mid", epoch=epoch).passed
            fossilized_epoch = epoch
        model.step_epoch(epoch)
    assert fossilized_epoch == 25
