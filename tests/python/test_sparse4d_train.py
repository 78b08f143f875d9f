"""Training Sparse4D: the losses against hand-computed values, the Hungarian
matching against brute force, the nuScenes-style metrics on small hand-made
cases with known results, the dataset's ground truth against its own world,
checkpoints, and a short training run on the CPU whose loss must fall."""
import csv
import itertools
import math
import os

import matplotlib  # noqa: F401  train.plot_curve draws the curve the smoke test checks
import numpy as np
import pytest
import scipy.optimize  # noqa: F401  the matching and the tracking metric import it lazily
import torch

from s4d.sparse4d import get_preset
from s4d.sparse4d.checkpoint import load_model, read_checkpoint, save_checkpoint
from s4d.sparse4d.dataset import (SPLIT_BASE, TrainSet, kmeans_anchors, sequence_frames,
                                  sequence_seed)
from s4d.sparse4d.losses import (denoising_loss, encode_boxes, focal_cost, gaussian_focal_loss,
                                 hungarian, layer_loss, make_denoising, many_to_one, match,
                                 sigmoid_focal_loss, sparse4d_loss)
from s4d.sparse4d.metrics import (aligned_iou, average_precision, detection_metrics,
                                  tracking_metrics, yaw_difference)
from s4d.sparse4d.model import build_model
from s4d.sparse4d.scene import FRAME_INTERVAL, make_scene

torch.set_num_threads(1)


def _sig(x):
    return 1.0 / (1.0 + math.exp(-x))


# ---------------------------------------------------------------- losses, by hand

def test_sigmoid_focal_loss_equals_hand_computed_terms():
    logits = torch.tensor([[0.0, 2.0], [-1.0, 3.0]], dtype=torch.float64)
    targets = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    want = 0.0
    for x, t in ((0.0, 1), (2.0, 0), (-1.0, 0), (3.0, 1)):
        p = _sig(x)
        if t:
            want += 0.25 * (1 - p) ** 2 * -math.log(p)
        else:
            want += 0.75 * p ** 2 * -math.log(1 - p)
    assert abs(float(sigmoid_focal_loss(logits, targets)) - want) < 1e-12
    # logit 0, target 1: 0.25 * 0.25 * ln 2
    one = sigmoid_focal_loss(torch.zeros(1, 1, dtype=torch.float64),
                             torch.ones(1, 1, dtype=torch.float64))
    assert abs(float(one) - 0.0625 * math.log(2)) < 1e-12


def test_gaussian_focal_loss_equals_hand_computed_terms():
    pred = torch.tensor([0.8, 0.3, 0.6], dtype=torch.float64)
    target = torch.tensor([1.0, 0.0, 0.5], dtype=torch.float64)
    want = (-math.log(0.8) * 0.2 ** 2) + (-math.log(0.7) * 0.3 ** 2 * 1.0 ** 4) + \
        (-math.log(0.4) * 0.6 ** 2 * 0.5 ** 4)
    assert abs(float(gaussian_focal_loss(pred, target)) - want) < 1e-9


def test_encode_boxes_and_costs():
    boxes = torch.tensor([[1.0, -2.0, 0.5, 2.0, 4.0, 1.5, 0.3, 1.0, -1.0]], dtype=torch.float64)
    enc = encode_boxes(boxes)[0].tolist()
    want = [1.0, -2.0, 0.5, math.log(2), math.log(4), math.log(1.5), math.sin(0.3),
            math.cos(0.3), 1.0, -1.0]
    assert np.allclose(enc, want, atol=1e-12)
    logits = torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64)
    cost = focal_cost(logits, torch.tensor([2, 0]))
    for j, c in enumerate((2, 0)):
        p = _sig(float(logits[0, c]))
        pos = -math.log(p + 1e-8) * 0.25 * (1 - p) ** 2
        neg = -math.log(1 - p + 1e-8) * 0.75 * p ** 2
        assert abs(float(cost[0, j]) - (pos - neg)) < 1e-12
    # a confident right class costs less than a confident wrong one
    assert cost[0, 0] < cost[0, 1]


def test_layer_loss_on_a_hand_made_frame():
    """Two predictions, one ground-truth car. Prediction 1 sits on the box,
    scores the car class; prediction 0 is far away: the matching takes 1,
    and every term follows from the numbers below."""
    gt_box = torch.tensor([[10.0, 5.0, -1.0, 2.0, 4.5, 1.6, 0.4, 3.0, 0.0]], dtype=torch.float64)
    target = encode_boxes(gt_box)[0]
    anchor = torch.zeros(1, 2, 11, dtype=torch.float64)
    anchor[0, 0, :10] = torch.tensor([-20.0, 3.0, -1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    anchor[0, 1, :10] = target + torch.tensor([0.3, -0.4, 0.0, 0.1, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0],
                                              dtype=torch.float64)
    cls = torch.full((1, 2, 10), -3.0, dtype=torch.float64)
    cls[0, 1, 0] = 1.0
    quality = torch.tensor([[[0.2, -0.5], [0.7, 1.5]]], dtype=torch.float64)
    gts = [{"boxes": gt_box, "labels": torch.tensor([0])}]
    out = layer_loss(anchor, cls, quality, gts, num_gt=1.0)
    # classification: 19 negatives at -3 and one (-3 of row 0 ... ) + the positive at 1.0
    p_neg, p_pos = _sig(-3.0), _sig(1.0)
    focal_neg = 0.75 * p_neg ** 2 * -math.log(1 - p_neg)
    focal_pos = 0.25 * (1 - p_pos) ** 2 * -math.log(p_pos)
    assert abs(float(out["cls"]) - 2.0 * (19 * focal_neg + focal_pos)) < 1e-9
    # box: weights 2 on x, y, z, 1 on the rest; |0.3| + |0.4| at 2, 0.1 + 0.5 at 1; times 0.25
    assert abs(float(out["box"]) - 0.25 * (2 * 0.7 + 0.6)) < 1e-9
    # centerness: BCE(logit 0.7, exp(-0.5)) (centre off by 0.3, 0.4, 0)
    t = math.exp(-0.5)
    bce = -(t * math.log(_sig(0.7)) + (1 - t) * math.log(1 - _sig(0.7)))
    assert abs(float(out["centerness"]) - bce) < 1e-9
    # yawness: the yaw is right, so a positive: -log(p) (1 - p)^2
    p = _sig(1.5)
    assert abs(float(out["yawness"]) - (-math.log(p) * (1 - p) ** 2)) < 1e-9


def test_loss_sums_layers_and_backpropagates():
    g = torch.Generator().manual_seed(0)
    layers = []
    for _ in range(3):
        layers.append((torch.randn(2, 16, 11, generator=g, requires_grad=True),
                       torch.randn(2, 16, 10, generator=g, requires_grad=True),
                       torch.randn(2, 16, 2, generator=g, requires_grad=True)))
    boxes = torch.tensor([[1.0, 2.0, -1.0, 1.9, 4.6, 1.6, 0.1, 1.0, 0.0],
                          [-5.0, 8.0, -1.0, 0.6, 0.7, 1.8, 2.0, 0.0, 1.0]])
    gts = [{"boxes": boxes, "labels": torch.tensor([0, 8])},
           {"boxes": boxes[:0], "labels": torch.zeros(0, dtype=torch.long)}]
    total, parts = sparse4d_loss(layers, gts)
    each = [layer_loss(*l, gts, 2.0) for l in layers]
    assert abs(float(total) - sum(float(v) for e in each for v in e.values())) < 1e-4
    assert set(parts) == {"cls", "box", "centerness", "yawness"}
    total.backward()
    for a, c, q in layers:
        assert a.grad.abs().sum() > 0 and c.grad.abs().sum() > 0 and q.grad.abs().sum() > 0
    # the frame without ground truth still trains its classification (all negative)
    assert layers[0][1].grad[1].abs().sum() > 0 and layers[0][0].grad[1].abs().sum() == 0


# ---------------------------------------------------------------- matching

def test_hungarian_finds_the_brute_force_optimum():
    rng = np.random.default_rng(1)
    for a, m in ((4, 4), (7, 3), (6, 1)):
        cost = rng.uniform(0, 10, (a, m))
        rows, cols = hungarian(torch.from_numpy(cost))
        got = cost[rows, cols].sum()
        best = min(sum(cost[p[j], j] for j in range(m))
                   for p in itertools.permutations(range(a), m))
        assert len(rows) == m and len(set(rows)) == m and abs(got - best) < 1e-9
    with pytest.raises(ValueError, match="NaN or infinite"):
        hungarian(torch.tensor([[float("nan")]]))


def test_match_pairs_each_truth_with_the_prediction_on_it():
    boxes = torch.tensor([[10.0, 0.0, -1.0, 1.9, 4.6, 1.6, 0.0, 0.0, 0.0],
                          [-8.0, 6.0, -1.0, 0.6, 0.7, 1.8, 1.0, 0.0, 0.0],
                          [0.0, -15.0, -1.0, 2.9, 11.0, 3.3, 2.0, 0.0, 0.0]])
    target = encode_boxes(boxes)
    pred = torch.zeros(6, 11)
    pred[:, :10] = encode_boxes(torch.tensor([[30.0, 30.0, -1.0, 1.0, 1.0, 1.0, 0.0, 0, 0]] * 6))
    pred[4, :10], pred[1, :10], pred[5, :10] = target[0], target[1], target[2]
    logits = torch.zeros(6, 10)
    rows, cols = match(logits, pred, torch.tensor([0, 8, 3]), target)
    assert dict(zip(cols.tolist(), rows.tolist())) == {0: 4, 1: 1, 2: 5}
    rows, cols = match(logits, pred, torch.zeros(0, dtype=torch.long), target[:0])
    assert len(rows) == 0


def test_many_to_one_takes_the_cheapest_unmatched_predictions_nearby():
    target = torch.tensor([[0.0, 0.0], [10.0, 0.0]])
    pred = torch.tensor([[0.1, 0.0], [0.5, 0.5], [1.0, 1.0], [2.0, 0.0], [9.0, 0.0], [5.0, 0.0],
                         [20.0, 0.0]])
    cost = torch.tensor([[0.1, 9.0], [0.5, 8.0], [0.9, 7.0], [0.3, 6.0], [5.0, 0.2],
                         [2.0, 2.5], [9.0, 9.0]])
    rows, cols = many_to_one(cost, pred, target, np.array([0, 4]), k=2, radius=3.0)
    # target 0: unmatched within 3 m are 1, 2, 3 (cost 0.5, 0.9, 0.3) -> 3 and 1;
    # target 1: nothing unmatched within 3 m (5 is 5 m away, 6 is 10 m away)
    assert sorted(zip(cols.tolist(), rows.tolist())) == [(0, 1), (0, 3)]
    rows, cols = many_to_one(cost, pred, target, np.array([0, 4]), k=2, radius=6.0)
    # prediction 5 is within 6 m of both and cheaper for target 0; it serves only that one
    assert sorted(zip(cols.tolist(), rows.tolist())) == [(0, 1), (0, 3)]
    rows, cols = many_to_one(cost, pred, target, np.array([0, 4]), k=5, radius=6.0)
    assert sorted(zip(cols.tolist(), rows.tolist())) == [(0, 1), (0, 2), (0, 3), (0, 5)]


def test_denoising_queries_surround_the_ground_truth():
    boxes = torch.tensor([[10.0, 5.0, -1.0, 1.9, 4.6, 1.6, 0.5, 2.0, 0.0],
                          [-3.0, 8.0, -1.0, 0.6, 0.7, 1.8, 1.0, 0.0, 0.0],
                          [4.0, -9.0, -1.0, 2.5, 7.5, 3.1, 2.0, 0.0, 0.0]])
    gts = [{"boxes": boxes, "labels": torch.tensor([0, 8, 1])},
           {"boxes": boxes[:1], "labels": torch.tensor([0])}]
    anchor, group, info = make_denoising(gts, 128, torch.Generator().manual_seed(0), groups=2)
    assert anchor.shape == (2, 2 * 2 * 3, 11) and group.tolist() == [1] * 6 + [2] * 6
    for b, (rows, cols, pos) in enumerate(info["frames"]):
        assert len(rows) == 2 * 2 * len(gts[b]["labels"]) and pos.sum() * 2 == len(pos)
        d = (anchor[b, rows, :2] - gts[b]["boxes"][cols, :2]).norm(dim=-1)
        assert (d[pos] <= 1.0 + 1e-5).all() and (d[~pos] >= 1.5 - 1e-5).all()
        assert (d[~pos] <= 3.0 + 1e-5).all()
        yaw = torch.atan2(anchor[b, rows, 6], anchor[b, rows, 7])
        dyaw = torch.remainder(yaw - gts[b]["boxes"][cols, 6] + math.pi, 2 * math.pi) - math.pi
        assert (dyaw.abs() <= 0.25 + 1e-5).all()
    # the loss on exact copies of the truth: no box error left, so the box
    # term is the quality terms at logit 0: ln 2 (centerness target 1) plus
    # 0.25 ln 2 (yawness, a positive) per positive copy
    cls = torch.full((2, 128 + 12, 10), -5.0)
    full = torch.zeros(2, 128 + 12, 11)
    full[:, 128:] = anchor
    for b, (rows, cols, pos) in enumerate(info["frames"]):
        full[b, 128 + rows[pos], :10] = encode_boxes(gts[b]["boxes"][cols[pos]])
    out = denoising_loss(full, cls, torch.zeros(2, 140, 2), gts, info)
    assert abs(float(out["dn_box"]) - 1.25 * math.log(2)) < 1e-5
    assert float(out["dn_cls"]) > 0


def test_denoising_queries_leave_the_ordinary_queries_unchanged():
    """The ordinary queries never attend to the denoising ones: with or
    without them, every output of the head is the same (float64)."""
    from s4d.sparse4d.scene import make_sequence
    model = build_model("tiny", aggregation="reference", seed=1, yaw_swap_quirk=False).double()
    seq = make_sequence(model.cfg, num_frames=2, cut_at=1, seed=0)
    state = model.initial_state()
    state = type(state)(*[x.double() if x.is_floating_point() else x for x in state])
    g = torch.Generator().manual_seed(3)
    for fr in seq:
        ins = [torch.from_numpy(fr[k]).double() for k in ("images", "projection", "image_wh",
                                                           "timestamp", "ego_pose")]
        dn = model.head.instance_bank.anchor[None, :12].detach().clone()
        dn[..., :3] += torch.randn(1, 12, 3, generator=g, dtype=torch.float64)
        with torch.no_grad():
            features = model.backbone(ins[0])
            plain = model.head(features, *ins[1:], state, return_layers=True)
            with_dn = model.head(features, *ins[1:], state, return_layers=True, dn_anchor=dn,
                                 dn_group=torch.tensor([1] * 6 + [2] * 6))
        for k in ("boxes", "scores", "classification", "prediction", "quality"):
            torch.testing.assert_close(with_dn[k], plain[k], rtol=1e-12, atol=1e-10)
        for a, b in zip(plain["state"], with_dn["state"]):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-10)
        for (a1, c1, q1), (a2, c2, q2) in zip(plain["layers"], with_dn["layers"]):
            assert a2.shape[1] == a1.shape[1] + 12
            torch.testing.assert_close(a2[:, :128], a1, rtol=1e-12, atol=1e-10)
            torch.testing.assert_close(c2[:, :128], c1, rtol=1e-12, atol=1e-10)
        # and the denoising rows did see the image: they moved from their anchors
        assert (with_dn["layers"][-1][0][0, 128:, :2] - dn[0, :, :2]).abs().max() > 1e-4
        state = plain["state"]
    assert bool(state.valid[0] > 0.5)


# ---------------------------------------------------------------- metrics on hand-made cases

def _frame(gt, gt_labels, pred, scores, labels, gt_ids=None, pred_ids=None, start=False):
    gt = np.asarray(gt, np.float64).reshape(-1, 9)
    pred = np.asarray(pred, np.float64).reshape(-1, 9)
    return {"gt_boxes": gt, "gt_labels": np.asarray(gt_labels, np.int64),
            "gt_track_ids": np.asarray(gt_ids if gt_ids is not None else range(len(gt)), np.int64),
            "boxes": pred, "scores": np.asarray(scores, np.float64),
            "labels": np.asarray(labels, np.int64),
            "track_ids": np.asarray(pred_ids if pred_ids is not None else range(len(pred)),
                                    np.int64), "scene_start": start}


CAR = [5.0, 3.0, -1.0, 2.0, 4.0, 1.5, 0.2, 1.0, 0.0]
PED = [-7.0, 2.0, -1.0, 0.6, 0.7, 1.8, 1.0, 0.0, 0.5]


def test_perfect_detections_give_map_and_nds_one():
    frames = [_frame([CAR, PED], [0, 8], [CAR, PED], [0.9, 0.8], [0, 8]),
              _frame([PED], [8], [PED], [0.7], [8])]
    m = detection_metrics(frames)
    assert m["mAP"] == pytest.approx(1.0) and m["NDS"] == pytest.approx(1.0)
    for k in ("mATE", "mASE", "mAOE", "mAVE"):
        assert m[k] == pytest.approx(0.0, abs=1e-12)


def test_half_recall_gives_the_known_ap():
    """Two cars, one found exactly: precision 1 up to recall 0.5 and 0 beyond;
    AP = mean over the 90 recall levels above 10% of (p - 0.1)+ / 0.9 = 40 * 0.9 / 90 / 0.9."""
    frames = [_frame([CAR, [20.0, -4.0] + CAR[2:]], [0, 0], [CAR], [0.9], [0])]
    m = detection_metrics(frames)
    assert m["per_class"]["0"]["AP"] == pytest.approx(40 / 90)
    assert m["mAP"] == pytest.approx(40 / 90)


def test_distance_thresholds_and_true_positive_errors():
    """One car predicted 0.7 m off (AP 0 at 0.5 m, 1 at 1, 2 and 4 m: mAP 0.75),
    half as wide (IoU 0.5), 0.5 rad off in yaw, 1 m/s off in velocity."""
    pred = [CAR[0] + 0.7, CAR[1], CAR[2], 1.0, 4.0, 1.5, CAR[6] + 0.5, 1.0, 1.0]
    m = detection_metrics([_frame([CAR], [0], [pred], [0.6], [0])])
    c = m["per_class"]["0"]
    assert c["AP@"] == pytest.approx({"0.5": 0.0, "1.0": 1.0, "2.0": 1.0, "4.0": 1.0})
    assert m["mAP"] == pytest.approx(0.75)
    assert c["ATE"] == pytest.approx(0.7) and c["ASE"] == pytest.approx(0.5)
    assert c["AOE"] == pytest.approx(0.5) and c["AVE"] == pytest.approx(1.0)
    nds = (4 * 0.75 + (1 - 0.7) + (1 - 0.5) + (1 - 0.5) + 0.0) / 8
    assert m["NDS"] == pytest.approx(nds)


def test_a_false_positive_ranked_first_halves_the_precision():
    """FP at 0.9 then TP at 0.8: (recall, precision) goes (0, 0) -> (1, 0.5) and
    is interpolated linearly: p(r) = r / 2 at the 101 recall levels."""
    fp = [40.0, 40.0] + CAR[2:]
    m = detection_metrics([_frame([CAR], [0], [fp, CAR], [0.9, 0.8], [0, 0])])
    levels = np.linspace(0, 1, 101)[11:]
    want = np.mean(np.maximum(levels / 2 - 0.1, 0)) / 0.9
    assert m["mAP"] == pytest.approx(want)
    assert average_precision(np.ones(101)) == pytest.approx(1.0)
    # a wrong class is no match
    m = detection_metrics([_frame([CAR], [0], [CAR], [0.9], [1])])
    assert m["mAP"] == 0.0 and m["mATE"] == 1.0


def test_geometry_helpers():
    assert yaw_difference(np.array(3.1), np.array(-3.1)) == pytest.approx(2 * math.pi - 6.2)
    assert aligned_iou(np.array([2.0, 4.0, 1.0]), np.array([2.0, 2.0, 1.0])) == pytest.approx(0.5)


def test_tracking_counts_id_switches_misses_and_false_positives():
    a = [CAR, PED]
    frames = [_frame(a, [0, 8], a, [0.9, 0.9], [0, 8], [0, 1], [10, 11], start=True),
              _frame(a, [0, 8], a, [0.9, 0.9], [0, 8], [0, 1], [10, 11])]
    t = tracking_metrics(frames)
    assert (t["MOTA"], t["IDS"], t["FP"], t["FN"]) == (1.0, 0, 0, 0)
    # the car changes track in frame 2: one switch over 4 ground-truth boxes
    frames[1] = _frame(a, [0, 8], a, [0.9, 0.9], [0, 8], [0, 1], [12, 11])
    t = tracking_metrics(frames)
    assert t["IDS"] == 1 and t["MOTA"] == pytest.approx(0.75)
    # a miss (pedestrian scored too low at every threshold) and a false positive
    far = [30.0, 30.0] + CAR[2:]
    frames[1] = _frame(a, [0, 8], [CAR, PED, far], [0.9, 0.01, 0.9], [0, 8, 0], [0, 1],
                       [10, 11, 13])
    t = tracking_metrics(frames)
    assert (t["IDS"], t["FN"], t["FP"]) == (0, 1, 1) and t["MOTA"] == pytest.approx(0.5)
    # a new scene: the same ground-truth id on another track is no switch
    frames[1] = _frame(a, [0, 8], a, [0.9, 0.9], [0, 8], [0, 1], [20, 21], start=True)
    assert tracking_metrics(frames)["IDS"] == 0


# ---------------------------------------------------------------- dataset

def test_splits_are_disjoint_and_sequences_reproducible():
    assert sequence_seed("val", 0) == SPLIT_BASE["val"] != sequence_seed("train", 0)
    with pytest.raises(ValueError, match="split 'test' unknown"):
        sequence_seed("test", 0)
    cfg = get_preset("tiny")
    a = sequence_frames(cfg, "val", 3, length=2)
    b = sequence_frames(cfg, "val", 3, length=2)
    assert np.array_equal(a[1]["raw_images"], b[1]["raw_images"])
    c = sequence_frames(cfg, "train", 3, length=1)
    assert not np.array_equal(a[0]["raw_images"], c[0]["raw_images"])


def test_ground_truth_moves_with_its_velocity_in_the_global_frame():
    """Boxes are given in the lidar frame of each frame; carried to the
    global frame by the ego poses, a track moves by velocity * 0.5 s."""
    cfg = get_preset("tiny")
    frames = sequence_frames(cfg, "train", 5, length=3)
    moved = 0
    for f0, f1 in zip(frames, frames[1:]):
        g = []
        for fr in (f0, f1):
            pose = fr["ego_pose"][0].astype(np.float64)
            b = fr["gt"]["boxes"].astype(np.float64)
            xyz = np.concatenate([b[:, :3], np.ones((len(b), 1))], 1) @ pose.T
            vel = b[:, 7:9] @ pose[:2, :2].T
            g.append({int(t): (xyz[i, :2], vel[i]) for i, t in enumerate(fr["gt"]["track_ids"])})
        for tid in set(g[0]) & set(g[1]):
            (p0, v0), (p1, v1) = g[0][tid], g[1][tid]
            np.testing.assert_allclose(p1 - p0, v0 * FRAME_INTERVAL, atol=2e-3)
            np.testing.assert_allclose(v0, v1, atol=2e-3)
            moved += np.linalg.norm(v0) > 0.5
    assert moved > 0
    gt = frames[0]["gt"]
    assert len(gt["labels"]) > 5 and set(gt["labels"].tolist()) <= {0, 1, 3, 7, 8}
    # on the ground: bottom at the ground (lidar 1.84 m above it)
    np.testing.assert_allclose(gt["boxes"][:, 2] - gt["boxes"][:, 5] / 2, -1.84, atol=1e-4)


def test_the_bank_carries_true_boxes_onto_the_next_frame():
    """The head's projection of cached instances (head.project_anchor, with
    the geometric yaw that training uses) moves the ground truth of a frame,
    with its velocities, onto the ground truth of the next frame: the
    dataset's ego poses, timestamps and box convention are the model's."""
    from s4d.sparse4d.head import project_anchor, rigid_inverse_times
    cfg = get_preset("tiny", yaw_swap_quirk=False)
    frames = sequence_frames(cfg, "val", 2, length=3)
    checked = 0
    for f0, f1 in zip(frames, frames[1:]):
        b0 = torch.from_numpy(f0["gt"]["boxes"].astype(np.float64))
        a0 = torch.cat([encode_boxes(b0), torch.zeros(len(b0), 1, dtype=b0.dtype)], 1)[None]
        rot, trans = rigid_inverse_times(torch.from_numpy(f1["ego_pose"]).double(),
                                         torch.from_numpy(f0["ego_pose"]).double())
        dt = torch.from_numpy(f1["timestamp"] - f0["timestamp"]).double().reshape(1)
        moved = project_anchor(a0, rot, trans, dt, False)[0].numpy()
        ids1 = {int(t): i for i, t in enumerate(f1["gt"]["track_ids"])}
        for i, tid in enumerate(f0["gt"]["track_ids"]):
            if int(tid) not in ids1:
                continue
            g = f1["gt"]["boxes"][ids1[int(tid)]].astype(np.float64)
            np.testing.assert_allclose(moved[i, :3], g[:3], atol=2e-3)
            np.testing.assert_allclose(moved[i, 6:8], [math.sin(g[6]), math.cos(g[6])], atol=1e-4)
            np.testing.assert_allclose(moved[i, 8:10], g[7:9], atol=2e-3)
            checked += 1
    assert checked > 10


def test_visible_objects_project_into_a_camera():
    cfg = get_preset("tiny")
    fr = sequence_frames(cfg, "val", 1, length=1)[0]
    proj = fr["projection"][0].astype(np.float64)
    h, w = cfg.image_hw
    for box in fr["gt"]["boxes"]:
        seen = False
        for cam, dz in itertools.product(range(cfg.num_cams), (0.0, box[5] / 2)):  # centre, top
            p = proj[cam] @ np.array([box[0], box[1], box[2] + dz, 1.0])
            if p[2] > 0.2:
                u, v = p[0] / p[2], p[1] / p[2]
                seen |= bool(-0.5 * w < u < 1.5 * w and -0.5 * h < v < 1.5 * h)
        assert seen, box


def test_kmeans_anchors_cover_the_boxes():
    rng = np.random.default_rng(0)
    boxes = np.concatenate([rng.normal(0, 20, (300, 2)), np.full((300, 1), -1.0),
                            rng.uniform(0.5, 5, (300, 3)), np.zeros((300, 3))], 1)
    anchors = kmeans_anchors(boxes, 16, seed=0)
    assert anchors.shape == (16, 11)
    d = np.hypot(boxes[:, None, 0] - anchors[None, :, 0], boxes[:, None, 1] - anchors[None, :, 1])
    assert np.median(d.min(1)) < 10.0
    assert np.allclose(anchors[:, 7], 1.0) and np.allclose(anchors[:, 3:6],
                                                           np.log(boxes[:, 3:6]).mean(0))
    with pytest.raises(ValueError, match="cannot seed"):
        kmeans_anchors(boxes[:3], 16)


# ---------------------------------------------------------------- checkpoints

def test_checkpoint_round_trip_in_half_precision(tmp_path):
    model = build_model("tiny", aggregation="reference", seed=7, yaw_swap_quirk=False)
    path = str(tmp_path / "w.pt")
    save_checkpoint(model, path, {"yaw_swap_quirk": False}, {"note": "test"})
    ck = read_checkpoint(path)
    assert ck["preset"] == "tiny" and ck["meta"]["note"] == "test"
    assert all(v.dtype == torch.float16 for v in ck["state_dict"].values()
               if v.is_floating_point())
    back = load_model(path, aggregation="reference")
    assert back.cfg.yaw_swap_quirk is False and not back.training
    for (k, a), (_, b) in zip(model.state_dict().items(), back.state_dict().items()):
        want = a.half().float() if a.is_floating_point() else a
        assert torch.equal(want, b), k
    with pytest.raises(ValueError, match="not 'v3'"):
        load_model(path, aggregation="reference", preset="v3")
    torch.save({"weights": 1}, str(tmp_path / "other.pt"))
    with pytest.raises(ValueError, match="not an s4d checkpoint"):
        read_checkpoint(str(tmp_path / "other.pt"))


def test_committed_checkpoint_fits_the_budget_and_scores_what_it_records():
    """The trained weights the demo runs by default: small, fp16, strict fit
    to the tiny preset, with how they were made; evaluated again over the
    whole validation split they give the metrics their meta records (and
    that docs/training.md and the README quote)."""
    from s4d.sparse4d.checkpoint import default_checkpoint
    from s4d.sparse4d.evaluate import evaluate_model
    path = default_checkpoint("tiny")
    assert os.path.getsize(path) <= 20 * 1024 * 1024
    ck = read_checkpoint(path)
    assert ck["preset"] == "tiny" and ck["overrides"] == {"yaw_swap_quirk": False}
    assert all(v.dtype == torch.float16 for v in ck["state_dict"].values()
               if v.is_floating_point())
    meta = ck["meta"]
    for key in ("command", "machine", "steps", "train_minutes", "val"):
        assert key in meta, key
    model = load_model(path, aggregation="ext", preset="tiny")
    got = evaluate_model(model)
    for key in ("mAP", "NDS"):
        assert abs(got[key] - meta["val"][key]) < 2e-3, (key, got[key], meta["val"][key])
    assert got["mAP"] > 0.4


# ---------------------------------------------------------------- training smoke test

def _log_rows(out):
    with open(os.path.join(out, "log.csv")) as f:
        return list(csv.DictReader(f))


def test_a_few_training_steps_lower_the_loss_and_resume(tmp_path):
    """30 steps over two sequences (three passes over the same 20 frames,
    five frames per logged row): the loss of frames 0-4 falls from the first
    pass to the third. Then a run stopped after 4 of 8 steps and resumed
    ends where a run of 8 steps at once does."""
    from s4d.sparse4d.train import main
    common = ["--train-sequences", "2", "--batch", "2", "--eval-sequences", "0",
              "--log-every", "5", "--lr", "2e-3", "--warmup", "5", "--save-every", "100"]
    out = str(tmp_path / "run")
    assert main(["--out", out, "--steps", "30"] + common) == 0
    rows = _log_rows(out)
    assert [int(r["step"]) for r in rows] == [5, 10, 15, 20, 25, 30]
    first, third = float(rows[0]["loss"]), float(rows[4]["loss"])
    assert third < 0.85 * first, (first, third)
    assert os.path.exists(os.path.join(out, "curve.png"))
    ck = read_checkpoint(os.path.join(out, "sparse4d_tiny_synthetic.pt"))
    assert ck["meta"]["steps"] == 30 and "command" in ck["meta"]

    straight, parts = str(tmp_path / "straight"), str(tmp_path / "parts")
    assert main(["--out", straight, "--steps", "8"] + common) == 0
    assert main(["--out", parts, "--steps", "8", "--stop-after", "4"] + common) == 0
    assert main(["--out", parts, "--steps", "8", "--resume"] + common) == 0
    a = torch.load(os.path.join(straight, "last.pt"))["model"]
    b = torch.load(os.path.join(parts, "last.pt"))["model"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)


def test_train_refuses_bad_arguments(capsys):
    from s4d.sparse4d.train import main
    assert main(["--steps", "0"]) == 2
    assert "--steps must be at least 1" in capsys.readouterr().err
    assert main(["--train-sequences", "1", "--batch", "4"]) == 2
    assert "--train-sequences (1) must be at least --batch (4)" in capsys.readouterr().err
