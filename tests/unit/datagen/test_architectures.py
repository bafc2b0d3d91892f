"""Datagen hosts: the architecture names build Kasmina hosts of the expected sizes, and Kasmina grows each."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from esper.datagen.architectures import SUPPORTED_ARCHITECTURES, create_model
from esper.kasmina.blueprints import DEFAULT_REGISTRY
from esper.kasmina.hosts import CNNHost, HostProtocol, ResNetHost, SegmentedHost
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


def test_the_architectures_are_kasmina_hosts(hosts: dict[str, nn.Module]) -> None:
    assert all(isinstance(hosts[n], CNNHost) for n in ("HostCNN", "HostCNN-Wide", "HostCNN-Deep"))
    assert all(isinstance(hosts[n], ResNetHost) for n in ("ResNet-18", "ResNet-34"))
    assert all(isinstance(host, SegmentedHost) for host in hosts.values())


def test_classes_and_input_channels() -> None:
    for name in ("HostCNN", "ResNet-18"):
        host = create_model(name, num_classes=7, in_channels=1).eval()
        assert host(torch.randn(2, 1, 28, 28)).shape == (2, 7)


def test_unknown_architecture_raises() -> None:
    with pytest.raises(ValueError, match=r"Unknown architecture 'InvalidArch'\. Supported: HostCNN"):
        create_model("InvalidArch")


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
