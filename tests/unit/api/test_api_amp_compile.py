"""bf16 autocast on CPU and `torch.compile` on a growing model: both work, a TRAINING seed stays isolated under
autocast, and moving α (the blend ramp, a counterfactual's α = 0) never recompiles: α is a buffer."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.testing import CompileCounterWithBackend

import esper
from esper.leyline import SeedStage
from unit.api.models import SmallCNN, germinated, host_parameters, image_data

X, Y = image_data(16, seed=3)


def test_bf16_autocast_trains_training_and_blended_seeds_and_keeps_a_training_seed_isolated() -> None:
    original = SmallCNN()
    model = esper.wrap(copy.deepcopy(original), ["stem", "layer1"], example_input=X[:2])
    training = germinated(model, "early", "conv_light", stage=SeedStage.TRAINING)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, ref = model(X), original(X)
        F.cross_entropy(out, Y).backward()
        F.cross_entropy(ref, Y).backward()
    assert out.dtype == torch.bfloat16 and torch.equal(out, ref)
    params = host_parameters(model)
    assert all(torch.equal(params[n].grad, p.grad) for n, p in original.named_parameters())
    blended = germinated(model, "mid", "norm", stage=SeedStage.BLENDING)
    seeds = [*training.seed_parameters(), *blended.seed_parameters()]
    before = [p.detach().clone() for p in seeds]
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(3):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(X), Y)
        loss.backward()
        optimizer.step()
    assert torch.isfinite(loss) and all(p.dtype == torch.float32 for p in seeds)
    assert all(not torch.equal(a, p) for a, p in zip(before, seeds, strict=True))


def test_torch_compile_follows_the_lifecycle_and_alpha_changes_do_not_recompile() -> None:
    model = esper.wrap(SmallCNN(), ["stem", "layer1"])  # shapes learnt inside the compiled forward
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model, backend=counter)
    assert torch.equal(compiled(X), model(X))
    slot = germinated(model, "early", "conv_light", stage=SeedStage.TRAINING)
    out = compiled(X)
    out.sum().backward()
    assert torch.equal(out, model(X)) and all(p.grad is not None for p in slot.seed_parameters())
    blending = germinated(model, "mid", "norm", stage=SeedStage.BLENDING)  # a new structure: a recompile is due
    compiled(X)
    graphs = counter.frame_count
    blending.record_accuracy(50.0)
    blending.step_epoch(3)  # α ramps on
    assert blending.state is not None and blending.state.stage == SeedStage.BLENDING and blending.alpha > 0.1
    assert torch.allclose(compiled(X), model(X), atol=1e-6)
    with blending.ablated():
        assert torch.allclose(compiled(X), model(X), atol=1e-6)
    assert counter.frame_count == graphs


@pytest.mark.slow
def test_torch_compile_with_inductor_matches_eager() -> None:
    model = esper.wrap(SmallCNN(), ["stem", "layer1"], example_input=X[:2])
    germinated(model, "early", "conv_light", stage=SeedStage.BLENDING)
    compiled = torch.compile(model)
    out = compiled(X)
    out.sum().backward()
    assert torch.allclose(out, model(X), atol=1e-5)
