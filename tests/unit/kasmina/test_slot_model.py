"""SeedSlot lifecycle mechanics and MorphogeneticModel contracts."""

from __future__ import annotations

import pytest
import torch

from esper.kasmina.hosts import CNNHost
from esper.kasmina.model import MorphogeneticModel, batch_statistics
from esper.kasmina.state import LifecycleConfig
from esper.leyline import SeedStage, TelemetryEvent, TelemetryEventType


def _model(slots: tuple[str, ...] = ("early", "mid", "late"), events: list[TelemetryEvent] | None = None
           ) -> MorphogeneticModel:
    host = CNNHost(in_channels=3, num_classes=10, channels=(8, 16, 32))
    return MorphogeneticModel(host, slots=list(slots), lifecycle=LifecycleConfig(),
                              on_event=events.append if events is not None else None)


def _germinate(m: MorphogeneticModel, slot: str = "mid", blueprint: str = "conv_light", blend: str = "linear",
               seed_id: str = "s1") -> None:
    m.germinate_seed(blueprint, seed_id, slot=slot, blend_id=blend, baseline_accuracy=50.0, epoch=1)


def test_unknown_slot_rejected_and_slots_ordered() -> None:
    with pytest.raises(ValueError, match="Unknown slot: deep"):
        _model(("deep",))
    assert _model(("late", "early")).slot_ids == ("early", "late")


def test_no_seeds_equals_host_bit_exact() -> None:
    m = _model()
    x = torch.randn(4, 3, 32, 32)
    assert torch.equal(m(x), m.host(x))


def test_a_training_slot_outputs_the_host_activation_without_running_its_seed() -> None:
    """TRAINING isolation is structural: the slot returns the activation it was given (the same tensor) and never
    calls its seed, so neither the model's value nor its autograd graph contains the seed."""
    m = _model()
    _germinate(m)
    m.step_epoch(1)
    s = m.slot("mid")
    assert s.state is not None and s.state.stage == SeedStage.TRAINING and s.seed is not None
    calls: list[int] = []
    s.seed.register_forward_hook(lambda mod, args, out: calls.append(1))
    h = torch.randn(2, 16, 8, 8, requires_grad=True)
    assert s(h) is h
    x = torch.randn(2, 3, 32, 32)
    logits, activations = m.forward_with_activations(x)
    assert not calls and torch.equal(logits, m.host(x))
    assert set(activations) == {"early", "mid", "late"}
    assert torch.equal(activations["mid"], m.host.forward_to_segment("mid", x))
    m.forward_probe("mid", activations["mid"])
    assert calls == [1]  # the probe (and the incubator) run it


def test_germinate_validates_before_mutating() -> None:
    m = _model()
    slot = m.slot("mid")
    with pytest.raises(ValueError, match="Blueprint 'lora' not available for topology 'cnn'"):
        _germinate(m, blueprint="lora")
    with pytest.raises(ValueError, match="Unknown blend"):
        _germinate(m, blend="cubic")
    assert slot.state is None and slot.seed is None and slot.gate is None
    _germinate(m)
    keys = set(slot.state_dict())
    with pytest.raises(RuntimeError, match="Slot 'mid' already holds seed 's1'"):
        _germinate(m, seed_id="s2")
    assert slot.state is not None and slot.state.seed_id == "s1" and set(slot.state_dict()) == keys


def test_shape_probe_does_not_consume_global_rng() -> None:
    m = _model()
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    # Creating the module consumes RNG for its init; the probe itself must not: compare against direct creation.
    m.slot("mid").registry.create("cnn", "conv_light", 16)
    after_create = torch.rand(3)
    torch.manual_seed(7)
    _germinate(m)
    assert torch.equal(torch.rand(3), after_create)
    assert not torch.equal(expected, after_create)


def test_germination_emits_event_and_sets_baseline() -> None:
    events: list[TelemetryEvent] = []
    m = _model(events=events)
    _germinate(m)
    r = m.get_slot_reports()["mid"]
    assert r.stage == SeedStage.GERMINATED
    assert r.metrics.initial_val_accuracy == r.metrics.accuracy_at_stage_start == 50.0
    assert r.metrics.seed_param_count == 9 * 16 * 16 + 2 * 16
    assert r.metrics.host_param_count == 6418
    assert events[-1].event_type == TelemetryEventType.SEED_GERMINATED and events[-1].slot_id == "mid"


def _advance_to_blending(m: MorphogeneticModel, slot: str = "mid") -> None:
    s = m.slot(slot)
    s.step_epoch(1)  # G1 -> TRAINING
    for acc in (51.0, 52.0, 53.0):
        s.record_accuracy(acc)
        s.update_gradient_ratio(0.1)
        s.set_probe_contribution(0.5)
        s.step_epoch(2)
    assert s.state is not None and s.state.stage == SeedStage.BLENDING


def test_step_epoch_table_linear() -> None:
    m = _model()
    _germinate(m)
    s = m.slot("mid")
    _advance_to_blending(m)
    assert s.state is not None
    assert (s.state.alpha, s.state.blending_steps_done) == (pytest.approx(0.2), 1)
    alphas = []
    for _ in range(4):
        s.record_accuracy(54.0)
        s.step_epoch(3)
        alphas.append(s.state.alpha)
    assert alphas == pytest.approx([0.4, 0.6, 0.8, 1.0]) and alphas[-1] == 1.0
    s.record_accuracy(55.0)
    s.step_epoch(4)
    assert s.state.stage == SeedStage.PROBATIONARY and s.state.alpha == 1.0


def test_training_stays_without_gradient_ratio() -> None:
    m = _model()
    _germinate(m)
    s = m.slot("mid")
    s.step_epoch(1)
    for acc in (55.0, 60.0, 65.0, 70.0):
        s.record_accuracy(acc)
        s.update_gradient_ratio(0.01)
        s.set_probe_contribution(5.0)
        s.step_epoch(2)
    assert s.state is not None and s.state.stage == SeedStage.TRAINING and s.state.alpha == 0.0


def test_training_stays_while_the_probe_says_the_seed_hurts() -> None:
    """The host improving says nothing about an isolated seed: only the probe lets it blend."""
    m = _model()
    _germinate(m)
    s = m.slot("mid")
    s.step_epoch(1)
    for acc in (55.0, 60.0, 65.0, 70.0):  # +20 pp of host progress
        s.record_accuracy(acc)
        s.update_gradient_ratio(0.5)
        s.set_probe_contribution(-0.1)
        s.step_epoch(2)
    assert s.state is not None and s.state.stage == SeedStage.TRAINING
    assert s.to_report().metrics.probe_contribution == -0.1  # type: ignore[union-attr]
    s.set_probe_contribution(0.0)
    s.record_accuracy(55.0)  # the host falls back: irrelevant
    s.step_epoch(3)
    assert s.state.stage == SeedStage.BLENDING


def _to_probation(m: MorphogeneticModel) -> None:
    _advance_to_blending(m)
    s = m.slot("mid")
    for _ in range(5):
        s.record_accuracy(54.0)
        s.step_epoch(3)
    assert s.state is not None and s.state.stage == SeedStage.PROBATIONARY


def test_probation_timeout_and_negative_counterfactual_culls() -> None:
    events: list[TelemetryEvent] = []
    m = _model(events=events)
    _germinate(m)
    _to_probation(m)
    s = m.slot("mid")
    s.set_counterfactual(0.5)
    changes = []
    for _ in range(5):
        s.record_accuracy(54.0)
        changes += s.step_epoch(5)
    assert s.state is None and changes[-1].reason == "probation_timeout"
    assert events[-1].event_type == TelemetryEventType.SEED_CULLED

    m2 = _model()
    _germinate(m2)
    _to_probation(m2)
    m2.slot("mid").set_counterfactual(0.0)
    m2.slot("mid").record_accuracy(54.0)
    assert m2.step_epoch(6)[0].reason == "negative_counterfactual"
    assert m2.slot("mid").state is None


def test_fossilize_gate_and_permanence() -> None:
    m = _model()
    _germinate(m)
    assert not m.fossilize_seed(slot="mid", epoch=2).passed  # GERMINATED: not probationary
    _to_probation(m)
    s = m.slot("mid")
    s.set_counterfactual(0.5)
    assert not m.fossilize_seed(slot="mid", epoch=4).passed
    s.set_counterfactual(2.0)
    assert m.fossilize_seed(slot="mid", epoch=4).passed
    assert s.state is not None and s.state.stage == SeedStage.FOSSILIZED and s.state.alpha == 1.0
    assert s.state.metrics.contribution_at_fossilization == 2.0
    assert not m.cull_seed(slot="mid", reason="manual", epoch=5)
    assert sum(s.state is not None and s.state.stage == SeedStage.FOSSILIZED for s in m.slots()) == 1
    assert m.seed_parameters() == []
    assert m.seed_param_count_total == 9 * 16 * 16 + 2 * 16


def test_cull_removes_module_gate_and_state_keys() -> None:
    m = _model()
    before = set(m.state_dict())
    _germinate(m, blend="gated")
    assert set(m.state_dict()) > before
    assert m.cull_seed(slot="mid", reason="manual", epoch=2)
    assert set(m.state_dict()) == before
    assert not m.cull_seed(slot="mid", reason="manual", epoch=2)


def test_gated_parameters_counted_and_in_seed_parameters() -> None:
    m = _model()
    _germinate(m, blend="gated")
    s = m.slot("mid")
    assert s.gate is not None
    gate_params = {id(p) for p in s.gate.parameters()}
    assert gate_params <= {id(p) for p in m.seed_parameters("mid")}
    r = 16 // 4
    assert s.seed_param_count == 9 * 16 * 16 + 2 * 16 + 16 * r + 2 * r + 1


def test_cached_prefix_ablation_equals_naive() -> None:
    m = _model()
    for slot, bp in (("early", "conv_light"), ("mid", "attention"), ("late", "depthwise")):
        _germinate(m, slot=slot, blueprint=bp, seed_id=slot)
        m.slot(slot).state.alpha = 0.7  # type: ignore[union-attr]
        m.slot(slot).state.stage = SeedStage.BLENDING  # type: ignore[union-attr]
    m.eval()
    x = torch.randn(5, 3, 32, 32)
    with torch.no_grad():
        full, ablated, probed = m.forward_with_counterfactuals(x, ("late", "early", "mid"))
        assert probed == {}
        assert torch.allclose(full, m(x), atol=1e-6)
        # Equality with an independent naive forward, for every blueprint and slot, is the contract test's job
        # (tests/contracts/test_blueprint_contracts.py); here: every requested slot is ablated, and differs.
        assert set(ablated) == {"early", "mid", "late"}
        for slot in ("early", "mid", "late"):
            assert not torch.allclose(ablated[slot], full, atol=1e-6)


def test_lifecycle_snapshot_and_counts() -> None:
    m = _model(("early", "mid"))
    _germinate(m, slot="mid")
    m.step_epoch(1)
    assert m.lifecycle_snapshot() == (("early", 0, 0), ("mid", int(SeedStage.TRAINING), 0))
    assert m.seeds_present() == 1
    assert m.total_params == m.host_param_count + m.seed_param_count_total


def test_export_load_round_trip_into_fresh_model() -> None:
    m = _model()
    _germinate(m, slot="early", blend="gated", seed_id="a")
    _germinate(m, slot="late", blueprint="norm", seed_id="b")
    _advance_to_blending(m, "early")
    x = torch.randn(3, 3, 32, 32)
    m.eval()
    fresh = _model()
    fresh.load_state(m.export_state())
    fresh.eval()
    assert torch.equal(fresh(x), m(x))
    assert fresh.get_slot_reports().keys() == m.get_slot_reports().keys()
    for slot in ("early", "late"):
        assert fresh.slot(slot).state.to_dict() == m.slot(slot).state.to_dict()  # type: ignore[union-attr]
    empty = _model()
    fresh.load_state(empty.export_state())
    assert fresh.seeds_present() == 0


def test_slot_follows_host_device_and_dtype() -> None:
    m = _model().double()
    _germinate(m)
    seed = m.slot("mid").seed
    assert seed is not None and next(seed.parameters()).dtype == torch.float64
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    assert m(x).dtype == torch.float64


def _segmented(m: MorphogeneticModel, x: torch.Tensor, boundary: str) -> torch.Tensor:
    """Run the model up to `boundary` (slots applied), then resume from there: must equal the full forward."""
    prev, prev_slot = x, None
    for s in m.slot_ids:
        h = m.segments.forward_to_segment(s, prev, from_segment=prev_slot)
        prev, prev_slot = m.slot(s)(h), s
        if s == boundary:
            break
    for s in m.slot_ids[m.slot_ids.index(boundary) + 1:]:
        h = m.segments.forward_to_segment(s, prev, from_segment=prev_slot)
        prev, prev_slot = m.slot(s)(h), s
    return m.segments.forward_from_segment(m.slot_ids[-1], prev)


@pytest.mark.parametrize("topology", ["cnn", "transformer"])
def test_segmented_forward_equals_full_forward_with_seeds(topology: str) -> None:
    from esper.kasmina.hosts import TransformerHost

    if topology == "cnn":
        host: torch.nn.Module = CNNHost(channels=(8, 16, 32))
        x = torch.randn(3, 3, 32, 32)
        seeds = ("conv_light", "attention", "norm")
    else:
        host = TransformerHost(vocab_size=50, n_embd=32, n_head=4, n_layer=3, block_size=16, dropout=0.0)
        x = torch.randint(0, 50, (2, 16))
        seeds = ("lora", "mlp", "attention")
    m = MorphogeneticModel(host, slots=["early", "mid", "late"], lifecycle=LifecycleConfig())
    for slot, bp in zip(("early", "mid", "late"), seeds, strict=True):
        m.germinate_seed(bp, slot, slot=slot, blend_id="gated", baseline_accuracy=0.0, epoch=1)
    m.step_epoch(1)
    m.slot("mid").state.stage, m.slot("mid").state.alpha = SeedStage.BLENDING, 0.6  # type: ignore[union-attr]
    m.slot("late").state.stage, m.slot("late").state.alpha = SeedStage.BLENDING, 1.0  # type: ignore[union-attr]
    m.eval()
    with torch.no_grad():
        full = m(x)
        for boundary in ("early", "mid", "late"):
            assert torch.equal(_segmented(m, x, boundary), full)
        _, ablated, _ = m.forward_with_counterfactuals(x, ("mid", "late"))
        assert set(ablated) == {"mid", "late"}


@pytest.mark.parametrize("training", [False, True])
def test_batch_statistics_normalizes_with_the_batch_and_changes_nothing(training: bool) -> None:
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(4)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-1.0, 1.0)
    bn.running_mean.fill_(3.0)
    net = torch.nn.Sequential(bn).train(training)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    x = 2.0 + 5.0 * torch.randn(6, 4, 3, 3)
    with batch_statistics(net):
        out = net(x)
    expected = torch.nn.functional.batch_norm(x, None, None, bn.weight, bn.bias, training=True, eps=bn.eps)
    assert torch.equal(out, expected)
    assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())  # incl. num_batches_tracked
    assert (bn.training, bn.track_running_stats) == (training, True)
    with pytest.raises(RuntimeError, match="boom"), batch_statistics(net):
        raise RuntimeError("boom")
    assert (bn.training, bn.track_running_stats) == (training, True)
