"""The two examples run as written, at a tiny size."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TINY = ["--epochs", "2", "--train-samples", "256", "--val-samples", "128", "--test-samples", "128"]


@pytest.fixture(autouse=True)
def _examples_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))


def test_grow_your_own_trains_static_and_grown(capsys: pytest.CaptureFixture[str]) -> None:
    outcomes = importlib.import_module("grow_your_own").main([*TINY, "--policy", "grow:conv_light@early", "--quiet"])
    assert outcomes["grown"].params > outcomes["static"].params  # the seed germinated after epoch 1
    assert outcomes["grown"].gflops > outcomes["static"].gflops > 0
    table = capsys.readouterr().out
    assert "test acc %" in table and "train GFLOPs" in table and "grown" in table


def test_grow_with_lightning_trains_static_and_grown(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("lightning")
    outcomes = importlib.import_module("grow_with_lightning").main([*TINY, "--policy", "grow:norm@mid"])
    assert outcomes["grown"].params > outcomes["static"].params
    assert "train GFLOPs" in capsys.readouterr().out
