"""Host architectures of the datagen matrix: names for configurations of Kasmina's hosts.

The HostCNN family are `CNNHost` configurations and the ResNets are `ResNetHost`s; both are `SegmentedHost`s, so a
datagen episode grows its host through the same segmented forward as every other run.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from esper.datagen.configs import SUPPORTED_ARCHITECTURES
from esper.kasmina.hosts import CNNHost, ResNetHost
from esper.leyline.errors import UserInputError

__all__ = ["SUPPORTED_ARCHITECTURES", "create_model"]


def _cnn(channels: tuple[int, ...], pool: tuple[bool, ...]) -> Callable[[int, int], nn.Module]:
    return lambda classes, in_ch: CNNHost(in_channels=in_ch, num_classes=classes, channels=channels, pool=pool)


def _resnet(depth: int) -> Callable[[int, int], nn.Module]:
    return lambda classes, in_ch: ResNetHost(depth, num_classes=classes, in_channels=in_ch)


# The last HostCNN block keeps its 8×8 resolution (no pool) so the late slot still sees spatial structure.
_BUILDERS: dict[str, Callable[[int, int], nn.Module]] = {
    "HostCNN": _cnn((64, 128, 256), (True, True, False)),
    "HostCNN-Wide": _cnn((128, 256, 512), (True, True, False)),
    "HostCNN-Deep": _cnn((64, 64, 128, 128, 256), (False, True, False, True, False)),
    "ResNet-18": _resnet(18),
    "ResNet-34": _resnet(34),
}
assert tuple(_BUILDERS) == SUPPORTED_ARCHITECTURES


def create_model(architecture: str, num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    """A fresh host (a `SegmentedHost`) for `architecture`, initialized from the global torch RNG."""
    builder = _BUILDERS.get(architecture)
    if builder is None:
        raise UserInputError(f"Unknown architecture '{architecture}'. Supported: {', '.join(SUPPORTED_ARCHITECTURES)}")
    return builder(num_classes, in_channels)
