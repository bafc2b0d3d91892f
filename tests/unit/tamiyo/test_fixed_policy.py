"""The `fixed:` controller: spec parsing and its errors, the canonical label, variants and the host it asks for."""

from __future__ import annotations

import pytest

from esper.leyline import LifecycleOp, SeedStage
from esper.tamiyo import (
    CONTROLLERS,
    ControllerContext,
    FixedPolicy,
    RandomPolicy,
    StaticPolicy,
    check_decision,
    fixed_variants,
    host_variant,
    module_extensions,
)
from unit.tamiyo.helpers import PLUGIN_SPACE, make_obs, make_report, space_of

ALL = ("early", "mid", "late")
CNN, TRANSFORMER = space_of("cnn"), space_of("transformer")


def _build(text: str, topology: str = "cnn", slots: tuple[str, ...] = ALL) -> FixedPolicy:
    policy = CONTROLLERS.build(text, ControllerContext(space=space_of(topology), slots=slots))
    assert isinstance(policy, FixedPolicy)
    return policy


def test_a_spec_becomes_modules_in_canonical_slot_order_with_a_canonical_label() -> None:
    policy = _build("fixed:attention@late, conv_light@mid")
    assert policy.fixed_modules == (("mid", "conv_light"), ("late", "attention"))
    assert policy.label == "fixed:conv_light@mid,attention@late"
    assert _build(policy.label).fixed_modules == policy.fixed_modules
    assert _build("fixed:norm@early").fixed_modules == (("early", "norm"),)
    assert _build("fixed:lora@mid,mlp@early", "transformer").label == "fixed:mlp@early,lora@mid"


@pytest.mark.parametrize(("argument", "match"), [
    ("norm", r"'norm' is not BLUEPRINT@SLOT.*fixed:norm@early"),
    ("norm@", "is not BLUEPRINT@SLOT"),
    ("@early", "is not BLUEPRINT@SLOT"),
    ("norm@early@mid", "is not BLUEPRINT@SLOT"),
    ("norm@early,", "'' is not BLUEPRINT@SLOT"),
    ("lora@early", "unknown blueprint 'lora' for topology 'cnn' .*; choose one of conv_light, attention, norm, "
                   "depthwise, conv_heavy"),
    ("pointwise@early", r"unknown blueprint 'pointwise' .*\(a plugin's blueprint needs --plugin MODULE\)"),
    ("noop@early", r"noop builds nothing: use static"),
    ("norm@deep", "unknown slot 'deep'; choose one of the enabled slots: early, mid"),
    ("norm@late", "slot 'late' is not enabled in this run; choose one of the enabled slots: early, mid"),
    ("norm@early,attention@early", r"slot 'early' is given twice \(norm and attention\).*name each slot once"),
])
def test_every_bad_spec_names_the_problem_and_the_fix(argument: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _build(f"fixed:{argument}", slots=("early", "mid"))


def test_the_registry_needs_modules() -> None:
    with pytest.raises(ValueError, match=r"needs an argument: fixed:BLUEPRINT@SLOT\[,\.\.\.\]"):
        CONTROLLERS.parse("fixed")


def test_every_registered_blueprint_can_be_built_in() -> None:
    """Blueprints outside the policy head (conv_heavy) and a plugin's are specs like any other."""
    assert _build("fixed:conv_heavy@early").fixed_modules == (("early", "conv_heavy"),)
    plugin = CONTROLLERS.build("fixed:pointwise@mid", ControllerContext(space=PLUGIN_SPACE, slots=ALL))
    assert isinstance(plugin, FixedPolicy) and plugin.fixed_modules == (("mid", "pointwise"),)


def test_fixed_always_waits_validly_and_refuses_another_topology() -> None:
    policy = _build("fixed:norm@early")
    obs = make_obs([make_report("mid", SeedStage.TRAINING, epochs_in_stage=2)])
    decision = policy.decide(obs)
    assert decision.command.op == LifecycleOp.WAIT and "fixed:norm@early" in decision.reason
    check_decision(decision, obs)
    with pytest.raises(ValueError, match="built for 'transformer'"):
        _build("fixed:lora@early", "transformer").decide(obs)


def test_variants_are_every_head_blueprint_at_every_enabled_slot() -> None:
    assert fixed_variants(CNN, ("late", "early")) == [
        f"fixed:{b}@{s}" for b in ("conv_light", "attention", "norm", "depthwise") for s in ("early", "late")]
    variants = fixed_variants(TRANSFORMER, ("mid",))
    assert variants == ["fixed:lora@mid", "fixed:attention@mid", "fixed:norm@mid", "fixed:mlp@mid"]
    assert [_build(v, "transformer", ("mid",)).label for v in variants] == variants
    assert fixed_variants(PLUGIN_SPACE, ("mid",))[-1] == "fixed:pointwise@mid"  # a plugin's head blueprint too
    with pytest.raises(ValueError, match="Unknown slot"):
        fixed_variants(CNN, ("deep",))


def test_extensions_add_each_head_blueprint_at_each_free_slot_in_canonical_order() -> None:
    assert module_extensions("fixed:norm@mid", CNN, ("late", "mid", "early")) == [
        f"fixed:{b}@early,norm@mid" if s == "early" else f"fixed:norm@mid,{b}@late"
        for b in ("conv_light", "attention", "norm", "depthwise") for s in ("early", "late")]
    grown = module_extensions("grow:norm@early,depthwise@late", CNN, ALL)
    assert grown == [f"grow:norm@early,{b}@mid,depthwise@late"
                     for b in ("conv_light", "attention", "norm", "depthwise")]
    assert module_extensions("fixed:norm@early", CNN, ("early",)) == []  # no free slot
    assert [_build(v).label for v in module_extensions("fixed:attention@late", CNN, ALL)] == \
        module_extensions("fixed:attention@late", CNN, ALL)  # canonical: each parses back to itself


def test_host_variant_tells_the_runner_which_host_to_build() -> None:
    assert host_variant(_build("fixed:attention@late,norm@early")) == (1.0, (("early", "norm"), ("late", "attention")))
    assert host_variant(StaticPolicy(1.5)) == (1.5, ())
    assert host_variant(RandomPolicy(0)) == (1.0, ())
