"""The Sparse4Dv3 head with the instance bank as explicit state.

Upstream keeps the temporal state inside the instance bank object and
branches on it in Python, which cannot be exported. Here the state travels
in and out of forward() as tensors (HeadState), and "is there a usable
history" is a boolean tensor that selects with torch.where, so one traced
graph serves the first frame, later frames and scene resets.

Behaviour follows upstream with one deliberate difference: on a time gap
above max_time_interval upstream still lets temp_gnn attend to the stale
cached instances of the previous scene (only the update and the track ids
are reset); here a gap is a full reset, the same as a first frame.
"""
import math
from collections import OrderedDict
from typing import Dict, NamedTuple

import torch
from torch import nn

from .aggregation import get_aggregation
from .config import ANCHOR_DIM, COS_YAW, SIN_YAW, VX, Sparse4DConfig
from .layers import (AnchorEncoder, AsymmetricFFN, DeformableFeatureAggregation,
                     MultiheadAttention, Refinement, xavier_uniform)


class HeadState(NamedTuple):
    """The instance bank between two frames; all tensors have batch first.
    The initial state (zeros_state) has valid = 0."""
    feature: torch.Tensor     # [B, T, C] float32
    anchor: torch.Tensor      # [B, T, 11] float32
    confidence: torch.Tensor  # [B, T] float32, decayed confidence of the cached instances
    track_id: torch.Tensor    # [B, T] int64, -1 = none
    timestamp: torch.Tensor   # [B] float32, seconds (the caller's origin)
    ego_pose: torch.Tensor    # [B, 4, 4] float32, lidar to global of the cached frame
    valid: torch.Tensor       # [B] float32, 1 when the fields above hold a frame
    next_id: torch.Tensor     # [B] int64, first unused track id


STATE_NAMES = ("bank_feature", "bank_anchor", "bank_confidence", "bank_track_id",
               "bank_timestamp", "bank_ego_pose", "bank_valid", "bank_next_id")
FRAME_INPUT_NAMES = ("features", "projection", "image_wh", "timestamp", "ego_pose")
DETECTION_NAMES = ("boxes", "scores", "labels", "track_ids")


def zeros_state(cfg: Sparse4DConfig, batch: int = 1, device=None) -> HeadState:
    t = cfg.num_temp_instances
    kw = {"device": device}
    return HeadState(
        feature=torch.zeros(batch, t, cfg.embed_dims, **kw),
        anchor=torch.zeros(batch, t, ANCHOR_DIM, **kw), confidence=torch.zeros(batch, t, **kw),
        track_id=torch.full((batch, t), -1, dtype=torch.long, **kw),
        timestamp=torch.zeros(batch, **kw), ego_pose=torch.eye(4, **kw).repeat(batch, 1, 1),
        valid=torch.zeros(batch, **kw), next_id=torch.zeros(batch, dtype=torch.long, **kw))


def batched_gather(x, idx, b: int, n: int, k: int):
    """x [B, N] or [B, N, D], idx [B, K] int64 -> [B, K] or [B, K, D]: a flat
    Gather on axis 0 (which every engine has) instead of GatherElements with
    an Expand. Sizes are passed, not read from shapes (see MultiheadAttention)."""
    offs = (torch.arange(b, dtype=torch.long, device=idx.device) * n)[:, None]
    flat_idx = (idx + offs).reshape(b * k)
    if x.dim() == 2:
        return x.reshape(b * n).index_select(0, flat_idx).reshape(b, k)
    return x.reshape(b * n, -1).index_select(0, flat_idx).reshape(b, k, -1)


def rigid_inverse_times(a, b):
    """inverse(a) @ b for rigid 4x4 transforms, as (R [B,3,3], t [B,3])."""
    ra, ta = a[:, :3, :3], a[:, :3, 3]
    rb, tb = b[:, :3, :3], b[:, :3, 3]
    ra_t = ra.transpose(1, 2)
    return torch.matmul(ra_t, rb), torch.matmul(ra_t, (tb - ta)[..., None])[..., 0]


def project_anchor(anchor, rot, trans, dt, yaw_swap: bool):
    """Moves cached anchors into the current frame: centre += velocity * dt,
    then rotate + translate the centre, rotate velocity and yaw."""
    center = anchor[..., 0:3] + anchor[..., VX:] * dt[:, None, None]
    rot_t = rot.transpose(1, 2)
    center = torch.matmul(center, rot_t) + trans[:, None]
    vel = torch.matmul(anchor[..., VX:], rot_t)
    cos_sin = torch.matmul(anchor[..., [COS_YAW, SIN_YAW]], rot_t[:, :2, :2])
    if yaw_swap:
        yaw = cos_sin  # upstream: (cos', sin') written into the (sin, cos) slots
    else:
        yaw = torch.stack([cos_sin[..., 1], cos_sin[..., 0]], dim=-1)
    return torch.cat([center, anchor[..., 3:6], yaw, vel], dim=-1)


def atan2(y, x):
    """atan2 from Atan and Where (opset 17 has no Atan2, and torch 1.13 does
    not export aten::atan2)."""
    dev = x.device
    zero = torch.tensor(0.0, device=dev)
    safe_x = torch.where(x == 0, torch.tensor(1.0, device=dev), x)
    base = torch.atan(y / safe_x)
    pi = torch.tensor(math.pi, device=dev)
    half = torch.tensor(math.pi / 2, device=dev)
    left = torch.where(y >= 0, base + pi, base - pi)
    on_axis = torch.where(y > 0, half, torch.where(y < 0, -half, zero))
    return torch.where(x > 0, base, torch.where(x < 0, left, on_axis))


def decode_box(pred):
    yaw = atan2(pred[..., SIN_YAW], pred[..., COS_YAW])[..., None]
    return torch.cat([pred[..., 0:3], pred[..., 3:6].exp(), yaw, pred[..., VX:]], dim=-1)


class InstanceBankParams(nn.Module):
    # the learnable initial instances; the state itself lives in HeadState
    def __init__(self, cfg: Sparse4DConfig):
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(cfg.num_anchor, ANCHOR_DIM))
        self.instance_feature = nn.Parameter(torch.zeros(cfg.num_anchor, cfg.embed_dims),
                                             requires_grad=False)


class Sparse4DHead(nn.Module):
    def __init__(self, cfg: Sparse4DConfig, aggregation: str = "ext"):
        super().__init__()
        self.cfg = cfg
        c = cfg.embed_dims
        self.aggregation = aggregation
        aggregate = get_aggregation(aggregation)
        self.instance_bank = InstanceBankParams(cfg)
        self.anchor_encoder = AnchorEncoder(cfg.anchor_embed_dims)
        if sum(cfg.anchor_embed_dims) != c:
            raise ValueError("anchor_embed_dims must sum to embed_dims")
        layers = []
        for op in cfg.operation_order:
            if op in ("temp_gnn", "gnn"):
                layers.append(MultiheadAttention(2 * c, cfg.num_heads))
            elif op == "norm":
                layers.append(nn.LayerNorm(c))
            elif op == "ffn":
                layers.append(AsymmetricFFN(2 * c, cfg.ffn_dims, c))
            elif op == "deformable":
                layers.append(DeformableFeatureAggregation(cfg, aggregate))
            elif op == "refine":
                layers.append(Refinement(c, cfg.num_classes))
            else:
                raise ValueError(f"operation '{op}' unknown")
        self.layers = nn.ModuleList(layers)
        self.fc_before = nn.Linear(c, 2 * c, bias=False)
        self.fc_after = nn.Linear(2 * c, c, bias=False)
        shapes = torch.tensor(cfg.level_shapes, dtype=torch.int32)
        spatial = shapes[None].repeat(cfg.num_cams, 1, 1)
        sizes = (spatial[..., 0] * spatial[..., 1]).reshape(-1).long()
        start = (torch.cumsum(sizes, 0) - sizes).reshape(cfg.num_cams, cfg.num_levels)
        self.register_buffer("spatial_shape", spatial.contiguous(), persistent=False)
        self.register_buffer("scale_start_index", start.to(torch.int32), persistent=False)

    def init_weights(self, generator: torch.Generator):
        """Seeded initialisation shaped like upstream's: xavier for every
        matrix of the layers other than refine, then the modules' own
        init_weight (zero/small weights where a trained head has small
        outputs, the classification prior), LayerNorm at identity. Untrained
        outputs stay in the range of a trained model's, so the head is not
        chaotic: small input differences give small output differences."""
        for op, layer in zip(self.cfg.operation_order, self.layers):
            if op == "refine":
                continue
            for p in layer.parameters():
                # fix_scale is a constant stored as a Parameter: leave it
                if p.dim() > 1 and p.requires_grad:
                    xavier_uniform(p, generator)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.fill_(1.0)
                    m.bias.zero_()
        for m in self.modules():
            if hasattr(m, "init_weight"):
                m.init_weight(generator)

    def set_aggregation(self, mode: str):
        aggregate = get_aggregation(mode)
        self.aggregation = mode
        for m in self.layers:
            if isinstance(m, DeformableFeatureAggregation):
                m.aggregate = aggregate

    def _graph(self, i, query, key, value, key_mask, b: int):
        return self.fc_after(self.layers[i](query, key, value, key_mask, b))

    def check_inputs(self, features, projection, image_wh, timestamp, ego_pose,
                     state: HeadState) -> None:
        """Raises ValueError naming the first input whose shape or dtype does
        not fit the config (the graph has static shapes; better a clear
        message here than a broadcast or an out-of-bounds read later)."""
        cfg = self.cfg
        b = int(features.shape[0]) if features.dim() else 0
        t, c, n = cfg.num_temp_instances, cfg.embed_dims, cfg.num_cams
        f32, i64 = self.instance_bank.anchor.dtype, torch.int64  # float32 unless .double()
        want = [("features", features, (b, cfg.num_feature_rows, c), f32),
                ("projection", projection, (b, n, 4, 4), f32),
                ("image_wh", image_wh, (b, n, 2), f32), ("timestamp", timestamp, (b,), f32),
                ("ego_pose", ego_pose, (b, 4, 4), f32)]
        want += list(zip(STATE_NAMES, state,
                         [(b, t, c), (b, t, ANCHOR_DIM), (b, t), (b, t), (b,), (b, 4, 4), (b,),
                          (b,)], [f32, f32, f32, i64, f32, f32, f32, i64]))
        for name, tensor, shape, dtype in want:
            if not isinstance(tensor, torch.Tensor):
                raise ValueError(f"{name}: expected a tensor, got {type(tensor).__name__}")
            if tuple(tensor.shape) != shape or tensor.dtype != dtype:
                raise ValueError(f"{name}: expected {list(shape)} {dtype}, got "
                                 f"{list(tensor.shape)} {tensor.dtype} (preset '{cfg.name}')")

    def forward(self, features, projection, image_wh, timestamp, ego_pose,
                state: HeadState, return_layers: bool = False, dn_anchor=None,
                dn_group=None) -> Dict[str, torch.Tensor]:
        """With return_layers (training), out["layers"] lists every refinement's
        (anchor, classification, quality): the losses supervise each decoder
        layer. Denoising (training): dn_anchor [B, D, 11] are extra queries
        (noised ground truth) appended after the A anchors, dn_group [D]
        their group (1, 2, ...): a denoising query attends to the A queries
        and its own group, the A queries never to a denoising one, so the A
        queries compute exactly what they compute without them. Their
        outputs are the last D rows of out["layers"]; the bank, the decoder
        and the other outputs see the A queries only. The exported graph
        sets none of these."""
        cfg = self.cfg
        if not torch.jit.is_tracing():
            self.check_inputs(features, projection, image_wh, timestamp, ego_pose, state)
        b = int(features.shape[0])  # a graph input: static in the export
        dev = features.device
        t, a = cfg.num_temp_instances, cfg.num_anchor
        new = a - t
        dn = dn_anchor is not None
        a_all = a + (int(dn_anchor.shape[1]) if dn else 0)

        # ---- instance bank: get
        dt = timestamp - state.timestamp
        history = (state.valid > 0.5) & (dt.abs() <= cfg.max_time_interval)  # [B]
        time_interval = torch.where(history & (dt.abs() > 0), dt,
                                    torch.tensor(cfg.default_time_interval, device=dev))
        rot, trans = rigid_inverse_times(ego_pose, state.ego_pose)
        temp_anchor = project_anchor(state.anchor, rot, trans, dt, cfg.yaw_swap_quirk)
        temp_feature = state.feature
        instance_feature = self.instance_bank.instance_feature[None]
        anchor = self.instance_bank.anchor[None]
        if b > 1:
            instance_feature = instance_feature.repeat(b, 1, 1)
            anchor = anchor.repeat(b, 1, 1)
        if dn:
            instance_feature = torch.cat([instance_feature, instance_feature.new_zeros(
                b, a_all - a, cfg.embed_dims)], 1)
            anchor = torch.cat([anchor, dn_anchor], 1)
        anchor_embed = self.anchor_encoder(anchor)
        temp_anchor_embed = self.anchor_encoder(temp_anchor)
        # temp_gnn keys: the cached instances when there is history, else the
        # current ones (self-attention), selected by a mask over their concat
        yes = torch.ones(b, t + a, dtype=torch.bool, device=dev)
        no = torch.zeros(b, t + a, dtype=torch.bool, device=dev)
        key_mask = torch.where(history[:, None], torch.cat([yes[:, :t], no[:, t:]], 1),
                               torch.cat([no[:, :t], yes[:, t:]], 1))
        self_mask = None
        if dn:
            group = torch.cat([torch.zeros(a, dtype=torch.long, device=dev), dn_group.to(dev)])
            self_mask = ((group[None, :] == 0) | (group[None, :] == group[:, None]))[None]
            self_mask = self_mask.expand(b, a_all, a_all)
            cached = torch.cat([torch.ones(b, a_all, t, dtype=torch.bool, device=dev),
                                torch.zeros_like(self_mask)], 2)
            current = torch.cat([torch.zeros(b, a_all, t, dtype=torch.bool, device=dev),
                                 self_mask], 2)
            key_mask = torch.where(history[:, None, None], cached, current)

        n_refine = 0
        cls = quality = None
        layer_outputs = []
        for i, op in enumerate(cfg.operation_order):
            layer = self.layers[i]
            if op == "temp_gnn":
                query = torch.cat([instance_feature, anchor_embed], dim=-1)
                key = torch.cat([torch.cat([temp_feature, temp_anchor_embed], dim=-1), query], 1)
                value = torch.cat([self.fc_before(temp_feature), query], dim=1)
                instance_feature = self._graph(i, query, key, value, key_mask, b)
            elif op == "gnn":
                query = torch.cat([instance_feature, anchor_embed], dim=-1)
                instance_feature = self._graph(i, query, query, self.fc_before(instance_feature),
                                               self_mask, b)
            elif op in ("norm", "ffn"):
                instance_feature = layer(instance_feature)
            elif op == "deformable":
                instance_feature = layer(instance_feature, anchor, anchor_embed, features,
                                         self.spatial_shape, self.scale_start_index,
                                         projection, image_wh, b, a_all)
            elif op == "refine":
                last = i == len(cfg.operation_order) - 1
                anchor, cls, quality = layer(instance_feature, anchor, anchor_embed,
                                             time_interval,
                                             return_cls=(n_refine == 0 or last or return_layers))
                if return_layers:
                    layer_outputs.append((anchor, cls, quality))
                n_refine += 1
                if n_refine == 1:
                    if dn:  # the update concerns the A queries; the denoising ones stay
                        dn_rows = (instance_feature[:, a:], anchor[:, a:])
                        instance_feature, anchor = instance_feature[:, :a], anchor[:, :a]
                    # update: the cached instances first, then the best current ones
                    _, idx = torch.topk((cls[:, :a] if dn else cls).max(dim=-1).values, new,
                                        dim=1)
                    # the selected instances in anchor order, not by logit:
                    # fresh track ids are numbered in row order, and the order
                    # of near-equal logits is decided by float rounding (an
                    # ascending sort of the indices: one TopK of the smallest)
                    idx = torch.topk(idx, new, dim=1, largest=False).values
                    sel_f = torch.cat([temp_feature,
                                       batched_gather(instance_feature, idx, b, a, new)], 1)
                    sel_a = torch.cat([temp_anchor, batched_gather(anchor, idx, b, a, new)], 1)
                    h3 = history[:, None, None]
                    instance_feature = torch.where(h3, sel_f, instance_feature)
                    anchor = torch.where(h3, sel_a, anchor)
                    if dn:
                        instance_feature = torch.cat([instance_feature, dn_rows[0]], 1)
                        anchor = torch.cat([anchor, dn_rows[1]], 1)
                if not last:
                    anchor_embed = self.anchor_encoder(anchor)
                if n_refine > 1:
                    temp_anchor_embed = anchor_embed[:, :t]
            else:
                raise ValueError(f"operation '{op}' unknown")
        if dn:
            instance_feature, anchor = instance_feature[:, :a], anchor[:, :a]
            cls, quality = cls[:, :a], quality[:, :a]
        out = self._finish(instance_feature, anchor, cls, quality, history, timestamp,
                           ego_pose, state, b)
        if return_layers:
            out["layers"] = layer_outputs
        return out

    def _finish(self, instance_feature, anchor, cls, quality, history, timestamp, ego_pose,
                state: HeadState, b: int):
        cfg = self.cfg
        t, a = cfg.num_temp_instances, cfg.num_anchor
        cls_max = cls.max(dim=-1)
        confidence = cls_max.values.sigmoid()  # [B, A]

        # ---- cache: decayed confidence for the cached part, keep the top T
        kept = torch.maximum(state.confidence * cfg.confidence_decay, confidence[:, :t])
        temp_conf = torch.where(history[:, None],
                                torch.cat([kept, confidence[:, t:]], dim=1), confidence)
        next_conf, cache_idx = torch.topk(temp_conf, t, dim=1)
        next_feature = batched_gather(instance_feature.detach(), cache_idx, b, a, t)
        next_anchor = batched_gather(anchor.detach(), cache_idx, b, a, t)

        # ---- track ids: cached instances keep theirs, new ones get fresh ids
        dev = anchor.device
        none = torch.full((b, a), -1, dtype=torch.long, device=dev)
        pad = torch.full((b, a - t), -1, dtype=torch.long, device=dev)
        ids = torch.where(history[:, None], torch.cat([state.track_id, pad], dim=1), none)
        fresh = (ids < 0) & (confidence.detach() >= cfg.track_threshold)
        # running count of fresh instances by a triangular MatMul (no CumSum)
        tri = torch.triu(torch.ones(a, a, device=dev))
        rank = torch.matmul(fresh.float(), tri).long() - 1
        ids = torch.where(fresh, state.next_id[:, None] + rank, ids)
        next_id = state.next_id + rank[:, a - 1] + 1
        next_track_id = batched_gather(ids, cache_idx, b, a, t)

        # ---- decoder: top K by class score, times centerness, re-sorted
        k = cfg.num_output
        scores, idx = torch.topk(cls_max.values.sigmoid(), k, dim=1)
        centerness = batched_gather(quality[..., 0], idx, b, a, k).sigmoid()
        scores, order = torch.topk(scores * centerness, k, dim=1)  # a sort, with constant k
        idx = batched_gather(idx, order, b, k, k)
        out = OrderedDict()
        out["boxes"] = decode_box(batched_gather(anchor, idx, b, a, k))
        out["scores"] = scores
        out["labels"] = batched_gather(cls_max.indices, idx, b, a, k)
        out["track_ids"] = batched_gather(ids, idx, b, a, k)
        out["classification"] = cls
        out["prediction"] = anchor
        out["quality"] = quality
        out["state"] = HeadState(
            feature=next_feature, anchor=next_anchor, confidence=next_conf,
            track_id=next_track_id, timestamp=timestamp, ego_pose=ego_pose,
            valid=torch.ones_like(state.valid), next_id=next_id)
        return out
