"""Datagen hosts: shapes, parameter counts, slot positions, segment invariants, and wrapping by Kasmina."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from esper.datagen.architectures import SUPPORTED_ARCHITECTURES, ResNetHost, create_model
from esper.kasmina.blueprints import DEFAULT_REGISTRY
from esper.kasmina.hosts import CNNHost, HostProtocol
from esper.kasmina.model import MorphogeneticModel
from esper.kasmina.state import LifecycleConfig
from esper.leyline import CANONICAL_SLOTS, SeedStage

# Trainable parameters (10 classes) and channels at the early, mid and late slots.
EXPECTED = {
    "HostCNN": (373_834, (64, 128, 256)),
    "HostCNN-Wide": (1_484_938, (128, 256, 512)),
    "HostCNN-Deep": (558_538, (64, 128, 256)),
    "ResNet-18": (11_173_962, (64, 128, 512)),
    "ResNet-34": (21_282_122, (64, 128, 512)),
}


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


@pytest.fixture(scope="module")
def hosts() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    return {name: create_model(name).eval() for name in SUPPORTED_ARCHITECTURES}


def test_supported_architectures() -> None:
    assert set(SUPPORTED_ARCHITECTURES) == {"HostCNN", "HostCNN-Wide", "HostCNN-Deep", "ResNet-18", "ResNet-34"}


@pytest.mark.parametrize("name", SUPPORTED_ARCHITECTURES)
def test_shapes_params_and_slot_channels(hosts: dict[str, nn.Module], name: str) -> None:
    host = hosts[name]
    assert isinstance(host, HostProtocol) and host.topology == "cnn"
    assert host(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    params, channels = EXPECTED[name]
    assert n_params(host) == params
    assert list(host.segment_channels.items()) == list(zip(CANONICAL_SLOTS, channels))


def test_wide_has_more_parameters_than_hostcnn(hosts: dict[str, nn.Module]) -> None:
    assert n_params(hosts["HostCNN-Wide"]) > n_params(hosts["HostCNN"])


def test_hostcnn_family_are_cnnhost_configurations(hosts: dict[str, nn.Module]) -> None:
    assert all(isinstance(hosts[n], CNNHost) for n in ("HostCNN", "HostCNN-Wide", "HostCNN-Deep"))


def test_classes_and_input_channels() -> None:
    for name in ("HostCNN", "ResNet-18"):
        host = create_model(name, num_classes=7, in_channels=1).eval()
        assert host(torch.randn(2, 1, 28, 28)).shape == (2, 7)


def test_unknown_architecture_raises() -> None:
    with pytest.raises(ValueError, match=r"Unknown architecture 'InvalidArch'\. Supported: HostCNN"):
        create_model("InvalidArch")
    with pytest.raises(ValueError, match="Unsupported ResNet depth 50"):
        ResNetHost(50)


def test_resnet_slots_sit_after_stages_1_2_and_4() -> None:
    torch.manual_seed(0)
    host = ResNetHost(18).eval()
    x = torch.randn(2, 3, 32, 32)
    h = host.stem(x.contiguous(memory_format=torch.channels_last))
    stage_outputs = []
    for stage in host.stages:
        h = stage(h)
        stage_outputs.append(h)
    for segment, stage in zip(CANONICAL_SLOTS, (0, 1, 3)):
        assert torch.equal(host.forward_to_segment(segment, x), stage_outputs[stage])
    shapes = [tuple(host.forward_to_segment(s, x).shape) for s in CANONICAL_SLOTS]
    assert shapes == [(2, 64, 32, 32), (2, 128, 16, 16), (2, 512, 4, 4)]


def test_resnet_blocks_use_projection_shortcuts_only_when_the_shape_changes() -> None:
    host = ResNetHost(34)
    assert [len(stage) for stage in host.stages] == [3, 4, 6, 3]
    first = [stage[0] for stage in host.stages]
    assert isinstance(first[0].shortcut, nn.Identity)
    for block in first[1:]:
        conv, bn = block.shortcut
        assert conv.kernel_size == (1, 1) and conv.stride == (2, 2) and isinstance(bn, nn.BatchNorm2d)
    assert all(isinstance(stage[1].shortcut, nn.Identity) for stage in host.stages)


@pytest.mark.parametrize("name", SUPPORTED_ARCHITECTURES)
def test_segmented_forward_equals_full_forward(hosts: dict[str, nn.Module], name: str) -> None:
    host = hosts[name]
    x = torch.randn(2, 3, 32, 32)
    full = host(x)
    for segment in CANONICAL_SLOTS:
        assert torch.equal(host.forward_from_segment(segment, host.forward_to_segment(segment, x)), full)
    early = host.forward_to_segment("early", x)
    mid = host.forward_to_segment("mid", early, from_segment="early")
    assert torch.equal(mid, host.forward_to_segment("mid", x))
    assert torch.equal(host.forward_to_segment("late", mid, from_segment="mid"), host.forward_to_segment("late", x))
    with pytest.raises(ValueError, match="Unknown segment 'middle'"):
        host.forward_to_segment("middle", x)


@pytest.mark.parametrize("name", SUPPORTED_ARCHITECTURES)
def test_morphogenetic_model_wraps_every_host_and_every_blueprint_germinates(
    hosts: dict[str, nn.Module], name: str
) -> None:
    model = MorphogeneticModel(hosts[name], slots=list(CANONICAL_SLOTS), lifecycle=LifecycleConfig()).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(model(x), hosts[name](x))  # seedless model == host
    assert model.host_param_count == EXPECTED[name][0]
    for blueprint in DEFAULT_REGISTRY.names("cnn"):
        for slot in CANONICAL_SLOTS:
            model.germinate_seed(blueprint, f"{blueprint}-{slot}", slot=slot, baseline_accuracy=10.0, epoch=1)
        model.step_epoch(1)  # G1: every seed enters TRAINING and runs in the forward
        assert all(s.state is not None and s.state.stage == SeedStage.TRAINING for s in model.slots())
        with torch.no_grad():
            out = model(x)
        assert out.shape == (2, 10) and torch.isfinite(out).all()
        for slot in CANONICAL_SLOTS:
            model.cull_seed(slot=slot, reason="test", epoch=1)
