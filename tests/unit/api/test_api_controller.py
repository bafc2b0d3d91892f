"""`esper.Controller` in a plain PyTorch loop: parameter groups made with the optimizer's settings, a seed the
optimizer steps, the host's optimizer state kept, a scheduler that follows, and growth end to end."""

from __future__ import annotations

import pytest
import torch

import esper
from esper.api import Controller, StepResult
from esper.api.wrapping import slot_set_of
from unit.api.models import QUICK, SmallCNN, evaluator, image_data, train_epoch, val_loss

X, Y = image_data(128, seed=1)
XV, YV = image_data(64, seed=2)


def grown(policy: str = "grow:conv_light@early", *, lr: float = 0.01, scheduler: bool = False,
          max_epochs: int = 8) -> tuple[torch.nn.Module, torch.optim.Optimizer, Controller, object]:
    torch.manual_seed(0)
    model = esper.wrap(SmallCNN(), ["stem", "layer1", "layer2"], example_input=X[:2])
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=5) if scheduler else None
    ctl = esper.Controller(model, optimizer, policy=policy, evaluate=evaluator(model, XV, YV), max_epochs=max_epochs,
                           scheduler=sched, config=QUICK)
    return model, optimizer, ctl, sched


def epoch(model: torch.nn.Module, optimizer: torch.optim.Optimizer, ctl: Controller, sched: object = None
          ) -> StepResult:
    train_epoch(model, optimizer, X, Y)
    if sched is not None:
        sched.step()  # type: ignore[attr-defined]
    return ctl.step({"val_accuracy": evaluator(model, XV, YV)(), "val_loss": val_loss(model, XV, YV)})


def test_germination_adds_a_group_the_optimizer_steps_and_keeps_the_host_adam_state() -> None:
    model, optimizer, ctl, _ = grown()
    train_epoch(model, optimizer, X, Y)
    optimizer.param_groups[0]["lr"] = 0.004  # the host's group as it is now (a schedule moved it), not the defaults
    host_state = {p: {k: v.clone() for k, v in optimizer.state[p].items()} for p in model.parameters()}
    result = ctl.step({"val_accuracy": evaluator(model, XV, YV)()})  # grow: germinates at its first decision
    assert result.command is not None and result.command.describe() == "GERMINATE early conv_light/sigmoid"
    assert result.added == ("early",) and result.structure_changed
    assert [t.new for t in result.transitions] == ["GERMINATED", "TRAINING"]
    seed = slot_set_of(model).slot("early").seed_parameters()
    assert len(optimizer.param_groups) == 2 and optimizer.param_groups[1]["params"] == seed
    host_settings = {k: v for k, v in optimizer.param_groups[0].items() if k != "params"}
    assert {k: v for k, v in optimizer.param_groups[1].items() if k != "params"} == host_settings
    assert optimizer.param_groups[1]["lr"] == 0.004 and optimizer.param_groups[1]["weight_decay"] == 1e-4
    for p, state in host_state.items():  # the germination itself touched no host state
        assert all(torch.equal(optimizer.state[p][k], v) for k, v in state.items())
    before = [p.detach().clone() for p in seed]
    epoch(model, optimizer, ctl)
    assert all(not torch.equal(a, p) for a, p in zip(before, seed, strict=True))  # the optimizer stepped the seed
    assert all(int(optimizer.state[p]["step"]) == 4 for p in seed)  # the epoch's 4 steps, all of them


def test_a_cull_removes_the_seed_group_and_its_state_and_keeps_the_host_state() -> None:
    model, optimizer, ctl, _ = grown()
    epoch(model, optimizer, ctl)
    epoch(model, optimizer, ctl)
    slot = slot_set_of(model).slot("early")
    seed = slot.seed_parameters()
    host = [p for p in model.parameters() if all(p is not s for s in seed)]
    host_state = {p: {k: v.clone() for k, v in optimizer.state[p].items()} for p in host}
    assert slot.cull("test", epoch=3)
    added, removed = ctl.groups.sync(ctl.slot_set)
    assert (added, removed) == ((), ("early",))
    assert len(optimizer.param_groups) == 1 and all(p not in optimizer.state for p in seed)
    for p, state in host_state.items():
        assert all(torch.equal(optimizer.state[p][k], v) for k, v in state.items())


def test_seed_groups_follow_the_learning_rate_scheduler() -> None:
    model, optimizer, ctl, sched = grown(scheduler=True)
    epoch(model, optimizer, ctl, sched)
    assert len(sched.base_lrs) == 2 and len(sched._last_lr) == 2  # type: ignore[attr-defined]
    for _ in range(2):
        epoch(model, optimizer, ctl, sched)
        assert optimizer.param_groups[1]["lr"] == optimizer.param_groups[0]["lr"] < 0.01


def test_the_heuristic_grows_a_user_model_end_to_end() -> None:
    model, optimizer, ctl, _ = grown("heuristic", max_epochs=9)
    results = [epoch(model, optimizer, ctl) for _ in range(9)]
    commands = [r.command.op.name for r in results if r.command is not None]
    assert "GERMINATE" in commands and results[-1].command is None
    assert any(r.contributions.probe for r in results) and any(r.contributions.counterfactual for r in results)
    assert any(t.new == "BLENDING" for r in results for t in r.transitions)


@pytest.mark.parametrize(("metrics", "message"), [
    ({"val_acc": 50.0}, "val_accuracy required"),
    ({"val_accuracy": 0.5, "loss": 1.0}, "got \\['loss', 'val_accuracy'\\]"),
    ({"val_accuracy": 150.0}, "not a percentage"),
])
def test_step_refuses_metrics_it_cannot_read(metrics: dict[str, float], message: str) -> None:
    _, _, ctl, _ = grown()
    with pytest.raises(ValueError, match=message):
        ctl.step(metrics)


def test_more_steps_than_epochs_and_a_fraction_from_evaluate_are_refused() -> None:
    model, optimizer, ctl, _ = grown(max_epochs=2)
    ctl.step({"val_accuracy": 50.0})
    ctl.step({"val_accuracy": 50.0})
    with pytest.raises(ValueError, match="called 3 times for max_epochs=2"):
        ctl.step({"val_accuracy": 50.0})
    model, optimizer, ctl, _ = grown()
    ctl.evaluate = lambda: 0.5
    epoch(model, optimizer, ctl)
    with pytest.raises(ValueError, match="in percent \\(0–100\\): multiply a fraction by 100"):
        ctl.evaluate = lambda: 1.5e3
        epoch(model, optimizer, ctl)
        epoch(model, optimizer, ctl)
