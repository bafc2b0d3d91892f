"""Every registered controller, in one place: importing the packages that define controllers registers them.

Commands resolve controller specs through `all_controllers()`, so a package that adds a controller (a learner, a
behaviour policy) only needs to be imported here.
"""

from __future__ import annotations

import esper.datagen
import esper.evaluation.replay
import esper.simic.iql
import esper.simic.ppo.controller  # noqa: F401  (registers ppo:PATH)
from esper.tamiyo import CONTROLLERS, ControllerRegistry

__all__ = ["all_controllers"]


def all_controllers() -> ControllerRegistry:
    """The controller registry with every package's controllers registered."""
    return CONTROLLERS
