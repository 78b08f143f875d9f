"""Presets of the Sparse4Dv3 model.

`v3` is the released nuScenes configuration (ResNet50, 6 x 256x704, 900
anchors, 600 temporal instances, 6 decoder layers). `tiny` keeps the same
structure at a size that runs a frame in well under a second on two CPU cores,
so CI can export it, run it through several frames and compare.
"""
from dataclasses import dataclass, replace
from typing import List, Tuple

# Anchor layout, shared by every part of the model.
X, Y, Z, W, L, H, SIN_YAW, COS_YAW, VX, VY, VZ = range(11)
ANCHOR_DIM = 11
NUM_BOX_OUT = 10  # x, y, z, w, l, h, yaw, vx, vy, vz


@dataclass(frozen=True)
class Sparse4DConfig:
    name: str
    # images
    num_cams: int = 6
    image_hw: Tuple[int, int] = (256, 704)
    # backbone
    depth: int = 50                 # ResNet 18, 34 or 50
    base_width: int = 64            # 64 is the standard ResNet; smaller only for tests
    fpn_channels: int = 256
    # head
    embed_dims: int = 256
    num_groups: int = 8
    num_anchor: int = 900
    num_temp_instances: int = 600
    num_classes: int = 10
    num_decoder_layers: int = 6     # layer 1 single-frame, the rest temporal
    num_heads: int = 8
    ffn_dims: int = 1024
    anchor_embed_dims: Tuple[int, int, int, int] = (128, 32, 32, 64)
    num_learnable_pts: int = 6
    fix_scale: float = 0.45
    num_output: int = 300
    # instance bank
    max_time_interval: float = 2.0
    default_time_interval: float = 0.5
    confidence_decay: float = 0.6
    # Upstream writes the ego-motion-rotated (cos, sin) into the (sin, cos)
    # slots; the released checkpoint was trained with it, so it is the default.
    yaw_swap_quirk: bool = True
    # New instances whose confidence reaches this get a track id (upstream's
    # default decoder passes no threshold: every new instance gets one).
    track_threshold: float = 0.0
    # image normalisation the backbone graph expects to have been applied
    mean: Tuple[float, float, float] = (123.675, 116.28, 103.53)
    std: Tuple[float, float, float] = (58.395, 57.12, 57.375)

    @property
    def num_levels(self) -> int:
        return 4

    @property
    def num_points(self) -> int:
        return 7 + self.num_learnable_pts

    @property
    def level_shapes(self) -> List[Tuple[int, int]]:
        """(H, W) of the FPN maps at strides 4, 8, 16, 32 (ResNet rounds up)."""
        h, w = self.image_hw
        shapes = []
        for s in range(2, 6):
            hh, ww = h, w
            for _ in range(s):
                hh, ww = (hh + 1) // 2, (ww + 1) // 2
            shapes.append((hh, ww))
        return shapes

    @property
    def num_feature_rows(self) -> int:
        return self.num_cams * sum(h * w for h, w in self.level_shapes)

    @property
    def operation_order(self) -> List[str]:
        order = ["deformable", "ffn", "norm", "refine"]
        order += ["temp_gnn", "gnn", "norm", "deformable", "ffn", "norm", "refine"] * (
            self.num_decoder_layers - 1)
        return order

    @property
    def num_new_instances(self) -> int:
        return self.num_anchor - self.num_temp_instances


PRESETS = {
    "v3": Sparse4DConfig(name="v3"),
    "tiny": Sparse4DConfig(
        name="tiny", image_hw=(64, 192), depth=18, base_width=16, fpn_channels=64,
        embed_dims=64, num_anchor=128, num_temp_instances=96, num_decoder_layers=3,
        ffn_dims=256, anchor_embed_dims=(32, 8, 8, 16), num_output=100),
}


def get_preset(name: str, **overrides) -> Sparse4DConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset '{name}' (expected one of {sorted(PRESETS)})")
    cfg = PRESETS[name]
    return replace(cfg, **overrides) if overrides else cfg
