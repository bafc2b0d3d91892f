"""Kasmina: the body. Hosts, blueprints, blending, isolation, the seed lifecycle and MorphogeneticModel."""

from esper.kasmina.blending import BLEND_IDS, GatedBlend, schedule_alpha
from esper.kasmina.blueprints import DEFAULT_REGISTRY, BlueprintRegistry, BlueprintSpec, register_blueprint
from esper.kasmina.fixed import FixedModulesHost, build_fixed_host
from esper.kasmina.hosts import CNNHost, HostProtocol, ResNetHost, SegmentedHost, TransformerHost, slot_boundaries
from esper.kasmina.isolation import blend_lerp
from esper.kasmina.model import CounterfactualLogits, MorphogeneticModel
from esper.kasmina.slot import SeedSlot, StageChange
from esper.kasmina.state import LifecycleConfig, QualityGates, SeedState

__all__ = [
    "BLEND_IDS",
    "DEFAULT_REGISTRY",
    "BlueprintRegistry",
    "BlueprintSpec",
    "CNNHost",
    "CounterfactualLogits",
    "FixedModulesHost",
    "GatedBlend",
    "HostProtocol",
    "LifecycleConfig",
    "MorphogeneticModel",
    "QualityGates",
    "ResNetHost",
    "SeedSlot",
    "SeedState",
    "SegmentedHost",
    "StageChange",
    "TransformerHost",
    "blend_lerp",
    "build_fixed_host",
    "register_blueprint",
    "schedule_alpha",
    "slot_boundaries",
]
