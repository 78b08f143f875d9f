"""Detection and tracking metrics of Sparse4D on the validation split.

    python3 -m s4d.sparse4d.evaluate [--checkpoint FILE] [--preset tiny] [--sequences 12]
                                     [--device cpu] [--json FILE]
    python3 -m s4d.sparse4d.evaluate --golden DIR [--engine DIR] [--tolerance 0.001]

The first form runs PyTorch (eager, the instance bank carried from frame to
frame) over the validation sequences and prints the metrics (metrics.py):
mAP over the 0.5/1/2/4 m centre-distance thresholds, mATE, mASE, mAOE, mAVE,
the NDS-like score, AP per class, and MOTA with ID switches. The default
checkpoint is the committed one of the preset.

The second form reads a golden sequence (s4d.sparse4d.golden: PyTorch's
decoded boxes and the ground truth of every frame) and, with --engine, the
per-frame JSON the demo program wrote from the C engine's boxes, and prints
both side by side. With --tolerance, it exits 1 when the engine's mAP or NDS
differs from PyTorch's by more than that.

Both sides count the boxes within EVAL_RANGE metres of the ego car (ground
truth: visible objects, scene.ground_truth).
"""
import argparse
import json
import os
import sys
from typing import Dict, List, Optional

import numpy as np
import torch

from .dataset import DEFAULT_SEQUENCES, SEQUENCE_LENGTH, split_frames
from .metrics import detection_metrics, filter_range, tracking_metrics
from .scene import CLASS_NAMES

EVAL_RANGE = 30.0


def score_frames(frames: List[Dict]) -> Dict:
    """Metrics of frames holding both sides (metrics.py's frame dicts)."""
    frames = [filter_range(f, EVAL_RANGE) for f in frames]
    m = detection_metrics(frames, CLASS_NAMES)
    m["tracking"] = tracking_metrics(frames)
    m["eval_range"] = EVAL_RANGE
    return m


def gt_fields(gt: Dict) -> Dict:
    return {"gt_boxes": np.asarray(gt["boxes"], np.float64).reshape(-1, 9),
            "gt_labels": np.asarray(gt["labels"], np.int64),
            "gt_track_ids": np.asarray(gt["track_ids"], np.int64)}


def run_model(model, num_sequences: int, scene_length: int = SEQUENCE_LENGTH,
              device="cpu") -> List[Dict]:
    """Eager PyTorch over the first sequences of the validation split, the
    bank carried (the 3 s gap between sequences resets it, as in the
    golden sequences); one metrics frame per frame."""
    cfg = model.cfg
    model = model.eval()
    state = model.initial_state()
    state = type(state)(*[t.to(device) for t in state])
    out_frames = []
    for fr in split_frames(cfg, "val", num_sequences * scene_length, scene_length):
        ins = [torch.from_numpy(fr[k]).to(device) for k in
               ("images", "projection", "image_wh", "timestamp", "ego_pose")]
        with torch.no_grad():
            out = model(*ins, state)
        state = out["state"]
        out_frames.append({
            **gt_fields(fr["gt"]), "scene_start": bool(fr["scene_start"]),
            "boxes": out["boxes"][0, :, :9].double().cpu().numpy(),
            "scores": out["scores"][0].double().cpu().numpy(),
            "labels": out["labels"][0].cpu().numpy(),
            "track_ids": out["track_ids"][0].cpu().numpy()})
    return out_frames


def evaluate_model(model, num_sequences: int = DEFAULT_SEQUENCES["val"], device="cpu") -> Dict:
    return score_frames(run_model(model, num_sequences, device=device))


# ------------------------------------------------------------ golden + engine JSON

def golden_frames(golden_dir: str) -> List[Dict]:
    """PyTorch's decoded boxes and the ground truth of every golden frame."""
    with open(os.path.join(golden_dir, "manifest.json")) as f:
        manifest = json.load(f)
    recs = {}
    for r in manifest["tensors"]:
        recs[(r["frame"], r["graph"], r["io"], r["name"])] = r["file"]

    def load(frame, graph, io, name):
        file = recs.get((frame, graph, io, name))
        if file is None:
            raise ValueError(f"{golden_dir}: frame {frame} has no {graph} {io} '{name}' "
                             "(a golden sequence written with the ground truth is needed)")
        return np.load(os.path.join(golden_dir, file))

    frames = []
    for info in manifest["frames"]:
        i = info["frame"]
        truth = load(i, "scene", "truth", "gt_boxes").reshape(-1, 11)
        frames.append({
            "gt_boxes": truth[:, :9].astype(np.float64), "gt_labels": truth[:, 9].astype(np.int64),
            "gt_track_ids": truth[:, 10].astype(np.int64),
            "scene_start": bool(info["scene_start"]),
            "boxes": load(i, "head", "output", "boxes")[0, :, :9].astype(np.float64),
            "scores": load(i, "head", "output", "scores")[0].astype(np.float64),
            "labels": load(i, "head", "output", "labels")[0].astype(np.int64),
            "track_ids": load(i, "head", "output", "track_ids")[0].astype(np.int64)})
    return frames


def engine_frames(golden: List[Dict], json_dir: str) -> List[Dict]:
    """The golden frames' ground truth with the engine's boxes (frame_NNN.json)."""
    out = []
    for i, g in enumerate(golden):
        path = os.path.join(json_dir, "frame_%03d.json" % i)
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from e
        b = d["boxes"]
        fields = ("x", "y", "z", "w", "l", "h", "yaw", "vx", "vy")
        out.append({**{k: g[k] for k in ("gt_boxes", "gt_labels", "gt_track_ids", "scene_start")},
                    "boxes": np.array([[x[k] for k in fields] for x in b],
                                      np.float64).reshape(-1, 9),
                    "scores": np.array([x["score"] for x in b], np.float64),
                    "labels": np.array([x["class"] for x in b], np.int64),
                    "track_ids": np.array([x["track_id"] for x in b], np.int64)})
    return out


# ------------------------------------------------------------------ reporting

SUMMARY_KEYS = ("mAP", "NDS", "mATE", "mASE", "mAOE", "mAVE")


def format_table(results: Dict[str, Dict]) -> str:
    """Metrics of one or more runs as columns."""
    names = list(results)
    first = results[names[0]]
    lines = [f"{'metric':<24}" + "".join(f"{n:>12}" for n in names)]

    def row(label, get, fmt="{:.4f}"):
        cells = []
        for n in names:
            try:
                cells.append(fmt.format(get(results[n])))
            except (KeyError, TypeError):
                cells.append("-")
        lines.append(f"{label:<24}" + "".join(f"{c:>12}" for c in cells))

    for k in SUMMARY_KEYS:
        row(k, lambda m, k=k: m[k])
    for cls in first["per_class"]:
        row(f"AP {cls}", lambda m, c=cls: m["per_class"][c]["AP"])
    for th in ("0.5", "1.0", "2.0", "4.0"):
        row(f"mAP @ {th} m", lambda m, t=th: float(np.mean(
            [c["AP@"][t] for c in m["per_class"].values()])))
    row("MOTA", lambda m: m["tracking"]["MOTA"])
    row("MOTP (m)", lambda m: m["tracking"]["MOTP"])
    row("ID switches", lambda m: m["tracking"]["IDS"], "{:d}")
    row("track score threshold", lambda m: m["tracking"]["threshold"], "{:.2f}")
    row("frames", lambda m: m["num_frames"], "{:d}")
    row("ground-truth boxes", lambda m: m["num_gt"], "{:d}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m s4d.sparse4d.evaluate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="s4d checkpoint (default: the committed one of "
                    "--preset)")
    ap.add_argument("--preset", default="tiny", choices=["tiny", "v3"])
    ap.add_argument("--sequences", type=int, default=DEFAULT_SEQUENCES["val"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--aggregation", default="auto", choices=["auto", "ext", "reference"])
    ap.add_argument("--golden", help="a golden sequence folder (with ground truth)")
    ap.add_argument("--engine", help="with --golden: the demo's per-frame JSON folder")
    ap.add_argument("--tolerance", type=float, default=None,
                    help="with --engine: fail when mAP or NDS differ by more")
    ap.add_argument("--json", help="also write the metrics here")
    args = ap.parse_args(argv)
    try:
        if args.golden:
            gold = golden_frames(args.golden)
            results = {"PyTorch": score_frames(gold)}
            if args.engine:
                results["engine"] = score_frames(engine_frames(gold, args.engine))
        else:
            from .checkpoint import default_checkpoint, load_model
            agg = args.aggregation
            if agg == "auto":
                from s4d import ops
                agg = "ext" if ops.extension_available() else "reference"
            path = args.checkpoint or default_checkpoint(args.preset)
            model = load_model(path, aggregation=agg).to(args.device)
            if args.sequences < 1:
                raise ValueError("--sequences must be at least 1")
            results = {"PyTorch": evaluate_model(model, args.sequences, args.device)}
    except (ValueError, RuntimeError, OSError, KeyError) as e:
        print(f"evaluate: {e}", file=sys.stderr)
        return 1
    print(format_table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=float)
    if args.engine and args.tolerance is not None:
        a, b = results["PyTorch"], results["engine"]
        worst = max(abs(a[k] - b[k]) for k in ("mAP", "NDS"))
        if not worst <= args.tolerance:
            print(f"evaluate: the engine's mAP/NDS differ from PyTorch's by {worst:.2e} "
                  f"(> {args.tolerance:g})", file=sys.stderr)
            return 1
        print(f"evaluate: engine and PyTorch agree (mAP/NDS within {worst:.1e}, "
              f"tolerance {args.tolerance:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
