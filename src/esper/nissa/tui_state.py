"""The dashboard's state and value formatting: one row per env, seed slots, PPO health thresholds.

Kept apart from `esper.nissa.tui` (event handling and layout) so each stays one readable responsibility.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text

__all__ = ["DASH", "PPO_ROWS", "STAGES", "EnvView", "SlotView", "fmt", "num", "severity", "sparkline"]

SPARK = "▁▂▃▄▅▆▇█"
STAGES: dict[str, tuple[str, str]] = {  # name → (abbreviation, style)
    "DORMANT": ("Dorm", "dim"),
    "GERMINATED": ("Germ", "cyan"),
    "TRAINING": ("Train", "yellow"),
    "BLENDING": ("Blend", "magenta"),
    "PROBATIONARY": ("Prob", "bright_blue"),
    "FOSSILIZED": ("Foss", "bright_green"),
    "CULLED": ("Cull", "bold red"),
}
# (label, metric key, format, CRIT threshold, WARN threshold, bad direction); ratio limits are the anomaly detector's.
PPO_ROWS: tuple[tuple[str, str, str, float | None, float | None, str], ...] = (
    ("entropy", "entropy", ".3f", 0.3, 0.5, "below"),
    ("clip fraction", "clip_fraction", ".3f", 0.3, 0.25, "above"),
    ("approx KL", "approx_kl", ".4f", None, 0.05, "above"),
    ("explained var", "explained_variance", ".3f", 0.0, 0.3, "below"),
    ("ratio max", "ratio_max", ".3f", 5.0, None, "above"),
    ("ratio min", "ratio_min", ".3f", 0.1, None, "below"),
    ("policy loss", "policy_loss", "+.4f", None, None, "above"),
    ("value loss", "value_loss", ".4f", None, None, "above"),
    ("grad norm", "grad_norm", ".3f", 10.0, 5.0, "above"),
    ("entropy coef", "entropy_coef", ".4f", None, None, "above"),
    ("early stop epoch", "early_stop_epoch", "g", None, None, "above"),
)
STALL_EPOCHS = 10
DROP_PP = 1.0
DASH = "—"


def sparkline(values: Iterable[float]) -> str:
    """One block character per value, scaled to the window's min..max (flat windows sit mid-height)."""
    vals = list(values)
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    if hi - lo < 1e-9:
        return SPARK[3] * len(vals)
    return "".join(SPARK[round((v - lo) / (hi - lo) * (len(SPARK) - 1))] for v in vals)


@dataclass(slots=True)
class SlotView:
    stage: str
    blueprint: str
    alpha: float = 0.0
    contribution: float | None = None


@dataclass(slots=True)
class EnvView:
    env_id: int
    device: str = "?"
    controller: str | None = None
    episode: Any = None
    epoch: int = 0
    max_epochs: int | None = None
    val_accuracy: float | None = None
    curve: deque[float] = field(default_factory=lambda: deque(maxlen=8))
    best: float = float("-inf")
    since_best: int = 0
    drop: float = 0.0
    reward: float | None = None
    last_action: str = DASH
    slots: dict[str, SlotView | None] = field(default_factory=dict)
    flash: dict[str, tuple[str, int]] = field(default_factory=dict)  # culled slot → (blueprint, epochs left)
    rollback_left: int = 0

    def status(self) -> Text:
        if self.epoch == 0:
            return Text("initializing", style="dim")
        if self.rollback_left > 0:
            return Text("rolled back", style="bold red")
        if self.drop > DROP_PP:
            return Text("degraded", style="red")
        if self.since_best > STALL_EPOCHS:
            return Text("stalled", style="yellow")
        return Text("healthy", style="green")


def num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def fmt(value: Any, spec: str) -> str:
    number = num(value)
    return DASH if number is None else format(number, spec)


def severity(value: float, crit: float | None, warn: float | None, direction: str) -> tuple[str, str]:
    def bad(limit: float | None) -> bool:
        return limit is not None and (value < limit if direction == "below" else value > limit)

    if bad(crit):
        return "CRIT", "bold red"
    if bad(warn):
        return "WARN", "yellow"
    return ("ok", "green") if crit is not None or warn is not None else ("", "")
