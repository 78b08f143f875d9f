"""The building blocks of the Sparse4Dv3 head.

Module and parameter names follow the upstream checkpoint (see mapping.py):
a block that upstream builds as nn.Sequential keeps its indices, so
`refine.layers.10` here is `refine.layers.10` there.
"""
import math
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .config import ANCHOR_DIM, COS_YAW, SIN_YAW, VX, Sparse4DConfig


# Seeded initialisation shaped like upstream's (see Sparse4DHead.init_weights).
# torch.nn.init takes no generator in torch 1.13, so these draw from one.
def xavier_uniform(weight: torch.Tensor, generator: torch.Generator, gain: float = 1.0):
    fan_out, fan_in = weight.shape[0], weight[0].numel()
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        weight.uniform_(-bound, bound, generator=generator)


def small_normal(linear: nn.Linear, out_std: float, generator: torch.Generator):
    """Weights such that an input of unit variance per element gives outputs
    of about out_std; zero bias."""
    with torch.no_grad():
        linear.weight.normal_(0.0, out_std / math.sqrt(linear.in_features), generator=generator)
        linear.bias.zero_()


def linear_relu_ln(embed_dims: int, in_loops: int, out_loops: int,
                   input_dims: Optional[int] = None) -> List[nn.Module]:
    input_dims = embed_dims if input_dims is None else input_dims
    layers: List[nn.Module] = []
    for _ in range(out_loops):
        for _ in range(in_loops):
            layers += [nn.Linear(input_dims, embed_dims), nn.ReLU()]
            input_dims = embed_dims
        layers.append(nn.LayerNorm(embed_dims))
    return layers


class AnchorEncoder(nn.Module):
    """Four branches (position, size, yaw, velocity), concatenated."""

    def __init__(self, dims):
        super().__init__()
        pos, size, yaw, vel = dims
        self.pos_fc = nn.Sequential(*linear_relu_ln(pos, 1, 4, 3))
        self.size_fc = nn.Sequential(*linear_relu_ln(size, 1, 4, 3))
        self.yaw_fc = nn.Sequential(*linear_relu_ln(yaw, 1, 4, 2))
        self.vel_fc = nn.Sequential(*linear_relu_ln(vel, 1, 4, 3))

    def forward(self, anchor):
        return torch.cat([self.pos_fc(anchor[..., 0:3]), self.size_fc(anchor[..., 3:6]),
                          self.yaw_fc(anchor[..., 6:8]), self.vel_fc(anchor[..., 8:11])], dim=-1)


class _AttnParams(nn.Module):
    # Holds the parameters with nn.MultiheadAttention's names (in_proj_weight,
    # in_proj_bias, out_proj); the arithmetic is written out in
    # MultiheadAttention.forward so it exports as plain MatMul/Softmax.
    def __init__(self, dims: int):
        super().__init__()
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dims, dims))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * dims))
        self.out_proj = nn.Linear(dims, dims)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.out_proj.bias)


class MultiheadAttention(nn.Module):
    """Batch-first multi-head attention with the residual on the query
    (upstream's mmcv wrapper adds the query back; dropout is left out)."""

    def __init__(self, dims: int, num_heads: int):
        super().__init__()
        if dims % num_heads:
            raise ValueError(f"attention width {dims} not divisible by {num_heads} heads")
        self.dims, self.num_heads = dims, num_heads
        self.attn = _AttnParams(dims)

    def forward(self, query, key, value, key_mask, b: int):
        """query [B, Q, E], key/value [B, K, E]; key_mask [B, K] (or [B, Q, K],
        per query) bool, True = attend.
        Sizes come from the module, never from tensor shapes (those turn into
        Shape ops in the export, downstream of the custom op)."""
        e, h = self.dims, self.num_heads
        d = e // h
        wq, wk, wv = self.attn.in_proj_weight.chunk(3, dim=0)
        bq, bk, bv = self.attn.in_proj_bias.chunk(3, dim=0)
        qh = F.linear(query, wq, bq).reshape(b, -1, h, d).transpose(1, 2)
        kh = F.linear(key, wk, bk).reshape(b, -1, h, d).permute(0, 2, 3, 1)
        vh = F.linear(value, wv, bv).reshape(b, -1, h, d).transpose(1, 2)
        scores = torch.matmul(qh * (1.0 / math.sqrt(d)), kh)  # [B, h, Q, K]
        if key_mask is not None:
            mask = key_mask[:, None, None, :] if key_mask.dim() == 2 else key_mask[:, None]
            scores = torch.where(mask, scores,
                                 torch.tensor(float("-inf"), device=scores.device))
        out = torch.matmul(scores.softmax(dim=-1), vh)  # [B, h, Q, d]
        out = self.attn.out_proj(out.transpose(1, 2).reshape(b, -1, e))
        return query + out


class AsymmetricFFN(nn.Module):
    """LayerNorm(in), in -> ffn ReLU -> out, plus Linear(in, out) on the
    normalised input as the identity branch."""

    def __init__(self, in_dims: int, ffn_dims: int, out_dims: int):
        super().__init__()
        self.pre_norm = nn.LayerNorm(in_dims)
        self.layers = nn.Sequential(nn.Sequential(nn.Linear(in_dims, ffn_dims), nn.ReLU()),
                                    nn.Linear(ffn_dims, out_dims))
        self.identity_fc = nn.Linear(in_dims, out_dims)

    def forward(self, x):
        x = self.pre_norm(x)
        return self.identity_fc(x) + self.layers(x)


class KeyPointsGenerator(nn.Module):
    def __init__(self, embed_dims: int, num_learnable_pts: int, fix: float):
        super().__init__()
        self.num_learnable_pts = num_learnable_pts
        scale = [[0, 0, 0], [fix, 0, 0], [-fix, 0, 0], [0, fix, 0], [0, -fix, 0],
                 [0, 0, fix], [0, 0, -fix]]
        self.num_pts = len(scale) + num_learnable_pts
        # a Parameter without gradient, as upstream stores it in the checkpoint
        self.fix_scale = nn.Parameter(torch.tensor(scale, dtype=torch.float32),
                                      requires_grad=False)
        self.learnable_fc = nn.Linear(embed_dims, num_learnable_pts * 3)

    def init_weight(self, generator: torch.Generator):
        # as upstream: xavier, zero bias, so the learnable points start at the
        # box centre (sigmoid(0) - 0.5 = 0) for the zero initial features
        xavier_uniform(self.learnable_fc.weight, generator)
        with torch.no_grad():
            self.learnable_fc.bias.zero_()

    def forward(self, anchor, instance_feature, b: int, a: int):
        """The key points [B, A, P, 4], homogeneous: (x, y, z, 1)."""
        size = anchor[..., None, 3:6].exp()  # [B, A, 1, 3]: (w, l, h)
        learn = (self.learnable_fc(instance_feature).reshape(b, a, self.num_learnable_pts, 3)
                 .sigmoid() - 0.5)
        pts = torch.cat([self.fix_scale * size, learn * size], dim=-2)  # [B, A, P, 3]
        sin, cos = anchor[..., None, SIN_YAW], anchor[..., None, COS_YAW]
        # rotation about z, written without building a 3x3 matrix in place, then the centre:
        # each coordinate is one expression and the export stacks them once, with the 1 that
        # the projection needs (the sums are the ones a rotated stack plus the centre makes)
        x = cos * pts[..., 0] - sin * pts[..., 1] + anchor[..., None, 0]
        y = sin * pts[..., 0] + cos * pts[..., 1] + anchor[..., None, 1]
        z = pts[..., 2] + anchor[..., None, 2]
        one = torch.ones(b, a, self.num_pts, dtype=z.dtype, device=z.device)
        return torch.stack([x, y, z, one], dim=-1)


def project_points(key_points, projection, image_wh, b: int, a: int, p: int, n: int):
    """key_points [B, A, P, 4] (homogeneous), projection [B, N, 4, 4], image_wh [B, N, 2]
    -> normalised locations [B, A, P, N, 2]."""
    pts = key_points.reshape(b, 1, a * p, 4)
    proj = torch.matmul(pts, projection[:, :, :3].transpose(-1, -2))  # [B, N, AP, 3]
    xy = proj[..., 0:2] / torch.clamp(proj[..., 2:3], min=1e-5)
    xy = xy / image_wh[:, :, None]
    return xy.reshape(b, n, a, p, 2).permute(0, 2, 3, 1, 4)


class DeformableFeatureAggregation(nn.Module):
    def __init__(self, cfg: Sparse4DConfig, aggregate):
        super().__init__()
        c = cfg.embed_dims
        self.num_cams, self.num_levels = cfg.num_cams, cfg.num_levels
        self.num_groups, self.num_pts = cfg.num_groups, cfg.num_points
        self.aggregate = aggregate
        self.kps_generator = KeyPointsGenerator(c, cfg.num_learnable_pts, cfg.fix_scale)
        self.camera_encoder = nn.Sequential(*linear_relu_ln(c, 1, 2, 12))
        self.weights_fc = nn.Linear(c, self.num_groups * self.num_levels * self.num_pts)
        self.output_proj = nn.Linear(c, c)

    def init_weight(self, generator: torch.Generator):
        # Upstream zeroes weights_fc (uniform weights over cameras, levels and
        # points). Small non-zero weights keep the softmax close to uniform
        # (logits of about 0.3) while its inputs still shape the weights, so
        # the path from features to weights is exercised by the tests.
        small_normal(self.weights_fc, 0.3, generator)
        xavier_uniform(self.output_proj.weight, generator)
        with torch.no_grad():
            self.output_proj.bias.zero_()

    def forward(self, instance_feature, anchor, anchor_embed, features, spatial_shape,
                scale_start_index, projection, image_wh, b: int, a: int):
        n, lv, p, g = self.num_cams, self.num_levels, self.num_pts, self.num_groups
        key_points = self.kps_generator(anchor, instance_feature, b, a)
        cam_embed = self.camera_encoder(projection[:, :, :3].reshape(b, n, 12))
        feature = (instance_feature + anchor_embed)[:, :, None] + cam_embed[:, None]
        # softmax over (camera, level, point) jointly, per group
        weights = self.weights_fc(feature).reshape(b, a, n * lv * p, g).softmax(dim=-2)
        weights = weights.reshape(b, a, n, lv, p, g).permute(0, 1, 4, 2, 3, 5)
        locations = project_points(key_points, projection, image_wh, b, a, p, n)
        sampled = self.aggregate(features, spatial_shape, scale_start_index,
                                 locations.contiguous(), weights.contiguous())
        return torch.cat([self.output_proj(sampled), instance_feature], dim=-1)


class Scale(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * self.scale


class Refinement(nn.Module):
    """Box regression (added to the anchor), classification and quality."""

    def __init__(self, embed_dims: int, num_classes: int):
        super().__init__()
        self.layers = nn.Sequential(*linear_relu_ln(embed_dims, 2, 2),
                                    nn.Linear(embed_dims, 11), Scale(11))
        self.cls_layers = nn.Sequential(*linear_relu_ln(embed_dims, 1, 2),
                                        nn.Linear(embed_dims, num_classes))
        self.quality_layers = nn.Sequential(*linear_relu_ln(embed_dims, 1, 2),
                                            nn.Linear(embed_dims, 2))
        # which of the 11 fields are velocities (divided by the time interval); not a weight
        self.register_buffer("velocity_field", torch.arange(ANCHOR_DIM) >= VX, persistent=False)
        self.register_buffer("unit", torch.ones(()), persistent=False)

    # prior probability of a class before any training (upstream's choice)
    CLS_PRIOR = 0.01
    # output scale of the box regression at initialisation, in anchor units
    # per refinement (m, log size, sin/cos; velocity this times 1/time_interval)
    REG_INIT_STD = 0.05

    def init_weight(self, generator: torch.Generator):
        """A trained head refines the anchors by small steps; the regression
        output starts small (zero bias) so the boxes stay near the anchors,
        and the classification bias encodes a 1% prior as upstream's."""
        small_normal(self.layers[-2], self.REG_INIT_STD, generator)
        with torch.no_grad():
            self.layers[-1].scale.fill_(1.0)
            self.cls_layers[-1].bias.fill_(-math.log((1 - self.CLS_PRIOR) / self.CLS_PRIOR))

    def forward(self, instance_feature, anchor, anchor_embed, time_interval,
                return_cls: bool = True):
        """time_interval [B]. Returns the refined anchor, logits and quality."""
        feature = instance_feature + anchor_embed
        out = self.layers(feature)
        # x, y, z, log sizes, sin, cos: out + anchor; velocity: out / time_interval + anchor.
        # One expression over all 11 fields, the first ones divided by exactly 1 (which changes
        # no bit): the export computes the refined anchor in one element-wise layer, without
        # cutting it in two and joining the halves again.
        t = time_interval[:, None, None]
        divisor = torch.where(self.velocity_field, t, self.unit)
        refined = out / divisor + anchor
        if not return_cls:
            return refined, None, None
        return refined, self.cls_layers(instance_feature), self.quality_layers(feature)
