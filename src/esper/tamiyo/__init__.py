"""Tamiyo: the controller layer (signal tracking, policy protocol, heuristic and its records, random, static, fixed
and grow controllers, and the one-epoch deviation of any of them).

Pure Python on Leyline contracts; no torch.
"""

from esper.tamiyo.deviate import DEVIATE, DeviatingPolicy, deviation_spec
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
from esper.tamiyo.heuristic_record import (
    THRESHOLD_FIELDS,
    TUNED,
    HeuristicRecord,
    ObjectiveRecord,
    TunedSetting,
    TuningSummary,
    heuristic_config,
    read_heuristic_record,
)
from esper.tamiyo.policy import MATCHED, MAX_HOST_WIDTH, RandomPolicy, StaticPolicy
from esper.tamiyo.protocol import (
    BatchTamiyoPolicy,
    InvalidDecisionError,
    StatefulPolicy,
    TamiyoDecision,
    TamiyoPolicy,
    check_decision,
)
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
    "DEVIATE",
    "FIXED",
    "GROW",
    "MATCHED",
    "MAX_HOST_WIDTH",
    "THRESHOLD_FIELDS",
    "TUNED",
    "BatchTamiyoPolicy",
    "ControllerContext",
    "ControllerEntry",
    "ControllerRegistry",
    "ControllerSpec",
    "DeviatingPolicy",
    "FixedModules",
    "FixedPolicy",
    "GrowPolicy",
    "HeuristicPolicyConfig",
    "HeuristicRecord",
    "HeuristicTamiyo",
    "InvalidDecisionError",
    "ObjectiveRecord",
    "RandomPolicy",
    "SettingChangeError",
    "SignalTracker",
    "StatefulPolicy",
    "StaticPolicy",
    "TamiyoDecision",
    "TamiyoPolicy",
    "TunedSetting",
    "TuningSummary",
    "check_decision",
    "check_trained_setting",
    "deviation_spec",
    "fixed_spec",
    "fixed_variants",
    "heuristic_config",
    "host_variant",
    "module_extensions",
    "read_heuristic_record",
    "register_controller",
]
