"""esper: morphogenetic training — neural networks that grow during training.

`esper.wrap`, `esper.slots` and `esper.Controller` (growth on any model, in any loop) are loaded on first use, so
importing esper stays light and no layer below the public API imports it.
"""

import importlib
from typing import Any

__version__ = "0.1.0"

_PUBLIC_API = frozenset({"wrap", "slots", "Controller", "GrowthConfig"})


def __getattr__(name: str) -> Any:
    if name in _PUBLIC_API:
        return getattr(importlib.import_module("esper.api"), name)
    if name == "lightning":
        return importlib.import_module("esper.lightning")
    raise AttributeError(f"module 'esper' has no attribute {name!r}")
