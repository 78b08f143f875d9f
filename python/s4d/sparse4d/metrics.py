"""nuScenes-style detection and tracking metrics, in NumPy.

Detection, per class, over all frames (the nuScenes detection protocol):
predictions sorted by score are matched greedily to the nearest unmatched
ground-truth box of their class and frame, by bird's-eye centre distance,
under each threshold of DIST_THRESHOLDS (0.5, 1, 2, 4 m). Precision is
sampled at 101 recall levels (np.interp, no envelope); AP is the mean
precision above 10% recall, less 10% precision, rescaled to [0, 1]. mAP
averages AP over the thresholds and the classes that have ground truth.

True-positive errors at the 2 m threshold, as nuScenes: ATE (centre
distance, m), ASE (1 - IoU of the boxes aligned in centre and yaw), AOE
(smallest yaw difference, rad), AVE (velocity difference, m/s), each a
running mean over the matches in score order, sampled on the same recall
levels and averaged between 10% recall and the highest recall reached (1
when that is below 10%). The mean over classes gives mATE, mASE, mAOE, mAVE.

NDS here weighs mAP half as nuScenes does; there are no attributes, so the
four remaining errors share the other half:
NDS = (4 mAP + sum over ATE, ASE, AOE, AVE of (1 - min(1, error))) / 8.

Tracking (CLEAR MOT, classes pooled, a 2 m match distance): per frame a
ground-truth object keeps the track it was matched to when that track is
still within 2 m and of its class; the rest are matched by the Hungarian
algorithm on distance. A ground-truth object that changes track is an ID
switch. MOTA = 1 - (misses + false positives + ID switches) / ground truth,
at the score threshold of TRACK_THRESHOLDS that gives the best MOTA (the
threshold is reported); MOTP is the mean distance of the matches.

A frame is a dict: gt_boxes [M, 9] (x, y, z, w, l, h, yaw, vx, vy), gt_labels
[M], gt_track_ids [M], boxes [K, >= 9], scores [K], labels [K], track_ids
[K], scene_start (bool). Callers filter both sides to the evaluation
range first (filter_range).
"""
import math
from typing import Dict, List, Optional, Sequence

import numpy as np

DIST_THRESHOLDS = (0.5, 1.0, 2.0, 4.0)
TP_THRESHOLD = 2.0
MIN_RECALL = 0.1
MIN_PRECISION = 0.1
RECALL_LEVELS = 101
TP_METRICS = ("ATE", "ASE", "AOE", "AVE")
TRACK_DISTANCE = 2.0
TRACK_THRESHOLDS = tuple(np.round(np.arange(0.05, 0.951, 0.05), 2))


def filter_range(frame: Dict, max_range: float) -> Dict:
    """The frame with the boxes (both sides) whose bird's-eye centre lies
    within max_range of the ego car."""
    out = dict(frame)
    g = np.hypot(frame["gt_boxes"][:, 0], frame["gt_boxes"][:, 1]) <= max_range
    p = np.hypot(frame["boxes"][:, 0], frame["boxes"][:, 1]) <= max_range
    for k in ("gt_boxes", "gt_labels", "gt_track_ids"):
        if k in frame:
            out[k] = frame[k][g]
    for k in ("boxes", "scores", "labels", "track_ids"):
        if k in frame:
            out[k] = frame[k][p]
    return out


def yaw_difference(a: np.ndarray, b: np.ndarray, period: float = 2 * math.pi) -> np.ndarray:
    d = np.mod(a - b + period / 2, period) - period / 2
    return np.abs(d)


def aligned_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of boxes of sizes a, b [..., 3] placed at one centre and yaw."""
    inter = np.prod(np.minimum(a, b), axis=-1)
    return inter / (np.prod(a, axis=-1) + np.prod(b, axis=-1) - inter)


def _match_class(frames: Sequence[Dict], label: int, threshold: float):
    """Greedy matching of one class at one threshold. Returns (number of
    ground-truth boxes, per prediction in score order: tp flag, score, and
    the errors of the true positives)."""
    preds = []
    npos = 0
    for f, fr in enumerate(frames):
        npos += int((fr["gt_labels"] == label).sum())
        for i in np.flatnonzero(fr["labels"] == label):
            preds.append((float(fr["scores"][i]), f, int(i)))
    # nuScenes sorts by score alone; equal scores keep frame, then box order
    preds.sort(key=lambda p: -p[0])
    taken = [np.zeros(len(fr["gt_labels"]), bool) for fr in frames]
    tp = np.zeros(len(preds), bool)
    errs = {k: [] for k in TP_METRICS}
    for n, (_, f, i) in enumerate(preds):
        fr = frames[f]
        cand = np.flatnonzero((fr["gt_labels"] == label) & ~taken[f])
        if not len(cand):
            continue
        d = np.hypot(fr["gt_boxes"][cand, 0] - fr["boxes"][i, 0],
                     fr["gt_boxes"][cand, 1] - fr["boxes"][i, 1])
        j = int(np.argmin(d))
        if d[j] >= threshold:
            continue
        g = cand[j]
        taken[f][g] = True
        tp[n] = True
        gt, pb = fr["gt_boxes"][g], fr["boxes"][i]
        errs["ATE"].append(d[j])
        errs["ASE"].append(1.0 - aligned_iou(pb[3:6], gt[3:6]))
        errs["AOE"].append(float(yaw_difference(pb[6], gt[6])))
        errs["AVE"].append(float(np.hypot(pb[7] - gt[7], pb[8] - gt[8])))
    scores = np.array([p[0] for p in preds])
    return npos, tp, scores, {k: np.array(v) for k, v in errs.items()}


def _curves(npos: int, tp: np.ndarray, scores: np.ndarray):
    """Precision and confidence at the 101 recall levels."""
    rec_levels = np.linspace(0.0, 1.0, RECALL_LEVELS)
    if npos == 0 or len(tp) == 0 or not tp.any():
        return np.zeros(RECALL_LEVELS), np.zeros(RECALL_LEVELS)
    ctp = np.cumsum(tp)
    cfp = np.cumsum(~tp)
    precision = ctp / (ctp + cfp)
    recall = ctp / npos
    prec = np.interp(rec_levels, recall, precision, right=0.0)
    conf = np.interp(rec_levels, recall, scores, right=0.0)
    return prec, conf


def average_precision(precision: np.ndarray) -> float:
    p = precision[int(round(100 * MIN_RECALL)) + 1:] - MIN_PRECISION
    p[p < 0] = 0.0
    return float(np.mean(p)) / (1.0 - MIN_PRECISION)


def _tp_errors(tp: np.ndarray, scores: np.ndarray, conf: np.ndarray,
               errs: Dict[str, np.ndarray]) -> Dict[str, float]:
    """The TP errors at the recall levels, averaged from MIN_RECALL up to the
    highest recall reached (nuScenes's calc_tp)."""
    nonzero = np.flatnonzero(conf)
    last = int(nonzero[-1]) if len(nonzero) else 0
    first = int(round(100 * MIN_RECALL)) + 1
    out = {}
    tp_scores = scores[tp]
    for k in TP_METRICS:
        if last < first or not len(errs[k]):
            out[k] = 1.0
            continue
        running = np.cumsum(errs[k]) / np.arange(1, len(errs[k]) + 1)
        # sample the running mean at the confidence of each recall level
        # (scores descend, np.interp needs ascending x)
        at = np.interp(conf[::-1], tp_scores[::-1], running[::-1])[::-1]
        out[k] = float(np.mean(at[first:last + 1]))
    return out


def detection_metrics(frames: Sequence[Dict], class_names: Optional[Sequence[str]] = None
                      ) -> Dict:
    labels = sorted({int(l) for fr in frames for l in fr["gt_labels"]})
    per_class = {}
    for label in labels:
        aps = {}
        for th in DIST_THRESHOLDS:
            npos, tp, scores, errs = _match_class(frames, label, th)
            prec, conf = _curves(npos, tp, scores)
            aps[th] = average_precision(prec)
            if th == TP_THRESHOLD:
                tp_err = _tp_errors(tp, scores, conf, errs)
        name = class_names[label] if class_names else str(label)
        per_class[name] = {"AP": float(np.mean(list(aps.values()))),
                           "AP@": {str(k): v for k, v in aps.items()}, **tp_err,
                           "num_gt": int(npos)}
    if not per_class:
        raise ValueError("no ground-truth boxes to evaluate")
    m = {"mAP": float(np.mean([c["AP"] for c in per_class.values()]))}
    for k in TP_METRICS:
        m["m" + k] = float(np.mean([c[k] for c in per_class.values()]))
    m["NDS"] = (4 * m["mAP"] + sum(1 - min(1.0, m["m" + k]) for k in TP_METRICS)) / 8
    m["per_class"] = per_class
    m["num_frames"] = len(frames)
    m["num_gt"] = int(sum(len(fr["gt_labels"]) for fr in frames))
    return m


def _clear_mot(frames: Sequence[Dict], threshold: float) -> Dict[str, float]:
    from scipy.optimize import linear_sum_assignment
    gt_total = fp = fn = ids = 0
    dist_sum, matches = 0.0, 0
    mapping: Dict[int, int] = {}
    for fr in frames:
        if fr.get("scene_start"):
            mapping = {}
        keep = fr["scores"] >= threshold
        pb, pl, pt = fr["boxes"][keep], fr["labels"][keep], fr["track_ids"][keep]
        gb, gl, gi = fr["gt_boxes"], fr["gt_labels"], fr["gt_track_ids"]
        gt_total += len(gl)
        d = np.hypot(gb[:, None, 0] - pb[None, :, 0], gb[:, None, 1] - pb[None, :, 1])
        ok = (d <= TRACK_DISTANCE) & (gl[:, None] == pl[None, :])
        pairs = []
        used_g, used_p = set(), set()
        # continuity: keep last frame's pairing where it still holds
        for g in range(len(gl)):
            t = mapping.get(int(gi[g]))
            if t is None:
                continue
            hit = np.flatnonzero((pt == t) & ok[g])
            if len(hit) and int(hit[0]) not in used_p:
                pairs.append((g, int(hit[0])))
                used_g.add(g)
                used_p.add(int(hit[0]))
        rest_g = [g for g in range(len(gl)) if g not in used_g]
        rest_p = [p for p in range(len(pl)) if p not in used_p]
        if rest_g and rest_p:
            sub = np.where(ok[np.ix_(rest_g, rest_p)], d[np.ix_(rest_g, rest_p)], 1e6)
            rows, cols = linear_sum_assignment(sub)
            for r, c in zip(rows, cols):
                if sub[r, c] < 1e6:
                    pairs.append((rest_g[r], rest_p[c]))
        for g, p in pairs:
            key, t = int(gi[g]), int(pt[p])
            if key in mapping and mapping[key] != t:
                ids += 1
            mapping[key] = t
            dist_sum += d[g, p]
        matches += len(pairs)
        fn += len(gl) - len(pairs)
        fp += len(pl) - len(pairs)
    mota = 1.0 - (fn + fp + ids) / max(gt_total, 1)
    return {"MOTA": mota, "MOTP": dist_sum / max(matches, 1), "IDS": ids, "FP": fp, "FN": fn,
            "TP": matches, "num_gt": gt_total, "threshold": float(threshold)}


def tracking_metrics(frames: Sequence[Dict],
                     thresholds: Sequence[float] = TRACK_THRESHOLDS) -> Dict:
    """CLEAR MOT at the best of `thresholds` (by MOTA; the lower threshold on a tie)."""
    best = None
    for th in thresholds:
        m = _clear_mot(frames, th)
        if best is None or m["MOTA"] > best["MOTA"] + 1e-12:
            best = m
    return best
