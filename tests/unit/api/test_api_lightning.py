"""`esper.lightning.GrowthCallback` under a real `lightning.Trainer` on CPU: growth in `fit`, and a resume from a
Lightning checkpoint taken mid-growth that equals the uninterrupted fit bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

import esper

pl = pytest.importorskip("lightning.pytorch")

from esper.lightning import GrowthCallback  # noqa: E402  (needs the optional extra)
from unit.api.models import QUICK, SmallCNN, accuracy, comparable, image_data  # noqa: E402

EPOCHS, RESUME_AT = 8, 3
X, Y = image_data(96, seed=1)
XV, YV = image_data(64, seed=2)


class Classifier(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = esper.wrap(SmallCNN(), ["stem", "layer1", "layer2"], example_input=X[:2])

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[Tensor, Tensor], _: int) -> Tensor:
        return F.cross_entropy(self(batch[0]), batch[1])

    def validation_step(self, batch: tuple[Tensor, Tensor], _: int) -> None:
        logits = self(batch[0])
        self.log("val_loss", F.cross_entropy(logits, batch[1]))
        self.log("val_accuracy", 100.0 * (logits.argmax(1) == batch[1]).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.01)


def fit(directory: Path, resume: Path | None = None) -> tuple[Classifier, GrowthCallback]:
    torch.manual_seed(0)
    module = Classifier()
    growth = GrowthCallback(evaluate=lambda: accuracy(module.net, XV, YV), config=QUICK)
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=directory, every_n_epochs=1, save_top_k=-1)
    trainer = pl.Trainer(max_epochs=EPOCHS, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, deterministic=True,
                         callbacks=[growth, checkpoints])
    trainer.fit(module, DataLoader(TensorDataset(X, Y), batch_size=32),
                DataLoader(TensorDataset(XV, YV), batch_size=64), ckpt_path=resume)
    return module, growth


def test_a_fit_resumed_from_a_checkpoint_taken_mid_growth_equals_the_uninterrupted_fit(tmp_path: Path) -> None:
    module, growth = fit(tmp_path / "run")
    assert growth.controller is not None and growth.controller.seeds_created >= 1
    checkpoint = next((tmp_path / "run").glob(f"epoch={RESUME_AT - 1}-*.ckpt"))
    saved = torch.load(checkpoint, weights_only=False)
    stages = [e["lifecycle"]["stage"] for e in saved["callbacks"]["GrowthCallback"]["manifest"]["seeds"].values()]
    assert set(stages) & {3, 4, 5}, "the checkpoint must hold a seed mid-lifecycle"
    resumed, _ = fit(tmp_path / "resumed", resume=checkpoint)
    final, reference = resumed.state_dict(), module.state_dict()
    assert final.keys() == reference.keys() and any(k.startswith("net.esper_slots.") for k in final)
    manifest = "net.esper_slots.manifest"
    assert comparable(final.pop(manifest)) == comparable(reference.pop(manifest))
    for key, value in reference.items():
        assert torch.equal(final[key], value), key


def test_metrics_the_module_did_not_log_are_refused(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = Classifier()
    growth = GrowthCallback(evaluate=lambda: accuracy(module.net, XV, YV), metrics={"val_accuracy": "val_acc"})
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
                         callbacks=[growth])
    with pytest.raises(ValueError, match="reads \\['val_acc'\\], which the module did not log"):
        trainer.fit(module, DataLoader(TensorDataset(X, Y), batch_size=32), DataLoader(TensorDataset(XV, YV)))
