"""Synthetic driving scenes: the camera rig, a world of moving objects and a renderer.

The six-camera rig mimics nuScenes (front, front-right, front-left, back,
back-left, back-right; 1600x900 sensors), with each image resized to the
preset's width and the top rows cropped to its height; the resize and the
crop are folded into the 4x4 lidar-to-image projection matrices the head
consumes.

A scene (`Scene`) is a short drive at 2 Hz: the ego car follows a curve
over a flat textured ground (global z = 0, the lidar 1.84 m above it) among
objects of five nuScenes classes (car, truck, bus, bicycle, pedestrian), each
with its own size, shape (parts: body, cabin, windows, wheels, rider, head),
colour family and constant velocity, plus unlabelled clutter (poles,
buildings). Lighting (sun, exposure, tint) varies per scene, exposure per
camera and sensor noise per frame, so a detector has to use shape, size and
context, not one colour. The renderer draws flat-shaded faces far to near
(occlusion by depth) at twice the resolution and averages 2x2 blocks (edges
at sub-pixel positions), and counts the pixels of each object that stay
visible, which decides whether the object counts as ground truth.

Box convention (the model's anchor layout): (x, y, z, w, l, h, yaw) in the
lidar frame; the box's local x axis, at angle `yaw`, spans the width w, its
local y axis the length l, so an object's heading (the direction its length
points, and a vehicle drives) is yaw + pi/2. The deformable aggregation's
fixed key points (+-0.45 of anchor slots 3, 4, 5 along the local axes) then
fall inside the object.
"""
import math
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

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
LIDAR_HEIGHT = 1.84  # lidar above the ground (global z = 0)
FRAME_INTERVAL = 0.5  # seconds, the 2 Hz of nuScenes key frames

# nuScenes detection classes, in the order of the model's 10 logits
CLASS_NAMES = ("car", "truck", "construction_vehicle", "bus", "trailer", "barrier",
               "motorcycle", "bicycle", "pedestrian", "traffic_cone")


@dataclass(frozen=True)
class ObjectClass:
    name: str
    size: Tuple[float, float, float]   # mean (w across, l along the heading, h), metres
    jitter: float                      # relative size spread (uniform +-)
    hue: float                         # colour family of the body (degrees) and its spread
    hue_spread: float
    frequency: float
    moving: float                      # probability of moving, and its speed range (m/s)
    speed: Tuple[float, float]
    # parts in the object's frame: (x0, x1) across, (y0, y1) along (fractions of w, l, centred),
    # (z0, z1) up (fractions of h from the ground), and the colour role
    parts: Tuple[Tuple[float, float, float, float, float, float, str], ...]


OBJECT_CLASSES = (
    ObjectClass("car", (1.9, 4.6, 1.6), 0.08, 0.0, 18.0, 0.40, 0.5, (3.0, 11.0), (
        (-0.46, 0.46, -0.46, 0.46, 0.0, 0.16, "dark"),
        (-0.5, 0.5, -0.5, 0.5, 0.16, 0.58, "body"),
        (-0.42, 0.42, -0.27, 0.22, 0.58, 1.0, "glass"))),
    ObjectClass("truck", (2.5, 7.5, 3.1), 0.10, 42.0, 10.0, 0.12, 0.5, (3.0, 9.0), (
        (-0.46, 0.46, -0.48, 0.48, 0.0, 0.13, "dark"),
        (-0.5, 0.5, 0.28, 0.5, 0.12, 0.72, "body"),
        (-0.45, 0.45, 0.40, 0.505, 0.45, 0.68, "glass"),
        (-0.5, 0.5, -0.5, 0.25, 0.12, 1.0, "light"))),
    ObjectClass("bus", (2.9, 11.0, 3.3), 0.06, 215.0, 12.0, 0.08, 0.6, (3.0, 9.0), (
        (-0.46, 0.46, -0.46, 0.46, 0.0, 0.09, "dark"),
        (-0.5, 0.5, -0.5, 0.5, 0.09, 1.0, "body"),
        (-0.505, 0.505, -0.44, 0.505, 0.52, 0.84, "glass"))),
    ObjectClass("bicycle", (0.65, 1.8, 1.65), 0.08, 125.0, 15.0, 0.15, 0.8, (2.0, 6.0), (
        (-0.15, 0.15, -0.5, 0.5, 0.0, 0.45, "dark"),
        (-0.45, 0.45, -0.22, 0.15, 0.45, 0.88, "body"),
        (-0.2, 0.2, -0.12, 0.06, 0.88, 1.0, "skin"))),
    ObjectClass("pedestrian", (0.6, 0.7, 1.75), 0.08, 290.0, 15.0, 0.25, 0.7, (0.5, 1.8), (
        (-0.32, 0.32, -0.3, 0.3, 0.0, 0.47, "dark"),
        (-0.5, 0.5, -0.5, 0.5, 0.47, 0.85, "body"),
        (-0.3, 0.3, -0.3, 0.3, 0.85, 1.0, "skin"))),
)
CLASS_LABELS = tuple(CLASS_NAMES.index(c.name) for c in OBJECT_CLASSES)

# unlabelled clutter: poles near the road, buildings further out
_POLE = ((-0.5, 0.5, -0.5, 0.5, 0.0, 1.0, "pole"),)
_BUILDING = ((-0.5, 0.5, -0.5, 0.5, 0.0, 1.0, "wall"),
             (-0.505, 0.505, -0.505, 0.505, 0.35, 0.55, "glass"))


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


def ego_pose(x: float, y: float, yaw: float) -> np.ndarray:
    p = np.eye(4)
    p[:3, :3] = rotz(yaw)
    p[:3, 3] = (x, y, LIDAR_HEIGHT)
    return p


def _hsv(h: float, s: float, v: float) -> np.ndarray:
    h = (h % 360.0) / 60.0
    c = v * s
    x = c * (1 - abs(h % 2 - 1))
    rgb = [(c, x, 0), (x, c, 0), (0, c, x), (0, x, c), (x, 0, c), (c, 0, x)][int(h) % 6]
    return (np.array(rgb) + (v - c)) * 255.0


# ------------------------------------------------------------------------ the world

@dataclass
class Scene:
    """A drive: ego poses per frame and objects moving at constant velocity.
    Object arrays are global: centre x, y at t = 0, velocity, yaw (of the
    box's x axis), size (w, l, h); clutter is static."""
    seed: int
    num_frames: int
    poses: np.ndarray          # [F, 4, 4] lidar to global
    cls: np.ndarray            # [M] index into OBJECT_CLASSES
    xy: np.ndarray             # [M, 2] at t = 0
    vel: np.ndarray            # [M, 2]
    yaw: np.ndarray            # [M]
    size: np.ndarray           # [M, 3]
    colours: List[Dict[str, np.ndarray]]
    clutter: List[Tuple[np.ndarray, np.ndarray, float, tuple, Dict[str, np.ndarray]]]
    light: Dict[str, np.ndarray]

    def objects_at(self, frame: int) -> np.ndarray:
        """[M, 9] global x, y, z, w, l, h, yaw, vx, vy at a frame."""
        t = frame * FRAME_INTERVAL
        xy = self.xy + self.vel * t
        z = self.size[:, 2] / 2
        return np.concatenate([xy, z[:, None], self.size, self.yaw[:, None], self.vel], 1)


def make_scene(seed: int, num_frames: int = 10) -> Scene:
    rng = np.random.default_rng([seed, 0x5eed])
    # ego: a curve at a steady speed (a fifth of the drives stand still)
    x0, y0 = rng.uniform(-2000.0, 2000.0, 2)
    yaw0 = rng.uniform(-math.pi, math.pi)
    speed = 0.0 if rng.random() < 0.2 else rng.uniform(3.0, 11.0)
    yaw_rate = rng.uniform(-0.12, 0.12)
    poses, x, y, yaw = [], x0, y0, yaw0
    for _ in range(num_frames):
        poses.append(ego_pose(x, y, yaw))
        x += speed * FRAME_INTERVAL * math.cos(yaw)
        y += speed * FRAME_INTERVAL * math.sin(yaw)
        yaw += yaw_rate * FRAME_INTERVAL
    poses = np.stack(poses)
    ego_xy = poses[:, :2, 3]
    mid = ego_xy[num_frames // 2]
    ego_heading = yaw0 + yaw_rate * FRAME_INTERVAL * num_frames / 2

    freq = np.array([c.frequency for c in OBJECT_CLASSES])
    count = int(rng.integers(30, 51))
    cls, xy, vel, yaws, sizes, colours = [], [], [], [], [], []
    t_all = np.arange(num_frames) * FRAME_INTERVAL
    for _ in range(count * 20):
        if len(cls) == count:
            break
        k = int(rng.choice(len(OBJECT_CLASSES), p=freq / freq.sum()))
        oc = OBJECT_CLASSES[k]
        size = np.array(oc.size) * rng.uniform(1 - oc.jitter, 1 + oc.jitter, 3)
        r, phi = 55.0 * math.sqrt(rng.random()), rng.uniform(-math.pi, math.pi)
        p = mid + r * np.array([math.cos(phi), math.sin(phi)])
        if oc.name == "pedestrian" or rng.random() < 0.3:
            heading = rng.uniform(-math.pi, math.pi)
        else:  # traffic along (or against) the ego's road
            heading = ego_heading + (math.pi if rng.random() < 0.5 else 0.0) + rng.normal(0, 0.12)
        v = rng.uniform(*oc.speed) if rng.random() < oc.moving else 0.0
        v_xy = v * np.array([math.cos(heading), math.sin(heading)])
        p0 = p - v_xy * t_all[num_frames // 2]
        track = p0[None] + v_xy[None] * t_all[:, None]
        radius = 0.5 * math.hypot(size[0], size[1])
        # keep clear of the ego car and of the other objects (at every frame)
        if (np.linalg.norm(track - ego_xy, axis=1) < radius + 3.0).any():
            continue
        clash = False
        for j in range(len(cls)):
            other = xy[j][None] + vel[j][None] * t_all[:, None]
            rj = 0.5 * math.hypot(sizes[j][0], sizes[j][1])
            if (np.linalg.norm(track - other, axis=1) < 0.9 * (radius + rj)).any():
                clash = True
                break
        if clash:
            continue
        body = _hsv(oc.hue + rng.uniform(-oc.hue_spread, oc.hue_spread), rng.uniform(0.5, 0.9),
                    rng.uniform(0.55, 0.95))
        colours.append({
            "body": body,
            "light": _hsv(oc.hue + rng.uniform(-8, 8), rng.uniform(0.15, 0.35),
                          rng.uniform(0.8, 0.95)),
            "dark": np.full(3, rng.uniform(20.0, 45.0)),
            "glass": np.array([35.0, 45.0, 60.0]) * rng.uniform(0.8, 1.3),
            "skin": np.array([220.0, 170.0, 130.0]) * rng.uniform(0.55, 1.0),
        })
        cls.append(k)
        xy.append(p0)
        vel.append(v_xy)
        yaws.append(heading - math.pi / 2)
        sizes.append(size)

    clutter = []
    for _ in range(int(rng.integers(6, 14))):  # poles along the way
        r, phi = rng.uniform(6.0, 45.0), rng.uniform(-math.pi, math.pi)
        p = mid + r * np.array([math.cos(phi), math.sin(phi)])
        if (np.linalg.norm(ego_xy - p, axis=1) < 2.5).any():
            continue
        grey = rng.uniform(90.0, 150.0)
        clutter.append((p, np.array([0.25, 0.25, rng.uniform(3.0, 6.0)]), 0.0, _POLE,
                        {"pole": np.full(3, grey)}))
    for _ in range(int(rng.integers(4, 9))):  # buildings beyond the objects
        r, phi = rng.uniform(62.0, 90.0), rng.uniform(-math.pi, math.pi)
        p = mid + r * np.array([math.cos(phi), math.sin(phi)])
        size = np.array([rng.uniform(8, 20), rng.uniform(8, 25), rng.uniform(6, 18)])
        wall = _hsv(rng.uniform(20, 50), rng.uniform(0.05, 0.25), rng.uniform(0.45, 0.8))
        clutter.append((p, size, rng.uniform(-math.pi, math.pi), _BUILDING,
                        {"wall": wall, "glass": np.array([50.0, 60.0, 75.0])}))

    sun_az, sun_el = rng.uniform(-math.pi, math.pi), rng.uniform(0.35, 1.1)
    light = {
        "sun": np.array([math.cos(sun_el) * math.cos(sun_az), math.cos(sun_el) * math.sin(sun_az),
                         math.sin(sun_el)]),
        "ambient": np.array(rng.uniform(0.35, 0.6)), "direct": np.array(rng.uniform(0.35, 0.75)),
        "exposure": np.array(rng.uniform(0.75, 1.2)),
        "tint": 1.0 + rng.uniform(-0.08, 0.08, 3),
        "ground": np.array(rng.uniform(70.0, 115.0)),
        "ground_offset": rng.uniform(0.0, 100.0, 2),
        "sky": _hsv(rng.uniform(195, 225), rng.uniform(0.15, 0.45), rng.uniform(0.7, 0.95)),
    }
    return Scene(seed, num_frames, poses, np.array(cls, np.int64), np.array(xy).reshape(-1, 2),
                 np.array(vel).reshape(-1, 2), np.array(yaws), np.array(sizes).reshape(-1, 3),
                 colours, clutter, light)


# ------------------------------------------------------------------------ rendering

_SS = 2  # supersampling per axis


def _ground_texture() -> np.ndarray:
    """A fixed 256x256 tile of value noise (0.25 m texels: 64 m period), mean 0."""
    rng = np.random.default_rng(20240611)
    tile = np.zeros((256, 256))
    for cells, amp in ((8, 1.0), (32, 0.6), (128, 0.35), (256, 0.25)):
        coarse = rng.normal(0, 1, (cells, cells))
        rep = 256 // cells
        up = np.repeat(np.repeat(coarse, rep, 0), rep, 1)
        # a cheap blur keeps the coarse octaves smooth
        for axis in (0, 1):
            up = (up + np.roll(up, rep // 2, axis)) / 2 if rep > 1 else up
        tile += amp * up
    return (tile - tile.mean()) / tile.std()


_TEXTURE = _ground_texture()


# corners of a box part: index ix + 2 iy + 4 iz (0 = low, 1 = high on each axis);
# the five faces a camera above the ground can see (never the bottom), each
# as a corner loop and its outward normal in the part's frame
_FACES = np.array([[0, 4, 6, 2], [1, 3, 7, 5], [0, 1, 5, 4], [2, 6, 7, 3], [4, 5, 7, 6]])
_NORMALS = np.array([[-1, 0, 0], [1, 0, 0], [0, -1, 0], [0, 1, 0], [0, 0, 1]], np.float64)
_BITS = np.array([[i & 1, (i >> 1) & 1, (i >> 2) & 1] for i in range(8)], np.float64)


def _part_arrays(parts) -> Tuple[np.ndarray, np.ndarray, Tuple[str, ...]]:
    p = np.array([q[:6] for q in parts], np.float64)
    lo = p[:, [0, 2, 4]]
    hi = p[:, [1, 3, 5]]
    return lo, hi, tuple(q[6] for q in parts)


class Renderer:
    """Renders scenes for one image size; per-camera rays are computed once.
    Faces are flat-shaded convex polygons drawn into a z-buffer at twice the
    resolution (2x2 supersampling)."""

    def __init__(self, cfg: Sparse4DConfig):
        self.cfg = cfg
        self.proj = camera_rig(cfg)
        h, w = cfg.image_hw
        self.focal = [CAMERAS[i % len(CAMERAS)][3] * w / SENSOR_WH[0]
                      for i in range(cfg.num_cams)]
        uu, vv = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
        pix = np.stack([uu, vv, np.ones_like(uu)], -1).reshape(-1, 3)
        haze = np.array([200.0, 205.0, 210.0])
        self.centres, self.bg, self.ground_depth = [], [], []
        for p in self.proj:
            m_inv = np.linalg.inv(p[:3, :3])
            c = -m_inv @ p[:3, 3]
            d = pix @ m_inv.T
            d /= np.linalg.norm(d, axis=1, keepdims=True)
            sky = d[:, 2] > -1e-3
            g = ~sky
            t = (-LIDAR_HEIGHT - c[2]) / d[g, 2]
            self.centres.append(c)
            # depth of the ground under each pixel (0 for the sky): the rig is
            # fixed to the ground, so it never changes
            depth = np.zeros(h * w)
            ground = c[None] + t[:, None] * d[g]
            depth[g] = ground @ p[2, :3] + p[2, 3]
            self.ground_depth.append(depth.reshape(h, w))
            # what the background needs per frame: where each ground pixel
            # hits the ground (lidar frame), its haze, and the sky gradient
            self.bg.append({"sky": sky, "ground_xy": c[None, :2] + t[:, None] * d[g, :2],
                            "fog": np.exp(-t / 120.0)[:, None], "haze": haze,
                            "sky_a": np.clip(d[sky, 2] * 4.0, 0.0, 1.0)[:, None]})
        self._parts = {}

    def _background(self, cam: int, pose: np.ndarray, light) -> np.ndarray:
        """Sky gradient and textured ground with lane marks, at 1x: [H, W, 3]."""
        h, w = self.cfg.image_hw
        bg = self.bg[cam]
        out = np.empty((h * w, 3))
        out[bg["sky"]] = bg["haze"] * (1 - bg["sky_a"]) + light["sky"] * bg["sky_a"]
        p = bg["ground_xy"]
        gx = pose[0, 0] * p[:, 0] + pose[0, 1] * p[:, 1] + pose[0, 3] + light["ground_offset"][0]
        gy = pose[1, 0] * p[:, 0] + pose[1, 1] * p[:, 1] + pose[1, 3] + light["ground_offset"][1]
        tex = _TEXTURE[(gx * 4).astype(np.int64) % 256, (gy * 4).astype(np.int64) % 256]
        base = light["ground"] * (1.0 + 0.13 * tex)
        lane = (np.mod(gy, 3.6) < 0.15) & (np.mod(gx, 9.0) < 4.0)
        base = np.where(lane, 190.0, base)
        col = base[:, None] * np.array([1.0, 1.0, 1.04])[None]
        out[~bg["sky"]] = col * bg["fog"] + bg["haze"] * (1 - bg["fog"])
        return out.reshape(h, w, 3)

    def render(self, scene: Scene, frame: int, rng: np.random.Generator
               ) -> Tuple[np.ndarray, np.ndarray, Dict[str, np.ndarray]]:
        """-> images [N, 3, H, W] uint8, visible pixels per object [M] (at the
        network resolution, summed over the cameras), and dense targets at
        the network resolution: "depth" [N, H, W] float32 (0 for the sky),
        "label" [N, H, W] uint8 (1 + index into OBJECT_CLASSES of the object
        seen at the pixel, 0 for background and clutter) and "centre"
        [N, H, W, 3] float32: where the pixel's object has its centre, as
        (u, v) pixel offsets and depth (NaN off objects and for centres
        behind the camera)."""
        cfg = self.cfg
        h, w = cfg.image_hw
        hs, ws = h * _SS, w * _SS
        pose = scene.poses[frame]
        g2l = np.linalg.inv(pose)
        light = scene.light
        objs = scene.objects_at(frame)
        # every drawable: (global centre xy, size, yaw, parts, colours, object index or -1)
        items = [(objs[i, :2], objs[i, 3:6], objs[i, 6], OBJECT_CLASSES[scene.cls[i]].parts,
                  scene.colours[i], i) for i in range(len(objs))]
        items += [(p, s, y, parts, col, -1) for p, s, y, parts, col in scene.clutter]
        visible = np.zeros(len(objs))
        images = np.empty((cfg.num_cams, 3, h, w), np.uint8)
        depth = np.empty((cfg.num_cams, h, w), np.float32)
        label = np.zeros((cfg.num_cams, h, w), np.uint8)
        centre = np.full((cfg.num_cams, h, w, 3), np.nan, np.float32)
        grid_u, grid_v = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
        for cam in range(cfg.num_cams):
            bg = self._background(cam, pose, light)
            canvas = np.repeat(np.repeat(bg, _SS, 0), _SS, 1)
            ids = np.full((hs, ws), -1, np.int64)
            zbuf = np.zeros((hs, ws))  # 1 / depth: 0 is infinitely far
            proj = self.proj[cam] @ g2l
            centre_g = pose[:3, :3] @ self.centres[cam] + pose[:3, 3]
            for xy, size, yaw, parts, col, idx in items:
                cz = proj[2, :2] @ xy + proj[2, 2] * size[2] / 2 + proj[2, 3]
                radius = 0.5 * float(np.linalg.norm(size))
                if cz < -radius:
                    continue
                if cz > radius:  # outside the view: a test on the bounding sphere
                    uvw = proj[:3, :2] @ xy + proj[:3, 2] * size[2] / 2 + proj[:3, 3]
                    u, v = uvw[0] / cz, uvw[1] / cz
                    r_px = radius * self.focal[cam] / (cz - radius) if cz > 2 * radius else 1e9
                    if u < -r_px or u > w + r_px or v < -r_px or v > h + r_px:
                        continue
                self._draw_object(canvas, ids, zbuf, proj, centre_g, xy, size, yaw, parts, col,
                                  idx, light)
            if len(objs):
                visible += np.bincount(ids[ids >= 0], minlength=len(objs)) / (_SS * _SS)
            zb, idc = zbuf[::_SS, ::_SS], ids[::_SS, ::_SS]
            depth[cam] = np.where(zb > 0, 1.0 / np.maximum(zb, 1e-9), self.ground_depth[cam])
            if len(objs):
                label[cam] = np.where(idc >= 0, scene.cls[np.maximum(idc, 0)] + 1, 0)
                hom = objs[:, :3] @ proj[:3, :3].T + proj[:3, 3]
                ok = hom[:, 2] > _NEAR
                uvd = np.stack([hom[:, 0] / np.where(ok, hom[:, 2], 1.0),
                                hom[:, 1] / np.where(ok, hom[:, 2], 1.0),
                                np.where(ok, hom[:, 2], np.nan)], 1)
                on = idc >= 0
                c = uvd[idc[on]]
                centre[cam][on] = np.stack([c[:, 0] - grid_u[on], c[:, 1] - grid_v[on],
                                            c[:, 2]], 1)
            img = canvas.reshape(h, _SS, w, _SS, 3).mean(axis=(1, 3))
            gain = light["exposure"] * light["tint"] * rng.uniform(0.92, 1.08)
            img = img * gain + rng.normal(0.0, rng.uniform(2.0, 7.0), img.shape)
            images[cam] = np.clip(img, 0, 255).astype(np.uint8).transpose(2, 0, 1)
        return images, visible, {"depth": depth, "label": label, "centre": centre}

    def _draw_object(self, canvas, ids, zbuf, proj, centre_g, xy, size, yaw, parts, col, idx,
                     light):
        key = id(parts)
        if key not in self._parts:
            self._parts[key] = _part_arrays(parts)
        lo, hi, roles = self._parts[key]
        c, s = math.cos(yaw), math.sin(yaw)
        rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
        local = (lo[:, None] + (hi - lo)[:, None] * _BITS[None]) * size  # [P, 8, 3]
        world = local @ rot.T + np.array([xy[0], xy[1], 0.0])
        hom = world @ proj[:3, :3].T + proj[:3, 3]                       # [P, 8, 3]
        normals = _NORMALS @ rot.T                                        # [5, 3]
        # a face is seen when the camera is on its outer side
        first = world[:, _FACES[:, 0]]                                    # [P, 5, 3]
        seen = np.einsum("pfk,fk->pf", centre_g - first, normals) > 0
        shade = light["ambient"] + light["direct"] * np.maximum(normals @ light["sun"], 0.0)
        pi, fi = np.nonzero(seen)
        polys = hom[pi[:, None], _FACES[fi]]                              # [K, 4, 3]
        colours = np.stack([col[roles[p]] for p in pi]) * shade[fi][:, None]
        near = polys[..., 2].min(1) >= _NEAR
        for k in np.flatnonzero(~near):  # crossing the camera plane: clip, one by one
            _fill(canvas, ids, zbuf, polys[k], colours[k], idx)
        if near.any():
            _fill_many(canvas, ids, zbuf, polys[near], colours[near], idx)


_NEAR = 0.2  # metres: faces are clipped at this depth


def _fill_many(canvas, ids, zbuf, polys, colours, idx):
    """Fills K convex quads in front of the near plane ((u z, v z, z) per
    vertex, [K, 4, 3]) at once: every pixel of their common bounding box
    takes the nearest face that covers it, if nearer than the z-buffer."""
    uv = polys[..., :2] / polys[..., 2:3] * _SS                       # [K, 4, 2]
    hs, ws = ids.shape
    lo = np.floor(uv.reshape(-1, 2).min(0)).astype(int)
    hi = np.ceil(uv.reshape(-1, 2).max(0)).astype(int)
    u0, v0, u1, v1 = max(lo[0], 0), max(lo[1], 0), min(hi[0], ws), min(hi[1], hs)
    if u0 >= u1 or v0 >= v1:
        return
    # 1 / depth is affine in screen space on a plane: fit it on three vertices
    m = np.concatenate([uv[:, :3], np.ones((len(uv), 3, 1))], 2)       # [K, 3, 3]
    det = np.linalg.det(m)
    ok = np.abs(det) > 1e-9
    if not ok.all():
        uv, m, det, polys, colours = uv[ok], m[ok], det[ok], polys[ok], colours[ok]
        if not len(uv):
            return
    abc = np.linalg.solve(m, 1.0 / polys[:, :3, 2:3])[..., 0]          # [K, 3]
    xs = (np.arange(u0, u1) + 0.5)[None, None]
    ys = (np.arange(v0, v1) + 0.5)[None, :, None]
    inv_z = abc[:, 0, None, None] * xs + abc[:, 1, None, None] * ys + abc[:, 2, None, None]
    sign = np.where(det > 0, 1.0, -1.0)[:, None, None]
    inside = np.ones(inv_z.shape, bool)
    for i in range(4):
        a, b = uv[:, i], uv[:, (i + 1) % 4]
        e = (b[:, 0] - a[:, 0])[:, None, None] * (ys - a[:, 1, None, None]) - \
            (b[:, 1] - a[:, 1])[:, None, None] * (xs - a[:, 0, None, None])
        inside &= sign * e >= 0
    inv_z = np.where(inside, inv_z, 0.0)
    best = inv_z.argmax(0)
    best_z = np.take_along_axis(inv_z, best[None], 0)[0]
    win = best_z > zbuf[v0:v1, u0:u1]
    if not win.any():
        return
    zbuf[v0:v1, u0:u1][win] = best_z[win]
    canvas[v0:v1, u0:u1][win] = colours[best[win]]
    ids[v0:v1, u0:u1][win] = idx


def _fill(canvas, ids, zbuf, hom, colour, idx):
    """Fills a planar convex polygon given as (u z, v z, z) per vertex (linear
    in 3D, so clipping at the near plane happens here), with a depth test."""
    near = _NEAR
    z = hom[:, 2]
    if z.max() < near:
        return
    if z.min() < near:
        out = []
        k = len(hom)
        for i in range(k):
            a, b = hom[i], hom[(i + 1) % k]
            if a[2] >= near:
                out.append(a)
            if (a[2] >= near) != (b[2] >= near):
                out.append(a + (near - a[2]) / (b[2] - a[2]) * (b - a))
        hom = np.array(out)
    uv = hom[:, :2] / hom[:, 2:3] * _SS
    hs, ws = ids.shape
    lo = np.floor(uv.min(0)).astype(int)
    hi = np.ceil(uv.max(0)).astype(int)
    u0, v0, u1, v1 = max(lo[0], 0), max(lo[1], 0), min(hi[0], ws), min(hi[1], hs)
    if u0 >= u1 or v0 >= v1:
        return
    # 1 / depth is affine in screen space on a plane: fit it on three vertices
    m = np.stack([uv[:3, 0], uv[:3, 1], np.ones(3)], 1)
    det = np.linalg.det(m)
    if abs(det) < 1e-9:
        return
    abc = np.linalg.solve(m, 1.0 / hom[:3, 2])
    xs = np.arange(u0, u1) + 0.5
    ys = (np.arange(v0, v1) + 0.5)[:, None]
    sign = 1.0 if det > 0 else -1.0
    inside = abc[0] * xs + abc[1] * ys + abc[2] > zbuf[v0:v1, u0:u1]
    n = len(uv)
    for i in range(n):
        ax, ay = uv[i]
        bx, by = uv[(i + 1) % n]
        inside &= sign * ((bx - ax) * (ys - ay) - (by - ay) * (xs - ax)) >= 0
    if not inside.any():
        return
    inv_z = abc[0] * xs + abc[1] * ys + abc[2]
    zbuf[v0:v1, u0:u1][inside] = inv_z[inside]
    canvas[v0:v1, u0:u1][inside] = colour
    ids[v0:v1, u0:u1][inside] = idx


# What counts as ground truth: the object's centre within GT_RANGE of the
# lidar (bird's-eye distance) and at least MIN_VISIBLE_PIXELS of it visible at
# 64x192 (scaled with the image area), summed over the cameras. The metrics
# count the boxes within EVAL_RANGE (evaluate.py).
GT_RANGE = 35.0
MIN_VISIBLE_PIXELS = 8.0


def ground_truth(scene: Scene, frame: int, visible: np.ndarray, cfg: Sparse4DConfig) -> Dict:
    """Boxes [M, 9] (x, y, z, w, l, h, yaw, vx, vy in the lidar frame),
    labels [M] (nuScenes class index), track_ids [M] (per scene), visible
    pixels [M]."""
    pose = scene.poses[frame]
    objs = scene.objects_at(frame)
    g2l = np.linalg.inv(pose)
    centre = np.concatenate([objs[:, :3], np.ones((len(objs), 1))], 1) @ g2l.T
    ego_yaw = math.atan2(pose[1, 0], pose[0, 0])
    yaw = np.mod(objs[:, 6] - ego_yaw + math.pi, 2 * math.pi) - math.pi
    vel = objs[:, 7:9] @ pose[:2, :2]  # R^T v: global to lidar
    h, w = cfg.image_hw
    keep = (np.hypot(centre[:, 0], centre[:, 1]) <= GT_RANGE) & \
        (visible >= MIN_VISIBLE_PIXELS * h * w / (64 * 192))
    boxes = np.concatenate([centre[:, :3], objs[:, 3:6], yaw[:, None], vel], 1)[keep]
    labels = np.array(CLASS_LABELS, np.int64)[scene.cls][keep] if len(objs) else \
        np.zeros(0, np.int64)
    return {"boxes": boxes.astype(np.float32), "labels": labels,
            "track_ids": np.flatnonzero(keep).astype(np.int64),
            "visible": visible[keep].astype(np.float32)}


def normalise(cfg: Sparse4DConfig, images: np.ndarray) -> np.ndarray:
    mean = np.asarray(cfg.mean, np.float32)[:, None, None]
    std = np.asarray(cfg.std, np.float32)[:, None, None]
    return (images.astype(np.float32) - mean) / std


def frame_inputs(cfg: Sparse4DConfig, renderer: Renderer, scene: Scene, frame: int,
                 timestamp: float, rng: np.random.Generator) -> Dict:
    """The model inputs of one frame (batch 1) plus raw images and ground truth."""
    raw, visible, dense = renderer.render(scene, frame, rng)
    h, w = cfg.image_hw
    return {
        "images": normalise(cfg, raw)[None],
        "projection": renderer.proj.astype(np.float32)[None],
        "image_wh": np.tile(np.array([w, h], np.float32), (cfg.num_cams, 1))[None],
        "timestamp": np.array([timestamp], np.float32),
        "ego_pose": scene.poses[frame].astype(np.float32)[None],
        "raw_images": raw, "objects": scene.objects_at(frame),
        "gt": ground_truth(scene, frame, visible, cfg), "dense": dense,
    }


def make_sequence(cfg: Sparse4DConfig, num_frames: int = 6, cut_at: int = 3,
                  gap: float = 3.0, seed: int = 0) -> List[Dict]:
    """Frames of two drives with a scene cut before frame `cut_at` (time jumps
    by `gap` seconds, another place, other objects). Each frame holds the
    head/backbone inputs with batch 1: images [1,N,3,H,W] float32
    (normalised), projection [1,N,4,4], image_wh [1,N,2], timestamp [1]
    (seconds since the first frame), ego_pose [1,4,4] (lidar to global), plus
    raw uint8 images, the objects (global), the ground truth (lidar frame)
    and scene_start (bool)."""
    renderer = Renderer(cfg)
    rng = np.random.default_rng([seed, 1])
    # seeds of their own, apart from the dataset's splits (dataset.SPLIT_BASE)
    first = make_scene(2_000_000 + 2 * seed, max(cut_at, 1))
    second = make_scene(2_000_000 + 2 * seed + 1, max(num_frames - cut_at, 1))
    frames, t = [], 0.0
    for i in range(num_frames):
        if i > 0:
            t += gap if i == cut_at else FRAME_INTERVAL
        scene, k = (first, i) if i < cut_at else (second, i - cut_at)
        fr = frame_inputs(cfg, renderer, scene, k, t, rng)
        fr["scene_start"] = i in (0, cut_at)
        frames.append(fr)
    return frames
