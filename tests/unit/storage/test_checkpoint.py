"""Checkpoint files: atomic writes, format checks, model round trip, RNG capture."""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import esper
from esper.kasmina.hosts import CNNHost
from esper.kasmina.model import MorphogeneticModel
from esper.kasmina.state import LifecycleConfig
from esper.leyline import SeedStage, atomic
from esper.storage.checkpoint import (
    MODEL_FORMAT,
    CheckpointFormatError,
    atomic_save,
    capture_rng_state,
    load_checkpoint,
    load_model_checkpoint,
    model_checkpoint,
    restore_rng_state,
)


def _model() -> MorphogeneticModel:
    host = CNNHost(in_channels=3, num_classes=10, channels=(8, 16, 32))
    return MorphogeneticModel(host, slots=["early", "mid", "late"], lifecycle=LifecycleConfig())


def _drive(model: MorphogeneticModel, slot: str, target: SeedStage, *, blend: str, blueprint: str) -> None:
    """Germinate and advance with stubbed measurements (ratio 0.1, +1 pp/epoch, c = +2 pp) to `target`."""
    s = model.slot(slot)
    model.germinate_seed(blueprint, f"{slot}_seed", slot=slot, blend_id=blend, baseline_accuracy=40.0, epoch=1)
    acc = 40.0
    for epoch in range(2, 40):
        assert s.state is not None
        if s.state.stage == target:
            return
        s.update_gradient_ratio(0.1)
        if s.state.stage == SeedStage.TRAINING:
            s.set_probe_contribution(1.0)
        if s.alpha > 0:
            s.set_counterfactual(2.0)
        acc += 1.0
        s.record_accuracy(acc)
        if target == SeedStage.FOSSILIZED and s.state.stage == SeedStage.PROBATIONARY:
            assert s.fossilize(epoch).passed
        else:
            s.step_epoch(epoch)
    raise AssertionError(f"could not drive {slot} to {target.name}")


# ------------------------------------------------------------------------------------------ atomic writes


def test_atomic_save_writes_through_tmp_and_leaves_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "sub" / "latest.pt"
    calls: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        calls.append((str(src), str(dst)))
        assert Path(src).is_file() and not Path(dst).exists()
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", spy)
    atomic_save({"format": "x", "value": torch.arange(3)}, path)
    assert calls == [(str(path) + ".tmp", str(path))]
    assert path.is_file() and not (tmp_path / "sub" / "latest.pt.tmp").exists()
    assert sorted(p.name for p in path.parent.iterdir()) == ["latest.pt"]
    assert torch.equal(torch.load(path, weights_only=True)["value"], torch.arange(3))


def test_crash_before_replace_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "latest.pt"
    atomic_save({"format": "x", "version": 1}, path)

    def crash(src: object, dst: object) -> None:
        raise OSError("simulated crash")

    monkeypatch.setattr(atomic.os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        atomic_save({"format": "x", "version": 2}, path)
    assert load_checkpoint(path, "x")["version"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.pt"]  # the failed write took its temp file along


# ------------------------------------------------------------------------------------------ format checks


def test_missing_file_raises(tmp_path: Path) -> None:
    path = tmp_path / "nope.pt"
    with pytest.raises(CheckpointFormatError, match=re.escape(str(path))):
        load_checkpoint(path, MODEL_FORMAT)


def test_truncated_file_raises_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.pt"
    atomic_save({"format": MODEL_FORMAT, "w": torch.randn(100)}, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointFormatError, match=re.escape(str(path))):
        load_checkpoint(path, MODEL_FORMAT)
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointFormatError, match=re.escape(str(path))) as info:
        load_checkpoint(path, MODEL_FORMAT)
    assert "weights_only" not in str(info.value) and "\n" not in str(info.value)  # no advice to load unsafely


def test_an_unreadable_checkpoint_suggests_the_others_beside_it_never_itself(tmp_path: Path) -> None:
    """A corrupt latest.pt used to say "use another file (e.g. checkpoints/latest.pt)"."""
    checkpoints = tmp_path / "run" / "checkpoints"
    for name in ("init.pt", "best.pt"):
        atomic_save({"format": MODEL_FORMAT}, checkpoints / name)
    latest = checkpoints / "latest.pt"
    latest.write_bytes(b"torn")
    with pytest.raises(CheckpointFormatError) as info:
        load_checkpoint(latest, MODEL_FORMAT)
    fix = str(info.value).split("; ", 1)[1]
    assert f"(best.pt, init.pt in {checkpoints}" in fix and "latest.pt" not in fix and "--overwrite" in fix
    with pytest.raises(CheckpointFormatError) as info:
        load_checkpoint(checkpoints / "final.pt", MODEL_FORMAT)
    assert "best.pt, init.pt, latest.pt in" in str(info.value)  # a missing file: every one that is there
    alone = tmp_path / "alone.pt"
    alone.write_bytes(b"torn")
    with pytest.raises(CheckpointFormatError, match=r"pass a checkpoint an esper run saved \(RUN/checkpoints/"):
        load_checkpoint(alone, MODEL_FORMAT)


def test_wrong_format_names_expected_and_found(tmp_path: Path) -> None:
    path = tmp_path / "ppo.pt"
    atomic_save({"format": "esper-ppo-v1"}, path)
    with pytest.raises(CheckpointFormatError, match="esper-ppo-v1") as info:
        load_checkpoint(path, MODEL_FORMAT)
    assert MODEL_FORMAT in str(info.value) and "ppo.pt" in str(info.value)
    atomic_save({"no_format": 1}, path)
    with pytest.raises(CheckpointFormatError, match=MODEL_FORMAT):
        load_checkpoint(path, MODEL_FORMAT)


def test_pickled_classes_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "unsafe.pt"
    torch.save({"format": MODEL_FORMAT, "obj": Path("x")}, path)
    with pytest.raises(CheckpointFormatError, match=re.escape(str(path))):
        load_checkpoint(path, MODEL_FORMAT)


# ------------------------------------------------------------------------------------------ model round trip


def test_model_round_trip_into_fresh_seedless_model(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _model()
    _drive(model, "early", SeedStage.TRAINING, blend="sigmoid", blueprint="depthwise")
    _drive(model, "mid", SeedStage.BLENDING, blend="gated", blueprint="conv_light")
    _drive(model, "late", SeedStage.FOSSILIZED, blend="linear", blueprint="attention")
    with torch.no_grad():  # non-default weights everywhere, including BN running stats and the gate
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
        model.train()
        model(torch.randn(8, 3, 16, 16))
    host_opt = torch.optim.SGD(model.host_parameters(), lr=0.1, momentum=0.9).state_dict()
    path = tmp_path / "model.pt"
    atomic_save(model_checkpoint(model, task="synthetic", host_optimizer=host_opt), path)

    raw = torch.load(path, weights_only=True)
    assert raw["format"] == MODEL_FORMAT and raw["esper_version"] == esper.__version__
    assert raw["task"] == "synthetic" and raw["topology"] == "cnn" and raw["slots"] == ["early", "mid", "late"]
    assert set(raw["seeds"]) == {"early", "mid", "late"} and raw["seeds"]["mid"]["gate"] is not None
    assert raw["seeds"]["early"]["gate"] is None and raw["host_optimizer"] is not None

    torch.manual_seed(123)
    fresh = _model()
    x = torch.randn(5, 3, 16, 16)
    model.eval()
    fresh.eval()
    assert not torch.equal(fresh(x), model(x))
    data = load_model_checkpoint(fresh, path)
    assert data["task"] == "synthetic"
    with torch.no_grad():
        assert torch.equal(fresh(x), model(x))
    for slot in ("early", "mid", "late"):
        a, b = model.slot(slot), fresh.slot(slot)
        assert a.state is not None and b.state is not None
        assert b.state.to_dict() == a.state.to_dict()
        assert (a.gate is None) == (b.gate is None)
    assert [fresh.slot(s).state.stage for s in ("early", "mid", "late")] == [  # type: ignore[union-attr]
        SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.FOSSILIZED]
    assert set(fresh.state_dict()) == set(model.state_dict())
    for k, v in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k


def test_load_model_checkpoint_empties_slots_and_checks_topology(tmp_path: Path) -> None:
    empty = _model()
    path = tmp_path / "host_only.pt"
    atomic_save(model_checkpoint(empty, task="synthetic"), path)
    target = _model()
    _drive(target, "mid", SeedStage.TRAINING, blend="gated", blueprint="conv_light")
    load_model_checkpoint(target, path)
    s = target.slot("mid")
    assert s.state is None and s.seed is None and s.gate is None and not list(s.state_dict())
    wrong = tmp_path / "lm.pt"
    atomic_save({**model_checkpoint(empty, task="synthetic"), "topology": "transformer"}, wrong)
    with pytest.raises(CheckpointFormatError, match="transformer"):
        load_model_checkpoint(target, wrong)


# ------------------------------------------------------------------------------------------------ RNG state


def _draws() -> tuple[float, np.ndarray, float, torch.Tensor]:
    return random.random(), np.random.rand(3), float(np.random.standard_normal()), torch.rand(3)


def test_rng_state_round_trip_through_a_checkpoint(tmp_path: Path) -> None:
    np.random.standard_normal()  # leave a cached gaussian in NumPy's state
    state = capture_rng_state()
    first = _draws()
    path = tmp_path / "rng.pt"
    atomic_save({"format": "rng", "rng": state}, path)
    _draws()  # move every generator on
    restore_rng_state(load_checkpoint(path, "rng")["rng"])  # weights_only load: plain values only
    second = _draws()
    assert first[0] == second[0] and first[2] == second[2]
    assert np.array_equal(first[1], second[1]) and torch.equal(first[3], second[3])
    restore_rng_state(state)
    assert _draws()[0] == first[0]


def test_the_plugin_fix_names_what_to_load_or_what_to_leave_out(monkeypatch: pytest.MonkeyPatch) -> None:
    from esper.storage import checkpoint as module

    assert "(--plugin /me/p.py)" in module.plugin_fix({"plugins": ["/me/p.py", "ep:pkg"]})
    assert "entry points it was trained with (ep:pkg)" in module.plugin_fix({"plugins": ["ep:pkg"]})
    monkeypatch.setattr(module, "loaded_plugins", lambda: ("extra.py",))
    assert "trained without plugins: run it without the ones loaded now (extra.py" in module.plugin_fix({})
