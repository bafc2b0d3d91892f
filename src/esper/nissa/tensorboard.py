"""TensorBoard backend: scalars under `run_dir/tb`.

The mappings below are the contract with producers: the `data` keys read per event type, the tag each is written
under, and the key giving the global step. Missing, non-numeric or non-finite values are skipped (they would wreck
chart scales; events.jsonl keeps them); a missing step key is an error.

* BATCH_COMPLETED, step `episodes_completed`: `BATCH_SCALARS`, plus `action_shares` {op: share} →
  `actions/share_{op}` (op lower-cased) and `reward_components` {name: mean} → `rewards/{name}`.
* PPO_UPDATE_COMPLETED, step `episodes_completed`: `PPO_SCALARS` (the PPO update metric names).
* IQL_EPOCH_COMPLETED, step `epoch`: `IQL_SCALARS` (losses, AWR weights, agreement, values of one IQL epoch).
* EPISODE_COMPLETED, step `episode` (global episode index): `EPISODE_SCALARS`, so runs without PPO (heuristic,
  compare) still get curves; with several controllers side by side (a comparison) one curve per controller,
  `episode/{who}/{name}`.
* EPOCH_COMPLETED: `EPOCH_SCALARS` as `epoch/{name}/{who}`, one curve per env of a PPO run (`who` = `env{i}`, step
  batch·T + epoch, so each env's episodes follow each other) or per controller otherwise (`who` = its label, step
  episode·T + epoch). Labels are reduced to `[A-Za-z0-9_.:-]`, so a tag never holds a file path's separators.

The event types read here are the backend's `always` set: the hub delivers them at every telemetry level, so curves
do not depend on `--telemetry-level` (only `--no-tensorboard` turns them off).

Hyperparameters given at construction are written once as a markdown text table (tag `hparams`, step 0).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from esper.leyline.sectioned_config import dotted_leaves
from esper.leyline.telemetry import TelemetryEvent, TelemetryEventType

__all__ = [
    "BATCH_SCALARS",
    "EPISODE_SCALARS",
    "EPOCH_SCALARS",
    "PPO_SCALARS",
    "STEP_KEYS",
    "TensorBoardBackend",
    "hparams_markdown",
    "tag_label",
]

_E = TelemetryEventType

BATCH_SCALARS: dict[str, str] = {
    "avg_accuracy": "charts/avg_accuracy",
    "rolling_accuracy": "charts/rolling_accuracy",
    "avg_reward": "charts/avg_reward",
    "seeds_created": "seeds/created",
    "seeds_fossilized": "seeds/fossilized",
    "seeds_culled": "seeds/culled",
}
BATCH_GROUPS: dict[str, str] = {"action_shares": "actions/share_{}", "reward_components": "rewards/{}"}

PPO_SCALARS: dict[str, str] = {
    "policy_loss": "losses/policy",
    "value_loss": "losses/value",
    "entropy": "losses/entropy",
    "approx_kl": "ppo/approx_kl",
    "clip_fraction": "ppo/clip_fraction",
    "explained_variance": "ppo/explained_variance",
    "ratio_max": "ppo/ratio_max",
    "ratio_min": "ppo/ratio_min",
    "ratio_mean": "ppo/ratio_mean",
    "ratio_std": "ppo/ratio_std",
    "entropy_coef": "ppo/entropy_coef",
    "grad_norm": "ppo/grad_norm",
    "entropy_op": "ppo/entropy_op",
    "entropy_slot": "ppo/entropy_slot",
    "entropy_blueprint": "ppo/entropy_blueprint",
    "entropy_blend": "ppo/entropy_blend",
}

IQL_SCALARS: dict[str, str] = {name: f"iql/{name}" for name in (
    "v_loss", "q_loss", "policy_loss", "mean_weight", "frac_weight_clipped", "agreement", "q_behavior", "q_policy")}

EPISODE_SCALARS: dict[str, str] = {
    "final_accuracy": "episode/final_accuracy",
    "best_accuracy": "episode/best_accuracy",
    "total_reward": "episode/total_reward",
    "params_added": "episode/params_added",
    "seeds_created": "episode/seeds_created",
    "seeds_fossilized": "episode/seeds_fossilized",
    "seeds_culled": "episode/seeds_culled",
}

EPOCH_SCALARS: dict[str, str] = {
    "val_accuracy": "val_accuracy",
    "val_loss": "val_loss",
    "train_accuracy": "train_accuracy",
    "train_loss": "train_loss",
    "seed_params": "seed_params",
    "reward": "episode_reward",
}

STEP_KEYS: dict[TelemetryEventType, str] = {
    _E.BATCH_COMPLETED: "episodes_completed",
    _E.PPO_UPDATE_COMPLETED: "episodes_completed",
    _E.IQL_EPOCH_COMPLETED: "epoch",
    _E.EPISODE_COMPLETED: "episode",
}
_FLUSH_TYPES = frozenset({_E.BATCH_COMPLETED, _E.EPISODE_COMPLETED, _E.IQL_EPOCH_COMPLETED, _E.RUN_COMPLETED})
_NOT_IN_TAGS = re.compile(r"[^A-Za-z0-9_.:-]+")


def tag_label(label: str) -> str:
    """A controller label as a tag component: characters outside [A-Za-z0-9_.:-] collapse to "_"."""
    return _NOT_IN_TAGS.sub("_", label).strip("_") or "_"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def hparams_markdown(hparams: Mapping[str, Any]) -> str:
    """Nested hyperparameters as a two-column markdown table (nested keys dotted)."""
    rows = ["| parameter | value |", "|---|---|"]
    for key, value in sorted(dotted_leaves(hparams).items()):
        cell = str(value).replace("|", "\\|").replace("\n", " ")
        rows.append(f"| {key} | {cell} |")
    return "\n".join(rows)


class TensorBoardBackend:
    """Writes the scalars of the mappings above with `torch.utils.tensorboard.SummaryWriter`."""

    always = frozenset({_E.TRAINING_STARTED, _E.EPOCH_COMPLETED, _E.EPISODE_COMPLETED, _E.BATCH_COMPLETED,
                        _E.PPO_UPDATE_COMPLETED, _E.IQL_EPOCH_COMPLETED, _E.RUN_COMPLETED})

    def __init__(self, log_dir: str | Path, hparams: Mapping[str, Any] | None = None) -> None:
        # Imported here so `import esper.nissa` stays free of torch for runs without TensorBoard.
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(log_dir)
        self._writer = SummaryWriter(log_dir=str(self.log_dir))
        self._closed = False
        self._per_env = False  # a PPO run: its envs all run the one policy, so curves are per env
        self._per_controller = False  # several controllers side by side (a comparison)
        if hparams:
            self._writer.add_text("hparams", hparams_markdown(hparams), 0)
            self._writer.flush()

    def emit(self, event: TelemetryEvent) -> None:
        if self._closed:
            raise RuntimeError(f"TensorBoardBackend for {self.log_dir} is closed")
        etype = event.event_type
        if etype in STEP_KEYS:
            data = event.data
            step_key = STEP_KEYS[etype]
            if step_key not in data:
                raise KeyError(f"{etype.name} data lacks the step key {step_key!r}")
            step = int(data[step_key])
            if etype == _E.BATCH_COMPLETED:
                self._scalars(data, BATCH_SCALARS, step)
                for group, template in BATCH_GROUPS.items():
                    for name, value in (data.get(group) or {}).items():
                        self._scalar(template.format(str(name).lower()), value, step)
            elif etype == _E.PPO_UPDATE_COMPLETED:
                self._scalars(data, PPO_SCALARS, step)
            elif etype == _E.IQL_EPOCH_COMPLETED:
                self._scalars(data, IQL_SCALARS, step)
            else:  # in a comparison, one curve per controller (they share episode indices)
                who = self._who(event) if self._per_controller else ""
                mapping = EPISODE_SCALARS if not who else {
                    k: tag.replace("episode/", f"episode/{who}/", 1) for k, tag in EPISODE_SCALARS.items()}
                self._scalars(data, mapping, step)
        elif etype == _E.EPOCH_COMPLETED:
            self._epoch(event)
        elif etype == _E.TRAINING_STARTED:
            command = str(event.data.get("command") or "")
            self._per_env = "ppo" in command
            self._per_controller = not self._per_env and int(event.data.get("n_envs") or 1) > 1
        if etype in _FLUSH_TYPES:
            self._writer.flush()

    def _who(self, event: TelemetryEvent) -> str:
        controller = event.data.get("controller")
        if self._per_env or not controller:
            return f"env{event.env_id if event.env_id is not None else 0}"
        return tag_label(str(controller))

    def _epoch(self, event: TelemetryEvent) -> None:
        """Per-epoch curves; an event without its epoch, episode length or episode index is skipped."""
        d = event.data
        epoch, length = _number(d.get("epoch", event.epoch)), _number(d.get("max_epochs"))
        index = _number(d.get("batch" if self._per_env else "episode"))
        if epoch is None or length is None or index is None:
            return
        step = int(index) * int(length) + int(epoch)
        who = self._who(event)
        for key, name in EPOCH_SCALARS.items():
            self._scalar(f"epoch/{name}/{who}", d.get(key), step)

    def _scalars(self, data: Mapping[str, Any], mapping: Mapping[str, str], step: int) -> None:
        for key, tag in mapping.items():
            self._scalar(tag, data.get(key), step)

    def _scalar(self, tag: str, value: Any, step: int) -> None:
        number = _number(value)
        if number is not None and math.isfinite(number):
            self._writer.add_scalar(tag, number, step)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._writer.close()
