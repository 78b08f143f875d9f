"""A synthetic but realistic driving sequence for the model.

The six-camera rig mimics nuScenes (front, front-right, front-left, back,
back-left, back-right; 1600x900 sensors), with each image resized to the
preset's width and the top rows cropped to its height; the resize and the
crop are folded into the 4x4 lidar-to-image projection matrices the head
consumes. The ego car drives a gentle curve at 2 Hz; a scene cut (a jump in
time above the 2 s history limit, to another place) tests the reset. Images
are rendered: a road/sky background with noise and every object's projected
3D box filled in its colour, far to near.
"""
import math
from typing import Dict, List

import numpy as np

from .config import Sparse4DConfig

# name, yaw (deg, CCW from forward), position in the lidar frame (m), fx, cx, cy (1600x900)
CAMERAS = (
    ("CAM_FRONT", 0.0, (0.76, 0.02, -0.33), 1266.4, 816.3, 491.5),
    ("CAM_FRONT_RIGHT", -55.0, (0.61, -0.49, -0.34), 1260.8, 807.2, 495.3),
    ("CAM_FRONT_LEFT", 55.0, (0.58, 0.49, -0.33), 1272.6, 826.6, 479.8),
    ("CAM_BACK", 180.0, (-0.91, 0.00, -0.27), 809.2, 829.2, 481.8),
    ("CAM_BACK_LEFT", 110.0, (0.10, 0.48, -0.28), 1256.7, 817.8, 451.9),
    ("CAM_BACK_RIGHT", -110.0, (0.09, -0.48, -0.25), 1259.5, 807.3, 501.2),
)
SENSOR_WH = (1600, 900)


def rotz(yaw: float) -> np.ndarray:
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]], dtype=np.float64)


def camera_rig(cfg: Sparse4DConfig) -> np.ndarray:
    """[N, 4, 4] float64 lidar-to-image matrices with resize and crop folded in."""
    h, w = cfg.image_hw
    scale = w / SENSOR_WH[0]
    crop_top = round(SENSOR_WH[1] * scale) - h
    if crop_top < 0:
        raise ValueError(f"image_hw {cfg.image_hw} is taller than the resized sensor")
    aug = np.diag([scale, scale, 1.0, 1.0])
    aug[1, 2] = -crop_top  # a pixel shift: it multiplies depth in homogeneous image coords
    mats = []
    for i in range(cfg.num_cams):
        _, yaw_deg, pos, f, cx, cy = CAMERAS[i % len(CAMERAS)]
        yaw = math.radians(yaw_deg)
        fwd = np.array([math.cos(yaw), math.sin(yaw), 0.0])
        right = np.array([math.sin(yaw), -math.cos(yaw), 0.0])
        down = np.array([0.0, 0.0, -1.0])
        r_cam2lidar = np.stack([right, down, fwd], axis=1)
        lidar2cam = np.eye(4)
        lidar2cam[:3, :3] = r_cam2lidar.T
        lidar2cam[:3, 3] = -r_cam2lidar.T @ np.asarray(pos)
        k = np.eye(4)
        k[0, 0], k[1, 1], k[0, 2], k[1, 2] = f, f, cx, cy
        mats.append(aug @ k @ lidar2cam)
    return np.stack(mats)


def _pose(x: float, y: float, yaw: float) -> np.ndarray:
    p = np.eye(4)
    p[:3, :3] = rotz(yaw)
    p[:3, 3] = (x, y, 1.84)
    return p


def _objects(rng: np.random.Generator, ego: np.ndarray, count: int) -> np.ndarray:
    """[count, 9]: global x, y, z, w, l, h, yaw, vx, vy around an ego pose."""
    r = rng.uniform(4.0, 50.0, count)
    phi = rng.uniform(-math.pi, math.pi, count)
    local = np.stack([r * np.cos(phi), r * np.sin(phi), np.full(count, -1.0), np.ones(count)], 1)
    world = (ego @ local.T).T
    kinds = np.array([[1.9, 4.6, 1.7], [0.7, 0.7, 1.8], [2.9, 11.0, 3.5], [0.6, 1.9, 1.4]])
    size = kinds[rng.integers(0, 4, count)] * rng.uniform(0.85, 1.15, (count, 3))
    yaw = rng.uniform(-math.pi, math.pi, count)
    speed = rng.choice([0.0, 0.0, 1.2, 8.0], count) * rng.uniform(0.5, 1.5, count)
    vel = np.stack([speed * np.cos(yaw), speed * np.sin(yaw)], 1)
    z = world[:, 2] - 1.84 + size[:, 2] / 2
    return np.concatenate([world[:, :2], z[:, None], size, yaw[:, None], vel], 1)


def _box_corners(obj: np.ndarray) -> np.ndarray:
    w, l, h = obj[3], obj[4], obj[5]
    # x along the box length (heading), y across
    xs, ys, zs = np.meshgrid([-l / 2, l / 2], [-w / 2, w / 2], [-h / 2, h / 2], indexing="ij")
    pts = np.stack([xs.ravel(), ys.ravel(), zs.ravel()], 1)
    return pts @ rotz(obj[6]).T + obj[:3]


def render(cfg: Sparse4DConfig, proj: np.ndarray, ego: np.ndarray, objects: np.ndarray,
           rng: np.random.Generator) -> np.ndarray:
    """[N, 3, H, W] uint8 images."""
    h, w = cfg.image_hw
    imgs = np.empty((cfg.num_cams, 3, h, w), dtype=np.float32)
    rows = np.linspace(0.0, 1.0, h, dtype=np.float32)[:, None]
    sky = np.array([150, 180, 210], np.float32)[:, None, None]
    road = np.array([90, 90, 95], np.float32)[:, None, None]
    horizon = 0.35
    blend = np.clip((rows - horizon) * 8 + 0.5, 0, 1)[None]
    base = sky * (1 - blend) + road * blend
    global2lidar = np.linalg.inv(ego)
    corners = [_box_corners(o) for o in objects]
    colours = rng.uniform(30, 255, (len(objects), 3)).astype(np.float32)
    for n in range(cfg.num_cams):
        img = np.broadcast_to(base, (3, h, w)).copy()
        img += rng.normal(0, 6, img.shape).astype(np.float32)
        boxes = []
        for c, col in zip(corners, colours):
            homo = np.concatenate([c, np.ones((8, 1))], 1)
            cam = (proj[n] @ global2lidar @ homo.T).T
            if np.any(cam[:, 2] < 0.5):
                continue
            uv = cam[:, :2] / cam[:, 2:3]
            u0, v0 = np.floor(uv.min(0)).astype(int)
            u1, v1 = np.ceil(uv.max(0)).astype(int)
            if u1 < 0 or v1 < 0 or u0 >= w or v0 >= h:
                continue
            boxes.append((cam[:, 2].mean(), max(u0, 0), max(v0, 0), min(u1, w), min(v1, h), col))
        for _, u0, v0, u1, v1, col in sorted(boxes, key=lambda b: -b[0]):
            img[:, v0:v1, u0:u1] = col[:, None, None]
            # a darker outline, so the boxes have edges at every scale
            img[:, v0:v1, u0:min(u0 + 1, u1)] *= 0.5
            img[:, v0:min(v0 + 1, v1), u0:u1] *= 0.5
        imgs[n] = img
    return np.clip(imgs, 0, 255).astype(np.uint8)


def normalise(cfg: Sparse4DConfig, images: np.ndarray) -> np.ndarray:
    mean = np.asarray(cfg.mean, np.float32)[:, None, None]
    std = np.asarray(cfg.std, np.float32)[:, None, None]
    return (images.astype(np.float32) - mean) / std


def make_sequence(cfg: Sparse4DConfig, num_frames: int = 6, cut_at: int = 3,
                  gap: float = 3.0, seed: int = 0, num_objects: int = 40) -> List[Dict]:
    """Frames of a drive with a scene cut before frame `cut_at` (time jumps by
    `gap` seconds, the ego car is elsewhere, new objects). Each frame holds the
    head/backbone inputs with batch 1: images [1,N,3,H,W] float32 (normalised),
    projection [1,N,4,4], image_wh [1,N,2], timestamp [1] (seconds since the
    first frame), ego_pose [1,4,4] (lidar to global), plus raw uint8 images,
    the objects (global) and scene_start (bool)."""
    rng = np.random.default_rng(seed)
    proj = camera_rig(cfg)
    h, w = cfg.image_hw
    wh = np.tile(np.array([w, h], np.float32), (cfg.num_cams, 1))
    frames = []
    t = 0.0
    x, y, yaw = 412.5, 1183.0, 0.3
    speed, yaw_rate = 8.0, 0.05
    objects = _objects(rng, _pose(x, y, yaw), num_objects)
    for i in range(num_frames):
        start = i == 0
        if i > 0:
            dt = gap if i == cut_at else 0.5
            t += dt
            if i == cut_at:
                x, y, yaw = x + 350.0, y - 220.0, yaw + 1.9
                objects = _objects(rng, _pose(x, y, yaw), num_objects)
                start = True
            else:
                x += speed * dt * math.cos(yaw)
                y += speed * dt * math.sin(yaw)
                yaw += yaw_rate * dt
                objects = objects.copy()
                objects[:, 0:2] += objects[:, 7:9] * dt
        ego = _pose(x, y, yaw)
        raw = render(cfg, proj, ego, objects, rng)
        frames.append({
            "images": normalise(cfg, raw)[None],
            "projection": proj.astype(np.float32)[None],
            "image_wh": wh[None],
            "timestamp": np.array([t], np.float32),
            "ego_pose": ego.astype(np.float32)[None],
            "raw_images": raw, "objects": objects.copy(), "scene_start": start,
        })
    return frames
