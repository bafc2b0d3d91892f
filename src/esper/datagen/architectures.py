"""Host architectures of the datagen matrix, all implementing Kasmina's segmented-forward host protocol.

The HostCNN family are `CNNHost` configurations; `ResNetHost` is the CIFAR ResNet (3×3 stem, no max-pool) whose four
residual stages are the blocks for slot placement, so its slots sit after stages 1, 2 and 4.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from esper.datagen.configs import SUPPORTED_ARCHITECTURES
from esper.kasmina.hosts import CNNHost, SegmentLayout
from esper.leyline import CANONICAL_SLOTS
from esper.leyline.errors import UserInputError

__all__ = ["RESNET_STAGES", "SUPPORTED_ARCHITECTURES", "BasicBlock", "ResNetHost", "create_model"]

RESNET_STAGES: dict[int, tuple[int, int, int, int]] = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}
_STAGE_WIDTHS = (64, 128, 256, 512)
_STAGE_STRIDES = (1, 2, 2, 2)


class BasicBlock(nn.Module):
    """Two 3×3 conv-BN layers with a residual connection; a 1×1 conv + BN projection when the shape changes."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out)) + self.shortcut(x)
        return F.relu(out)


class ResNetHost(nn.Module):
    """CIFAR ResNet-18/34 with a segmented forward: stem → 4 stages (the slot blocks) → GAP → Linear."""

    topology = "cnn"

    def __init__(self, depth: int, *, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        if depth not in RESNET_STAGES:
            raise UserInputError(f"Unsupported ResNet depth {depth}. Available: {sorted(RESNET_STAGES)}")
        self.depth = depth
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, _STAGE_WIDTHS[0], 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(_STAGE_WIDTHS[0]),
            nn.ReLU(inplace=True),
        )
        stages: list[nn.Module] = []
        c_in = _STAGE_WIDTHS[0]
        for width, stride, n_blocks in zip(_STAGE_WIDTHS, _STAGE_STRIDES, RESNET_STAGES[depth]):
            blocks = [BasicBlock(c_in if i == 0 else width, width, stride if i == 0 else 1) for i in range(n_blocks)]
            stages.append(nn.Sequential(*blocks))
            c_in = width
        self.stages = nn.ModuleList(stages)
        self.head = nn.Linear(_STAGE_WIDTHS[-1], num_classes)
        self.layout = SegmentLayout(len(self.stages))
        self._segment_channels = {s: _STAGE_WIDTHS[self.layout.last_block(s)] for s in CANONICAL_SLOTS}

    @property
    def segment_channels(self) -> Mapping[str, int]:
        return dict(self._segment_channels)

    def _enter(self, x: Tensor) -> Tensor:
        # channels_last for the same reason as CNNHost: faster convolutions on both cuDNN and oneDNN.
        return self.stem(x.contiguous(memory_format=torch.channels_last))

    def _run(self, h: Tensor, stages: range) -> Tensor:
        for i in stages:
            h = self.stages[i](h)
        return h

    def _classify(self, h: Tensor) -> Tensor:
        return self.head(h.mean(dim=(2, 3)))

    def forward(self, x: Tensor) -> Tensor:
        return self._classify(self._run(self._enter(x), range(len(self.stages))))

    def forward_to_segment(self, segment: str, x: Tensor, from_segment: str | None = None) -> Tensor:
        stages = self.layout.to_segment(segment, from_segment)
        return self._run(self._enter(x) if from_segment is None else x, stages)

    def forward_from_segment(self, segment: str, h: Tensor) -> Tensor:
        return self._classify(self._run(h, self.layout.from_segment(segment)))


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
    """A fresh host (HostProtocol) for `architecture`, initialized from the global torch RNG."""
    builder = _BUILDERS.get(architecture)
    if builder is None:
        raise UserInputError(f"Unknown architecture '{architecture}'. Supported: {', '.join(SUPPORTED_ARCHITECTURES)}")
    return builder(num_classes, in_channels)
