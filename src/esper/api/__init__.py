"""Growth on any model, in any training loop: `wrap` names a model's modules as slots, a `Controller` grows seeds in
them once per epoch of the user's loop (`docs/api.md`). The public API, above every layer it drives."""

from esper.api.controller import METRICS, Controller, GrowthConfig, StepResult, Transition
from esper.api.measure import Contributions
from esper.api.wrapping import SlotInfo, slots, wrap

__all__ = ["METRICS", "Contributions", "Controller", "GrowthConfig", "SlotInfo", "StepResult", "Transition", "slots",
           "wrap"]
