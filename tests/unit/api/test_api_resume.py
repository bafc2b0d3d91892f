"""Checkpoints of a growing model: `ctl.state_dict()` with the model's and optimizer's own state dicts resume a run
mid-growth in a fresh process exactly where it stopped, a grown model reloads from its state dict alone, and a seed
whose blueprint is not registered is refused naming the import it needs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import esper
from esper.api.wrapping import slot_set_of
from unit.api.models import QUICK, SmallCNN, comparable, evaluator, image_data, train_epoch, val_loss

EPOCHS, BATCHES, BATCH = 12, 4, 32
STOP = 2 * BATCHES + 2
"""The interrupted run stops halfway through epoch 3, its seed TRAINING, a second germination still to come."""
TESTS = Path(__file__).resolve().parents[2]
SRC = Path(esper.__file__).resolve().parents[1]


def run(stop: int, *, resume: Path | None = None, save: Path | None = None) -> dict[str, Any]:
    """Grow under the heuristic for `stop` training batches (from a checkpoint, if given), a step of the controller
    after each epoch's; the final weights and seed manifest, and the training signals after each step."""
    torch.manual_seed(0)
    x, y = image_data(BATCHES * BATCH, seed=1)
    xv, yv = image_data(64, seed=2)
    model = esper.wrap(SmallCNN(), ["stem", "layer1", "layer2"], example_input=x[:2])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)
    ctl = esper.Controller(model, optimizer, policy="heuristic", evaluate=evaluator(model, xv, yv),
                           max_epochs=EPOCHS, scheduler=scheduler, config=QUICK)
    start, signals = 0, []
    if resume is not None:
        checkpoint = torch.load(resume, weights_only=True)
        ctl.load_state_dict(checkpoint["growth"])  # first: the model and optimizer then find the seeds and groups
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
        start = checkpoint["batches"]
    for batch in range(start, stop):
        i = (batch % BATCHES) * BATCH
        train_epoch(model, optimizer, x[i:i + BATCH], y[i:i + BATCH], batch=BATCH)
        if (batch + 1) % BATCHES == 0:
            scheduler.step()
            ctl.step({"val_accuracy": evaluator(model, xv, yv)(), "val_loss": val_loss(model, xv, yv)})
            signals.append(ctl.tracker.state_dict())
    if save is not None:
        torch.save({"growth": ctl.state_dict(), "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "batches": stop}, save)
    weights = {k: v for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
    return {"weights": weights, "seeds": comparable(slot_set_of(model).manifest()), "signals": signals}


def test_a_run_resumed_mid_growth_in_a_fresh_process_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    uninterrupted = run(EPOCHS * BATCHES)
    checkpoint = tmp_path / "growth.pt"
    run(STOP, save=checkpoint)
    saved = torch.load(checkpoint, weights_only=True)["growth"]
    assert [e["lifecycle"]["stage"] for e in saved["manifest"]["seeds"].values()] == [3]  # one seed, TRAINING
    assert saved["telemetry"]["steps"] == 2  # halfway through an epoch
    final = tmp_path / "final.pt"
    code = ("import torch; torch.set_num_threads(1); from pathlib import Path; from unit.api.test_api_resume import "
            f"run; torch.save(run({EPOCHS * BATCHES}, resume=Path({str(checkpoint)!r})), {str(final)!r})")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)])}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    resumed = torch.load(final, weights_only=True)
    assert len(uninterrupted["seeds"]) >= 2, "the run must germinate again after the interruption"
    assert resumed["seeds"] == uninterrupted["seeds"]
    assert resumed["signals"] == uninterrupted["signals"][-len(resumed["signals"]):]
    assert resumed["weights"].keys() == uninterrupted["weights"].keys()
    for key, value in uninterrupted["weights"].items():
        assert torch.equal(resumed["weights"][key], value), key


def test_a_grown_model_reloads_from_its_state_dict_alone(tmp_path: Path) -> None:
    run(STOP, save=tmp_path / "growth.pt")
    state = torch.load(tmp_path / "growth.pt", weights_only=True)["model"]
    model = esper.wrap(SmallCNN(), ["stem", "layer1", "layer2"])  # no shapes yet: the manifest brings them
    model.load_state_dict(state)
    assert any(s.blueprint is not None for s in esper.slots(model))
    reference = esper.wrap(SmallCNN(), ["stem", "layer1", "layer2"])
    reference.load_state_dict(state)
    x = torch.randn(3, 3, 12, 12)
    assert torch.equal(model.eval()(x), reference.eval()(x))


def test_a_seed_of_an_unregistered_blueprint_is_refused_naming_its_import() -> None:
    model = esper.wrap(SmallCNN(), ["stem"], example_input=torch.randn(1, 3, 12, 12))
    slot = slot_set_of(model).slot("early")
    slot.germinate("norm", "seed_0", device="cpu", baseline_accuracy=0.0, host_param_count=1, epoch=0)
    state = model.state_dict()
    entry = state["esper_slots.manifest"]["seeds"]["early"]
    entry["blueprint_id"], entry["blueprint_module"] = "pointwise", "my_plugin"
    with pytest.raises(ValueError, match="blueprint 'pointwise' \\(cnn\\), which is not registered here: import "
                                         "my_plugin before loading \\(on the command line: --plugin my_plugin\\)"):
        esper.wrap(SmallCNN(), ["stem"]).load_state_dict(state)


def test_a_state_of_another_policy_or_slot_path_is_refused(tmp_path: Path) -> None:
    run(BATCHES, save=tmp_path / "growth.pt")
    growth = torch.load(tmp_path / "growth.pt", weights_only=True)["growth"]
    model = esper.wrap(SmallCNN(), ["stem", "layer1", "layer2"], example_input=torch.randn(1, 3, 12, 12))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ctl = esper.Controller(model, optimizer, policy="grow:norm@early", evaluate=lambda: 0.0, max_epochs=EPOCHS)
    with pytest.raises(ValueError, match="saved under policy 'heuristic', this Controller runs 'grow:norm@early'"):
        ctl.load_state_dict(growth)
    other = esper.wrap(SmallCNN(), ["stem", "down", "layer2"], example_input=torch.randn(1, 3, 12, 12))
    ctl = esper.Controller(other, torch.optim.SGD(other.parameters(), lr=0.1), evaluate=lambda: 0.0,
                           max_epochs=EPOCHS)
    with pytest.raises(ValueError, match="grew slot mid at 'layer1', this one wraps 'down'"):
        ctl.load_state_dict(growth)
