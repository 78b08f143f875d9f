"""Common image classifiers in plain PyTorch (torchvision is not installed
here), laid out as torchvision defines them: ResNet-18, ResNet-50,
MobileNetV2, MobileNetV3-Large, EfficientNet-B0 and ShuffleNetV2 x1.0.

Weights are random (seeded) with non-trivial BatchNorm statistics; the
benchmark measures speed and the tests agreement, neither needs trained
weights. `build(name)` returns the model in eval mode.
"""
import torch
from torch import nn


def _divisible(v, divisor=8, min_value=None):
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvBNAct(nn.Sequential):
    def __init__(self, cin, cout, k=3, stride=1, groups=1, act=nn.ReLU):
        layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]
        if act is not None:
            layers.append(act(inplace=True))
        super().__init__(*layers)


# ---- ResNet ----

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride=1, down=None):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.down = down

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + idt)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride=1, down=None):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.down = down

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + idt)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes=1000):
        super().__init__()
        self.cin = 64
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        stages = []
        for i, (planes, n) in enumerate(zip((64, 128, 256, 512), layers)):
            stride = 1 if i == 0 else 2
            down = None
            if stride != 1 or self.cin != planes * block.expansion:
                down = nn.Sequential(nn.Conv2d(self.cin, planes * block.expansion, 1, stride, bias=False),
                                     nn.BatchNorm2d(planes * block.expansion))
            blocks = [block(self.cin, planes, stride, down)]
            self.cin = planes * block.expansion
            blocks += [block(self.cin, planes) for _ in range(1, n)]
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(self.cin, num_classes)

    def forward(self, x):
        x = self.pool(self.stages(self.stem(x)))
        return self.fc(torch.flatten(x, 1))


# ---- MobileNetV2 ----

class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = int(round(cin * expand))
        self.use_res = stride == 1 and cin == cout
        layers = []
        if expand != 1:
            layers.append(ConvBNAct(cin, hidden, 1, act=nn.ReLU6))
        layers += [ConvBNAct(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
               (6, 160, 3, 2), (6, 320, 1, 1)]
        cin = 32
        layers = [ConvBNAct(3, cin, 3, 2, act=nn.ReLU6)]
        for t, c, n, s in cfg:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(ConvBNAct(cin, 1280, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


# ---- MobileNetV3-Large ----

class SqueezeExcite(nn.Module):
    def __init__(self, cin, squeeze, act=nn.ReLU, gate=nn.Hardsigmoid):
        super().__init__()
        self.fc1 = nn.Conv2d(cin, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, cin, 1)
        self.act = act()
        self.gate = gate()

    def forward(self, x):
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


class V3Block(nn.Module):
    def __init__(self, cin, k, exp, cout, se, act, stride):
        super().__init__()
        self.use_res = stride == 1 and cin == cout
        layers = []
        if exp != cin:
            layers.append(ConvBNAct(cin, exp, 1, act=act))
        layers.append(ConvBNAct(exp, exp, k, stride, groups=exp, act=act))
        if se:
            layers.append(SqueezeExcite(exp, _divisible(exp // 4)))
        layers.append(ConvBNAct(exp, cout, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res else y


class MobileNetV3Large(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        RE, HS = nn.ReLU, nn.Hardswish
        cfg = [(16, 3, 16, 16, False, RE, 1), (16, 3, 64, 24, False, RE, 2),
               (24, 3, 72, 24, False, RE, 1), (24, 5, 72, 40, True, RE, 2),
               (40, 5, 120, 40, True, RE, 1), (40, 5, 120, 40, True, RE, 1),
               (40, 3, 240, 80, False, HS, 2), (80, 3, 200, 80, False, HS, 1),
               (80, 3, 184, 80, False, HS, 1), (80, 3, 184, 80, False, HS, 1),
               (80, 3, 480, 112, True, HS, 1), (112, 3, 672, 112, True, HS, 1),
               (112, 5, 672, 160, True, HS, 2), (160, 5, 960, 160, True, HS, 1),
               (160, 5, 960, 160, True, HS, 1)]
        layers = [ConvBNAct(3, 16, 3, 2, act=HS)]
        layers += [V3Block(*c) for c in cfg]
        layers.append(ConvBNAct(160, 960, 1, act=HS))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(960, 1280), nn.Hardswish(inplace=True),
                                        nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


# ---- EfficientNet-B0 ----

class MBConv(nn.Module):
    def __init__(self, cin, cout, k, stride, expand):
        super().__init__()
        self.use_res = stride == 1 and cin == cout
        exp = cin * expand
        layers = []
        if exp != cin:
            layers.append(ConvBNAct(cin, exp, 1, act=nn.SiLU))
        layers.append(ConvBNAct(exp, exp, k, stride, groups=exp, act=nn.SiLU))
        layers.append(SqueezeExcite(exp, max(1, cin // 4), act=nn.SiLU, gate=nn.Sigmoid))
        layers.append(ConvBNAct(exp, cout, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res else y


class EfficientNetB0(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        cfg = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
               (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]
        layers = [ConvBNAct(3, 32, 3, 2, act=nn.SiLU)]
        for e, k, s, cin, cout, n in cfg:
            for i in range(n):
                layers.append(MBConv(cin if i == 0 else cout, cout, k, s if i == 0 else 1, e))
        layers.append(ConvBNAct(320, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


# ---- ShuffleNetV2 x1.0 ----

def channel_shuffle(x, groups):
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous()
    return x.view(b, -1, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride = stride
        half = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                nn.Conv2d(cin, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True))
        b2in = cin if stride > 1 else half
        self.branch2 = nn.Sequential(
            nn.Conv2d(b2in, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True),
            nn.Conv2d(half, half, 3, stride, 1, groups=half, bias=False), nn.BatchNorm2d(half),
            nn.Conv2d(half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        chans = [24, 116, 232, 464, 1024]
        self.conv1 = ConvBNAct(3, 24, 3, 2)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, cin = [], 24
        for reps, cout in zip((4, 8, 4), chans[1:4]):
            units = [ShuffleUnit(cin, cout, 2)] + [ShuffleUnit(cout, cout, 1) for _ in range(reps - 1)]
            stages.append(nn.Sequential(*units))
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.conv5 = ConvBNAct(cin, chans[-1], 1)
        self.fc = nn.Linear(chans[-1], num_classes)

    def forward(self, x):
        x = self.conv5(self.stages(self.maxpool(self.conv1(x))))
        return self.fc(x.mean([2, 3]))


BUILDERS = {
    "resnet18": lambda: ResNet(BasicBlock, [2, 2, 2, 2]),
    "resnet50": lambda: ResNet(Bottleneck, [3, 4, 6, 3]),
    "mobilenet_v2": MobileNetV2,
    "mobilenet_v3_large": MobileNetV3Large,
    "efficientnet_b0": EfficientNetB0,
    "shufflenet_v2": ShuffleNetV2,
}


def build(name: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    m = BUILDERS[name]()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.1, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.1, 0.1)
    return m.eval()
