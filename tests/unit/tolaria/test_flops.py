"""FLOP counting per model state: the count an env assigns to a pass from its cache equals what `FlopCounterMode`
measures for the same pass run for real, in every lifecycle stage, on a CNN and a transformer host."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

from esper.data.tasks import get_task_spec
from esper.env.env import EnvSpec, MorphoEnv
from esper.kasmina.state import LifecycleConfig
from esper.leyline import SeedStage
from esper.tolaria import counterfactual_slots, finish_train_epoch, finish_validation, probe_slots
from esper.tolaria.flops import flop_counter

LIFECYCLE = LifecycleConfig(min_training_epochs=1, blending_steps=2, min_blending_epochs=1)
WALKED = (None, SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY,
          SeedStage.FOSSILIZED)


def _env(task_name: str) -> MorphoEnv:
    task = dataclasses.replace(get_task_spec(task_name), lifecycle=LIFECYCLE)
    return MorphoEnv(EnvSpec(task, ("early", "mid", "late"), 10, env_seed=5, device=torch.device("cpu")), "test")


def _batch(env: MorphoEnv, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    task = env.spec.task
    if task.topology == "cnn":
        return torch.randn(n, *task.input_shape), torch.randint(0, task.num_outputs, (n,))
    tokens = torch.randint(0, task.num_outputs, (n, task.input_shape[0] + 1))
    return tokens[:, :-1], tokens[:, 1:]


def _walk(env: MorphoEnv, slot: str, blueprint: str, blend: str) -> Iterator[SeedStage]:
    """Germinate into `slot` and advance with stubbed measurements, yielding once in each stage reached, up to
    FOSSILIZED (the env's optimizers follow every change)."""
    s = env.model.slot(slot)
    env.model.germinate_seed(blueprint, f"{slot}_seed", slot=slot, blend_id=blend, baseline_accuracy=50.0, epoch=1)
    acc, last = 50.0, None
    for epoch in range(2, 40):
        assert s.state is not None
        if s.state.stage != last:
            last = s.state.stage
            env.ts.sync_optimizers()
            yield last
            if last == SeedStage.FOSSILIZED:
                return
        s.update_gradient_ratio(1.0)
        s.set_probe_contribution(1.0)
        if s.state.alpha > 0:
            s.set_counterfactual(2.0)
        acc += 1.0
        s.record_accuracy(acc)
        if s.state.stage == SeedStage.PROBATIONARY:
            assert s.fossilize(epoch).passed
        else:
            s.step_epoch(epoch)
    raise AssertionError(f"could not walk {slot} to FOSSILIZED")


def _drive(env: MorphoEnv, slot: str, target: SeedStage, blueprint: str, blend: str) -> None:
    for stage in _walk(env, slot, blueprint, blend):
        if stage == target:
            return


def _assigned_and_measured(env: MorphoEnv, run: Callable[[], None]) -> tuple[int, int]:
    """FLOPs the env adds for `run` from its cache, and what a counter measures for the very same passes."""
    before, known = env.flops.total, dict(env.flops.per_pass)
    with flop_counter() as reference:
        run()
    assert env.flops.per_pass == known  # the cached count, not a fresh measurement of the same call
    return env.flops.total - before, reference.get_total_flops()


def _check_passes(env: MorphoEnv) -> dict[str, int]:
    """Each pass kind runs once to be measured, then again (on other data) as the cached count under a reference
    counter; returns the FLOPs of one train step, one recalibration over two batches and one validation batch."""
    ablate, probe = counterfactual_slots(env.model), probe_slots(env.model)
    (x1, y1), (x2, y2), (x3, y3), (x4, y4) = (_batch(env, 4) for _ in range(4))
    env.train_batch(x1, y1, collect_gradients=False)
    step, measured = _assigned_and_measured(env, lambda: env.train_batch(x2, y2, collect_gradients=True))
    assert step == measured > 0
    env.finish_train_pass()
    env.train_batch(x3, y3, collect_gradients=False)
    env.train_batch(x4, y4, collect_gradients=False)
    recalibration, measured = _assigned_and_measured(env, env.finish_train_pass)
    assert recalibration == measured
    finish_train_epoch(env.ts)
    env.validate_batch(x1, y1, ablate, probe)
    val, measured = _assigned_and_measured(env, lambda: env.validate_batch(x2, y2, ablate, probe))
    assert val == measured > 0
    finish_validation(env.ts)
    return {"train": step, "recalibrate": recalibration, "validate": val}


@pytest.mark.parametrize(("task", "blueprint", "blend"), [("synthetic", "conv_light", "gated"),
                                                          ("synthetic_text", "attention", "linear")])
def test_cached_counts_equal_measured_counts_in_every_stage(task: str, blueprint: str, blend: str) -> None:
    """One env walks a seed through the lifecycle: in each stage the cache (keyed by the state) gives exactly
    what the counter measures for a real train step, BatchNorm recalibration and validation batch."""
    env = _env(task)
    counts = {None: _check_passes(env)}
    for stage in _walk(env, "mid", blueprint, blend):
        counts[stage] = _check_passes(env)
    assert tuple(counts) == WALKED
    none, germinated, training, blending = (counts[s] for s in WALKED[:4])
    assert germinated == none  # a GERMINATED seed takes no part in any pass
    assert training["train"] > none["train"]  # the incubator's forward and backward
    assert training["validate"] > none["validate"]  # the probe
    assert blending["train"] > none["train"] and blending["validate"] > none["validate"]  # blended, ablated
    recalibrates = env.spec.task.topology == "cnn"  # only BatchNorm hosts re-estimate statistics
    assert (none["recalibrate"] > 0) == recalibrates


def test_cached_counts_equal_measured_counts_with_seeds_in_several_stages() -> None:
    """Seeds in TRAINING, BLENDING and FOSSILIZED at once, and a batch of another size."""
    env = _env("synthetic")
    _drive(env, "early", SeedStage.FOSSILIZED, "conv_light", "linear")
    _drive(env, "mid", SeedStage.BLENDING, "depthwise", "sigmoid")
    _drive(env, "late", SeedStage.TRAINING, "norm", "linear")
    _check_passes(env)
    x, y = _batch(env, 3)
    env.train_batch(x, y, collect_gradients=False)
    step, measured = _assigned_and_measured(env, lambda: env.train_batch(*_batch(env, 3), collect_gradients=False))
    assert step == measured > 0


def test_train_step_flops_of_the_synthetic_host() -> None:
    """A seed in TRAINING adds its incubator pass to the host's step; the count is an exact int."""
    env = _env("synthetic")
    without = _check_passes(env)["train"]
    _drive(env, "mid", SeedStage.TRAINING, "conv_light", "linear")
    with_seed = _check_passes(env)["train"]
    assert isinstance(without, int) and isinstance(with_seed, int)
    assert with_seed > without


def test_cpu_attention_is_counted_like_the_cuda_kernels() -> None:
    """PyTorch counts its CPU flash-attention kernel as 0 FLOPs; the counter uses the CUDA kernels' formulas."""
    q, k, v = (torch.randn(2, 4, 16, 8, requires_grad=True) for _ in range(3))
    with flop_counter() as counter:
        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    shape = (2, 4, 16, 8)
    assert counter.get_total_flops() == sdpa_flop_count(shape, shape, shape) + sdpa_backward_flop_count(
        shape, shape, shape, shape)
