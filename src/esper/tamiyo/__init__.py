"""Tamiyo: the controller layer (signal tracking, policy protocol, heuristic, random, static, fixed and grow
controllers).

Pure Python on Leyline contracts; no torch.
"""

from esper.tamiyo.fixed import (
    FIXED,
    FixedModules,
    FixedPolicy,
    fixed_spec,
    fixed_variants,
    host_variant,
    module_extensions,
)
from esper.tamiyo.grow import GROW, GrowPolicy
from esper.tamiyo.heuristic import DEFAULT_BLUEPRINT_ROTATION, HeuristicPolicyConfig, HeuristicTamiyo
from esper.tamiyo.policy import MATCHED, MAX_HOST_WIDTH, RandomPolicy, StaticPolicy
from esper.tamiyo.protocol import BatchTamiyoPolicy, InvalidDecisionError, TamiyoDecision, TamiyoPolicy, check_decision
from esper.tamiyo.registry import (
    CONTROLLERS,
    ControllerContext,
    ControllerEntry,
    ControllerRegistry,
    ControllerSpec,
    SettingChangeError,
    check_trained_setting,
    register_controller,
)
from esper.tamiyo.tracker import SignalTracker

__all__ = [
    "CONTROLLERS",
    "DEFAULT_BLUEPRINT_ROTATION",
    "FIXED",
    "GROW",
    "MATCHED",
    "MAX_HOST_WIDTH",
    "BatchTamiyoPolicy",
    "ControllerContext",
    "ControllerEntry",
    "ControllerRegistry",
    "ControllerSpec",
    "FixedModules",
    "FixedPolicy",
    "GrowPolicy",
    "HeuristicPolicyConfig",
    "HeuristicTamiyo",
    "InvalidDecisionError",
    "RandomPolicy",
    "SettingChangeError",
    "SignalTracker",
    "StaticPolicy",
    "TamiyoDecision",
    "TamiyoPolicy",
    "check_decision",
    "check_trained_setting",
    "fixed_spec",
    "fixed_variants",
    "host_variant",
    "module_extensions",
    "register_controller",
]
