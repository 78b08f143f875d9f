"""The synthetic driving dataset: seeded sequences, a train/val split by seed.

Sequence i of a split is the scene made from seed SPLIT_BASE[split] + i
(scene.make_scene), SEQUENCE_LENGTH frames at 2 Hz. The splits never share a
seed, so validation scenes (places, objects, lighting) are never trained on.
Each frame carries the model inputs and the ground truth in the lidar frame
(scene.ground_truth): boxes (x, y, z, w, l, h, yaw, vx, vy), nuScenes class
labels and track ids.
"""
from typing import Dict, Iterator, List, Tuple

import numpy as np
import torch

from .config import Sparse4DConfig
from .scene import FRAME_INTERVAL, Renderer, frame_inputs, make_scene

SPLIT_BASE = {"train": 0, "val": 1_000_000}
SEQUENCE_LENGTH = 10
DEFAULT_SEQUENCES = {"train": 240, "val": 12}
SCENE_GAP = 3.0  # seconds between two sequences laid end to end (above the 2 s history)


def sequence_seed(split: str, index: int) -> int:
    if split not in SPLIT_BASE:
        raise ValueError(f"split '{split}' unknown (expected one of {sorted(SPLIT_BASE)})")
    if not 0 <= index < 1_000_000:
        raise ValueError(f"sequence index {index} out of range")
    return SPLIT_BASE[split] + index


def sequence_frames(cfg: Sparse4DConfig, split: str, index: int,
                    length: int = SEQUENCE_LENGTH, renderer: Renderer = None,
                    t0: float = 0.0) -> List[Dict]:
    """The first `length` frames of one sequence (scene.frame_inputs dicts,
    batch 1), with timestamps from t0 and scene_start on the first."""
    renderer = renderer or Renderer(cfg)
    seed = sequence_seed(split, index)
    scene = make_scene(seed, max(length, SEQUENCE_LENGTH))
    rng = np.random.default_rng([seed, 7])  # sensor noise and camera exposure
    frames = []
    for k in range(length):
        fr = frame_inputs(cfg, renderer, scene, k, t0 + k * FRAME_INTERVAL, rng)
        fr["scene_start"] = k == 0
        fr["sequence"] = index
        frames.append(fr)
    return frames


def split_frames(cfg: Sparse4DConfig, split: str, num_frames: int,
                 scene_length: int = SEQUENCE_LENGTH) -> Iterator[Dict]:
    """The first `num_frames` frames of a split with sequences laid end to
    end, `scene_length` frames of each (sequence 0, 1, ...), time running on
    from the first frame with a SCENE_GAP between sequences."""
    if num_frames < 1 or not 1 <= scene_length <= SEQUENCE_LENGTH * 100:
        raise ValueError(f"need num_frames >= 1 and scene_length >= 1 (got {num_frames}, "
                         f"{scene_length})")
    renderer = Renderer(cfg)
    t, done, index = 0.0, 0, 0
    while done < num_frames:
        n = min(scene_length, num_frames - done)
        for fr in sequence_frames(cfg, split, index, scene_length, renderer, t)[:n]:
            yield fr
        t += (scene_length - 1) * FRAME_INTERVAL + SCENE_GAP
        done += n
        index += 1


DENSE_LEVELS = 2  # FPN levels (strides 4, 8) with dense targets for training


def dense_targets(cfg: Sparse4DConfig, dense: Dict[str, np.ndarray]) -> List[Tuple]:
    """Per FPN level of DENSE_LEVELS: the renderer's depth (float16) and
    label (uint8) at the centre of each feature cell, [N, h, w], and the
    centre of the object seen there (float16 [N, h, w, 3])."""
    h, w = cfg.image_hw
    out = []
    for level, (hl, wl) in enumerate(cfg.level_shapes[:DENSE_LEVELS]):
        stride = 2 ** (level + 2)
        rows = np.minimum(np.arange(hl) * stride + stride // 2, h - 1)
        cols = np.minimum(np.arange(wl) * stride + stride // 2, w - 1)
        out.append((dense["depth"][:, rows][:, :, cols].astype(np.float16),
                    dense["label"][:, rows][:, :, cols],
                    dense["centre"][:, rows][:, :, cols].astype(np.float16)))
    return out


class TrainSet:
    """Pre-rendered sequences of a split (uint8 images, poses, ground
    truth, dense targets), served as batches of the same frame of B
    sequences."""

    def __init__(self, cfg: Sparse4DConfig, split: str, sequences, length: int = SEQUENCE_LENGTH,
                 log=None):
        """`sequences`: how many (the first ones) or which (a list of indices)."""
        import time
        self.cfg, self.length = cfg, length
        renderer = Renderer(cfg)
        self.images, self.poses, self.gts, self.dense = [], [], [], []
        t0 = time.time()
        indices = list(range(sequences)) if isinstance(sequences, int) else list(sequences)
        num_sequences = len(indices)
        for n, i in enumerate(indices):
            frames = sequence_frames(cfg, split, i, length, renderer)
            self.images.append(np.stack([f["raw_images"] for f in frames]))
            self.poses.append(np.stack([f["ego_pose"][0] for f in frames]))
            self.gts.append([f["gt"] for f in frames])
            self.dense.append([dense_targets(cfg, f["dense"]) for f in frames])
            if log and (n + 1) % 20 == 0:
                log(f"rendered {n + 1}/{num_sequences} {split} sequences "
                    f"({time.time() - t0:.0f} s)")
        self.projection = renderer.proj.astype(np.float32)
        h, w = cfg.image_hw
        self.image_wh = np.tile(np.array([w, h], np.float32), (cfg.num_cams, 1))

    def __len__(self) -> int:
        return len(self.images)

    def batch(self, sequences: List[int], frame: int, device="cpu") -> Dict:
        """Model inputs of `frame` of each sequence (uint8 images; normalise
        on the device) and the ground truth as tensors."""
        b = len(sequences)
        return {
            "images": torch.from_numpy(np.stack([self.images[s][frame] for s in sequences]))
            .to(device),
            "projection": torch.from_numpy(self.projection)[None].repeat(b, 1, 1, 1).to(device),
            "image_wh": torch.from_numpy(self.image_wh)[None].repeat(b, 1, 1).to(device),
            "timestamp": torch.full((b,), frame * FRAME_INTERVAL, device=device),
            "ego_pose": torch.from_numpy(np.stack([self.poses[s][frame] for s in sequences]))
            .to(device),
            "gt": [{k: torch.from_numpy(self.gts[s][frame][k]) for k in ("boxes", "labels")}
                   for s in sequences],
            "dense": [tuple(torch.from_numpy(np.stack([self.dense[s][frame][lv][k]
                                                        for s in sequences])).to(device)
                            for k in range(3)) for lv in range(DENSE_LEVELS)],
        }

    def all_boxes(self) -> np.ndarray:
        return np.concatenate([g["boxes"] for seq in self.gts for g in seq])


def normalise_images(cfg: Sparse4DConfig, images: torch.Tensor) -> torch.Tensor:
    """uint8 [B, N, 3, H, W] -> float32 (pixel - mean) / std."""
    mean = torch.tensor(cfg.mean, device=images.device).view(1, 1, 3, 1, 1)
    std = torch.tensor(cfg.std, device=images.device).view(1, 1, 3, 1, 1)
    return (images.float() - mean) / std


def kmeans_anchors(boxes: np.ndarray, num: int, seed: int = 0, iters: int = 30) -> np.ndarray:
    """[num, 11] anchors from ground-truth boxes [M, 9]: centres by k-means
    of the box centres (as upstream, which clusters the training set), the
    mean log size, yaw 0, no velocity."""
    if len(boxes) < num:
        raise ValueError(f"{len(boxes)} boxes cannot seed {num} anchors")
    rng = np.random.default_rng(seed)
    pts = boxes[:, :3].astype(np.float64)
    centres = pts[rng.choice(len(pts), num, replace=False)]
    for _ in range(iters):
        d = ((pts[:, None, :2] - centres[None, :, :2]) ** 2).sum(-1)
        assign = d.argmin(1)
        for k in range(num):
            members = pts[assign == k]
            centres[k] = members.mean(0) if len(members) else pts[rng.integers(len(pts))]
    log_size = np.log(boxes[:, 3:6]).mean(0)
    out = np.zeros((num, 11), np.float32)
    out[:, 0:3] = centres
    out[:, 3:6] = log_size
    out[:, 7] = 1.0  # cos yaw
    return out
