"""Sparse4Dv3 model: presets, rig, layout, instance bank over frames, upstream
checkpoint names, backward. The bank is checked against an independent,
upstream-style implementation with Python control flow and in-place writes."""
import math

import numpy as np
import pytest
import torch

from s4d.sparse4d import build_model, get_preset
from s4d.sparse4d.config import PRESETS
from s4d.sparse4d.head import (HeadState, atan2, project_anchor, rigid_inverse_times,
                               zeros_state)
from s4d.sparse4d.mapping import load_upstream_state_dict, map_upstream_state_dict
from s4d.sparse4d.scene import camera_rig, make_sequence

torch.set_num_threads(2)


def _ext_or_reference():
    from s4d import ops
    return "ext" if ops.extension_available() else "reference"


@pytest.fixture(scope="module")
def tiny():
    return build_model("tiny", aggregation=_ext_or_reference(), seed=0)


@pytest.fixture(scope="module")
def frames(tiny):
    seq = make_sequence(get_preset("tiny"), num_frames=6, cut_at=3, seed=1)
    with torch.no_grad():  # the backbone once per frame for the whole module
        for fr in seq:
            fr["features"] = tiny.backbone(torch.from_numpy(fr["images"]))
    return seq


def _run_head(model, fr, state):
    with torch.no_grad():
        features = fr["features"]
        return model.head(features, *[torch.from_numpy(fr[k]) for k in
                                      ("projection", "image_wh", "timestamp", "ego_pose")],
                          state)


# ---------------------------------------------------------------- presets, rig, layout

def test_v3_preset_matches_the_published_model():
    cfg = get_preset("v3")
    assert cfg.level_shapes == [(64, 176), (32, 88), (16, 44), (8, 22)]
    assert cfg.num_feature_rows == 89760
    assert (cfg.num_anchor, cfg.num_temp_instances, cfg.num_points) == (900, 600, 13)
    assert cfg.operation_order[:4] == ["deformable", "ffn", "norm", "refine"]
    assert cfg.operation_order[4:11] == ["temp_gnn", "gnn", "norm", "deformable", "ffn",
                                         "norm", "refine"]
    assert len(cfg.operation_order) == 4 + 7 * 5
    tiny = get_preset("tiny")
    assert tiny.operation_order == cfg.operation_order[:4 + 7 * (tiny.num_decoder_layers - 1)]
    with pytest.raises(ValueError, match="unknown preset"):
        get_preset("v4")


def test_rig_sees_about_a_fifth_of_point_camera_pairs():
    cfg = get_preset("v3")
    proj = camera_rig(cfg)
    rng = np.random.default_rng(3)
    r = 55 * np.sqrt(rng.random(20000))
    phi = rng.random(20000) * 2 * np.pi
    pts = np.stack([r * np.cos(phi), r * np.sin(phi), rng.normal(-1, 0.5, 20000),
                    np.ones(20000)], 1)
    cam = np.einsum("nij,pj->pni", proj, pts)
    d = np.maximum(cam[..., 2], 1e-5)
    u, v = cam[..., 0] / d / 704, cam[..., 1] / d / 256
    inside = (u > 0) & (u < 1) & (v > 0) & (v < 1) & (cam[..., 2] > 1e-5)
    assert 0.13 < inside.mean() < 0.23
    assert 0.8 < (inside.sum(1) == 1).mean() < 0.92
    # a point 20 m straight ahead lands in the front camera, near the
    # principal point scaled by 0.44 and shifted by the 140-row crop
    p = proj[0] @ np.array([20.0, 0.0, -0.33 + 0.0, 1.0])
    assert abs(p[0] / p[2] - 816.3 * 0.44) < 2 and abs(p[1] / p[2] - (491.5 * 0.44 - 140)) < 2


def test_sequence_has_a_scene_cut(frames):
    ts = [float(f["timestamp"][0]) for f in frames]
    gaps = np.diff(ts)
    assert gaps[2] > 2.0 and np.allclose(np.delete(gaps, 2), 0.5)
    assert [f["scene_start"] for f in frames] == [True, False, False, True, False, False]
    assert all(np.isfinite(f["images"]).all() and f["images"].std() > 0.3 for f in frames)


def test_feature_layout_is_camera_major_nhwc(tiny):
    cfg = tiny.cfg
    g = torch.Generator().manual_seed(5)
    images = torch.randn(1, cfg.num_cams, 3, *cfg.image_hw, generator=g)
    with torch.no_grad():
        feats = tiny.backbone(images)
        maps = tiny.backbone.img_neck(tiny.backbone.img_backbone(images[0]))
    start = tiny.head.scale_start_index
    shapes = tiny.head.spatial_shape
    assert feats.shape == (1, cfg.num_feature_rows, cfg.embed_dims)
    for n, lv, h, w in [(0, 0, 3, 7), (5, 3, 1, 5), (2, 1, 7, 0), (4, 2, 2, 11)]:
        assert tuple(shapes[n, lv].tolist()) == tuple(maps[lv].shape[2:])
        row = int(start[n, lv]) + h * int(shapes[n, lv, 1]) + w
        torch.testing.assert_close(feats[0, row], maps[lv][n, :, h, w])


# ---------------------------------------------------------------- geometry helpers

def test_atan2_matches_torch_on_every_quadrant_and_axis():
    y = torch.tensor([1.0, 1.0, -1.0, -1.0, 0.0, 0.0, 2.0, -3.0, 0.0, 0.3])
    x = torch.tensor([1.0, -1.0, -1.0, 1.0, 1.0, -1.0, 0.0, 0.0, 0.0, -2.0])
    torch.testing.assert_close(atan2(y, x), torch.atan2(y, x))


@pytest.mark.parametrize("yaw_swap", [True, False])
def test_anchor_projection_against_4x4_float64(yaw_swap):
    g = torch.Generator().manual_seed(2)
    anchor = torch.randn(1, 5, 11, generator=g) * 4
    yaw = torch.rand(5, generator=g) * 6
    anchor[0, :, 6], anchor[0, :, 7] = torch.sin(yaw), torch.cos(yaw)

    def pose(x, y, a):
        p = np.eye(4)
        p[:2, :2] = [[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]]
        p[:3, 3] = (x, y, 1.8)
        return p
    prev, cur = pose(400.0, 1100.0, 0.4), pose(404.0, 1102.5, 0.5)
    dt = 0.5
    t = np.linalg.inv(cur) @ prev
    rot, trans = rigid_inverse_times(torch.tensor(cur, dtype=torch.float32)[None],
                                     torch.tensor(prev, dtype=torch.float32)[None])
    got = project_anchor(anchor, rot, trans, torch.tensor([dt]), yaw_swap)[0].double().numpy()
    a = anchor[0].double().numpy()
    centre = a[:, :3] + a[:, 8:] * dt
    exp_centre = (t[:3, :3] @ centre.T).T + t[:3, 3]
    cos_sin = (t[:2, :2] @ a[:, [7, 6]].T).T
    exp_yaw = cos_sin if yaw_swap else cos_sin[:, ::-1]
    np.testing.assert_allclose(got[:, :3], exp_centre, atol=2e-3)
    np.testing.assert_allclose(got[:, 3:6], a[:, 3:6], atol=1e-6)
    np.testing.assert_allclose(got[:, 6:8], exp_yaw, atol=1e-5)
    np.testing.assert_allclose(got[:, 8:], (t[:3, :3] @ a[:, 8:].T).T, atol=1e-5)


# ---------------------------------------------------------------- instance bank over frames

class UpstreamStyleBank:
    """Upstream's stateful instance bank, written independently: Python
    branches on the state, in-place slice writes, boolean-mask id assignment,
    float64 4x4 ego-motion. Differs from upstream only where s4d does on
    purpose (a gap above 2 s is a full reset; the selected current instances
    are kept in anchor order)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.feature = self.anchor = self.confidence = self.ids = None
        self.timestamp = self.pose = None
        self.prev_id = 0

    def forward(self, head, features, proj, wh, timestamp, pose):
        cfg = self.cfg
        t, a = cfg.num_temp_instances, cfg.num_anchor
        inst = head.instance_bank.instance_feature[None].clone()
        anchor = head.instance_bank.anchor[None].clone()
        temp_f = temp_a = None
        interval = cfg.default_time_interval
        if self.feature is not None:
            dt = float(timestamp[0] - self.timestamp[0])
            if abs(dt) <= cfg.max_time_interval:
                tm = np.linalg.inv(pose[0].double().numpy()) @ self.pose[0].double().numpy()
                old = self.anchor[0].double().numpy()
                centre = old[:, :3] + old[:, 8:] * dt
                centre = centre @ tm[:3, :3].T + tm[:3, 3]
                cos_sin = old[:, [7, 6]] @ tm[:2, :2].T
                yaw = cos_sin if cfg.yaw_swap_quirk else cos_sin[:, ::-1]
                vel = old[:, 8:] @ tm[:3, :3].T
                temp_a = torch.tensor(np.concatenate([centre, old[:, 3:6], yaw, vel], 1),
                                      dtype=torch.float32)[None]
                temp_f = self.feature
                interval = dt if dt != 0 else cfg.default_time_interval
            else:
                self.feature = self.anchor = self.confidence = self.ids = None
        interval = torch.tensor([interval])
        enc = head.anchor_encoder
        ae = enc(anchor)
        tae = enc(temp_a) if temp_a is not None else None
        n_ref = 0
        for i, op in enumerate(cfg.operation_order):
            layer = head.layers[i]
            q = torch.cat([inst, ae], -1) if op in ("temp_gnn", "gnn") else None
            if op == "temp_gnn":
                if temp_f is None:
                    inst = head.fc_after(layer(q, q, q, None, 1))
                else:
                    k = torch.cat([temp_f, tae], -1)
                    inst = head.fc_after(layer(q, k, head.fc_before(temp_f), None, 1))
            elif op == "gnn":
                inst = head.fc_after(layer(q, q, head.fc_before(inst), None, 1))
            elif op in ("norm", "ffn"):
                inst = layer(inst)
            elif op == "deformable":
                inst = layer(inst, anchor, ae, features, head.spatial_shape,
                             head.scale_start_index, proj, wh, 1, a)
            else:
                last = i == len(cfg.operation_order) - 1
                anchor, cls, qual = layer(inst, anchor, ae, interval, True)
                n_ref += 1
                if n_ref == 1 and temp_f is not None:
                    _, idx = cls.max(-1).values.topk(a - t, dim=1)
                    idx = idx.sort(dim=1).values  # s4d: in anchor order
                    inst = torch.cat([temp_f, inst[:, idx[0]]], 1)
                    anchor = torch.cat([temp_a, anchor[:, idx[0]]], 1)
                if not last:
                    ae = enc(anchor)
                if n_ref > 1 and tae is not None:
                    tae = ae[:, :t]
        conf_raw = cls.max(-1).values.sigmoid()
        conf = conf_raw.clone()
        ids = torch.full((1, a), -1, dtype=torch.long)
        if temp_f is not None:
            conf[:, :t] = torch.maximum(self.confidence * cfg.confidence_decay, conf[:, :t])
            ids[:, :t] = self.ids
        fresh = (ids < 0) & (conf_raw >= cfg.track_threshold)
        n_new = int(fresh.sum())
        ids[fresh] = torch.arange(n_new) + self.prev_id
        self.prev_id += n_new
        self.confidence, keep = conf.topk(t, dim=1)
        self.feature, self.anchor = inst[:, keep[0]], anchor[:, keep[0]]
        self.ids = ids[:, keep[0]]
        self.timestamp, self.pose = timestamp, pose
        score, label = cls.sigmoid().max(-1)
        top, idx = score.topk(cfg.num_output, dim=1)
        top = top * qual[0, idx[0], 0].sigmoid()[None]
        top, order = top.sort(dim=1, descending=True)
        idx = idx[:, order[0]]
        return {"scores": top, "labels": label[:, idx[0]], "track_ids": ids[:, idx[0]],
                "prediction": anchor, "classification": cls}


def test_bank_matches_upstream_style_implementation_over_a_sequence(tiny, frames):
    ref = UpstreamStyleBank(tiny.cfg)
    state = tiny.initial_state()
    for i, fr in enumerate(frames):
        with torch.no_grad():
            feats = fr["features"]
            ins = [torch.from_numpy(fr[k]) for k in ("projection", "image_wh", "timestamp",
                                                     "ego_pose")]
            got = tiny.head(feats, *ins, state)
            exp = ref.forward(tiny.head, feats, *ins)
        # float32 poses ~1 km from the origin vs the float64 4x4 inverse: ~1e-4 m
        for k in ("prediction", "classification", "scores"):
            torch.testing.assert_close(got[k], exp[k], atol=2e-3, rtol=1e-3,
                                       msg=lambda m: f"frame {i} {k}: {m}")
        assert torch.equal(got["labels"], exp["labels"]), f"frame {i}"
        assert torch.equal(got["track_ids"], exp["track_ids"]), f"frame {i}"
        assert torch.equal(got["state"].track_id, ref.ids), f"frame {i}"
        torch.testing.assert_close(got["state"].confidence, ref.confidence, atol=1e-4, rtol=0)
        assert int(got["state"].next_id) == ref.prev_id
        state = got["state"]


def test_multi_frame_state_feedback_keeps_track_ids(tiny, frames):
    state = tiny.initial_state()
    seen = []
    for i, fr in enumerate(frames):
        prev = state
        out = _run_head(tiny, fr, state)
        state = out["state"]
        assert float(state.valid) == 1.0
        assert torch.equal(state.timestamp, torch.from_numpy(fr["timestamp"]))
        ids = state.track_id[0]
        assert (ids >= 0).all() and len(set(ids.tolist())) == len(ids), "ids unique, assigned"
        conf = state.confidence[0]
        assert (conf[:-1] >= conf[1:]).all(), "cache sorted by confidence"
        if fr["scene_start"]:
            assert (ids >= int(prev.next_id)).all(), f"frame {i}: a new scene starts new ids"
        else:
            # most cached instances carry on with their ids
            carried = set(ids.tolist()) & set(prev.track_id[0].tolist())
            assert len(carried) > len(ids) // 2, f"frame {i}"
        seen.append(int(state.next_id))
    assert seen == sorted(seen) and seen[0] == tiny.cfg.num_anchor


def _perturbed(state: HeadState, seed: int) -> HeadState:
    g = torch.Generator().manual_seed(seed)
    return state._replace(feature=torch.randn(state.feature.shape, generator=g),
                          anchor=torch.randn(state.anchor.shape, generator=g),
                          confidence=torch.rand(state.confidence.shape, generator=g),
                          track_id=torch.randint(0, 50, state.track_id.shape, generator=g))


def test_first_frame_ignores_the_bank_and_later_frames_use_it(tiny, frames):
    fr = frames[1]
    empty = zeros_state(tiny.cfg)
    a = _run_head(tiny, fr, empty)
    b = _run_head(tiny, fr, _perturbed(empty, 1))  # valid = 0: contents must not matter
    for k in ("boxes", "scores", "track_ids", "prediction"):
        assert torch.equal(a[k], b[k]), k
    # the same frame with a real history (frame 0 fed back) differs
    s0 = _run_head(tiny, frames[0], empty)["state"]
    c = _run_head(tiny, fr, s0)
    assert not torch.allclose(c["prediction"], a["prediction"], atol=1e-3)
    assert (c["prediction"][0, :tiny.cfg.num_temp_instances].std() > 0)


def test_gap_above_two_seconds_resets_the_history(tiny, frames):
    s0 = _run_head(tiny, frames[0], tiny.initial_state())["state"]
    fresh = _run_head(tiny, frames[1], tiny.initial_state())
    for gap, resets in ((2.5, True), (-2.2, True), (1.9, False)):
        st = s0._replace(timestamp=torch.from_numpy(frames[1]["timestamp"]) - gap)
        out = _run_head(tiny, frames[1], st)
        same = torch.equal(out["prediction"], fresh["prediction"])
        assert same == resets, f"gap {gap}"
        if resets:
            assert (out["track_ids"] >= int(s0.next_id)).all(), "no id survives a reset"
            assert int(out["state"].next_id) == int(s0.next_id) + tiny.cfg.num_anchor


def test_backward_reaches_backbone_head_and_anchors():
    model = build_model("tiny", aggregation=_ext_or_reference(), seed=3).train()
    fr = make_sequence(model.cfg, num_frames=1, seed=4)[0]
    ins = [torch.from_numpy(fr[k]) for k in ("images", "projection", "image_wh", "timestamp",
                                             "ego_pose")]
    out = model(*ins, model.initial_state())
    loss = out["prediction"].square().mean() + out["classification"].sigmoid().mean() \
        + out["quality"].mean()
    loss.backward()
    named = dict(model.named_parameters())
    for name in ("backbone.img_backbone.conv1.weight", "backbone.img_neck.fpn_convs.0.conv.weight",
                 "head.layers.0.weights_fc.weight", "head.layers.0.kps_generator.learnable_fc.bias",
                 "head.layers.4.attn.in_proj_weight", "head.instance_bank.anchor",
                 "head.anchor_encoder.vel_fc.0.weight"):
        grad = named[name].grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, name
    assert named["head.instance_bank.instance_feature"].grad is None


# ---------------------------------------------------------------- upstream checkpoint names

def _lin(sd, name, cin, cout, bias=True):
    sd[name + ".weight"] = (cout, cin)
    if bias:
        sd[name + ".bias"] = (cout,)


def _ln(sd, name, c):
    sd[name + ".weight"] = (c,)
    sd[name + ".bias"] = (c,)


def _bn(sd, name, c):
    for k in ("weight", "bias", "running_mean", "running_var"):
        sd[f"{name}.{k}"] = (c,)
    sd[name + ".num_batches_tracked"] = ()


def upstream_names_and_shapes(cfg):
    """Key -> shape of an upstream Sparse4Dv3 checkpoint, written out from
    upstream's module structure (mmdet ResNet/FPN, mmcv attention, Sparse4D
    head), not from this package's modules."""
    sd = {}
    w = cfg.base_width
    sd["img_backbone.conv1.weight"] = (w, 3, 7, 7)
    _bn(sd, "img_backbone.bn1", w)
    blocks = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3)}[cfg.depth]
    expansion = 4 if cfg.depth == 50 else 1
    cin = w
    outs = []
    for s, n in enumerate(blocks):
        planes = w * 2 ** s
        for j in range(n):
            p = f"img_backbone.layer{s + 1}.{j}"
            if expansion == 4:
                convs = [(cin, planes, 1), (planes, planes, 3), (planes, planes * 4, 1)]
            else:
                convs = [(cin, planes, 3), (planes, planes, 3)]
            for c, (ci, co, k) in enumerate(convs):
                sd[f"{p}.conv{c + 1}.weight"] = (co, ci, k, k)
                _bn(sd, f"{p}.bn{c + 1}", co)
            if j == 0 and (s > 0 or cin != planes * expansion):
                sd[f"{p}.downsample.0.weight"] = (planes * expansion, cin, 1, 1)
                _bn(sd, f"{p}.downsample.1", planes * expansion)
            cin = planes * expansion
        outs.append(cin)
    f = cfg.fpn_channels
    for i, c in enumerate(outs):
        sd[f"img_neck.lateral_convs.{i}.conv.weight"] = (f, c, 1, 1)
        sd[f"img_neck.lateral_convs.{i}.conv.bias"] = (f,)
        sd[f"img_neck.fpn_convs.{i}.conv.weight"] = (f, f, 3, 3)
        sd[f"img_neck.fpn_convs.{i}.conv.bias"] = (f,)
    c = cfg.embed_dims
    sd["head.instance_bank.anchor"] = (cfg.num_anchor, 11)
    sd["head.instance_bank.instance_feature"] = (cfg.num_anchor, c)
    for branch, dims, din in zip(("pos_fc", "size_fc", "yaw_fc", "vel_fc"),
                                 cfg.anchor_embed_dims, (3, 3, 2, 3)):
        for r in range(4):
            _lin(sd, f"head.anchor_encoder.{branch}.{3 * r}", din if r == 0 else dims, dims)
            _ln(sd, f"head.anchor_encoder.{branch}.{3 * r + 2}", dims)
    _lin(sd, "head.fc_before", c, 2 * c, bias=False)
    _lin(sd, "head.fc_after", 2 * c, c, bias=False)
    nw = cfg.num_groups * 4 * cfg.num_points
    for i, op in enumerate(cfg.operation_order):
        p = f"head.layers.{i}"
        if op in ("gnn", "temp_gnn"):
            sd[p + ".attn.in_proj_weight"] = (6 * c, 2 * c)
            sd[p + ".attn.in_proj_bias"] = (6 * c,)
            _lin(sd, p + ".attn.out_proj", 2 * c, 2 * c)
        elif op == "norm":
            _ln(sd, p, c)
        elif op == "ffn":
            _ln(sd, p + ".pre_norm", 2 * c)
            _lin(sd, p + ".layers.0.0", 2 * c, cfg.ffn_dims)
            _lin(sd, p + ".layers.1", cfg.ffn_dims, c)
            _lin(sd, p + ".identity_fc", 2 * c, c)
        elif op == "deformable":
            sd[p + ".kps_generator.fix_scale"] = (7, 3)
            _lin(sd, p + ".kps_generator.learnable_fc", c, 18)
            _lin(sd, p + ".camera_encoder.0", 12, c)
            _ln(sd, p + ".camera_encoder.2", c)
            _lin(sd, p + ".camera_encoder.3", c, c)
            _ln(sd, p + ".camera_encoder.5", c)
            _lin(sd, p + ".weights_fc", c, nw)
            _lin(sd, p + ".output_proj", c, c)
        elif op == "refine":
            for k in (0, 2, 5, 7):
                _lin(sd, f"{p}.layers.{k}", c, c)
            _ln(sd, p + ".layers.4", c)
            _ln(sd, p + ".layers.9", c)
            _lin(sd, p + ".layers.10", c, 11)
            sd[p + ".layers.11.scale"] = (11,)
            for branch, n_out in (("cls_layers", cfg.num_classes), ("quality_layers", 2)):
                _lin(sd, f"{p}.{branch}.0", c, c)
                _ln(sd, f"{p}.{branch}.2", c)
                _lin(sd, f"{p}.{branch}.3", c, c)
                _ln(sd, f"{p}.{branch}.5", c)
                _lin(sd, f"{p}.{branch}.6", c, n_out)
    return sd


def _random_upstream_state(cfg, seed=0):
    g = torch.Generator().manual_seed(seed)
    state = {}
    for k, shape in upstream_names_and_shapes(cfg).items():
        if k.endswith("num_batches_tracked"):
            state[k] = torch.tensor(7)
        elif k.endswith("running_var"):
            state[k] = torch.rand(shape, generator=g) + 0.5
        else:
            state[k] = torch.randn(shape, generator=g) * 0.1
    # training-only parts upstream checkpoints also carry
    state["depth_branch.depth_layers.0.weight"] = torch.randn(1, 256, 1, 1, generator=g)
    return state


@pytest.mark.parametrize("preset,overrides", [("tiny", {}), ("tiny", {"depth": 34}),
                                              ("v3", {})])
def test_upstream_state_dict_loads_fully(preset, overrides):
    model = build_model(preset, aggregation="reference", seed=0, **overrides)
    state = _random_upstream_state(model.cfg)
    dropped = load_upstream_state_dict(model, state)
    assert dropped == ["depth_branch.depth_layers.0.weight"]
    own = model.state_dict()
    for k, v in state.items():
        if k.startswith("depth_branch"):
            continue
        name = ("backbone." + k) if k.startswith("img_") else k
        assert torch.equal(own[name], v), k


def test_upstream_weights_drive_the_computation():
    """The FFN, refine and anchor encoder compute with the upstream tensors
    as upstream's formulas say, after loading."""
    model = build_model("tiny", aggregation="reference", seed=0)
    state = _random_upstream_state(model.cfg, seed=1)
    load_upstream_state_dict(model, {"module." + k: v for k, v in state.items()})
    c = model.cfg.embed_dims
    x = torch.randn(1, 4, 2 * c)
    s = lambda k: state[f"head.layers.1.{k}"].double()  # noqa: E731
    xn = torch.nn.functional.layer_norm(x.double(), (2 * c,), s("pre_norm.weight"),
                                        s("pre_norm.bias"))
    hidden = torch.relu(xn @ s("layers.0.0.weight").T + s("layers.0.0.bias"))
    exp = (xn @ s("identity_fc.weight").T + s("identity_fc.bias")
           + hidden @ s("layers.1.weight").T + s("layers.1.bias"))
    with torch.no_grad():
        torch.testing.assert_close(model.head.layers[1](x).double(), exp, atol=1e-4, rtol=1e-4)
    anchor = torch.randn(1, 3, 11)
    with torch.no_grad():
        got = model.head.anchor_encoder(anchor)
    pos = anchor[..., :3].double()
    for r in range(4):
        k = f"head.anchor_encoder.pos_fc.{3 * r}"
        pos = torch.relu(pos @ state[k + ".weight"].double().T + state[k + ".bias"].double())
        ln = f"head.anchor_encoder.pos_fc.{3 * r + 2}"
        pos = torch.nn.functional.layer_norm(pos, pos.shape[-1:], state[ln + ".weight"].double(),
                                             state[ln + ".bias"].double())
    torch.testing.assert_close(got[..., :pos.shape[-1]].double(), pos, atol=1e-4, rtol=1e-4)


def test_upstream_state_dict_errors_name_the_keys():
    model = build_model("tiny", aggregation="reference", seed=0)
    state = _random_upstream_state(model.cfg)
    bad = dict(state)
    bad["head.layers.0.surprise.weight"] = torch.zeros(1)
    with pytest.raises(ValueError, match="unexpected.*surprise"):
        load_upstream_state_dict(model, bad)
    bad = dict(state)
    del bad["head.layers.3.layers.11.scale"]
    with pytest.raises(ValueError, match="missing.*layers.3.layers.11.scale"):
        load_upstream_state_dict(model, bad)
    bad = dict(state)
    bad["head.fc_before.weight"] = torch.zeros(3, 3)
    with pytest.raises(ValueError, match="shape.*fc_before"):
        load_upstream_state_dict(model, bad)
    bad = {"optimizer.step": torch.zeros(1)}
    _, _, unknown = map_upstream_state_dict(bad)
    assert unknown == ["optimizer.step"]


def test_head_rejects_inputs_that_do_not_fit_the_preset(tiny, frames):
    fr = frames[0]
    ins = [fr["features"]] + [torch.from_numpy(fr[k]) for k in
                              ("projection", "image_wh", "timestamp", "ego_pose")]
    state = tiny.initial_state()
    cases = [
        (0, ins[0][:, :-1], "features: expected \\[1, 6120, 64\\]"),
        (1, ins[1][:, :5], "projection: expected \\[1, 6, 4, 4\\]"),
        (3, ins[3].double(), "timestamp: expected \\[1\\] torch.float32"),
        (8, state.track_id.int(), "bank_track_id: expected \\[1, 96\\] torch.int64"),
        (6, state.anchor[:, :, :8], "bank_anchor: expected"),
    ]
    for pos, bad, msg in cases:
        args = ins + list(state)
        args[pos] = bad
        with pytest.raises(ValueError, match=msg):
            tiny.head(*args[:5], HeadState(*args[5:]))


def test_random_weights_follow_the_seed():
    a = build_model("tiny", aggregation="reference", seed=11).state_dict()
    b = build_model("tiny", aggregation="reference", seed=11).state_dict()
    c = build_model("tiny", aggregation="reference", seed=12).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["head.instance_bank.anchor"], c["head.instance_bank.anchor"])
    assert not torch.equal(a["head.layers.0.weights_fc.weight"], c["head.layers.0.weights_fc.weight"])
    anchor = a["head.instance_bank.anchor"]
    assert anchor[:, :2].norm(dim=1).max() <= 55.0 and anchor[:, 6:8].norm(dim=1).sub(1).abs().max() < 1e-5


def _xavier_bound(w):
    return math.sqrt(6.0 / (w.shape[0] + w[0].numel()))


def test_initialisation_is_shaped_like_upstreams():
    model = build_model("tiny", aggregation="reference", seed=0)
    cfg = model.cfg
    c = cfg.embed_dims
    fixed = torch.tensor([[0, 0, 0], [1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1],
                          [0, 0, -1]], dtype=torch.float32) * cfg.fix_scale
    counts = {}
    for op, layer in zip(cfg.operation_order, model.head.layers):
        counts[op] = counts.get(op, 0) + 1
        if op in ("temp_gnn", "gnn"):
            w = layer.attn.in_proj_weight
            assert w.abs().max() <= _xavier_bound(w)
            assert abs(float(w.std()) * math.sqrt(3) / _xavier_bound(w) - 1) < 0.05
        elif op == "deformable":
            assert torch.equal(layer.kps_generator.fix_scale, fixed)  # a constant, not re-drawn
            for lin in (layer.kps_generator.learnable_fc, layer.output_proj):
                assert lin.weight.abs().max() <= _xavier_bound(lin.weight)
                assert not lin.bias.any()
            # upstream zeroes it; here small: softmax logits of about 0.3
            wfc = layer.weights_fc
            assert not wfc.bias.any()
            assert abs(float(wfc.weight.std()) * math.sqrt(c) / 0.3 - 1) < 0.1
        elif op == "refine":
            reg = layer.layers[-2]
            assert not reg.bias.any() and torch.equal(layer.layers[-1].scale, torch.ones(11))
            assert abs(float(reg.weight.std()) * math.sqrt(c) / 0.05 - 1) < 0.1
            prior = torch.sigmoid(layer.cls_layers[-1].bias.double())
            assert torch.allclose(prior, torch.full_like(prior, 0.01), rtol=1e-6)
    assert counts["refine"] == cfg.num_decoder_layers
    for m in model.head.modules():
        if isinstance(m, torch.nn.LayerNorm):
            assert torch.equal(m.weight, torch.ones_like(m.weight)) and not m.bias.any()


def test_untrained_head_stays_in_range_and_is_not_chaotic(tiny, frames):
    """Like a trained head, the seeded one refines anchors by small steps and
    passes small input differences on as small output differences: features
    perturbed by 1e-6 (relative) move the outputs by about as much, on the
    same state and with the perturbed run's own state carried over frames."""
    cfg = tiny.cfg
    g = torch.Generator().manual_seed(9)
    state = carried = zeros_state(cfg)

    def rel(a, b):
        return float((a.double() - b.double()).norm() / b.double().norm())

    for fr in frames:
        out = _run_head(tiny, fr, state)
        noisy = dict(fr, features=fr["features"] * (1 + 1e-6 * torch.randn(
            fr["features"].shape, generator=g)))
        same = _run_head(tiny, noisy, state)
        mine = _run_head(tiny, noisy, carried)
        p = out["prediction"][0]
        assert p[:, :2].norm(dim=1).max() < 65.0       # anchors within 55 m + ego motion
        size = p[:, 3:6].exp()
        assert 0.2 < size.min() and size.max() < 20.0  # pedestrians to buses
        assert p[:, 8:10].norm(dim=1).max() < 3.0
        yaw_norm = p[:, 6:8].norm(dim=1)
        assert 0.3 < yaw_norm.min() and yaw_norm.max() < 2.0
        logit = out["classification"]
        assert -9.0 < logit.min() and logit.max() < -1.0  # around the 1% prior
        for name in ("classification", "prediction", "quality"):
            assert rel(same[name], out[name]) < 3e-6, name
            assert rel(mine[name], out[name]) < 3e-6, name
        assert torch.equal(mine["track_ids"], out["track_ids"])
        state, carried = out["state"], mine["state"]


def test_model_rejects_inconsistent_configs():
    with pytest.raises(ValueError, match="fpn_channels"):
        build_model("tiny", fpn_channels=32)
    with pytest.raises(ValueError, match="ResNet depth"):
        build_model("tiny", depth=101)
    with pytest.raises(ValueError, match="aggregation"):
        build_model("tiny", aggregation="fast")
    assert set(PRESETS) == {"v3", "tiny"}
