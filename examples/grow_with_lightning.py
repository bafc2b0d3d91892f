"""Grow your own model with Lightning: `grow_your_own.py`'s ResNet and data in a `lightning.Trainer`.

Two fits from the same seed: the LightningModule as it is (static), and the same module wrapped by `esper.wrap` and
grown by `esper.lightning.GrowthCallback` under the heuristic. Prints test accuracy, parameters and training GFLOPs
of both. Needs the extra: pip install 'esper[lightning]'.

    python examples/grow_with_lightning.py            # about 4 min on 2 CPU cores
    python examples/grow_with_lightning.py --epochs 2 --train-samples 256
"""

from __future__ import annotations

import argparse
import time

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from grow_your_own import Data, FlopMeter, Outcome, ResNet, evaluate, load_data
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

import esper
from esper.lightning import GrowthCallback


class Classifier(pl.LightningModule):
    def __init__(self, in_channels: int, classes: int, width: int, epochs: int, grow: bool, example: Tensor) -> None:
        super().__init__()
        self.net = ResNet(in_channels, classes, width)
        if grow:
            esper.wrap(self.net, ["stage1", "stage2", "stage3"], example_input=example)
        self.epochs = epochs
        self.flops = FlopMeter()

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[Tensor, Tensor], _: int) -> Tensor:
        self.flops.add(self.net, *batch)
        return F.cross_entropy(self(batch[0]), batch[1])

    def validation_step(self, batch: tuple[Tensor, Tensor], _: int) -> None:
        logits = self(batch[0])
        self.log("val_loss", F.cross_entropy(logits, batch[1]))
        self.log("val_accuracy", 100.0 * (logits.argmax(1) == batch[1]).float().mean())

    def configure_optimizers(self) -> dict[str, object]:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=True)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(optimizer,
                                                                                                   self.epochs)}


def fit(data: Data, args: argparse.Namespace, grow: bool) -> Outcome:
    pl.seed_everything(args.seed, verbose=False)
    module = Classifier(data.train[0].shape[1], data.classes, args.width, args.epochs, grow, data.train[0][:2])
    callbacks = [GrowthCallback(policy=args.policy, evaluate=lambda: evaluate(module.net, data.val)[0])] if grow else []
    trainer = pl.Trainer(max_epochs=args.epochs, accelerator="cpu", devices=1, logger=False, callbacks=callbacks,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0)
    generator = torch.Generator().manual_seed(args.seed)
    start = time.perf_counter()
    trainer.fit(module, DataLoader(TensorDataset(*data.train), batch_size=args.batch_size, shuffle=True,
                                   generator=generator),
                DataLoader(TensorDataset(*data.val), batch_size=500))
    seconds = time.perf_counter() - start
    return Outcome(evaluate(module.net, data.test)[0], sum(p.numel() for p in module.net.parameters()),
                   module.flops.total / 1e9, seconds)


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
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = load_data(args.train_samples, args.val_samples, args.test_samples, args.seed)
    outcomes = {"static": fit(data, args, grow=False), "grown": fit(data, args, grow=True)}
    print(f"\n{'run':<8}{'test acc %':>11}{'params':>10}{'train GFLOPs':>14}{'wall s':>8}")
    for name, o in outcomes.items():
        print(f"{name:<8}{o.test_accuracy:>11.2f}{o.params:>10,}{o.gflops:>14.1f}{o.seconds:>8.0f}")
    return outcomes


if __name__ == "__main__":
    main()
