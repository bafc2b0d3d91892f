"""Observation features for Tamiyo policies.

Every feature is scaled explicitly to roughly [-1, 1] or [0, 5] here, so the very first rollout batch (running
normalizer still at mean 0, var 1) already sees sane inputs. The layout is fixed at three slots in canonical order;
disabled or empty slots give zeros, so positions never shift with the enabled subset. Each slot block one-hot encodes
its seed's blueprint over the topology's blueprint head, so the size follows the registered blueprints: 23 global
features, 3 slot blocks of 4 + |head| and 3 telemetry blocks of 10 (80 with the five built-in CNN blueprints).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from esper.leyline.actions import ActionSpace, ordered_slots
from esper.leyline.constants import CANONICAL_SLOTS, SEED_TELEMETRY_DIM
from esper.leyline.errors import UserInputError
from esper.leyline.reports import SeedStateReport
from esper.leyline.signals import EnvObservation, TrainingSignals

__all__ = ["FEATURE_RANGE", "feature_names", "obs_dim", "safe", "signals_to_features"]

HISTORY_LEN = 5
# Every feature lies in this range (the widest clamps below: loss deltas and accuracy deltas at ±5, parameter growth
# at 10), so observation spaces can state finite bounds.
FEATURE_RANGE = (-5.0, 10.0)

_GLOBAL_NAMES: tuple[str, ...] = (
    "epoch",
    "host_stabilized",
    "train_loss",
    "val_loss",
    "loss_delta",
    "train_accuracy",
    "val_accuracy",
    "accuracy_delta",
    "plateau_epochs",
    "best_val_accuracy",
    "best_val_loss",
    *(f"val_loss_hist_{i}" for i in range(HISTORY_LEN)),
    *(f"val_accuracy_hist_{i}" for i in range(HISTORY_LEN)),
    "param_growth",
    "slot_occupancy",
)
_SLOT_STATE_NAMES: tuple[str, ...] = ("occupied", "stage", "alpha", "improvement")
_TELEMETRY_NAMES: tuple[str, ...] = (
    "tel_gradient_norm",
    "tel_gradient_health",
    "tel_vanishing",
    "tel_exploding",
    "tel_epochs_in_stage",
    "tel_accuracy",
    "tel_accuracy_delta",
    "tel_stage",
    "tel_alpha",
    "tel_temporal",
)

assert len(_TELEMETRY_NAMES) == SEED_TELEMETRY_DIM


def feature_names(space: ActionSpace, use_telemetry: bool = True) -> tuple[str, ...]:
    """What each observation feature is, in order (its blueprint one-hots named after `space`'s head)."""
    slot_names = (*_SLOT_STATE_NAMES, *(f"blueprint_{b}" for b in space.head))
    telemetry = tuple(f"{slot}_{name}" for slot in CANONICAL_SLOTS for name in _TELEMETRY_NAMES)
    return (*_GLOBAL_NAMES, *(f"{slot}_{name}" for slot in CANONICAL_SLOTS for name in slot_names),
            *(telemetry if use_telemetry else ()))


def obs_dim(space: ActionSpace, use_telemetry: bool = True) -> int:
    """The observation's size for `space`: 80 (50 without telemetry) for the five built-in CNN blueprints."""
    return len(feature_names(space, use_telemetry))


def safe(v: float | int | None, default: float) -> float:
    """Map None/NaN/±inf to `default`, so one diverged measurement cannot poison the normalizer."""
    if v is None:
        return default
    f = float(v)
    return f if math.isfinite(f) else default


def _clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


def _history(scaled: list[float]) -> list[float]:
    """Last HISTORY_LEN entries, oldest first, left-padded with zeros."""
    out = scaled[-HISTORY_LEN:]
    return [0.0] * (HISTORY_LEN - len(out)) + out


def _slot_block(report: SeedStateReport | None, space: ActionSpace) -> list[float]:
    if report is None:
        return [0.0] * (len(_SLOT_STATE_NAMES) + space.num_blueprints)
    one_hot = [0.0] * space.num_blueprints
    head_index = space.blueprint_index(report.blueprint_id)
    if head_index is not None:
        one_hot[head_index] = 1.0
    return [
        1.0,
        _clamp((int(report.stage) - 1) / 6.0, 0.0, 1.0),
        _clamp(safe(report.metrics.current_alpha, 0.0), 0.0, 1.0),
        _clamp(safe(report.improvement, 0.0) / 10.0, -1.0, 1.0),
        *one_hot,
    ]


def _telemetry_block(report: SeedStateReport | None) -> list[float]:
    if report is None or report.telemetry is None:
        return [0.0] * SEED_TELEMETRY_DIM
    return [safe(v, 0.0) for v in report.telemetry.to_features()]


def signals_to_features(
    signals: TrainingSignals,
    *,
    slot_reports: Mapping[str, SeedStateReport],
    enabled_slots: Iterable[str],
    space: ActionSpace,
    max_epochs: int,
    host_param_count: int,
    seed_param_count_total: int,
    seeds_present: int,
    max_seeds: int,
    random_guess_loss: float,
    use_telemetry: bool = True,
) -> list[float]:
    """The observation: `obs_dim(space, use_telemetry)` floats (80, or 50 without the per-slot telemetry blocks, for
    the built-in CNN blueprints)."""
    enabled = ordered_slots(enabled_slots)
    stray = sorted(set(slot_reports) - set(enabled))
    if stray:
        raise ValueError(f"Seed reports for slots that are not enabled: {stray} (enabled: {list(enabled)})")
    if not (math.isfinite(random_guess_loss) and random_guess_loss > 0):
        raise UserInputError(f"random_guess_loss must be finite and > 0, got {random_guess_loss}")
    big_l = random_guess_loss
    m = signals.metrics

    def loss(x: float) -> float:
        return _clamp(safe(x, big_l) / big_l, 0.0, 5.0)

    def acc(x: float) -> float:
        return safe(x, 0.0) / 100.0

    capacity = min(max_seeds, len(enabled)) if max_seeds > 0 else len(enabled)
    features = [
        safe(m.epoch, 0.0) / max(max_epochs, 1),
        1.0 if m.host_stabilized else 0.0,
        loss(m.train_loss),
        loss(m.val_loss),
        _clamp(safe(m.loss_delta, 0.0) / (0.05 * big_l), -5.0, 5.0),
        acc(m.train_accuracy),
        acc(m.val_accuracy),
        _clamp(safe(m.accuracy_delta, 0.0) / 5.0, -5.0, 5.0),
        min(safe(m.plateau_epochs, 0.0), 10.0) / 10.0,
        acc(m.best_val_accuracy),
        loss(m.best_val_loss),
        *_history([loss(x) for x in signals.loss_history]),
        *_history([acc(x) for x in signals.accuracy_history]),
        _clamp(seed_param_count_total / host_param_count, 0.0, 10.0) if host_param_count > 0 else 0.0,
        seeds_present / capacity if capacity > 0 else 0.0,
    ]
    reports = [slot_reports.get(slot) if slot in enabled else None for slot in CANONICAL_SLOTS]
    for report in reports:
        features.extend(_slot_block(report, space))
    if use_telemetry:
        for report in reports:
            features.extend(_telemetry_block(report))
    assert len(features) == obs_dim(space, use_telemetry)
    return features


def observation_features(obs: EnvObservation, *, use_telemetry: bool = True) -> list[float]:
    """The policy input for an environment observation (the same features in training, comparison and datasets)."""
    return signals_to_features(
        obs.signals,
        slot_reports=obs.slot_reports,
        enabled_slots=obs.enabled_slots,
        space=obs.action_space,
        max_epochs=obs.max_epochs,
        host_param_count=obs.host_param_count,
        seed_param_count_total=obs.total_param_count - obs.host_param_count,
        seeds_present=obs.seeds_present,
        max_seeds=obs.max_seeds,
        random_guess_loss=obs.random_guess_loss,
        use_telemetry=use_telemetry,
    )
