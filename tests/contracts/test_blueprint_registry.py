"""Registry contract, parametrized over every registered blueprint.

A new blueprint is covered automatically; a new topology fails collection until it gets sizes in `SIZES`.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from esper.env.features import obs_dim
from esper.kasmina.blueprints import DEFAULT_REGISTRY, BlueprintRegistry, BlueprintSpec
from esper.kasmina.blueprints.registry import check_blueprint
from esper.leyline import UNRECORDED_HEADS
from esper.leyline.errors import UserInputError

SIZES: dict[str, tuple[int, ...]] = {"cnn": (4, 8, 16, 64), "transformer": (32, 64, 128)}

CASES = [
    pytest.param(spec, channels, id=f"{spec.topology}-{spec.name}-{channels}")
    for topology in DEFAULT_REGISTRY.topologies()
    for spec in DEFAULT_REGISTRY.list_for_topology(topology)
    for channels in SIZES[topology]
]


def sample_input(topology: str, channels: int) -> torch.Tensor:
    return torch.randn(2, channels, 8, 8) if topology == "cnn" else torch.randn(2, 8, channels)


@pytest.mark.parametrize(("spec", "channels"), CASES)
def test_param_count_closed_form_is_exact(spec: BlueprintSpec, channels: int) -> None:
    module = spec.factory(channels)
    assert sum(p.numel() for p in module.parameters() if p.requires_grad) == spec.param_count(channels)


@pytest.mark.parametrize(("spec", "channels"), CASES)
def test_shape_preserved_finite_and_trainable(spec: BlueprintSpec, channels: int) -> None:
    module = spec.factory(channels)
    x = sample_input(spec.topology, channels)
    y = module(x)
    assert y.shape == x.shape
    assert bool(torch.isfinite(y).all())
    params = list(module.parameters())
    if params:
        y.square().sum().backward()
        assert all(p.grad is not None for p in params)


def test_catalog_matches_the_design_tables() -> None:
    assert set(DEFAULT_REGISTRY.topologies()) == {"cnn", "transformer"}
    assert set(DEFAULT_REGISTRY.names("cnn")) == {"noop", "conv_light", "attention", "norm", "depthwise", "conv_heavy"}
    assert set(DEFAULT_REGISTRY.names("transformer")) == {"noop", "lora", "attention", "norm", "mlp"}


@pytest.mark.parametrize("topology", ["cnn", "transformer"])
def test_the_built_in_action_spaces_are_unchanged(topology: str) -> None:
    """With only the built-in blueprints registered, the head, the joint actions and the observation keep the sizes
    (and the order) every existing policy checkpoint and dataset was made with."""
    space = DEFAULT_REGISTRY.action_space(topology)
    assert space.head == UNRECORDED_HEADS[topology]
    assert (space.num_blueprints, space.num_joint_actions, obs_dim(space), obs_dim(space, False)) == (5, 43, 80, 50)
    for spec in DEFAULT_REGISTRY.list_for_topology(topology):
        assert spec.in_head == (spec.name in space.head), spec.name
    assert not DEFAULT_REGISTRY.get("cnn", "conv_heavy").in_head
    assert DEFAULT_REGISTRY.action_space("cnn").others == ("conv_heavy",)


def _spec(name: str, *, in_head: bool = True, topology: str = "cnn") -> BlueprintSpec:
    return BlueprintSpec(name, topology, lambda c: nn.Identity(), lambda c: 0, "test", in_head=in_head)


def test_a_registered_blueprint_extends_the_head_in_registration_order() -> None:
    registry = BlueprintRegistry()
    for spec in (_spec("noop"), _spec("b"), _spec("outside", in_head=False), _spec("a")):
        registry.register(spec)
    space = registry.action_space("cnn")
    assert (space.head, space.others) == (("noop", "b", "a"), ("outside",))
    assert (space.num_joint_actions, obs_dim(space)) == (1 + 3 * 2 * 3 + 6, 23 + 3 * 7 + 30)


def test_registration_checks_the_parameter_count_and_the_shape() -> None:
    with pytest.raises(UserInputError, match=r"param_count\(16\) is 0 but the module has 272 parameters"):
        check_blueprint(BlueprintSpec("wrong", "cnn", lambda c: nn.Conv2d(c, c, 1), lambda c: 0, "t", True))
    with pytest.raises(UserInputError, match="a seed must keep its input's shape"):
        check_blueprint(BlueprintSpec("pool", "cnn", lambda c: nn.MaxPool2d(2), lambda c: 0, "t", True))
    before = torch.get_rng_state()
    check_blueprint(BlueprintSpec("mix", "cnn", lambda c: nn.Conv2d(c, c, 1, bias=False), lambda c: c * c, "t", True))
    assert torch.equal(torch.get_rng_state(), before)  # trying a blueprint leaves every generator as it was


@pytest.mark.parametrize("name", ["", "two words", "fixed:x", "a@b"])
def test_a_blueprint_name_must_be_an_identifier(name: str) -> None:
    with pytest.raises(UserInputError, match="plain identifier"):
        BlueprintRegistry().register(_spec(name))


@pytest.mark.parametrize("topology", ["cnn", "transformer"])
def test_list_is_sorted_by_size_at_64(topology: str) -> None:
    specs = DEFAULT_REGISTRY.list_for_topology(topology)
    counts = [s.param_count(64) for s in specs]
    assert counts == sorted(counts)
    assert specs[0].name == "noop"
    assert DEFAULT_REGISTRY.names(topology) == tuple(s.name for s in specs)


def test_cnn_order() -> None:
    assert DEFAULT_REGISTRY.names("cnn") == ("noop", "norm", "attention", "depthwise", "conv_light", "conv_heavy")


def test_get_and_create() -> None:
    spec = DEFAULT_REGISTRY.get("cnn", "conv_light")
    assert (spec.name, spec.topology) == ("conv_light", "cnn")
    module = DEFAULT_REGISTRY.create("cnn", "conv_light", 8)
    assert sum(p.numel() for p in module.parameters()) == 9 * 64 + 16


def test_unknown_blueprint_message() -> None:
    expected = (
        "Unknown blueprint 'lora' for topology 'cnn'. "
        "Available: ['attention', 'conv_heavy', 'conv_light', 'depthwise', 'noop', 'norm'] "
        "(a plugin's blueprints need --plugin MODULE)"
    )
    with pytest.raises(ValueError) as excinfo:
        DEFAULT_REGISTRY.get("cnn", "lora")
    assert str(excinfo.value) == expected
    with pytest.raises(ValueError, match="Unknown blueprint 'conv_light' for topology 'transformer'"):
        DEFAULT_REGISTRY.create("transformer", "conv_light", 32)
    with pytest.raises(ValueError, match=r"Unknown blueprint 'noop' for topology 'rnn'. Available: \[\]"):
        DEFAULT_REGISTRY.get("rnn", "noop")


def test_unknown_topology_listing() -> None:
    with pytest.raises(ValueError, match=r"Unknown topology 'rnn'. Available: \['cnn', 'transformer'\]"):
        DEFAULT_REGISTRY.list_for_topology("rnn")
    with pytest.raises(ValueError, match="Unknown topology 'rnn'"):
        DEFAULT_REGISTRY.names("rnn")


def test_duplicate_registration_raises_and_keeps_the_original() -> None:
    registry = BlueprintRegistry()
    original = _spec("noop")
    registry.register(original)
    with pytest.raises(ValueError, match="'noop' is already registered for topology 'cnn'"):
        registry.register(_spec("noop"))
    assert registry.get("cnn", "noop") is original


def test_same_name_in_another_topology_is_allowed() -> None:
    registry = BlueprintRegistry()
    spec = BlueprintSpec("custom", "cnn", lambda c: nn.Identity(), lambda c: 0, "test", in_head=False)
    registry.register(spec)
    registry.register(BlueprintSpec("custom", "transformer", lambda c: nn.Identity(), lambda c: 0, "t", in_head=False))
    assert registry.topologies() == ("cnn", "transformer")
    assert registry.names("cnn") == ("custom",)


def test_spec_is_frozen() -> None:
    spec = DEFAULT_REGISTRY.get("cnn", "noop")
    with pytest.raises(AttributeError):
        spec.name = "other"  # type: ignore[misc]


def test_a_registry_of_ones_own_is_independent_of_the_default() -> None:
    fresh = BlueprintRegistry()
    fresh.register(_spec("extra", in_head=False))
    assert "extra" in fresh.names("cnn") and "extra" not in DEFAULT_REGISTRY.names("cnn")


def test_registry_has_no_reset() -> None:
    """`BlueprintRegistry.reset` must not exist (no global mutable registry state)."""
    assert not hasattr(BlueprintRegistry, "reset")
