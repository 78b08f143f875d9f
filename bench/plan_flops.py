"""How much arithmetic an engine's products, attention blocks and convolutions do, and what that
alone costs at a GPU's peak rate: a floor under the engine's time that no scheduling, fusion or
launch saving can go below.

usage: python3 bench/plan_flops.py LAYERINFO.txt [--peak-tflops 66.9] [--json OUT]

LAYERINFO.txt is what `s4dexec ... --dumpLayerInfo` prints (the layer list with each layer's
input and output shapes; S4D_TEST_BACKEND=guarded with --device=cuda gives the CUDA plan on a
machine without a GPU). Counted, as 2 x multiply-adds:
  - MatMul, FusedMatMul, Gemm: 2 x (elements of the output) x K (the first input's last dim);
  - FusedMLP: 2 x rows x k x n for every [k, n] weight of the chain;
  - FusedAttention: 2 x b x h x M x N x (d + dv) (scores and the weighted sum of V);
  - Conv, FusedConv: 2 x (elements of the output) x (input channels per group) x kh x kw.
Everything else (element-wise, norms, copies, the aggregation op) is left out: small next to these
on Sparse4Dv3. --peak-tflops is the float32 FMA rate (H200 and H100 SXM: 132 SMs x 128 lanes x 2
x 1.98 GHz = 66.9 TFLOPS); TF32 and float16 run on tensor cores at other rates.
"""
import argparse
import collections
import json
import re
import sys

SHAPE = re.compile(r"(?:float32|float16|bfloat16|float64|int64|int32|int8|uint8|bool)\[([0-9,]*)\]")


def shapes(text):
    return [[int(x) for x in m.group(1).split(",") if x] for m in SHAPE.finditer(text)]


def prod(v):
    r = 1
    for x in v:
        r *= x
    return r


def layer_flops(op, ins, outs):
    """2 x multiply-adds of one layer, or 0 when the op is not counted or its shapes do not fit."""
    if not ins or not outs:
        return 0
    if op in ("MatMul", "FusedMatMul", "Gemm"):
        return 2 * prod(outs[0]) * ins[0][-1] if ins[0] else 0
    if op == "FusedMLP":
        rows = prod(ins[0][:-1])
        return sum(2 * rows * w[0] * w[1] for w in ins[1:] if len(w) == 2)
    if op == "FusedAttention" and len(ins) >= 3 and len(ins[0]) == 4 and len(ins[2]) == 4:
        b, h, m, d = ins[0]
        n, dv = ins[2][2], ins[2][3]
        return 2 * b * h * m * n * (d + dv)
    if op in ("Conv", "FusedConv") and len(ins) >= 2 and len(ins[1]) == 4:
        _, cg, kh, kw = ins[1]
        return 2 * prod(outs[0]) * cg * kh * kw
    return 0


def parse(lines):
    """(name, op, flops) of every layer line of a --dumpLayerInfo listing."""
    rows = []
    for line in lines:
        parts = line.split()
        if len(parts) < 4 or not parts[0].isdigit() or " in: " not in line or " out: " not in line:
            continue
        name, op = parts[1], parts[2]
        head, tail = line.split(" out: ", 1)
        ins = shapes(head.split(" in: ", 1)[1])
        outs = shapes(tail.split(" plan: ")[0])
        rows.append((name, op, layer_flops(op, ins, outs)))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("layerinfo")
    ap.add_argument("--peak-tflops", type=float, default=66.9)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    with open(args.layerinfo) as f:
        rows = parse(f)
    if not rows:
        print(f"plan_flops: no layer lines with shapes in {args.layerinfo}", file=sys.stderr)
        return 1
    by_op = collections.defaultdict(lambda: [0, 0])
    for _, op, fl in rows:
        if fl:
            by_op[op][0] += 1
            by_op[op][1] += fl
    total = sum(v[1] for v in by_op.values())
    floor_ms = total / (args.peak_tflops * 1e12) * 1e3
    print(f"{args.layerinfo}: {len(rows)} layers, {total / 1e9:.2f} GFLOP in products, attention and "
          f"convolutions; at {args.peak_tflops:g} TFLOPS that alone is {floor_ms:.3f} ms")
    for op, (n, fl) in sorted(by_op.items(), key=lambda kv: -kv[1][1]):
        print(f"  {op:16s} {n:4d} layers {fl / 1e9:9.2f} GFLOP {fl / (args.peak_tflops * 1e9):8.3f} ms at peak")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"layers": len(rows), "gflop": total / 1e9, "peak_tflops": args.peak_tflops,
                       "floor_ms": floor_ms,
                       "by_op": {op: {"layers": n, "gflop": fl / 1e9} for op, (n, fl) in by_op.items()}},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
