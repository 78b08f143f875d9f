"""1x1 convolutions as cuBLASLt products on CUDA (src/backend/cuda/ops/dense_conv.c, CONV_GEMM).

usage: conv_gemm.py S4DEXEC PLUGINS SCRATCH

Each case is a small graph of 1x1 convolutions as ResNet bottlenecks and FPN laterals have them
(bias or none, a residual Add, a ReLU, a plane whose rows are not 16-byte multiples, one image
or several), next to a 3x3 convolution that the products cannot run. Per case:
  - built with S4D_CONV_CHOICE=gemm, --dumpLayerInfo shows every 1x1 layer as products and the
    3x3 one on cuDNN; the outputs agree with a float64 NumPy evaluation;
  - the saved engine loads and gives the outputs it gave when built, bit for bit;
  - built with S4D_CONV_CHOICE=cudnn, no layer runs as products, and the outputs agree with
    float64; built as the engine chooses (timed), they agree with float64 too.
Hostile: the 3x3 layer's payload turned into a product's choice, a product's choice cut short
after the convolution's fields, and one whose cuBLASLt part is damaged, are each refused at
load with exit status 1 and a message naming the layer.
Exit 77 when there is no GPU.
"""
import os
import struct
import sys
from types import SimpleNamespace

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "engine"))
sys.path.insert(0, os.path.join(HERE, "..", "fuzz"))
from exec_util import check_reload, close, load_inputs_flag, run, says_no_gpu  # noqa: E402
from engine_file import EngineFile  # noqa: E402
from mbconv_fusion import Graph, reference  # noqa: E402
import onnx  # noqa: E402

NO_GPU = 77
CONV_GEMM = 4
RTOL, ATOL = 1e-4, 1e-4


def bottleneck(rng):
    """1x1 reduce (bias, ReLU), 3x3, 1x1 expand with bias, residual and ReLU: a ResNet block."""
    g = Graph(rng, "bottleneck")
    x = g.input("x", (3, 64, 12, 16))
    a = g.node("Relu", [g.conv(x, 64, 32, 1)])
    b = g.node("Relu", [g.conv(a, 32, 32, 3)])
    c = g.conv(b, 32, 64, 1)
    return g, [g.node("Relu", [g.node("Add", [c, x])])], 2


def laterals(rng):
    """FPN laterals: a 1x1 with bias (no activation) on one image, a bias-free one with ReLU,
    a bias-free one with a residual only; planes of 9 x 11 (rows not 16-byte multiples)."""
    g = Graph(rng, "laterals")
    x = g.input("x", (1, 24, 9, 11))
    y = g.conv(x, 24, 16, 1)
    z = g.node("Relu", [g.conv(y, 16, 16, 1, bias=False)])
    r = g.node("Add", [g.conv(z, 16, 16, 1, bias=False), z])
    t = g.conv(r, 16, 8, 3)
    return g, [r, t], 3


def plain(rng):
    """One 1x1 with neither bias nor activation over two images."""
    g = Graph(rng, "plain")
    x = g.input("x", (2, 40, 7, 8))
    y = g.conv(x, 40, 12, 1, bias=False)
    return g, [y, g.conv(y, 12, 4, 3)], 1


def conv_plans(dump):
    """(layer name, plan) of each Conv / FusedConv layer in --dumpLayerInfo's output."""
    out = []
    for line in dump.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[0].isdigit() and parts[2] in ("Conv", "FusedConv"):
            out.append((parts[1], line.split("plan:", 1)[-1]))
    return out


def build(args, d, model, flags_in, env_choice, tag, engine=None, env_extra=None, extra_flags=()):
    """Builds and runs the model on CUDA with S4D_CONV_CHOICE=env_choice (None: unset), the
    variables of env_extra and s4dexec's extra_flags; the completed process, its outputs in d/<tag>."""
    env = dict(os.environ)
    env.pop("S4D_CONV_CHOICE", None)
    env.pop("S4D_CONV_WINOGRAD", None)
    if env_choice:
        env["S4D_CONV_CHOICE"] = env_choice
    env.update(env_extra or {})
    extra = ([f"--saveEngine={engine}"] if engine else []) + list(extra_flags)
    return run(args[0], [f"--onnx={model}", f"--plugins={args[1]}", "--device=cuda", "--iterations=1",
                         "--warmUp=0", "--dumpLayerInfo", flags_in, f"--exportOutput={d}/{tag}"] + extra,
               env=env, check=False)


def agree(d, tag, want, msgs):
    for k, w in want.items():
        ok, why = close(np.load(f"{d}/{tag}/{k}.npy"), w, RTOL, ATOL)
        if not ok:
            msgs.append(f"{tag}: output {k} against float64: {why}")


def u32s(b):
    return list(struct.unpack(f"<{len(b) // 4}I", b))


def mode_layers(engine, mode):
    """The engine's convolution layers whose payload has `mode`, and the others."""
    convs = [l for l in EngineFile.load(engine).layers if l["op_type"] in ("Conv", "FusedConv")]
    hit = [l for l in convs if len(l["backend_payload"]) > 24 and u32s(l["backend_payload"][:24])[2] == mode]
    return hit, [l for l in convs if l not in hit]


def forced_build(args, scratch, gr, outs, choice, tag):
    """Saves the case's model in scratch/<name> and builds it with S4D_CONV_CHOICE=choice into
    <tag>.s4de there: NO_GPU when there is no GPU, None when the build failed (printed), else
    (directory, the build's stdout, model, inputs flag, float64 outputs, engine path)."""
    d = os.path.join(scratch, gr.name)
    os.makedirs(d, exist_ok=True)
    model = os.path.join(d, "model.onnx")
    onnx.save(gr.model(outs), model)
    flags_in = load_inputs_flag(d, gr.inputs)
    engine = os.path.join(d, f"{tag}.s4de")
    p = build(args, d, model, flags_in, choice, tag, engine)
    said = p.stderr + p.stdout
    if p.returncode != 0:
        if says_no_gpu(said):
            print(f"skip: no GPU here: {said.strip().splitlines()[-1:]}")
            return NO_GPU
        print(f"FAIL {gr.name}: the build with S4D_CONV_CHOICE={choice} failed: {said.strip()}")
        return None
    return d, p.stdout, model, flags_in, reference(gr), engine


def agree_and_reload(args, d, tag, want, engine, flags_in, msgs):
    """d/<tag>'s outputs against float64, and the saved engine reloaded gives them bit for bit."""
    agree(d, tag, want, msgs)
    built = {k: np.load(f"{d}/{tag}/{k}.npy") for k in want}
    check_reload(SimpleNamespace(s4dexec=args[0], plugins=args[1]), engine, flags_in, d, built, "engine", msgs)


def hostile(args, d, engine, flags_in, msgs):
    """Edits of the engine's convolution payloads, each refused at load naming the layer."""
    gemm, other = mode_layers(engine, CONV_GEMM)
    if not gemm or not other:
        msgs.append(f"hostile: expected layers with and without products, found {len(gemm)} and {len(other)}")
        return
    refused_edits(args, d, engine, flags_in, gemm[0], other[0], CONV_GEMM,
                  ("a 3x3 layer stored as products", "1x1 convolution"), "a product's choice", msgs)


def refused_edits(args, d, engine, flags_in, g, o, mode, wrong, choice, msgs):
    """Three edits of the engine, each refused at load naming the layer: layer o's payload stored
    as g's (mode `mode`; wrong: what that is and a word of its refusal), g's choice cut short after
    the convolution's fields, and g's with its cuBLASLt part damaged."""
    head = bytearray(o["backend_payload"][:24])
    struct.pack_into("<I", head, 8, mode)
    bad_lt = bytearray(g["backend_payload"])
    struct.pack_into("<I", bad_lt, 24, 0x12345678)  # the cuBLASLt choice's magic
    edits = [(wrong[0], o, bytes(head) + g["backend_payload"][24:], wrong[1]),
             (f"{choice} cut short", g, g["backend_payload"][:24], "not the size"),
             ("a damaged cuBLASLt choice", g, bytes(bad_lt), "cuBLASLt")]
    for what, layer, payload, want in edits:
        e = EngineFile.load(engine)
        [l for l in e.layers if l["name"] == layer["name"]][0]["backend_payload"] = payload
        path = os.path.join(d, "hostile.s4de")
        e.save(path)
        p = run(args[0], [f"--loadEngine={path}", f"--plugins={args[1]}", "--iterations=1", "--warmUp=0",
                          flags_in], check=False)
        said = p.stderr + p.stdout
        if p.returncode != 1 or want not in said or layer["name"] not in said:
            msgs.append(f"hostile ({what}): exit {p.returncode}, want 1 and '{want}' naming "
                        f"{layer['name']}: {said.strip().splitlines()[-1:]}")


def run_cases(doc, makers, seed, choice, tag, check):
    """The scripts' main: each case made with one generator of `seed`, built with
    S4D_CONV_CHOICE=choice (forced_build), then check(args, case name, expected layer count, the
    build, msgs) appends its problems to msgs and returns the rest of the case's line."""
    if len(sys.argv) != 4:
        print(doc)
        return 2
    args = sys.argv[1:]
    rng = np.random.default_rng(seed)
    failures = 0
    for make in makers:
        gr, outs, n = make(rng)
        got = forced_build(args, args[2], gr, outs, choice, tag)
        if got == NO_GPU:
            return NO_GPU
        if got is None:
            failures += 1
            continue
        msgs = []
        line = check(args, gr.name, n, got, msgs)
        print(f"{'ok' if not msgs else 'FAIL'} {gr.name}: {line}")
        for m in msgs:
            print("   ", m)
        failures += bool(msgs)
    print(f"{len(makers) - failures} of {len(makers)} cases pass")
    return 1 if failures else 0


def check_case(args, name, n_gemm, got, msgs):
    d, stdout, model, flags_in, want, engine = got
    plans = conv_plans(stdout)
    as_gemm = [n for n, pl in plans if "1x1 as products" in pl]
    if len(as_gemm) != n_gemm or len(plans) != n_gemm + 1:
        msgs.append(f"gemm: {len(as_gemm)} of {len(plans)} convolution layers as products, want {n_gemm} "
                    f"of {n_gemm + 1}: {plans}")
    agree_and_reload(args, d, "gemm", want, engine, flags_in, msgs)
    for choice in ("cudnn", None):
        tag = choice or "timed"
        p = build(args, d, model, flags_in, choice, tag)
        if p.returncode != 0:
            msgs.append(f"{tag}: the build failed: {(p.stderr + p.stdout).strip()}")
            continue
        if choice == "cudnn" and any("1x1 as products" in pl for _, pl in conv_plans(p.stdout)):
            msgs.append("cudnn: a layer runs as products under S4D_CONV_CHOICE=cudnn")
        agree(d, tag, want, msgs)
    if name == "laterals":
        hostile(args, d, engine, flags_in, msgs)
    return f"{n_gemm} 1x1 layers"


def main():
    return run_cases(__doc__, (bottleneck, laterals, plain), 1234, "gemm", "gemm", check_case)


if __name__ == "__main__":
    sys.exit(main())
