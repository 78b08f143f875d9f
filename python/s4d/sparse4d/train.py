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


CENTRE_SCALE = 16.0  # pixels: the unit of the centre offsets


class DenseAux(nn.Module):
    """Training-only dense supervision of the first FPN levels (upstream's
    dense depth branch, extended): per feature cell, the log depth and the
    class of the object seen there (or background), and on objects where
    the object's centre lies (pixel offset, log depth), from the renderer.
    It gives the backbone, trained from scratch, a dense signal where the
    head's sparse sampling gives a thin one. Not exported."""

    def __init__(self, channels: int, num_labels: int):
        super().__init__()
        self.num_labels = num_labels
        self.conv = nn.Sequential(nn.Conv2d(channels, channels, 3, 1, 1), nn.ReLU(inplace=True),
                                  nn.Conv2d(channels, 1 + num_labels + 3, 1))

    def loss(self, maps, dense) -> torch.Tensor:
        total = 0.0
        weight = torch.ones(self.num_labels, device=maps[0].device)
        weight[0] = 0.25  # background is most of every image
        k = self.num_labels
        for level, (depth, label, centre) in enumerate(dense):
            out = self.conv(maps[level])
            depth = depth.reshape(out.shape[0], *out.shape[2:]).float()
            label = label.reshape(out.shape[0], *out.shape[2:]).long()
            valid = (depth > 0) & (depth < DENSE_MAX_DEPTH)
            if valid.any():
                total = total + (out[:, 0] - depth.clamp_min(1e-3).log()).abs()[valid].mean()
            total = total + F.cross_entropy(out[:, 1:1 + k], label, weight=weight)
            centre = centre.reshape(out.shape[0], *out.shape[2:], 3).float()
            on = torch.isfinite(centre[..., 2]) & (centre[..., 2] > 0)
            if on.any():
                want = torch.cat([centre[on][:, :2] / CENTRE_SCALE,
                                  centre[on][:, 2:].clamp_min(1e-3).log()], 1)
                got = out[:, 1 + k:].permute(0, 2, 3, 1)[on]
                total = total + (got - want).abs().sum(1).mean()
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
    """The B sequences (indices into the worker's TrainSet) of round `rnd` (a
    round is one sequence length of steps): a seeded permutation per epoch,
    the remainder dropped."""
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


FOCUS_LOGIT = 4.0


def focus_groups(model, strength: float = FOCUS_LOGIT) -> None:
    """Starts each channel group of the deformable aggregation looking at one
    of the fixed key points (centre, +-x, +-y, +-z; the eighth and any further
    group at all of them): a bias on its aggregation weights' logits. With
    the near-uniform weights of the usual initialisation, every group averages
    all key points alike, so the aggregated feature cannot tell on which side
    of the anchor the object lies, and from scratch the head is slow to learn
    to localise; with one key point per group it can from the first steps."""
    from .layers import DeformableFeatureAggregation
    for layer in model.head.layers:
        if isinstance(layer, DeformableFeatureAggregation):
            g, lv, p = layer.num_groups, layer.num_levels, layer.num_pts
            bias = torch.zeros(lv, p, g)  # the layout of weights_fc's output (levels, points, groups)
            for k in range(min(g - 1, 7)):
                bias[:, k, k] = strength
            with torch.no_grad():
                layer.weights_fc.bias.copy_(bias.reshape(-1))


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
    """Runs the training, in --workers processes when asked (CPU: one per
    core, gradients averaged every step); returns the result of worker 0."""
    if args.workers > 1:
        if args.device != "cpu":
            raise ValueError("--workers > 1 is for CPU training (one process per core)")
        if args.batch % args.workers:
            raise ValueError(f"--batch ({args.batch}) must be a multiple of --workers "
                             f"({args.workers})")
        import socket
        import torch.multiprocessing as mp
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        ctx = mp.get_context("spawn")
        results = ctx.Manager().dict()
        mp.start_processes(_worker, args=(args, port, results), nprocs=args.workers,
                           start_method="spawn")
        if "error" in results:
            raise RuntimeError(results["error"])
        return dict(results.get("result", {}))
    return _train(args, 0, 1)


def _worker(rank: int, args, port: int, results) -> None:
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.workers)
    try:
        out = _train(args, rank, args.workers)
        if rank == 0:
            results["result"] = out
    except (ValueError, RuntimeError, OSError, FloatingPointError) as e:
        results["error"] = f"worker {rank}: {e}"
        raise
    finally:
        dist.destroy_process_group()


def _all_mean(values: List[float], world: int) -> List[float]:
    if world == 1:
        return values
    import torch.distributed as dist
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t)
    return (t / world).tolist()


def _train(args, rank: int, world: int) -> Dict:
    """One worker: sequences rank, rank + world, ... of the split, batch / world
    of them per step; gradients are averaged over the workers."""
    torch.manual_seed(args.seed)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    log = _log if rank == 0 else (lambda msg: None)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: torch sees no CUDA device")
    cfg = get_preset(args.preset, **TRAIN_OVERRIDES)
    os.makedirs(args.out, exist_ok=True)
    last_path = os.path.join(args.out, "last.pt")
    resume = None
    if args.resume and os.path.exists(last_path):
        resume = torch.load(last_path, map_location="cpu")
        if resume["args"]["preset"] != args.preset or resume["args"]["seed"] != args.seed or \
                resume["args"].get("workers", 1) != world:
            raise ValueError(f"{last_path}: made with other --preset/--seed/--workers; use "
                             "another --out")
    t_start, cpu_start = time.time(), time.process_time()
    own = list(range(rank, args.train_sequences, world))
    data = TrainSet(cfg, "train", own, SEQUENCE_LENGTH, log=log)
    log(f"{args.train_sequences} sequences x {SEQUENCE_LENGTH} frames rendered in "
        f"{time.time() - t_start:.0f} s ({world} worker{'s' if world > 1 else ''})")
    local_batch = args.batch // world

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
    boxes = data.all_boxes()
    if world > 1:  # every worker clusters all the boxes, in rank order: the same anchors
        import torch.distributed as dist
        gathered = [None] * world
        dist.all_gather_object(gathered, boxes)
        boxes = np.concatenate(gathered)
    with torch.no_grad():
        model.head.instance_bank.anchor.copy_(torch.from_numpy(
            kmeans_anchors(boxes, cfg.num_anchor, seed=args.seed)))
    if args.focus:
        focus_groups(model)
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
    step, elapsed, cpu_used = 0, 0.0, 0.0
    state = None
    if resume is not None:
        model.load_state_dict(resume["model"])
        aux.load_state_dict(resume["aux"])
        opt.load_state_dict(resume["optimizer"])
        step, elapsed, cpu_used = resume["step"], resume["elapsed"], resume.get("cpu", 0.0)
        if resume["state"][rank]:
            state = HeadState(*[t.to(device) for t in resume["state"][rank]])
        log(f"resumed from {last_path} at step {step}")
    log_path = os.path.join(args.out, "log.csv")
    if rank == 0 and (resume is None or not os.path.exists(log_path)):
        with open(log_path, "w", newline="") as f:
            csv.writer(f).writerow(["step", "loss", *LOSS_TERMS, "lr", "frames_per_s",
                                    "elapsed_s"])
    log(f"preset {args.preset} ({cfg.image_hw[0]}x{cfg.image_hw[1]}, {cfg.num_anchor} anchors), "
        f"device {device}, aggregation {aggregation}, batch {args.batch}, {args.steps} steps")

    run = {"loss": 0.0, **{k: 0.0 for k in LOSS_TERMS}, "n": 0}
    t_log, cpu_log = time.time(), time.process_time()
    frames_since = 0
    stop = min(args.steps, args.stop_after or args.steps)
    while step < stop:
        rnd, frame = divmod(step, SEQUENCE_LENGTH)
        seqs = sequences_for_round(rnd, len(data), local_batch, args.seed + 7919 * rank)
        batch = data.batch(seqs, frame, device)
        if frame == 0 or state is None:
            state = zeros_state(cfg, local_batch, device=device)
        lr = lr_at(step, args.steps, args.lr, args.warmup)
        for group in opt.param_groups:
            group["lr"] = lr
        images = augment(normalise_images(cfg, batch["images"]), step, args.seed + 7919 * rank)
        b, n = images.shape[:2]
        maps = model.backbone.img_neck(model.backbone.img_backbone(
            images.reshape((b * n,) + tuple(images.shape[2:]))))
        dn = dn_group = dn_info = None
        if args.dn_groups > 0:
            g = torch.Generator().manual_seed((args.seed + 7919 * rank) * 1_000_003 + step + 7)
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
        if world > 1:
            _average_gradients(params, world)
        torch.nn.utils.clip_grad_norm_(params, args.clip)
        opt.step()
        state = detach_state(out["state"])
        step += 1
        frames_since += args.batch
        run["loss"] += float(loss.detach())
        for k in LOSS_TERMS:
            run[k] += parts.get(k, 0.0)
        run["n"] += 1
        if step % args.log_every == 0 or step == stop:
            now, cpu_now = time.time(), time.process_time()
            elapsed += now - t_log
            cpu_used += _all_mean([cpu_now - cpu_log], world)[0] * world
            fps = frames_since / max(now - t_log, 1e-9)
            t_log, cpu_log, frames_since = now, cpu_now, 0
            keys = ("loss",) + LOSS_TERMS
            avg = dict(zip(keys, _all_mean([run[k] / run["n"] for k in keys], world)))
            eta = (args.steps - step) * args.batch / max(fps, 1e-9)
            log(f"step {step}/{args.steps}  loss {avg['loss']:.3f} (cls {avg['cls']:.3f} "
                f"box {avg['box']:.3f} cns {avg['centerness']:.3f} yns {avg['yawness']:.3f} "
                f"many {avg['many']:.3f} dn {avg['dn_cls'] + avg['dn_box']:.3f} "
                f"dense {avg['dense']:.3f})  "
                f"lr {lr:.2e}  {fps:.1f} frames/s  {elapsed / 60:.1f} min, eta {eta / 60:.1f} min")
            if rank == 0:
                with open(log_path, "a", newline="") as f:
                    csv.writer(f).writerow([step, f"{avg['loss']:.5f}"] +
                                           [f"{avg[k]:.5f}" for k in LOSS_TERMS] +
                                           [f"{lr:.3e}", f"{fps:.2f}", f"{elapsed:.1f}"])
            run = {"loss": 0.0, **{k: 0.0 for k in LOSS_TERMS}, "n": 0}
        if step % args.save_every == 0 or step == stop:
            states = _gather([t.cpu() for t in state], world)
            if rank == 0:
                torch.save({"args": vars(args), "model": model.state_dict(),
                            "aux": aux.state_dict(), "optimizer": opt.state_dict(),
                            "step": step, "elapsed": elapsed, "cpu": cpu_used,
                            "state": states}, last_path + ".tmp")
                os.replace(last_path + ".tmp", last_path)

    total_s = time.time() - t_start
    if step < args.steps:
        log(f"stopped at step {step} of {args.steps}: continue with --resume")
        return {"steps": step}
    _average_buffers(model, world)  # BatchNorm statistics of every worker's images
    if rank != 0:
        return {}
    log(f"trained {step} steps; training {elapsed / 60:.1f} min, with rendering "
        f"{total_s / 60:.1f} min; {cpu_used / 60:.1f} CPU minutes in training")
    plot_curve(log_path, os.path.join(args.out, "curve.png"))
    weights = args.weights or os.path.join(args.out, f"sparse4d_{args.preset}_synthetic.pt")
    meta = {"command": "python3 -m s4d.sparse4d.train " + " ".join(args.argv),
            "machine": _machine(), "device": str(device), "workers": world, "steps": step,
            "train_minutes": round(elapsed / 60, 2), "total_minutes": round(total_s / 60, 2),
            "train_cpu_minutes": round(cpu_used / 60, 2),
            "train_sequences": args.train_sequences, "aggregation": aggregation}
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
    log(f"weights: {weights} ({os.path.getsize(weights) / 1e6:.1f} MB)")
    return result


def _average_gradients(params, world: int) -> None:
    """Sum the gradients of every worker in one flat buffer, then divide."""
    import torch.distributed as dist
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for p, g in zip(params, grads):
        n = g.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone()
        offset += n


def _average_buffers(model, world: int) -> None:
    if world == 1:
        return
    import torch.distributed as dist
    for name, buf in model.named_buffers():
        if buf.is_floating_point() and "running" in name:
            dist.all_reduce(buf)
            buf /= world


def _gather(obj, world: int):
    if world == 1:
        return [obj]
    import torch.distributed as dist
    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


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
    ap.add_argument("--workers", type=int, default=1,
                    help="CPU training processes (one per core), gradients averaged")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (0: torch's default; 1 is fastest on a shared machine)")
    ap.add_argument("--train-sequences", type=int, default=DEFAULT_SEQUENCES["train"])
    ap.add_argument("--eval-sequences", type=int, default=DEFAULT_SEQUENCES["val"],
                    help="validation sequences to evaluate at the end (0: none)")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--save-every", type=int, default=500)
    ap.add_argument("--dn-groups", type=int, default=DN_GROUPS,
                    help="denoising query groups (0: no denoising)")
    ap.add_argument("--no-focus", dest="focus", action="store_false",
                    help="keep the usual initialisation of the aggregation weights "
                         "(see focus_groups)")
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
    if args.workers < 1 or args.batch % args.workers:
        print(f"train: --batch ({args.batch}) must be a multiple of --workers ({args.workers})",
              file=sys.stderr)
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
