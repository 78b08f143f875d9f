"""NCHW against NHWC for the v3 backbone's convolution shapes, in PyTorch (cuDNN), on a GPU.

    PYTHONPATH=python python3 bench/conv_layout_probe.py

For TF32 and float16: each convolution shape of the ResNet50 + FPN backbone on 6 x 3 x 256 x
704 images (torch.backends.cudnn.benchmark, CUDA graph of 20 calls, median of 15 replays per
call), then the whole PyTorch backbone in either memory format. Prints one line per
measurement. The evidence behind channels-last convolutions (docs/cuda-backend.md).
"""
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, "python")

SHAPES = [  # name, N, C, H, W, M, kernel, stride
    ("stem 7x7 s2", 6, 3, 256, 704, 64, 7, 2),
    ("l1 1x1 256->64", 6, 256, 64, 176, 64, 1, 1),
    ("l1 3x3 64", 6, 64, 64, 176, 64, 3, 1),
    ("l1 1x1 64->256", 6, 64, 64, 176, 256, 1, 1),
    ("l2 3x3 128", 6, 128, 32, 88, 128, 3, 1),
    ("l3 3x3 256", 6, 256, 16, 44, 256, 3, 1),
    ("l4 3x3 512", 6, 512, 8, 22, 512, 3, 1),
    ("fpn 3x3 256 @64x176", 6, 256, 64, 176, 256, 3, 1),
]


def graph_ms(fn, reps=20, rounds=15):
    """Median milliseconds per call of fn, replayed as a CUDA graph of reps calls."""
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    times = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / reps)
    return sorted(times)[len(times) // 2]


def main():
    torch.backends.cudnn.benchmark = True
    dev = "cuda"
    fmts = {"nchw": torch.contiguous_format, "nhwc": torch.channels_last}
    for prec in ("tf32", "fp16"):
        torch.backends.cudnn.allow_tf32 = prec == "tf32"
        dt = torch.float16 if prec == "fp16" else torch.float32
        for name, n, c, h, w, m, k, s in SHAPES:
            r = {}
            for fmt, mf in fmts.items():
                x = torch.randn(n, c, h, w, device=dev, dtype=dt).to(memory_format=mf)
                wt = torch.randn(m, c, k, k, device=dev, dtype=dt).to(memory_format=mf)
                bias = torch.randn(m, device=dev, dtype=dt)
                r[fmt] = graph_ms(lambda: F.conv2d(x, wt, bias, s, k // 2))
            print(f"{prec} {name:24s} nchw {r['nchw'] * 1e3:8.1f} us  nhwc {r['nhwc'] * 1e3:8.1f} us  "
                  f"ratio {r['nhwc'] / r['nchw']:.2f}", flush=True)
    from s4d.sparse4d.model import build_model
    bb = build_model("v3", aggregation="reference").to(dev).eval().backbone
    x0 = torch.randn(6, 3, 256, 704, device=dev)
    for prec in ("tf32", "fp16"):
        torch.backends.cudnn.allow_tf32 = prec == "tf32"
        for fmt, mf in fmts.items():
            bb.to(memory_format=mf)
            xi = x0.contiguous(memory_format=mf)

            def run():
                with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=prec == "fp16"):
                    return bb.img_neck(bb.img_backbone(xi))
            print(f"backbone {prec} {fmt}: {graph_ms(run, reps=5, rounds=11):.3f} ms", flush=True)


if __name__ == "__main__":
    main()
