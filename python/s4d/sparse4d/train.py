"""Train Sparse4D on the synthetic driving dataset, in plain PyTorch.

    python3 -m s4d.sparse4d.train --preset tiny --out runs/tiny [--steps 6000] [--batch 4]
        [--lr 2e-3] [--device cpu|cuda] [--seed 0] [--resume] [--weights FILE]

Streaming temporal training, as upstream Sparse4Dv3: B sequences run side by
side, one frame of each per step, and the instance bank of a step (its
state output, detached) is the next step's input; at a sequence's first
frame the bank is empty. Every decoder layer is matched to the ground truth
(Hungarian) and supervised (losses.py). AdamW, linear warm-up then cosine
decay, gradient clipping.

Writes into --out: last.pt (the whole training state, every --save-every
steps and at the end; --resume continues from it, bit for bit on the same
machine), log.csv (a row per logged step), curve.png (the training
curve) and, at the end, the weights in the s4d checkpoint format (fp16,
--weights, default OUT/sparse4d_<preset>_synthetic.pt) with how they were
made and, unless --eval-sequences 0, their metrics on the validation split.
"""
import argparse
import csv
import math
import os
import platform
import sys
import time
from typing import Dict, List

import numpy as np
import torch

from torch import nn
from torch.nn import functional as F

from .backbone import flatten_feature_maps
from .checkpoint import save_checkpoint
from .config import get_preset
from .dataset import (DEFAULT_SEQUENCES, DENSE_LEVELS, SEQUENCE_LENGTH, TrainSet,
                      kmeans_anchors, normalise_images)
from .head import HeadState, zeros_state
from .losses import DN_GROUPS, make_denoising, sparse4d_loss
from .model import build_model

# the overrides every trained checkpoint uses: the geometrically correct yaw
# of cached anchors (docs/model.md: yaw_swap_quirk exists for upstream's weights)
TRAIN_OVERRIDES = {"yaw_swap_quirk": False}
LOSS_TERMS = ("cls", "box", "centerness", "yawness", "many", "dn_cls", "dn_box", "dense")
DENSE_WEIGHT = 1.0
DENSE_MAX_DEPTH = 80.0  # metres: farther ground (near the horizon) is left out


class DenseAux(nn.Module):
    """Training-only dense supervision of the first FPN levels (the part of
    upstream's dense depth branch that applies here): per feature cell, log
    depth and the class of the object seen there (or background), from the
    renderer. It gives the backbone, trained from scratch, a dense signal
    where the head's sparse sampling gives a thin one. Not exported."""

    def __init__(self, channels: int, num_labels: int):
        super().__init__()
        self.num_labels = num_labels
        self.conv = nn.Sequential(nn.Conv2d(channels, channels, 3, 1, 1), nn.ReLU(inplace=True),
                                  nn.Conv2d(channels, 1 + num_labels, 1))

    def loss(self, maps, dense) -> torch.Tensor:
        total = 0.0
        weight = torch.ones(self.num_labels, device=maps[0].device)
        weight[0] = 0.25  # background is most of every image
        for level, (depth, label) in enumerate(dense):
            out = self.conv(maps[level])
            depth = depth.reshape(out.shape[0], *out.shape[2:]).float()
            label = label.reshape(out.shape[0], *out.shape[2:]).long()
            valid = (depth > 0) & (depth < DENSE_MAX_DEPTH)
            if valid.any():
                total = total + (out[:, 0] - depth.clamp_min(1e-3).log()).abs()[valid].mean()
            total = total + F.cross_entropy(out[:, 1:], label, weight=weight)
        return DENSE_WEIGHT * total


def _log(msg: str) -> None:
    print(f"[train] {msg}", flush=True)


def lr_at(step: int, total: int, base: float, warmup: int) -> float:
    """Linear warm-up from base/10, then cosine decay to base/100."""
    if step < warmup:
        return base * (0.1 + 0.9 * step / max(warmup, 1))
    t = (step - warmup) / max(total - warmup, 1)
    return base * (0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))


def sequences_for_round(rnd: int, num_sequences: int, batch: int, seed: int) -> List[int]:
    """The B sequences of round `rnd` (a round is one sequence length of
    steps): a seeded permutation per epoch, the remainder dropped."""
    per_epoch = num_sequences // batch
    epoch, r = divmod(rnd, per_epoch)
    perm = np.random.default_rng([seed, epoch]).permutation(num_sequences)
    return [int(s) for s in perm[r * batch:(r + 1) * batch]]


def augment(images: torch.Tensor, step: int, seed: int) -> torch.Tensor:
    """Per-image gain and sensor noise on normalised images, drawn from
    (seed, step) so that a resumed run sees the same."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    b, n = images.shape[:2]
    gain = 0.9 + 0.2 * torch.rand(b, n, 1, 1, 1, generator=g)
    noise = 0.04 * torch.randn(images.shape, generator=g)
    return images * gain.to(images.device) + noise.to(images.device)


def detach_state(state) -> HeadState:
    return HeadState(*[t.detach() for t in state])


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs visible, torch {torch.__version__}"


def train(args) -> Dict:
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads) if args.threads > 0 else None
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: torch sees no CUDA device")
    cfg = get_preset(args.preset, **TRAIN_OVERRIDES)
    os.makedirs(args.out, exist_ok=True)
    last_path = os.path.join(args.out, "last.pt")
    resume = None
    if args.resume and os.path.exists(last_path):
        resume = torch.load(last_path, map_location="cpu")
        if resume["args"]["preset"] != args.preset or resume["args"]["seed"] != args.seed:
            raise ValueError(f"{last_path}: made with other --preset/--seed; use another --out")
    t_start = time.time()
    data = TrainSet(cfg, "train", args.train_sequences, SEQUENCE_LENGTH, log=_log)
    _log(f"{len(data)} sequences x {SEQUENCE_LENGTH} frames rendered in "
         f"{time.time() - t_start:.0f} s")

    aggregation = args.aggregation
    if aggregation == "auto":
        from s4d import ops
        aggregation = "ext" if ops.extension_available() else "reference"
        if device.type == "cuda" and aggregation == "ext":
            # the extension runs on CUDA only when it was built with CUDA
            try:
                ops.deformable_aggregation(*_tiny_da_inputs(device))
            except (RuntimeError, ValueError, TypeError):
                aggregation = "reference"
    model = build_model(args.preset, aggregation=aggregation, seed=args.seed, **TRAIN_OVERRIDES)
    with torch.no_grad():
        model.head.instance_bank.anchor.copy_(torch.from_numpy(
            kmeans_anchors(data.all_boxes(), cfg.num_anchor, seed=args.seed)))
    model = model.to(device).train()
    from .scene import OBJECT_CLASSES
    aux = DenseAux(cfg.fpn_channels, 1 + len(OBJECT_CLASSES)).to(device).train()
    named = list(model.named_parameters()) + list(aux.named_parameters(prefix="aux"))
    params = [p for _, p in named if p.requires_grad]
    # no weight decay on the anchors (positions in metres), biases and norms
    decay = [p for n, p in named if p.requires_grad and p.dim() > 1
             and n != "head.instance_bank.anchor"]
    keep = [p for n, p in named if p.requires_grad and not (
        p.dim() > 1 and n != "head.instance_bank.anchor")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": keep, "weight_decay": 0.0}], lr=args.lr)
    step, elapsed = 0, 0.0
    state = None
    if resume is not None:
        model.load_state_dict(resume["model"])
        aux.load_state_dict(resume["aux"])
        opt.load_state_dict(resume["optimizer"])
        step, elapsed = resume["step"], resume["elapsed"]
        state = HeadState(*[t.to(device) for t in resume["state"]]) if resume["state"] else None
        torch.set_rng_state(resume["torch_rng"])
        _log(f"resumed from {last_path} at step {step}")
    log_path = os.path.join(args.out, "log.csv")
    if resume is None or not os.path.exists(log_path):
        with open(log_path, "w", newline="") as f:
            csv.writer(f).writerow(["step", "loss", *LOSS_TERMS, "lr", "frames_per_s",
                                    "elapsed_s"])
    _log(f"preset {args.preset} ({cfg.image_hw[0]}x{cfg.image_hw[1]}, {cfg.num_anchor} anchors), "
         f"device {device}, aggregation {aggregation}, batch {args.batch}, {args.steps} steps")

    run = {"loss": 0.0, **{k: 0.0 for k in LOSS_TERMS}, "n": 0}
    t_log = time.time()
    frames_since = 0
    stop = min(args.steps, args.stop_after or args.steps)
    while step < stop:
        rnd, frame = divmod(step, SEQUENCE_LENGTH)
        seqs = sequences_for_round(rnd, len(data), args.batch, args.seed)
        batch = data.batch(seqs, frame, device)
        if frame == 0 or state is None:
            state = zeros_state(cfg, args.batch, device=device)
        lr = lr_at(step, args.steps, args.lr, args.warmup)
        for group in opt.param_groups:
            group["lr"] = lr
        images = augment(normalise_images(cfg, batch["images"]), step, args.seed)
        b, n = images.shape[:2]
        maps = model.backbone.img_neck(model.backbone.img_backbone(
            images.reshape((b * n,) + tuple(images.shape[2:]))))
        dn = dn_group = dn_info = None
        if args.dn_groups > 0:
            g = torch.Generator().manual_seed(args.seed * 1_000_003 + step + 7)
            dn, dn_group, dn_info = make_denoising(batch["gt"], cfg.num_anchor, g, args.dn_groups)
            dn, dn_group = dn.to(device), dn_group.to(device)
        out = model.head(flatten_feature_maps(maps, n), batch["projection"], batch["image_wh"],
                         batch["timestamp"], batch["ego_pose"].float(), state,
                         return_layers=True, dn_anchor=dn, dn_group=dn_group)
        loss, parts = sparse4d_loss(out["layers"], batch["gt"], many=args.many, dn=dn_info)
        dense = aux.loss(maps, batch["dense"])
        loss = loss + dense
        parts["dense"] = float(dense.detach())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, args.clip)
        opt.step()
        state = detach_state(out["state"])
        step += 1
        frames_since += args.batch
        run["loss"] += float(loss.detach())
        for k in LOSS_TERMS:
            run[k] += parts.get(k, 0.0)
        run["n"] += 1
        if step % args.log_every == 0 or step == args.steps:
            now = time.time()
            elapsed += now - t_log
            fps = frames_since / max(now - t_log, 1e-9)
            t_log, frames_since = now, 0
            avg = {k: run[k] / run["n"] for k in ("loss",) + LOSS_TERMS}
            eta = (args.steps - step) * args.batch / max(fps, 1e-9)
            _log(f"step {step}/{args.steps}  loss {avg['loss']:.3f} (cls {avg['cls']:.3f} "
                 f"box {avg['box']:.3f} cns {avg['centerness']:.3f} yns {avg['yawness']:.3f} "
                 f"many {avg['many']:.3f} dn {avg['dn_cls'] + avg['dn_box']:.3f} "
                 f"dense {avg['dense']:.3f})  "
                 f"lr {lr:.2e}  {fps:.1f} frames/s  {elapsed / 60:.1f} min, eta {eta / 60:.1f} min")
            with open(log_path, "a", newline="") as f:
                csv.writer(f).writerow([step, f"{avg['loss']:.5f}"] +
                                       [f"{avg[k]:.5f}" for k in LOSS_TERMS] +
                                       [f"{lr:.3e}", f"{fps:.2f}", f"{elapsed:.1f}"])
            run = {"loss": 0.0, **{k: 0.0 for k in LOSS_TERMS}, "n": 0}
        if step % args.save_every == 0 or step == stop:
            torch.save({"args": vars(args), "model": model.state_dict(), "aux": aux.state_dict(),
                        "optimizer": opt.state_dict(), "step": step, "elapsed": elapsed,
                        "state": [t.cpu() for t in state], "torch_rng": torch.get_rng_state()},
                       last_path + ".tmp")
            os.replace(last_path + ".tmp", last_path)

    total_s = time.time() - t_start
    if step < args.steps:
        _log(f"stopped at step {step} of {args.steps}: continue with --resume")
        return {"steps": step}
    _log(f"trained {step} steps; training {elapsed / 60:.1f} min, with rendering "
         f"{total_s / 60:.1f} min")
    plot_curve(log_path, os.path.join(args.out, "curve.png"))
    weights = args.weights or os.path.join(args.out, f"sparse4d_{args.preset}_synthetic.pt")
    meta = {"command": "python3 -m s4d.sparse4d.train " + " ".join(args.argv),
            "machine": _machine(), "device": str(device), "steps": step,
            "train_minutes": round(elapsed / 60, 2), "total_minutes": round(total_s / 60, 2),
            "train_sequences": len(data), "aggregation": aggregation}
    model.eval()
    save_checkpoint(model.cpu(), weights, TRAIN_OVERRIDES, meta)
    result = {"weights": weights, **meta}
    if args.eval_sequences > 0:
        from .checkpoint import load_model
        from .evaluate import evaluate_model, format_table
        # the metrics of the weights as stored (fp16), as every user loads them
        stored = load_model(weights, aggregation=aggregation).to(device)
        metrics = evaluate_model(stored, args.eval_sequences, device=device)
        print(format_table({"PyTorch": metrics}), flush=True)
        meta["val"] = {k: metrics[k] for k in ("mAP", "NDS", "mATE", "mASE", "mAOE", "mAVE")}
        meta["val"].update({k: metrics["tracking"][k] for k in ("MOTA", "IDS")})
        save_checkpoint(stored.cpu(), weights, TRAIN_OVERRIDES, meta, half=True)
        result["metrics"] = metrics
    _log(f"weights: {weights} ({os.path.getsize(weights) / 1e6:.1f} MB)")
    return result


def _tiny_da_inputs(device):
    from s4d.ops.workload import make_layout
    ss, si, rows = make_layout([[(2, 2)]])
    return (torch.ones(1, rows, 8, device=device), ss.to(device), si.to(device),
            torch.full((1, 1, 1, 1, 2), 0.5, device=device),
            torch.ones(1, 1, 1, 1, 1, 1, device=device))


def plot_curve(log_path: str, png_path: str) -> None:
    """The training curve: total and per-term loss against step."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _log("matplotlib missing: no curve.png")
        return
    with open(log_path) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return
    steps = [int(r["step"]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, [float(r["loss"]) for r in rows], label="total", color="black")
    for k in LOSS_TERMS:
        ax.plot(steps, [float(r[k]) for r in rows], label=k, linewidth=1)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (sum over decoder layers)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title(f"Sparse4D training on the synthetic dataset ({os.path.basename(os.path.dirname(os.path.abspath(log_path)))})")
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python3 -m s4d.sparse4d.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny", choices=["tiny", "v3"])
    ap.add_argument("--out", default=None, help="run folder (default runs/<preset>)")
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--batch", type=int, default=4, help="sequences side by side")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=1e-2)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--clip", type=float, default=10.0, help="gradient norm clip")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--aggregation", default="auto", choices=["auto", "ext", "reference"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (0: torch's default; 1 is fastest on a shared machine)")
    ap.add_argument("--train-sequences", type=int, default=DEFAULT_SEQUENCES["train"])
    ap.add_argument("--eval-sequences", type=int, default=DEFAULT_SEQUENCES["val"],
                    help="validation sequences to evaluate at the end (0: none)")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--save-every", type=int, default=500)
    ap.add_argument("--dn-groups", type=int, default=DN_GROUPS,
                    help="denoising query groups (0: no denoising)")
    ap.add_argument("--no-many", dest="many", action="store_false",
                    help="leave out the one-to-many box regression (losses.py)")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    ap.add_argument("--stop-after", type=int, default=0,
                    help="stop (resumably) after this step; the schedule stays that of --steps")
    ap.add_argument("--weights", default=None, help="where to write the trained weights")
    args = ap.parse_args(argv)
    args.argv = list(argv)
    args.out = args.out or os.path.join("runs", args.preset)
    problems = [n for n, v in (("--steps", args.steps), ("--batch", args.batch),
                               ("--train-sequences", args.train_sequences),
                               ("--log-every", args.log_every), ("--save-every", args.save_every))
                if v < 1]
    if problems:
        print(f"train: {', '.join(problems)} must be at least 1", file=sys.stderr)
        return 2
    if args.train_sequences < args.batch:
        print(f"train: --train-sequences ({args.train_sequences}) must be at least --batch "
              f"({args.batch})", file=sys.stderr)
        return 2
    try:
        train(args)
    except (ValueError, RuntimeError, OSError, FloatingPointError) as e:
        print(f"train: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
