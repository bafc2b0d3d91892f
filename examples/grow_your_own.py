"""Grow your own model in your own training loop.

A ResNet-style CNN written here (nothing of esper's), trained in a plain PyTorch loop twice from the same seed: once
as it is (static), once wrapped by `esper.wrap` and grown by `esper.Controller` under the heuristic. Prints test
accuracy, parameters and training GFLOPs (forward and backward of the training steps) of both. Data: Fashion-MNIST
where Debian's dataset-fashion-mnist is installed, else esper's synthetic texture task.

    python examples/grow_your_own.py                  # about 4 min on 2 CPU cores
    python examples/grow_your_own.py --epochs 2 --train-samples 256
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

import esper
from esper.data.readers import fashion_mnist_directory, load_fashion_mnist
from esper.data.synthetic import generate_synthetic_images

# ----------------------------------------------------------------------------------------------------- the model


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Identity() if stride == 1 and c_in == c_out else nn.Sequential(
            nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.shortcut(x) + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


class ResNet(nn.Module):
    def __init__(self, in_channels: int, classes: int, width: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU())
        self.stage1 = BasicBlock(width, width, stride=1)
        self.stage2 = BasicBlock(width, 2 * width, stride=2)
        self.stage3 = BasicBlock(2 * width, 4 * width, stride=2)
        self.head = nn.Linear(4 * width, classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.stage3(self.stage2(self.stage1(self.stem(x)))).mean(dim=(2, 3)))


# ------------------------------------------------------------------------------------------------------ the data


@dataclass
class Data:
    name: str
    train: tuple[Tensor, Tensor]
    val: tuple[Tensor, Tensor]
    test: tuple[Tensor, Tensor]
    classes: int


def _subset(x: Tensor, y: Tensor, n: int, seed: int) -> tuple[Tensor, Tensor]:
    keep = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:n]
    return x[keep], y[keep]


def load_data(train: int, val: int, test: int, seed: int) -> Data:
    if fashion_mnist_directory("data") is not None:
        def split(name: str, n: int) -> tuple[Tensor, Tensor]:
            x, y = load_fashion_mnist("data", name)  # type: ignore[arg-type]
            return _subset((x.float() / 255 - 0.286) / 0.353, y, n, seed)
        return Data("Fashion-MNIST", split("train", train), split("val", val), split("test", test), 10)
    def synthetic(name: str, n: int) -> tuple[Tensor, Tensor]:
        return _subset(*generate_synthetic_images(0, name), n, seed)  # type: ignore[arg-type]
    return Data("synthetic textures", synthetic("train", train), synthetic("val", val), synthetic("test", test), 10)


def batches(x: Tensor, y: Tensor, size: int, seed: int) -> Iterator[tuple[Tensor, Tensor]]:
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    for i in range(0, len(x), size):
        yield x[order[i:i + size]], y[order[i:i + size]]


@torch.no_grad()
def evaluate(model: nn.Module, data: tuple[Tensor, Tensor], size: int = 500) -> tuple[float, float]:
    """Accuracy in percent and mean loss."""
    was_training = model.training
    model.eval()
    correct, loss = 0, 0.0
    for x, y in zip(data[0].split(size), data[1].split(size), strict=True):
        logits = model(x)
        correct += int((logits.argmax(1) == y).sum())
        loss += float(F.cross_entropy(logits, y, reduction="sum"))
    model.train(was_training)
    return 100.0 * correct / len(data[1]), loss / len(data[1])


# ------------------------------------------------------------------------------------------------------ training


class FlopMeter:
    """Forward + backward FLOPs of a training step, counted on a copy once per model structure and batch size."""

    def __init__(self) -> None:
        self.total = 0
        self.cache: dict[tuple[object, ...], int] = {}

    def add(self, model: nn.Module, x: Tensor, y: Tensor) -> None:
        key = (tuple((s.blueprint, s.stage, s.alpha > 0) for s in esper.slots(model))
               if hasattr(model, "esper_slots") else (), len(x))
        if key not in self.cache:
            probe = copy.deepcopy(model)
            with FlopCounterMode(display=False) as counter:
                F.cross_entropy(probe(x), y).backward()
            self.cache[key] = counter.get_total_flops()
        self.total += self.cache[key]


@dataclass
class Outcome:
    test_accuracy: float
    params: int
    gflops: float
    seconds: float


def train(data: Data, args: argparse.Namespace, grow: bool, log: Callable[[str], None]) -> Outcome:
    torch.manual_seed(args.seed)
    model = ResNet(data.train[0].shape[1], data.classes, width=args.width)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=True)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    controller = None
    if grow:
        esper.wrap(model, ["stage1", "stage2", "stage3"], example_input=data.train[0][:2])
        controller = esper.Controller(model, optimizer, policy=args.policy, max_epochs=args.epochs,
                                      scheduler=scheduler, evaluate=lambda: evaluate(model, data.val)[0])
    flops, start = FlopMeter(), time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        for x, y in batches(*data.train, args.batch_size, seed=args.seed * 1000 + epoch):
            flops.add(model, x, y)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        scheduler.step()
        accuracy, loss = evaluate(model, data.val)
        note = ""
        if controller is not None:
            result = controller.step({"val_accuracy": accuracy, "val_loss": loss})
            note = "" if result.command is None or result.command.op.name == "WAIT" else result.command.describe()
        log(f"  {'grown ' if grow else 'static'} epoch {epoch + 1:2d}  val {accuracy:5.1f} %  {note}")
    seconds = time.perf_counter() - start
    params = sum(p.numel() for p in model.parameters())
    return Outcome(evaluate(model, data.test)[0], params, flops.total / 1e9, seconds)


def main(argv: list[str] | None = None) -> dict[str, Outcome]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--train-samples", type=int, default=5000)
    parser.add_argument("--val-samples", type=int, default=1000)
    parser.add_argument("--test-samples", type=int, default=5000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--policy", default="heuristic", help="any esper controller spec, e.g. grow:norm@early")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (results depend on them)")
    parser.add_argument("--quiet", action="store_true", help="print the table only")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = load_data(args.train_samples, args.val_samples, args.test_samples, args.seed)
    log = (lambda _: None) if args.quiet else print
    log(f"{data.name}: {len(data.train[1])} training images, seed {args.seed}, {args.epochs} epochs")
    outcomes = {"static": train(data, args, grow=False, log=log), "grown": train(data, args, grow=True, log=log)}
    print(f"\n{'run':<8}{'test acc %':>11}{'params':>10}{'train GFLOPs':>14}{'wall s':>8}")
    for name, o in outcomes.items():
        print(f"{name:<8}{o.test_accuracy:>11.2f}{o.params:>10,}{o.gflops:>14.1f}{o.seconds:>8.0f}")
    return outcomes


if __name__ == "__main__":
    main()
