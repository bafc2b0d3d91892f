"""`GrowthCallback`: esper's growth inside a Lightning `Trainer` (extra: pip install 'esper[lightning]').

The LightningModule holds a model `esper.wrap` prepared. After each validation run of `fit` the callback hands the
logged metrics to an `esper.Controller`, which grows seeds in the module and keeps one optimizer group per seed.
Resuming from a Lightning checkpoint needs nothing of the user: the module's state dict carries the seeds' manifest,
so Lightning's own `load_state_dict` finds the seed modules; the controller's state travels as this callback's state,
and at the start of the resumed fit the seed groups are re-created (as Lightning's `BaseFinetuning` re-creates its
groups) before Lightning restores the optimizer's state into them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    import lightning.pytorch as pl
except ImportError as exc:  # the extra is optional: say how to get it
    raise ImportError("esper.lightning needs Lightning: pip install 'esper[lightning]'") from exc

from esper.api import Controller, GrowthConfig, StepResult
from esper.api.measure import Evaluate
from esper.leyline.errors import UserInputError

__all__ = ["GrowthCallback"]

_LOGGED = {"val_accuracy": "val_accuracy", "val_loss": "val_loss"}


class GrowthCallback(pl.Callback):
    """Grows the seeds of the LightningModule's wrapped model once per validation run (validate every epoch).

    `evaluate()` returns the validation accuracy in percent (it measures each seed); `metrics` maps the names
    `Controller.step` takes (`esper.api.METRICS`) to the names the module logs; the fit's `max_epochs` is the
    controller's. The latest step's result is `last`.
    """

    def __init__(self, *, evaluate: Evaluate, policy: str = "heuristic", metrics: Mapping[str, str] | None = None,
                 config: GrowthConfig | None = None) -> None:
        self.evaluate = evaluate
        self.policy = policy
        self.metrics = dict(_LOGGED if metrics is None else metrics)
        self.config = config
        self.controller: Controller | None = None
        self.last: StepResult | None = None
        self._restored: dict[str, Any] | None = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if len(trainer.optimizers) != 1:
            raise UserInputError(f"GrowthCallback grows with one optimizer, the module configures "
                                 f"{len(trainer.optimizers)}: return one from configure_optimizers")
        if trainer.max_epochs is None or trainer.max_epochs < 2:
            raise UserInputError("GrowthCallback needs Trainer(max_epochs=N), N >= 2: the controller plans its seeds "
                                 "over the epochs of the fit")
        schedulers = trainer.lr_scheduler_configs
        self.controller = Controller(pl_module, trainer.optimizers[0], policy=self.policy, evaluate=self.evaluate,
                                     max_epochs=trainer.max_epochs,
                                     scheduler=schedulers[0].scheduler if schedulers else None, config=self.config)
        if self._restored is not None:  # before Lightning loads the optimizer's state: it finds the seed groups
            self.controller.load_state_dict(self._restored)
            self._restored = None

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or self.controller is None:
            return
        logged = trainer.callback_metrics
        missing = sorted(name for name in self.metrics.values() if name not in logged)
        if missing:
            raise UserInputError(f"GrowthCallback reads {missing}, which the module did not log (it logged "
                                 f"{sorted(logged)}): self.log them in validation_step, or pass metrics={{...}}")
        self.last = self.controller.step({key: float(logged[name]) for key, name in self.metrics.items()})

    def state_dict(self) -> dict[str, Any]:
        return {} if self.controller is None else self.controller.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored = dict(state_dict) or None
