"""Models, data and a training loop of the tests' own for the public API: a small ResNet-style CNN and a
TransformerEncoder classifier, as a user would write them (nothing of esper inside)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from esper.api import GrowthConfig
from esper.api.hookslot import HookSlot
from esper.api.wrapping import slot_set_of
from esper.kasmina.state import LifecycleConfig
from esper.leyline import SeedStage

QUICK = GrowthConfig(lifecycle=LifecycleConfig(min_training_epochs=1, blending_steps=2, min_blending_epochs=1,
                                               max_probation_epochs=3, min_fossilize_contribution=0.0,
                                               min_probe_contribution=-100.0))
"""A lifecycle short enough for a test: a seed can blend in two epochs after germinating and fossilize soon after."""


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x + self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))))


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 4, width: int = 8) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(inplace=True))
        self.layer1 = Block(width)
        self.down = nn.Sequential(nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.ReLU())
        self.layer2 = Block(2 * width)
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.layer2(self.down(self.layer1(self.stem(x)))).mean(dim=(2, 3)))


def image_data(n: int, seed: int) -> tuple[Tensor, Tensor]:
    """Noisy 3×12×12 images whose class (4) is which of two colour channels is brighter, and in which half."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    x = torch.randn(n, 3, 12, 12, generator=g)
    rows = torch.arange(12) < 6
    for i in range(n):
        channel, half = int(y[i]) % 2, int(y[i]) // 2
        x[i, channel, rows if half == 0 else ~rows] += 1.0
    return x, y


class TokenClassifier(nn.Module):
    def __init__(self, vocab: int = 10, dim: int = 16, length: int = 12) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.randn(length, dim) * 0.1)
        layer = nn.TransformerEncoderLayer(dim, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 2)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.head(self.encoder(self.embed(tokens) + self.position).mean(dim=1))


def token_data(n: int, seed: int, length: int = 12) -> tuple[Tensor, Tensor]:
    """Token sequences (vocabulary 10) labelled by whether token 1 occurs more often than token 2: a synthetic_text
    task for a classifier."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 10, (n, length), generator=g)
    return x, ((x == 1).sum(1) > (x == 2).sum(1)).long()


def accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    model.eval()
    with torch.no_grad():
        value = 100.0 * (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return value


def evaluator(model: nn.Module, x: Tensor, y: Tensor) -> Callable[[], float]:
    return lambda: accuracy(model, x, y)


def val_loss(model: nn.Module, x: Tensor, y: Tensor) -> float:
    model.eval()
    with torch.no_grad():
        value = F.cross_entropy(model(x), y).item()
    model.train()
    return value


def train_epoch(model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor, y: Tensor, batch: int = 32) -> None:
    model.train()
    for i in range(0, len(x), batch):
        optimizer.zero_grad()
        F.cross_entropy(model(x[i:i + batch]), y[i:i + batch]).backward()
        optimizer.step()


def host_parameters(model: nn.Module) -> dict[str, Tensor]:
    return {n: p for n, p in model.named_parameters() if not n.startswith("esper_slots.")}


def comparable(manifest: dict[str, Any]) -> dict[str, Any]:
    """A slot manifest's seeds without the wall-clock time their telemetry was captured at."""
    return {slot: {**entry, "lifecycle": {**entry["lifecycle"], "telemetry": {
        k: v for k, v in entry["lifecycle"]["telemetry"].items() if k != "captured_at"}}}
        for slot, entry in manifest["seeds"].items()}


def germinated(model: nn.Module, slot: str, blueprint: str, *, stage: SeedStage) -> HookSlot:
    """The slot's seed of `blueprint`, brought to `stage` (TRAINING or BLENDING) by its own lifecycle."""
    slot_set = slot_set_of(model)
    seed_slot = slot_set.slot(slot)
    device, dtype = slot_set.device_dtype()
    seed_slot.germinate(blueprint, f"seed_{slot}", device=device, dtype=dtype, baseline_accuracy=50.0,
                        host_param_count=1, epoch=0)
    seed_slot.step_epoch(1)  # GERMINATED -> TRAINING
    if stage == SeedStage.BLENDING:
        assert seed_slot.state is not None
        seed_slot.set_probe_contribution(1.0)
        seed_slot.update_gradient_ratio(1.0)
        seed_slot.record_accuracy(50.0)
        seed_slot.record_accuracy(50.0)
        seed_slot.record_accuracy(50.0)
        seed_slot.step_epoch(2)
    assert seed_slot.state is not None and seed_slot.state.stage == stage
    return seed_slot
