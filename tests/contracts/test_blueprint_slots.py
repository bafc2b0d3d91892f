"""Every blueprint in every slot of every registered task host, as the trainer runs it on CPU.

`test_blueprint_contracts.py` checks the blueprint contract on small stand-in hosts; this file covers the real task
hosts, whose slots include shapes the stand-ins never produce (a 1x1 map at the late slot of `cifar10_deep`, a
channels_last activation there that counts as contiguous in both memory formats). Each distinct host is built once
and batches are tiny, so the whole sweep costs a few seconds.
"""

from __future__ import annotations

import functools
import multiprocessing

import pytest
import torch

from esper.data.tasks import TASKS, TaskSpec
from esper.kasmina.blueprints import DEFAULT_REGISTRY
from esper.kasmina.model import MorphogeneticModel, batch_statistics
from esper.leyline import CANONICAL_SLOTS, SeedStage
from esper.tolaria import TrainState, compute_task_loss, train_step

INITIALIZATIONS = 50


def _distinct_hosts() -> list[str]:
    """One task per distinct host (architecture and input shape): tasks sharing a host would repeat the sweep."""
    first: dict[tuple[tuple[int, ...], str], str] = {}
    for name in sorted(TASKS):
        task = TASKS[name]
        first.setdefault((task.input_shape, repr(task.host_factory())), name)
    return sorted(first.values())


CASES = [(task, slot) for task in _distinct_hosts() for slot in CANONICAL_SLOTS]


def _batch(task: TaskSpec) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    if task.topology == "cnn":
        return (torch.randn(2, *task.input_shape, generator=g),
                torch.randint(0, task.num_outputs, (2,), generator=g))
    return (torch.randint(0, task.num_outputs, (1, 8), generator=g),
            torch.randint(0, task.num_outputs, (1, 8), generator=g))


@functools.cache
def _model(task_name: str) -> MorphogeneticModel:
    """The task's own host (built once per task) with all canonical slots, in training mode as the trainer uses it."""
    task = TASKS[task_name]
    torch.manual_seed(0)
    model = MorphogeneticModel(task.host_factory(), slots=list(CANONICAL_SLOTS), lifecycle=task.lifecycle)
    return model.train()


@functools.cache
def _slot_activation(task_name: str, slot: str) -> torch.Tensor:
    """The detached host activation at `slot` in training mode: what a TRAINING seed sees in the incubator."""
    with torch.no_grad():
        return _model(task_name).host.forward_to_segment(slot, _batch(TASKS[task_name])[0])


def _step(model: MorphogeneticModel, task: TaskSpec, slot: str) -> None:
    """One real train step (learning rate 0, so the shared model keeps its weights); every parameter the stage uses
    has a finite gradient when the post-backward hooks run (a TRAINING seed's comes from the incubator)."""
    ts = TrainState(model, task.host_optimizer, task.seed_optimizer, task.task_type, torch.device("cpu"))
    for opt in ts.optimizers():
        for group in opt.param_groups:
            group["lr"] = 0.0
    checked: list[bool] = []

    def check(state: TrainState) -> None:
        s = state.model.slot(slot)
        assert s.seed is not None and s.state is not None
        # The gate only acts while blending; in TRAINING the incubator puts the seed's output in place without it.
        used = model.seed_parameters(slot) if s.state.stage == SeedStage.BLENDING else list(s.seed.parameters())
        assert all(p.grad is not None for p in used)
        grads = [p.grad for p in [*used, *model.host_parameters()] if p.grad is not None]
        assert all(torch.isfinite(n) for n in torch._foreach_norm(grads))
        checked.append(True)

    ts.post_backward_hooks.append(check)
    train_step(ts, *_batch(task))
    assert checked
    model.zero_grad(set_to_none=True)
def test_the_sweep_covers_a_one_by_one_channels_last_slot() -> None:
    h = _slot_activation("cifar10_deep", "late")
    assert h.shape[-2:] == (1, 1)
    assert h.is_contiguous(memory_format=torch.channels_last) and h.is_contiguous()


@pytest.mark.parametrize(("task_name", "slot"), CASES)
def test_every_blueprint_trains_and_blends_in_every_task_slot(task_name: str, slot: str) -> None:
    task, model = TASKS[task_name], _model(task_name)
    if model.slot(slot).state is not None:  # left behind by an earlier failure on this shared model
        model.cull_seed(slot=slot, reason="cleanup", epoch=1)
    for name in DEFAULT_REGISTRY.names(task.topology):
        model.germinate_seed(name, f"{name}-{slot}", slot=slot, blend_id="gated", baseline_accuracy=10.0, epoch=1)
        model.step_epoch(1)
        state = model.slot(slot).state
        assert state is not None and state.stage == SeedStage.TRAINING
        _step(model, task, slot)
        state.stage, state.alpha = SeedStage.BLENDING, 0.5
        _step(model, task, slot)
        assert model.cull_seed(slot=slot, reason="test", epoch=1)
    model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("task_name", _distinct_hosts())
def test_every_blueprint_gets_a_gradient_at_initialization(task_name: str) -> None:
    """A seed with an exactly zero first gradient has gradient ratio 0 forever and can never pass G2.

    The first gradient is the incubator's: of the task loss with the fresh seed's output in place of the slot's
    (the host's BatchNorm on batch statistics, as `MorphogeneticModel.forward_probe` runs it; the other slots are
    empty). Each initialization is tried in every slot of its width (one module serves all of them: its weights are
    the same, only the slot's activation and the suffix differ).
    """
    task, host = TASKS[task_name], _model(task_name).host
    _, y = _batch(task)
    slots_by_width: dict[int, list[str]] = {}
    for slot in CANONICAL_SLOTS:
        slots_by_width.setdefault(host.segment_channels[slot], []).append(slot)
    for name in DEFAULT_REGISTRY.names(task.topology):
        for width, slots in slots_by_width.items():
            if DEFAULT_REGISTRY.get(task.topology, name).param_count(width) == 0:
                continue  # noop: nothing to train
            for init in range(INITIALIZATIONS):
                # The CPU generator only: torch.manual_seed also queues a lazy CUDA seeding with a formatted stack
                # trace, which would cost more than the whole check.
                torch.random.default_generator.manual_seed(init)
                seed = DEFAULT_REGISTRY.create(task.topology, name, width).train()
                params = list(seed.parameters())
                for slot in slots:
                    with batch_statistics(host):
                        out = host.forward_from_segment(slot, seed(_slot_activation(task_name, slot)))
                    grads = torch.autograd.grad(compute_task_loss(out, y, task.task_type), params, allow_unused=True)
                    total = sum(float(g.abs().sum()) for g in grads if g is not None)
                    assert total > 0, f"{name} at {task_name}/{slot}: zero gradient at initialization {init}"


def _train_norm_seed_at_the_one_by_one_slot() -> None:
    task = TASKS["cifar10_deep"]
    torch.manual_seed(0)
    model = MorphogeneticModel(task.host_factory(), slots=list(CANONICAL_SLOTS), lifecycle=task.lifecycle)
    ts = TrainState(model, task.host_optimizer, task.seed_optimizer, task.task_type, torch.device("cpu"))
    model.germinate_seed("norm", "s", slot="late", blend_id="linear", baseline_accuracy=10.0, epoch=1)
    model.step_epoch(1)
    ts.sync_optimizers()
    train_step(ts, *_batch(task))
    if not all(p.grad is not None for p in model.seed_parameters("late")):
        raise AssertionError("the norm seed got no gradient")


def test_norm_seed_at_a_one_by_one_slot_does_not_crash_cpu_backward() -> None:
    """Regression: CPU GroupNorm backward segfaulted on the 1x1 channels_last detached input of the TRAINING seed.

    Runs in a forked child, so that a crash fails this test instead of killing the test session (forking reuses the
    imported torch, where a fresh interpreter would spend seconds importing it).
    """
    child = multiprocessing.get_context("fork").Process(target=_train_norm_seed_at_the_one_by_one_slot)
    child.start()
    child.join(timeout=120)
    if child.is_alive():
        child.kill()
        child.join()
    assert child.exitcode == 0, f"the child exited with {child.exitcode} (negative: killed by that signal)"
