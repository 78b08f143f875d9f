"""ResNet (18/34/50) and a 4-level FPN, named like the upstream checkpoint.

The module and parameter names follow the mmdet ResNet/FPN used by Sparse4D
(conv1, bn1, layer1..4, downsample.0/1; lateral_convs.i.conv,
fpn_convs.i.conv) so upstream weights load by prefix alone (mapping.py).
"""
from typing import List

import torch
import torch.nn.functional as F
from torch import nn


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample=None):
        super().__init__()
        # stride on the 3x3 conv (the "pytorch" style mmdet uses by default)
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


_ARCH = {18: (BasicBlock, (2, 2, 2, 2)), 34: (BasicBlock, (3, 4, 6, 3)),
         50: (Bottleneck, (3, 4, 6, 3))}


class ResNet(nn.Module):
    """Returns the outputs of the four stages (strides 4, 8, 16, 32)."""

    def __init__(self, depth: int = 50, base_width: int = 64):
        super().__init__()
        if depth not in _ARCH:
            raise ValueError(f"ResNet depth {depth} not supported (expected 18, 34 or 50)")
        block, counts = _ARCH[depth]
        self.conv1 = nn.Conv2d(3, base_width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(base_width)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        inplanes = base_width
        self.out_channels = []
        for i, n in enumerate(counts):
            planes = base_width * 2 ** i
            stride = 1 if i == 0 else 2
            layers = []
            for j in range(n):
                down = None
                if j == 0 and (stride != 1 or inplanes != planes * block.expansion):
                    down = nn.Sequential(
                        nn.Conv2d(inplanes, planes * block.expansion, 1, stride, bias=False),
                        nn.BatchNorm2d(planes * block.expansion))
                layers.append(block(inplanes, planes, stride if j == 0 else 1, down))
                inplanes = planes * block.expansion
            self.add_module(f"layer{i + 1}", nn.Sequential(*layers))
            self.out_channels.append(inplanes)

    def forward(self, x) -> List[torch.Tensor]:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        outs = []
        for i in range(4):
            x = getattr(self, f"layer{i + 1}")(x)
            outs.append(x)
        return outs


class _ConvModule(nn.Module):
    # mmcv's ConvModule wraps the conv as `.conv`; kept for checkpoint names.
    def __init__(self, cin: int, cout: int, k: int):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, 1, k // 2)

    def forward(self, x):
        return self.conv(x)


def upsample_nearest(x, size):
    """F.interpolate(x, size, mode="nearest") without Shape ops in the export:
    a constant-scale Resize for the usual exact 2x, else two Gathers with
    the same source rows/columns (floor(dst * in / out))."""
    h, w = int(x.shape[2]), int(x.shape[3])
    oh, ow = int(size[0]), int(size[1])
    if (oh, ow) == (2 * h, 2 * w):
        return F.interpolate(x, scale_factor=2.0, mode="nearest")
    rows = torch.div(torch.arange(oh, device=x.device) * h, oh, rounding_mode="floor")
    cols = torch.div(torch.arange(ow, device=x.device) * w, ow, rounding_mode="floor")
    return x.index_select(2, rows).index_select(3, cols)


class FPN(nn.Module):
    def __init__(self, in_channels: List[int], out_channels: int = 256):
        super().__init__()
        self.lateral_convs = nn.ModuleList(_ConvModule(c, out_channels, 1) for c in in_channels)
        self.fpn_convs = nn.ModuleList(_ConvModule(out_channels, out_channels, 3)
                                       for _ in in_channels)

    def forward(self, inputs: List[torch.Tensor]) -> List[torch.Tensor]:
        lat = [m(x) for m, x in zip(self.lateral_convs, inputs)]
        # top-down, nearest upsampling to the size of the finer map
        for i in range(len(lat) - 1, 0, -1):
            lat[i - 1] = lat[i - 1] + upsample_nearest(lat[i], lat[i - 1].shape[2:])
        return [m(x) for m, x in zip(self.fpn_convs, lat)]


def flatten_feature_maps(maps: List[torch.Tensor], num_cams: int) -> torch.Tensor:
    """[bs*N, C, H, W] per level -> features [bs, F, C] (camera-major, NHWC)."""
    bn, c = int(maps[0].shape[0]), int(maps[0].shape[1])
    bs = bn // num_cams
    per_level = [m.reshape(bn, c, int(m.shape[2]) * int(m.shape[3])).transpose(1, 2)
                 for m in maps]  # [bs*N, HW, C]
    return torch.cat(per_level, dim=1).reshape(bs, -1, c)
