"""Blueprint catalog. Importing this package builds `DEFAULT_REGISTRY`, the only module-level registry.

The catalog modules only define `register_*_blueprints(registry)` functions and never touch a global, so
`build_default_registry()` gives tests and experiments an independent, fully populated registry, while
`default_registry()` returns the shared one.
"""

from esper.kasmina.blueprints.cnn import register_cnn_blueprints
from esper.kasmina.blueprints.registry import BlueprintRegistry, BlueprintSpec
from esper.kasmina.blueprints.transformer import register_transformer_blueprints


def build_default_registry() -> BlueprintRegistry:
    """A new registry holding the full catalog (cnn and transformer)."""
    registry = BlueprintRegistry()
    register_cnn_blueprints(registry)
    register_transformer_blueprints(registry)
    return registry


DEFAULT_REGISTRY = build_default_registry()


def default_registry() -> BlueprintRegistry:
    """The shared default registry (the same instance as `DEFAULT_REGISTRY`), for use as a default argument."""
    return DEFAULT_REGISTRY


__all__ = [
    "DEFAULT_REGISTRY",
    "BlueprintRegistry",
    "BlueprintSpec",
    "build_default_registry",
    "default_registry",
    "register_cnn_blueprints",
    "register_transformer_blueprints",
]
