"""A slot's forward through the lifecycle: a TRAINING seed leaves the host's outputs and gradients bit for bit as
they were while it learns from the gradient at its slot; a blended seed joins the forward by its α buffer."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import esper
from esper.leyline import SeedStage
from unit.api.models import SmallCNN, germinated, host_parameters

X = torch.randn(2, 3, 12, 12)


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**16), blueprint=st.sampled_from(["conv_light", "attention", "norm", "depthwise"]))
def test_a_training_seed_changes_neither_host_outputs_nor_host_gradients(seed: int, blueprint: str) -> None:
    torch.manual_seed(seed)
    original = SmallCNN()
    # `layer1.bn1` is followed by an in-place ReLU, which must not reach the seed's saved input.
    model = esper.wrap(copy.deepcopy(original), ["stem", "layer1.bn1"], example_input=X)
    slots = [germinated(model, name, blueprint, stage=SeedStage.TRAINING) for name in ("early", "mid")]
    x = torch.randn(4, 3, 12, 12)
    out, ref = model(x), original(x)
    out.square().sum().backward()
    ref.square().sum().backward()
    assert torch.equal(out, ref)
    params = host_parameters(model)
    for name, param in original.named_parameters():
        assert torch.equal(params[name].grad, param.grad), name
    for slot in slots:
        grads = [p.grad for p in slot.seed_parameters()]
        assert grads and all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)


def test_a_training_seed_is_left_out_without_gradients_and_probed_on_request() -> None:
    model = esper.wrap(SmallCNN(), ["stem"], example_input=X)
    slot = germinated(model, "early", "conv_light", stage=SeedStage.TRAINING)
    model.eval()
    with torch.no_grad():
        plain = model(X)
        with slot.probed():
            probed = model(X)
    assert slot.seed is not None and not torch.equal(plain, probed)
    slot.clear()
    with torch.no_grad():
        assert torch.equal(model(X), plain)


def test_a_blending_seed_joins_the_forward_by_its_alpha_buffer() -> None:
    model = esper.wrap(SmallCNN(), ["stem"], example_input=X).eval()
    with torch.no_grad():
        host = model(X)
    slot = germinated(model, "early", "conv_light", stage=SeedStage.BLENDING)
    assert slot.state is not None and 0 < slot.state.alpha < 1
    assert torch.equal(slot.blend_weight, torch.tensor(slot.state.alpha))  # the lifecycle's α, in the buffer
    with torch.no_grad():
        blended = model(X)
        with slot.ablated():
            assert float(slot.blend_weight) == 0.0
            ablated = model(X)
    assert not torch.equal(blended, host) and torch.equal(ablated, host)
    assert torch.equal(slot.blend_weight, torch.tensor(slot.state.alpha))
    assert "blend_weight" not in "".join(model.state_dict())  # α is saved with the lifecycle, not as a weight


def test_a_slot_after_an_in_place_op_keeps_its_seed_input() -> None:
    """`stem.1` (BatchNorm) is followed by ReLU(inplace=True): a TRAINING seed must still backpropagate."""
    model = esper.wrap(SmallCNN(), ["stem.1"], example_input=X)
    slot = germinated(model, "early", "conv_light", stage=SeedStage.TRAINING)
    model(X).sum().backward()
    assert all(p.grad is not None for p in slot.seed_parameters())


@pytest.mark.parametrize("stage", [SeedStage.TRAINING, SeedStage.BLENDING])
def test_a_seed_follows_the_model_to_its_dtype_and_the_slot_output_keeps_its_dtype(stage: SeedStage) -> None:
    model = esper.wrap(SmallCNN(), ["stem"], example_input=X).double()
    slot = germinated(model, "early", "norm", stage=stage)
    assert all(p.dtype == torch.float64 for p in slot.seed_parameters())
    assert model(X.double()).dtype == torch.float64
