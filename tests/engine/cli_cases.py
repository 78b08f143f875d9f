"""s4dexec command-line cases, one per CTest.

usage: cli_cases.py CASE S4DEXEC MODELS_DIR PLUGIN_LIB SCRATCH_DIR
Each case runs s4dexec and checks its exit status and what it prints.
"""
import os
import shutil
import subprocess
import sys

import numpy as np

CASE, EXE, MODELS, PLUGINS, SCRATCH = sys.argv[1:6]
DA_INPUTS = ",".join(f"{n}:{os.path.join(MODELS, 'da_in_' + n + '.npy')}"
                     for n in ("feat_in", "query", "sampling_location"))


def run(*args, ok=True, env=None):
    p = subprocess.run([EXE, *args], capture_output=True, text=True, errors="replace", timeout=100,
                       env=env)
    print("$ s4dexec", " ".join(args))
    print(p.stdout, end="")
    print(p.stderr, end="", file=sys.stderr)
    if ok and p.returncode != 0:
        sys.exit(f"expected success, got exit {p.returncode}")
    if not ok:
        if p.returncode == 0:
            sys.exit("expected failure, got exit 0")
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        if len(lines) != 1 or not lines[0].startswith("s4dexec: error: "):
            sys.exit(f"expected one 's4dexec: error:' line on stderr, got {lines!r}")
    return p


def expect(text, *needles):
    for n in needles:
        if n not in text:
            sys.exit(f"missing {n!r} in output")


def m(name):
    return os.path.join(MODELS, name)


def scratch(name):
    d = os.path.join(SCRATCH, CASE)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def case_help():
    p = run("--help")
    expect(p.stdout, "--onnx", "--plugins", "--saveEngine", "--loadEngine", "--fp16",
           "--iterations", "--warmUp", "--loadInputs", "--exportOutput", "--dumpLayerInfo",
           "--dumpProfile", "--verbose", "--device", "--compareOutputs", "--rtol", "--atol")


def case_onnx_plugins():
    # The plugin through --plugins, and the alias node through the same library.
    p = run(f"--onnx={m('da.onnx')}", f"--plugins={PLUGINS}", "--iterations=3", "--verbose")
    expect(p.stdout, "s4d::DeformableAggregation:1", "median", "p90", "PASSED")
    p = run(f"--onnx={m('da_alias.onnx')}", f"--plugins={PLUGINS}", "--iterations=1",
            "--dumpLayerInfo")
    expect(p.stdout, "custom::DeformableAttentionAggrPlugin:1")


def case_save_load():
    eng = scratch("da.s4de")
    out1, out2 = scratch("out1"), scratch("out2")
    run(f"--onnx={m('da.onnx')}", f"--plugins={PLUGINS}", f"--saveEngine={eng}",
        f"--loadInputs={DA_INPUTS}", f"--exportOutput={out1}", "--iterations=1")
    run(f"--loadEngine={eng}", f"--plugins={PLUGINS}", f"--loadInputs={DA_INPUTS}",
        f"--exportOutput={out2}", "--iterations=1")
    a, b = np.load(os.path.join(out1, "out.npy")), np.load(os.path.join(out2, "out.npy"))
    if a.tobytes() != b.tobytes() or not np.any(a):
        sys.exit("outputs differ after save -> load (or are all zero)")
    # Loading the engine without the plugin library names the key.
    p = run(f"--loadEngine={eng}", ok=False)
    expect(p.stderr, "DeformableAggregation", "'s4d'")


def case_compare_golden():
    p = run(f"--onnx={m('da.onnx')}", f"--plugins={PLUGINS}", f"--loadInputs={DA_INPUTS}",
            f"--compareOutputs={m('da_golden')}", "--rtol=1e-4", "--atol=1e-6", "--iterations=1")
    expect(p.stdout, "max_abs=", "rel_l2=", "cosine=", "ok")
    p = run(f"--onnx={m('mlp.onnx')}", f"--loadInputs=x:{m('mlp_in/x.npy')}",
            f"--compareOutputs={m('mlp_golden')}", "--iterations=1")
    expect(p.stdout, "[compare] y", "[compare] z")


def case_compare_fail():
    bad = scratch("golden")
    os.makedirs(bad, exist_ok=True)
    g = np.load(m("da_golden/out.npy")).copy()
    g.flat[3] += 0.5
    np.save(os.path.join(bad, "out.npy"), g)
    p = run(f"--onnx={m('da.onnx')}", f"--plugins={PLUGINS}", f"--loadInputs={DA_INPUTS}",
            f"--compareOutputs={bad}", "--iterations=1", ok=False)
    expect(p.stdout, "FAIL")
    expect(p.stderr, "'out'", "1 of", "flat index 3")


def case_export():
    out = scratch("export")
    shutil.rmtree(out, ignore_errors=True)
    run(f"--onnx={m('mlp.onnx')}", f"--exportOutput={out}", "--iterations=2", "--warmUp=0")
    y, z = np.load(os.path.join(out, "y.npy")), np.load(os.path.join(out, "z.npy"))
    if y.shape != (2, 4) or z.shape != (2, 4) or y.dtype != np.float32:
        sys.exit(f"bad exported shapes {y.shape} {z.shape} {y.dtype}")
    # Softmax rows (after the transpose: columns of y pairs) are positive.
    if not np.all(y > 0):
        sys.exit("exported y is not a softmax output")


def case_dump():
    p = run(f"--onnx={m('da.onnx')}", f"--plugins={PLUGINS}", "--dumpLayerInfo",
            "--dumpProfile", "--iterations=2")
    # the weight projection's MatMul + bias Add is fused into one FusedMatMul layer; its two
    # Reshapes run as views of their inputs, in 0 ms
    expect(p.stdout, "[layers] 8 layers, 2 views (no kernel)", "FusedMatMul", "Softmax",
           "float32[1,5,8]", "activations:", "planned", "[profile]", "total")
    views = [l for l in p.stdout.splitlines() if l.endswith(" view")]
    if len(views) != 2 or not all("Reshape" in l for l in views):
        sys.exit("expected the two Reshape layers marked as views:\n" + "\n".join(views))
    prof = [l for l in p.stdout.splitlines() if "Reshape" in l and " ms " in l]
    if len(prof) != 2 or not all("0.0000 ms" in l for l in prof):
        sys.exit("the views' profile lines are not 0 ms:\n" + "\n".join(prof))


def case_bad_flags():
    run(ok=False)
    p = run("--onnx=x.onnx", "--bogus", ok=False)
    expect(p.stderr, "--bogus")
    p = run(f"--onnx={m('mlp.onnx')}", "--iterations=zero", ok=False)
    expect(p.stderr, "--iterations")
    p = run(f"--onnx={m('mlp.onnx')}", "--loadInputs=x", ok=False)
    expect(p.stderr, "name:file.npy")
    p = run(f"--onnx={m('mlp.onnx')}", f"--loadInputs=nope:{m('mlp_in/x.npy')}", ok=False)
    expect(p.stderr, "'nope'")
    p = run(f"--onnx={m('unsupported.onnx')}", ok=False)
    expect(p.stderr, "FooOp", "foo1", "foo2", "BarOp")
    p = run(f"--onnx={m('mlp.onnx')}", "--convLayout=nhcw", ok=False)
    expect(p.stderr, "--convLayout", "'nhcw'")
    trunc = scratch("trunc.onnx")
    data = open(m("mlp.onnx"), "rb").read()
    open(trunc, "wb").write(data[: len(data) // 2])
    p = run(f"--onnx={trunc}", ok=False)
    expect(p.stderr, "trunc.onnx")
    eng = scratch("mlp.s4de")
    run(f"--onnx={m('mlp.onnx')}", f"--saveEngine={eng}", "--iterations=1")
    blob = bytearray(open(eng, "rb").read())
    blob[len(blob) // 2] ^= 0x10
    open(scratch("flipped.s4de"), "wb").write(blob)
    p = run(f"--loadEngine={scratch('flipped.s4de')}", ok=False)
    expect(p.stderr, "checksum")
    open(scratch("short.s4de"), "wb").write(blob[:100])
    p = run(f"--loadEngine={scratch('short.s4de')}", ok=False)
    expect(p.stderr, "truncated")
    p = run(f"--loadEngine={eng}", "--convLayout=nhwc", ok=False)
    expect(p.stderr, "--convLayout", "apply when building")


def case_bad_npy():
    bad = scratch("bad.npy")
    open(bad, "wb").write(b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'")
    p = run(f"--onnx={m('mlp.onnx')}", f"--loadInputs=x:{bad}", ok=False)
    expect(p.stderr, "'x'", "bad.npy")
    np.save(scratch("f64.npy"), np.zeros((2, 3), np.float64))
    p = run(f"--onnx={m('mlp.onnx')}", f"--loadInputs=x:{scratch('f64.npy')}", ok=False)
    expect(p.stderr, "float64", "float32")


def case_missing_plugin():
    p = run(f"--onnx={m('da.onnx')}", ok=False)
    expect(p.stderr, "'s4d'", "'DeformableAggregation'", "'1'", "registered creators")
    p = run(f"--onnx={m('da_wrong_version.onnx')}", f"--plugins={PLUGINS}", ok=False)
    expect(p.stderr, "'7'", "registered creators")
    p = run(f"--onnx={m('da_unknown_attr.onnx')}", f"--plugins={PLUGINS}", ok=False)
    expect(p.stderr, "im2col_step", "aggregate")
    p = run(f"--onnx={m('da.onnx')}", "--plugins=/nonexistent/libnothing.so", ok=False)
    expect(p.stderr, "libnothing.so")


def case_device_cuda():
    # Without a usable GPU (no backend built, no device) the build fails naming CUDA;
    # with one, the engine builds and runs.
    p = subprocess.run([EXE, f"--onnx={m('mlp.onnx')}", "--device=cuda"], capture_output=True, text=True,
                       errors="replace", timeout=100)
    if p.returncode == 0:
        expect(p.stdout, "PASSED")
    else:
        p = run(f"--onnx={m('mlp.onnx')}", "--device=cuda", ok=False)
        expect(p.stderr.lower(), "cuda")
    p = run(f"--onnx={m('mlp.onnx')}", "--device=tpu", ok=False)
    expect(p.stderr, "cpu or cuda")


def case_fp16():
    p = run(f"--onnx={m('mlp.onnx')}", "--fp16", ok=False)
    expect(p.stderr, "fp16")


def case_wrong_input_shape():
    np.save(scratch("x23.npy"), np.zeros((3, 2), np.float32))
    p = run(f"--onnx={m('mlp.onnx')}", f"--loadInputs=x:{scratch('x23.npy')}", ok=False)
    expect(p.stderr, "[3, 2]", "[2, 3]")


def case_hostile_flags():
    # Flags once accepted silently: non-finite tolerances, empty and repeated --loadInputs.
    x = m("mlp_in/x.npy")
    for flag in ("--rtol=inf", "--atol=nan", "--rtol=-inf", "--atol=1e999"):
        p = run(f"--onnx={m('mlp.onnx')}", flag, ok=False)
        expect(p.stderr, flag.split("=")[0], "finite")
    for spec in (",,,", "", f"x:{x},", f",x:{x}", f"x:{x},,y:{x}"):
        p = run(f"--onnx={m('mlp.onnx')}", f"--loadInputs={spec}", ok=False)
        expect(p.stderr, "--loadInputs", "name:file.npy")
    p = run(f"--onnx={m('mlp.onnx')}", f"--loadInputs=x:{x},x:{scratch('other.npy')}", ok=False)
    expect(p.stderr, "'x' is given twice", "other.npy")
    p = run(f"--onnx={m('mlp.onnx')}", f"--loadInputs=x:{x}", f"--loadInputs=x:{x}", ok=False)
    expect(p.stderr, "'x' is given twice")
    # Error paths after --loadInputs was parsed: the sanitizer build reports any leak (and the
    # extra stderr lines fail run()).
    p = run(f"--onnx={scratch('missing.onnx')}", f"--loadInputs=x:{x}", ok=False)
    expect(p.stderr, "missing.onnx")
    p = run(f"--onnx={m('mlp.onnx')}", f"--loadInputs=x:{x}", "--plugins=/nonexistent/lib.so",
            ok=False)
    expect(p.stderr, "lib.so")


def case_bounded_reads():
    # Devices, directories and pipes are refused at once, before any read; a file over the size
    # limit names the limit and the variable that raises it.
    for flag in ("--onnx=", "--loadEngine="):
        for path, kind in (("/dev/zero", "a character device"), (MODELS, "a directory")):
            p = run(flag + path, ok=False)
            expect(p.stderr, path, f"not a regular file ({kind})")
    p = run(f"--onnx={m('mlp.onnx')}", "--loadInputs=x:/dev/zero", ok=False)
    expect(p.stderr, "'x'", "/dev/zero", "not a regular file")
    fifo = scratch("fifo")
    if os.path.exists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo)
    p = run(f"--onnx={fifo}", ok=False)
    expect(p.stderr, "not a regular file (a pipe)")
    size = os.path.getsize(m("mlp.onnx"))
    env = dict(os.environ, S4D_MAX_FILE_BYTES=str(size - 1))
    p = run(f"--onnx={m('mlp.onnx')}", ok=False, env=env)
    expect(p.stderr, f"{size} bytes", f"limit of {size - 1}", "S4D_MAX_FILE_BYTES")
    env["S4D_MAX_FILE_BYTES"] = str(size)
    run(f"--onnx={m('mlp.onnx')}", "--iterations=1", env=env)
    env["S4D_MAX_FILE_BYTES"] = "lots"
    p = run(f"--onnx={m('mlp.onnx')}", ok=False, env=env)
    expect(p.stderr, "S4D_MAX_FILE_BYTES='lots'")


if __name__ == "__main__":
    globals()["case_" + CASE]()
    print(f"s4dexec.{CASE}: passed")
