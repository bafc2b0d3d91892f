"""Blueprint catalog. Importing this package registers the built-in CNN and transformer blueprints in
`DEFAULT_REGISTRY`, through the same `register_blueprint` a plugin module uses."""

from esper.kasmina.blueprints import cnn, transformer
from esper.kasmina.blueprints.registry import DEFAULT_REGISTRY, BlueprintRegistry, BlueprintSpec, register_blueprint

__all__ = ["DEFAULT_REGISTRY", "BlueprintRegistry", "BlueprintSpec", "cnn", "register_blueprint", "transformer"]
