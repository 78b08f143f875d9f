"""Sparse4Dv3: backbone (ResNet + FPN) and head, plus a seeded builder."""
import math

import torch
from torch import nn

from .backbone import FPN, ResNet, flatten_feature_maps
from .config import Sparse4DConfig, get_preset
from .head import HeadState, Sparse4DHead, zeros_state


class Sparse4DBackbone(nn.Module):
    """images [B, N, 3, H, W] (normalised) -> features [B, F, C] in the
    deformable-aggregation layout (camera-major, levels, rows of H*W, NHWC)."""

    def __init__(self, cfg: Sparse4DConfig):
        super().__init__()
        self.cfg = cfg
        self.img_backbone = ResNet(cfg.depth, cfg.base_width)
        self.img_neck = FPN(self.img_backbone.out_channels, cfg.fpn_channels)

    def forward(self, images):
        b, n = images.shape[0], images.shape[1]
        x = images.reshape((b * n,) + tuple(images.shape[2:]))
        maps = self.img_neck(self.img_backbone(x))
        return flatten_feature_maps(maps, n)


class Sparse4D(nn.Module):
    def __init__(self, cfg: Sparse4DConfig, aggregation: str = "ext"):
        super().__init__()
        if cfg.fpn_channels != cfg.embed_dims:
            raise ValueError(f"fpn_channels ({cfg.fpn_channels}) must equal embed_dims "
                             f"({cfg.embed_dims}): the head samples the FPN maps directly")
        self.cfg = cfg
        self.backbone = Sparse4DBackbone(cfg)
        self.head = Sparse4DHead(cfg, aggregation)

    def initial_state(self, batch: int = 1) -> HeadState:
        return zeros_state(self.cfg, batch, device=self.head.instance_bank.anchor.device)

    def forward(self, images, projection, image_wh, timestamp, ego_pose, state: HeadState,
                return_layers: bool = False):
        features = self.backbone(images)
        return self.head(features, projection, image_wh, timestamp, ego_pose, state,
                         return_layers)


def random_anchors(num: int, generator: torch.Generator) -> torch.Tensor:
    """Anchors spread like nuScenes objects: centres within ~55 m (denser
    near the ego car), car-to-pedestrian sizes (log), any yaw, no velocity."""
    r = 55.0 * torch.rand(num, generator=generator).sqrt()
    phi = 2 * math.pi * torch.rand(num, generator=generator)
    z = -1.0 + 0.5 * torch.randn(num, generator=generator)
    wlh = torch.tensor([[1.9, 4.6, 1.7], [0.7, 0.7, 1.8], [2.9, 11.0, 3.5], [0.6, 1.9, 1.4]])
    kind = torch.randint(0, 4, (num,), generator=generator)
    size = wlh[kind] * (1 + 0.1 * torch.randn(num, 3, generator=generator)).clamp(0.5, 1.5)
    yaw = 2 * math.pi * torch.rand(num, generator=generator)
    return torch.cat([torch.stack([r * torch.cos(phi), r * torch.sin(phi), z], 1), size.log(),
                      torch.stack([torch.sin(yaw), torch.cos(yaw)], 1), torch.zeros(num, 3)], 1)


def build_model(preset="tiny", aggregation: str = "ext", seed: int = 0, **overrides) -> Sparse4D:
    """A model in eval mode with reproducible random weights (a fixed seed
    gives the same parameters on every machine). The head is initialised
    like upstream's (Sparse4DHead.init_weights), so its untrained outputs
    stay near the anchors and in a trained model's range."""
    cfg = get_preset(preset, **overrides) if isinstance(preset, str) else preset
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = Sparse4D(cfg, aggregation)
        g = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            model.head.instance_bank.anchor.copy_(random_anchors(cfg.num_anchor, g))
            # BN statistics away from the identity so that folding BN matters
            for m in model.backbone.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.1, 0.1, generator=g)
                    m.running_var.uniform_(0.5, 1.5, generator=g)
                    m.weight.uniform_(0.5, 1.0, generator=g)
                    m.bias.uniform_(-0.1, 0.1, generator=g)
            model.head.init_weights(g)
    finally:
        torch.random.set_rng_state(state)
    return model.eval()
