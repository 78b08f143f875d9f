"""PyTorch reference time of the Sparse4Dv3 backbone (ResNet50 + FPN, 6 x 3 x 256 x 704).

    python3 bench/dense/torch_backbone.py [--iters 50] [--warmup 10] [--export FILE]

--export FILE writes the backbone's ONNX graph (as s4d.sparse4d.export does, without the
head) and exits. Otherwise prints one line per mode: eager float32 with TF32 off (what an s4d engine built without
--tf32 matches), eager with TF32 on, and the same with torch.backends.cudnn.benchmark,
each the median of CUDA-event timings. Needs torch with CUDA.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from s4d.sparse4d.model import build_model  # noqa: E402


def time_ms(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2], ts[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--export", help="write the backbone ONNX here and exit")
    args = ap.parse_args()
    if args.export:
        from s4d.sparse4d import export as ex
        model = build_model("v3", aggregation="reference", seed=0)
        os.makedirs(os.path.dirname(os.path.abspath(args.export)), exist_ok=True)
        ins = ex.example_inputs(model.cfg)
        ex._export(ex.BackboneGraph(model), (ins["images"],), args.export, ["images"], ["features"])
        ex._inline_identities(args.export)
        print(f"backbone: {args.export}")
        return 0
    if not torch.cuda.is_available():
        print("torch_backbone: no CUDA device")
        return 77
    model = build_model("v3", aggregation="reference", seed=0).backbone.cuda().eval()
    x = torch.randn(6, 3, 256, 704, device="cuda")
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cudnn {torch.backends.cudnn.version()}")
    with torch.no_grad():
        for bench in (False, True):
            for tf32 in (False, True):
                torch.backends.cudnn.benchmark = bench
                torch.backends.cudnn.allow_tf32 = tf32
                torch.backends.cuda.matmul.allow_tf32 = tf32
                med, best = time_ms(lambda: model(x), args.iters, args.warmup)
                print(f"torch backbone eager fp32 tf32={'on ' if tf32 else 'off'} "
                      f"cudnn.benchmark={'on ' if bench else 'off'}: median {med:.3f} ms, min {best:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
