"""Agreement of a reduced-precision run with the float32 reference, frame by
frame over a golden sequence with the state carried: the measures of the
demo's --fp16 check (examples/demo), in NumPy, for runs made in Python
(PyTorch under autocast, torch.compile).

Per frame:
  * rel_l2: the relative L2 error of each raw head output (classification,
    prediction, quality), instance rows matched by instance id (cached
    instances keep their track id, the others get fresh ids in instance
    order: the instance bank's rule), like the demo's carried-state check;
  * matched: how many of the reference's top-k decoded boxes have a box of
    the run's top k with the same class and track id and a centre within
    0.1 m, rank ignored, each box used once (demo_match_boxes);
  * matched_ids_mapped: the same with the track ids compared through a map
    built over the sequence (demo_match_boxes_mapped): ids are labels, and a
    run that gives fresh ids in another order tracks the same objects under
    other numbers; the map pairs the run's ids with the reference's one to
    one, so an id switch still counts against it.

    run = run_sequence(step, golden_dir, cfg, initial_state)
                                          # [{frame, rel_l2: {output: e}, matched, boxes}]
    summary(run) -> {"rel_l2": worst, "boxes_matched": smallest fraction, ...}
"""
import json
import os
from typing import Callable, Dict, List, Tuple

import numpy as np

RAW_OUTPUTS = ("classification", "prediction", "quality")


def rel_l2(got: np.ndarray, want: np.ndarray) -> float:
    g = np.asarray(got, np.float64).ravel()
    w = np.asarray(want, np.float64).ravel()
    if g.shape != w.shape:
        raise ValueError(f"shapes differ: {got.shape} and {want.shape}")
    num = float(np.linalg.norm(g - w))
    den = float(np.linalg.norm(w))
    return num / den if den > 0 else num


def instance_ids(classification: np.ndarray, bank_track_id: np.ndarray, bank_valid: float,
                 bank_next_id: int, dt: float, max_time_interval: float,
                 track_threshold: float) -> np.ndarray:
    """The track id of every instance [A] (the head's rule, _finish)."""
    cls = np.asarray(classification, np.float64).reshape(-1, classification.shape[-1])
    a = cls.shape[0]
    cached = np.asarray(bank_track_id).ravel()
    t = cached.size
    ids = np.full(a, -1, np.int64)
    if bank_valid > 0.5 and abs(dt) <= max_time_interval:
        ids[:t] = cached
    confidence = 1.0 / (1.0 + np.exp(-cls.max(axis=1)))
    fresh = (ids < 0) & (confidence >= track_threshold)
    ids[fresh] = int(bank_next_id) + np.arange(int(fresh.sum()))
    return ids


def align_rows(got_ids: np.ndarray, want_ids: np.ndarray) -> np.ndarray:
    """perm[i]: the row of `got` holding the instance of reference row i;
    rows without a partner take the unused rows in order (demo_align_rows)."""
    n = len(want_ids)
    where = {}
    for j, g in enumerate(got_ids):
        if g >= 0:
            where.setdefault(int(g), []).append(j)
    used = np.zeros(n, bool)
    perm = np.full(n, -1, np.int64)
    for i, w in enumerate(want_ids):
        if w < 0:
            continue
        for j in where.get(int(w), ()):
            if not used[j]:
                perm[i] = j
                used[j] = True
                break
    free = iter(np.flatnonzero(~used))
    for i in range(n):
        if perm[i] < 0:
            perm[i] = next(free)
    return perm


def match_boxes(got: Dict[str, np.ndarray], want: Dict[str, np.ndarray], k: int,
                metres: float = 0.1) -> int:
    """Reference boxes (of the first k) with a partner among the run's first
    k: same label and track id, centre (x, y, z) within `metres`."""
    gb = np.asarray(got["boxes"], np.float64).reshape(-1, got["boxes"].shape[-1])[:k, :3]
    wb = np.asarray(want["boxes"], np.float64).reshape(-1, want["boxes"].shape[-1])[:k, :3]
    gl, wl = np.ravel(got["labels"])[:k], np.ravel(want["labels"])[:k]
    gt, wt = np.ravel(got["track_ids"])[:k], np.ravel(want["track_ids"])[:k]
    used = np.zeros(len(gb), bool)
    matched = 0
    for i in range(len(wb)):
        cand = np.flatnonzero(~used & (gl == wl[i]) & (gt == wt[i]))
        if cand.size == 0:
            continue
        d = np.linalg.norm(gb[cand] - wb[i], axis=1)
        ok = d <= metres  # NaN never matches
        if ok.any():
            used[cand[np.flatnonzero(ok)[np.argmin(d[ok])]]] = True
            matched += 1
    return matched


def ids_agree(ids: Dict[int, int], taken: set, got: int, want: int) -> bool:
    if got < 0 or want < 0:
        return got == want
    if got in ids:
        return ids[got] == want
    return want not in taken


def match_boxes_mapped(got: Dict[str, np.ndarray], want: Dict[str, np.ndarray], k: int,
                       ids: Dict[int, int], metres: float = 0.1) -> int:
    """match_boxes with track ids compared through `ids` (run id -> reference
    id, updated here): ids agree when paired, or when neither is paired yet
    (they are paired then); negative ids agree only with themselves."""
    gb = np.asarray(got["boxes"], np.float64).reshape(-1, got["boxes"].shape[-1])[:k, :3]
    wb = np.asarray(want["boxes"], np.float64).reshape(-1, want["boxes"].shape[-1])[:k, :3]
    gl, wl = np.ravel(got["labels"])[:k], np.ravel(want["labels"])[:k]
    gt, wt = np.ravel(got["track_ids"])[:k], np.ravel(want["track_ids"])[:k]
    taken = set(ids.values())
    used = np.zeros(len(gb), bool)
    matched = 0
    for i in range(len(wb)):
        best, best_d = -1, 0.0
        for j in range(len(gb)):
            if used[j] or gl[j] != wl[i] or not ids_agree(ids, taken, int(gt[j]), int(wt[i])):
                continue
            d = float(np.linalg.norm(gb[j] - wb[i]))
            if d <= metres and (best < 0 or d < best_d):  # NaN never matches
                best, best_d = j, d
        if best < 0:
            continue
        g, w = int(gt[best]), int(wt[i])
        if g >= 0 and w >= 0 and g not in ids:
            ids[g] = w
            taken.add(w)
        used[best] = True
        matched += 1
    return matched


def load_golden(golden_dir: str) -> Tuple[Dict, List[Dict[str, Dict[str, np.ndarray]]]]:
    """The manifest and, per frame, {"backbone_in", "head_in", "head_out"}: name -> array."""
    with open(os.path.join(golden_dir, "manifest.json")) as f:
        man = json.load(f)
    frames = [{"backbone_in": {}, "head_in": {}, "head_out": {}}
              for _ in range(man["num_frames"])]
    for r in man["tensors"]:
        key = {("backbone", "input"): "backbone_in", ("head", "input"): "head_in",
               ("head", "output"): "head_out"}.get((r["graph"], r["io"]))
        if key:
            frames[r["frame"]][key][r["name"]] = np.load(os.path.join(golden_dir, r["file"]))
    return man, frames


def frame_agreement(out: Dict[str, np.ndarray], state_in: Dict[str, np.ndarray],
                    ref_out: Dict[str, np.ndarray], ref_in: Dict[str, np.ndarray], cfg,
                    topk: int = 100, metres: float = 0.1,
                    id_map: Dict[int, int] = None) -> Dict:
    """One frame: `out`/`state_in` the run's head outputs and the bank it was
    fed (bank_* names, timestamp), `ref_*` the reference's; `id_map` the
    sequence's map of track ids (updated; a fresh one when None)."""
    def ids(o, s):
        return instance_ids(o["classification"], s["bank_track_id"], float(s["bank_valid"][0]),
                            int(s["bank_next_id"][0]),
                            float(s["timestamp"][0]) - float(s["bank_timestamp"][0]),
                            cfg.max_time_interval, cfg.track_threshold)
    perm = align_rows(ids(out, state_in), ids(ref_out, ref_in))
    errs = {}
    for name in RAW_OUTPUTS:
        got = np.asarray(out[name])
        errs[name] = rel_l2(got[:, perm] if got.ndim >= 2 else got, ref_out[name])
    k = min(topk, int(np.asarray(ref_out["labels"]).size))
    mapped = match_boxes_mapped(out, ref_out, k, {} if id_map is None else id_map, metres)
    return {"rel_l2": errs, "matched": match_boxes(out, ref_out, k, metres),
            "matched_ids_mapped": mapped, "boxes": k}


def run_sequence(step: Callable, golden_dir: str, cfg, initial_state: Dict[str, np.ndarray],
                 topk: int = 100, metres: float = 0.1) -> List[Dict]:
    """Runs `step(images, frame_inputs, state) -> (head outputs, next state)`
    (NumPy dicts, the state by bank_* input names) over the golden frames
    with its own state carried, and measures each frame against the golden."""
    man, frames = load_golden(golden_dir)
    state = dict(initial_state)
    res = []
    id_map = {}
    for i, fr in enumerate(frames):
        frame_in = {k: fr["head_in"][k] for k in ("projection", "image_wh", "timestamp",
                                                  "ego_pose")}
        out, nxt = step(fr["backbone_in"]["images"], frame_in, state)
        fed = dict(state, timestamp=frame_in["timestamp"])
        a = frame_agreement(out, fed, fr["head_out"], fr["head_in"], cfg, topk, metres, id_map)
        a["frame"] = i
        res.append(a)
        state = nxt
    return res


def summary(frames: List[Dict]) -> Dict:
    """The worst relative L2 over frames and outputs, and the smallest
    fraction of boxes matched on a frame."""
    worst, where = 0.0, ""
    for f in frames:
        for name, e in f["rel_l2"].items():
            if not e <= worst:  # NaN is the worst
                worst, where = e, f"{name} frame {f['frame']}"
    fr = [f["matched"] / f["boxes"] for f in frames if f["boxes"]]
    fm = [f["matched_ids_mapped"] / f["boxes"] for f in frames
          if f["boxes"] and f.get("matched_ids_mapped") is not None]
    return {"rel_l2": worst, "rel_l2_where": where,
            "boxes_matched": min(fr) if fr else float("nan"),
            "boxes_matched_ids_mapped": min(fm) if fm else float("nan"), "frames": len(frames)}
