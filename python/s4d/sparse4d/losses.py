"""The Sparse4D training losses and the Hungarian matching of every decoder layer.

Per refinement layer and frame, predictions are matched one-to-one to the
ground truth by the Hungarian algorithm (scipy's linear_sum_assignment) on
a cost of classification (the focal cost) plus weighted L1 on the box.
Then:

- classification: sigmoid focal loss (alpha 0.25, gamma 2) over every
  prediction and class; matched predictions have their ground-truth class
  as target, the rest none; weight 2;
- box: L1 between the refined anchor (x, y, z, log w, log l, log h, sin yaw,
  cos yaw, vx, vy) and the encoded ground truth, per-dimension weights
  REG_WEIGHTS, weight 0.25, over matched predictions;
- quality: centerness, binary cross entropy against exp(-|centre error|);
  yawness, Gaussian focal loss (alpha 2, gamma 4) against "the predicted
  (sin, cos) points within 90 degrees of the truth"; over matched
  predictions.

One-to-many box regression (a training aid of this project, not
upstream's): besides its Hungarian match, each ground-truth box also pulls
the MANY_K unmatched predictions of lowest matching cost whose centre lies
within MANY_RADIUS of it, through the same weighted L1 (weight MANY_WEIGHT).
Their classification stays negative, so duplicates are still suppressed;
the refinement gets several examples per object and layer instead of one,
which is what slows the localisation of one-to-one matching down.

Denoising (as upstream Sparse4Dv3, without its temporal part): DN_GROUPS
groups of extra queries per frame, each holding every ground-truth box
(at most DN_MAX_GT) twice: a positive copy moved by at most DN_POS_RADIUS
(and a little in size, yaw and velocity), which must be classified as its
object and refined back onto it, and a negative copy moved by DN_NEG_RADIUS,
which must be classified as nothing. The head keeps them apart from the
ordinary queries (Sparse4DHead.forward); their assignment is known, so no
matching, and their terms are divided by the number of positive copies.

Every term is summed over frames and divided by the number of ground-truth
boxes in the batch (at least 1), and summed over the layers.
"""
import math
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from .config import COS_YAW, SIN_YAW

BOX_DIM = 10  # x, y, z, log w, log l, log h, sin, cos, vx, vy
REG_WEIGHTS = (2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
# the matching cost ignores yaw and velocity (as upstream's sampler)
MATCH_REG_WEIGHTS = (2.0, 2.0, 2.0, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0)
FOCAL_ALPHA, FOCAL_GAMMA = 0.25, 2.0
CLS_WEIGHT, BOX_WEIGHT, CENTERNESS_WEIGHT, YAWNESS_WEIGHT = 2.0, 0.25, 1.0, 1.0
MANY_K, MANY_RADIUS, MANY_WEIGHT = 3, 3.0, 0.5
DN_GROUPS, DN_MAX_GT = 2, 32
DN_POS_RADIUS, DN_NEG_RADIUS = 1.0, (1.5, 3.0)  # metres, bird's-eye


def encode_boxes(boxes: torch.Tensor) -> torch.Tensor:
    """[M, 9] (x, y, z, w, l, h, yaw, vx, vy) -> [M, 10] in the anchor layout."""
    return torch.cat([boxes[:, 0:3], boxes[:, 3:6].log(), torch.sin(boxes[:, 6:7]),
                      torch.cos(boxes[:, 6:7]), boxes[:, 7:9]], dim=1)


def sigmoid_focal_loss(logits: torch.Tensor, targets: torch.Tensor,
                       alpha: float = FOCAL_ALPHA, gamma: float = FOCAL_GAMMA) -> torch.Tensor:
    """Summed focal loss; targets in {0, 1} with the logits' shape."""
    p = logits.sigmoid()
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    a_t = alpha * targets + (1 - alpha) * (1 - targets)
    return (a_t * (1 - p_t) ** gamma * ce).sum()


def gaussian_focal_loss(pred: torch.Tensor, target: torch.Tensor, alpha: float = 2.0,
                        gamma: float = 4.0, eps: float = 1e-12) -> torch.Tensor:
    """Summed Gaussian focal loss (CornerNet's) of probabilities against
    targets in [0, 1]: positives are the targets equal to 1."""
    pos = target.eq(1).float()
    neg = 1.0 - pos
    pos_loss = -(pred + eps).log() * (1 - pred).pow(alpha) * pos
    neg_loss = -(1 - pred + eps).log() * pred.pow(alpha) * (1 - target).pow(gamma) * neg
    return (pos_loss + neg_loss).sum()


def focal_cost(logits: torch.Tensor, labels: torch.Tensor, alpha: float = FOCAL_ALPHA,
               gamma: float = FOCAL_GAMMA, eps: float = 1e-8) -> torch.Tensor:
    """[A, C] logits, [M] labels -> [A, M]: the focal loss of calling
    prediction a class labels[m] minus that of calling it background."""
    p = logits.sigmoid()[:, labels]
    pos = -(p + eps).log() * alpha * (1 - p) ** gamma
    neg = -(1 - p + eps).log() * (1 - alpha) * p ** gamma
    return pos - neg


def box_cost(pred: torch.Tensor, target: torch.Tensor, weights: Sequence[float]) -> torch.Tensor:
    """[A, D], [M, D] -> [A, M] weighted L1."""
    w = torch.tensor(weights, dtype=pred.dtype, device=pred.device)
    return ((pred[:, None, :] - target[None, :, :]).abs() * w).sum(-1)


def hungarian(cost: torch.Tensor) -> Tuple[np.ndarray, np.ndarray]:
    """Minimum-cost one-to-one assignment: (prediction rows, target columns)."""
    from scipy.optimize import linear_sum_assignment
    c = cost.detach().cpu().double().numpy()
    if c.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if not np.isfinite(c).all():
        raise ValueError("matching cost has NaN or infinite entries")
    rows, cols = linear_sum_assignment(c)
    return rows.astype(np.int64), cols.astype(np.int64)


def matching_cost(logits: torch.Tensor, pred: torch.Tensor, labels: torch.Tensor,
                  target: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return CLS_WEIGHT * focal_cost(logits, labels) + \
            BOX_WEIGHT * box_cost(pred[:, :BOX_DIM], target, MATCH_REG_WEIGHTS)


def match(logits: torch.Tensor, pred: torch.Tensor, labels: torch.Tensor,
          target: torch.Tensor) -> Tuple[np.ndarray, np.ndarray]:
    """One frame: logits [A, C], pred [A, >= 10] anchors, labels [M],
    target [M, 10] encoded boxes -> matched (rows, cols)."""
    if len(labels) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return hungarian(matching_cost(logits, pred, labels, target))


def many_to_one(cost: torch.Tensor, pred: torch.Tensor, target: torch.Tensor,
                rows: np.ndarray, k: int = MANY_K, radius: float = MANY_RADIUS
                ) -> Tuple[np.ndarray, np.ndarray]:
    """The extra regression pairs: per target, the k predictions of lowest
    cost among those not matched by Hungarian and within `radius` metres
    (bird's-eye) of it; a prediction serves one target at most (its
    cheapest)."""
    a, m = cost.shape
    if m == 0 or k == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    with torch.no_grad():
        d = (pred[:, None, :2] - target[None, :, :2]).norm(dim=-1)
        c = torch.where(d <= radius, cost, torch.full_like(cost, float("inf")))
        c[torch.as_tensor(rows, dtype=torch.long, device=c.device)] = float("inf")
        best, col = c.min(dim=1)                        # each prediction: its cheapest target
        out_r, out_c = [], []
        for j in range(m):
            cand = torch.nonzero((col == j) & torch.isfinite(best)).flatten()
            if len(cand):
                top = cand[torch.argsort(best[cand])[:k]]
                out_r.append(top)
                out_c.append(torch.full_like(top, j))
    if not out_r:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return torch.cat(out_r).cpu().numpy(), torch.cat(out_c).cpu().numpy()


def layer_loss(anchor: torch.Tensor, cls: torch.Tensor, quality: torch.Tensor,
               gts: List[Dict[str, torch.Tensor]], num_gt: float,
               many: bool = False) -> Dict[str, torch.Tensor]:
    """The losses of one decoder layer over a batch (anchor [B, A, 11],
    cls [B, A, C], quality [B, A, 2]; gts: per frame "boxes" [M, 9] and
    "labels" [M])."""
    dev = anchor.device
    cls_targets = torch.zeros_like(cls)
    preds, targets, quals, many_p, many_t = [], [], [], [], []
    for b, gt in enumerate(gts):
        labels = gt["labels"].to(dev)
        target = encode_boxes(gt["boxes"].to(dev, anchor.dtype))
        if len(labels) == 0:
            continue
        cost = matching_cost(cls[b], anchor[b], labels, target)
        rows, cols = hungarian(cost)
        if many:
            mr, mc = many_to_one(cost, anchor[b], target, rows)
            if len(mr):
                many_p.append(anchor[b, torch.from_numpy(mr).to(dev), :BOX_DIM])
                many_t.append(target[torch.from_numpy(mc).to(dev)])
        rows_t = torch.from_numpy(rows).to(dev)
        cols_t = torch.from_numpy(cols).to(dev)
        cls_targets[b, rows_t, labels[cols_t]] = 1.0
        preds.append(anchor[b, rows_t, :BOX_DIM])
        targets.append(target[cols_t])
        quals.append(quality[b, rows_t])
    out = {"cls": CLS_WEIGHT * sigmoid_focal_loss(cls, cls_targets) / num_gt}
    if preds:
        pred, target, qual = torch.cat(preds), torch.cat(targets), torch.cat(quals)
        w = torch.tensor(REG_WEIGHTS, dtype=pred.dtype, device=dev)
        out["box"] = BOX_WEIGHT * ((pred - target).abs() * w).sum() / num_gt
        with torch.no_grad():
            centre_err = (pred[:, :3] - target[:, :3]).norm(dim=-1)
            cns_target = torch.exp(-centre_err)
            yaw_ok = F.cosine_similarity(pred[:, [SIN_YAW, COS_YAW]],
                                         target[:, [SIN_YAW, COS_YAW]], dim=-1) > 0
        out["centerness"] = CENTERNESS_WEIGHT * F.binary_cross_entropy_with_logits(
            qual[:, 0], cns_target, reduction="sum") / num_gt
        out["yawness"] = YAWNESS_WEIGHT * gaussian_focal_loss(
            qual[:, 1].sigmoid(), yaw_ok.to(qual.dtype)) / num_gt
    else:
        zero = anchor.sum() * 0.0
        out.update(box=zero, centerness=zero, yawness=zero)
    if many:
        if many_p:
            pred, target = torch.cat(many_p), torch.cat(many_t)
            w = torch.tensor(REG_WEIGHTS, dtype=pred.dtype, device=dev)
            out["many"] = MANY_WEIGHT * BOX_WEIGHT * ((pred - target).abs() * w).sum() / num_gt
        else:
            out["many"] = anchor.sum() * 0.0
    return out


def make_denoising(gts: List[Dict[str, torch.Tensor]], num_cls_anchor: int,
                   generator: torch.Generator, groups: int = DN_GROUPS):
    """Denoising queries for a batch. Returns (anchor [B, D, 11], group [D]
    (1..groups), info) where info holds per frame the rows (offsets from
    the first denoising row), the ground-truth index of each row and
    whether it is a positive copy; rows past a frame's boxes are padding."""
    b = len(gts)
    counts = [min(len(g["labels"]), DN_MAX_GT) for g in gts]
    m = max(max(counts), 1)
    d = groups * 2 * m
    anchor = torch.zeros(b, d, 11)
    anchor[:, :, 2] = -1.0
    anchor[:, :, 7] = 1.0   # padding: a unit box at the ego car, never supervised
    info = []
    for i, gt in enumerate(gts):
        n = counts[i]
        pick = torch.randperm(len(gt["labels"]), generator=generator)[:n] \
            if len(gt["labels"]) > n else torch.arange(n)
        boxes = gt["boxes"][pick].float()
        rows, cols, positive = [], [], []
        for g in range(groups):
            for neg in (0, 1):
                if n == 0:
                    continue
                start = g * 2 * m + neg * m
                u = torch.rand(n, 8, generator=generator)
                if neg:
                    r = DN_NEG_RADIUS[0] + (DN_NEG_RADIUS[1] - DN_NEG_RADIUS[0]) * u[:, 0]
                else:
                    r = DN_POS_RADIUS * u[:, 0].sqrt()
                phi = 2 * math.pi * u[:, 1]
                yaw = boxes[:, 6] + 0.5 * (u[:, 2] - 0.5)
                a = torch.zeros(n, 11)
                a[:, 0] = boxes[:, 0] + r * torch.cos(phi)
                a[:, 1] = boxes[:, 1] + r * torch.sin(phi)
                a[:, 2] = boxes[:, 2] + 0.4 * (u[:, 3] - 0.5)
                a[:, 3:6] = boxes[:, 3:6].log() + 0.2 * (u[:, 4:5] - 0.5) * torch.ones(1, 3)
                a[:, 6], a[:, 7] = torch.sin(yaw), torch.cos(yaw)
                a[:, 8:10] = boxes[:, 7:9] + 2.0 * (u[:, 5:7] - 0.5)
                anchor[i, start:start + n] = a
                rows.append(torch.arange(start, start + n))
                cols.append(pick)
                positive.append(torch.full((n,), not neg))
        if rows:
            info.append((torch.cat(rows), torch.cat(cols), torch.cat(positive)))
        else:
            info.append((torch.zeros(0, dtype=torch.long),) * 2 + (torch.zeros(0, dtype=torch.bool),))
    group = torch.arange(d) // (2 * m) + 1
    return anchor, group, {"frames": info, "num_anchor": num_cls_anchor}


def denoising_loss(anchor: torch.Tensor, cls: torch.Tensor, quality: torch.Tensor,
                   gts: List[Dict[str, torch.Tensor]], info) -> Dict[str, torch.Tensor]:
    """The denoising terms of one layer (the rows after the ordinary queries)."""
    a0 = info["num_anchor"]
    anchor, cls, quality = anchor[:, a0:], cls[:, a0:], quality[:, a0:]
    dev = anchor.device
    targets_cls = torch.zeros_like(cls)
    valid = torch.zeros(cls.shape[:2], dtype=torch.bool, device=dev)
    preds, targets, quals = [], [], []
    for b, (rows, cols, pos) in enumerate(info["frames"]):
        if not len(rows):
            continue
        rows, cols, pos = rows.to(dev), cols.to(dev), pos.to(dev)
        valid[b, rows] = True
        labels = gts[b]["labels"].to(dev)[cols]
        targets_cls[b, rows[pos], labels[pos]] = 1.0
        target = encode_boxes(gts[b]["boxes"].to(dev, anchor.dtype)[cols[pos]])
        preds.append(anchor[b, rows[pos], :BOX_DIM])
        targets.append(target)
        quals.append(quality[b, rows[pos]])
    if not preds:
        zero = anchor.sum() * 0.0
        return {"dn_cls": zero, "dn_box": zero}
    pred, target, qual = torch.cat(preds), torch.cat(targets), torch.cat(quals)
    num = max(float(len(pred)), 1.0)
    p = cls[valid]
    out = {"dn_cls": CLS_WEIGHT * sigmoid_focal_loss(p, targets_cls[valid]) / num}
    w = torch.tensor(REG_WEIGHTS, dtype=pred.dtype, device=dev)
    out["dn_box"] = BOX_WEIGHT * ((pred - target).abs() * w).sum() / num
    with torch.no_grad():
        cns_target = torch.exp(-(pred[:, :3] - target[:, :3]).norm(dim=-1))
        yaw_ok = F.cosine_similarity(pred[:, [SIN_YAW, COS_YAW]], target[:, [SIN_YAW, COS_YAW]],
                                     dim=-1) > 0
    out["dn_box"] = out["dn_box"] + (
        CENTERNESS_WEIGHT * F.binary_cross_entropy_with_logits(qual[:, 0], cns_target,
                                                               reduction="sum")
        + YAWNESS_WEIGHT * gaussian_focal_loss(qual[:, 1].sigmoid(), yaw_ok.to(qual.dtype))) / num
    return out


def sparse4d_loss(layers: List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
                  gts: List[Dict[str, torch.Tensor]], many: bool = False, dn=None
                  ) -> Tuple[torch.Tensor, Dict[str, float]]:
    """Sum over the decoder layers; returns (total, per-term sums as floats).
    `many`: add the one-to-many box regression; `dn`: the info of
    make_denoising when the layers hold denoising rows."""
    num_gt = max(float(sum(len(g["labels"]) for g in gts)), 1.0)
    total = 0.0
    parts: Dict[str, float] = {}
    for anchor, cls, quality in layers:
        a0 = dn["num_anchor"] if dn else anchor.shape[1]
        terms = layer_loss(anchor[:, :a0], cls[:, :a0], quality[:, :a0], gts, num_gt, many)
        if dn:
            terms.update(denoising_loss(anchor, cls, quality, gts, dn))
        for k, v in terms.items():
            total = total + v
            parts[k] = parts.get(k, 0.0) + float(v.detach())
    if not torch.is_tensor(total) or not math.isfinite(float(total.detach())):
        raise FloatingPointError(f"loss is not finite: {parts}")
    return total, parts
