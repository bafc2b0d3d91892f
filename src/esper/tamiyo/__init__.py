"""Tamiyo: the controller layer (signal tracking, policy protocol, heuristic, random and static controllers).

Pure Python on Leyline contracts; no torch.
"""

from esper.tamiyo.heuristic import DEFAULT_BLUEPRINT_ROTATION, HeuristicPolicyConfig, HeuristicTamiyo
from esper.tamiyo.policy import (
    BatchTamiyoPolicy,
    InvalidDecisionError,
    RandomPolicy,
    StaticPolicy,
    TamiyoDecision,
    TamiyoPolicy,
    check_decision,
)
from esper.tamiyo.tracker import SignalTracker

__all__ = [
    "DEFAULT_BLUEPRINT_ROTATION",
    "BatchTamiyoPolicy",
    "HeuristicPolicyConfig",
    "HeuristicTamiyo",
    "InvalidDecisionError",
    "RandomPolicy",
    "SignalTracker",
    "StaticPolicy",
    "TamiyoDecision",
    "TamiyoPolicy",
    "check_decision",
]
