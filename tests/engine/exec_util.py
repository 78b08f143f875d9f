"""What the engine's script tests share: running s4dexec, reading the layer list that
--dumpLayerInfo prints, saving inputs for --loadInputs, comparing outputs, and refusing
hostile edits of one fused layer in an engine file."""
import argparse
import os
import subprocess

import numpy as np
import onnx


def run(exe, args, env=None, check=True):
    """s4dexec with args; a failure raises with its stderr unless check is False."""
    p = subprocess.run([exe] + args, capture_output=True, text=True, errors="replace", timeout=300,
                       env=env)
    if check and p.returncode != 0:
        raise RuntimeError(f"s4dexec {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def layer_types(dump, mark_views=False):
    """Op types of the layer list; with mark_views a view's type gets "(view)" and a copy
    between devices (placement's "copy X -> dev" line) is "Copy"."""
    types = []
    for line in dump.splitlines():
        parts = line.split()
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        if mark_views and parts[1] == "copy":
            types.append("Copy")
        elif mark_views and parts[-1] == "view":
            types.append(parts[2] + "(view)")
        else:
            types.append(parts[2])
    return types


def load_inputs_flag(d, inputs):
    """Saves each input as d/in_<name>.npy; the --loadInputs flag that reads them."""
    specs = []
    for k, a in inputs.items():
        f = os.path.join(d, f"in_{k}.npy")
        np.save(f, a)
        specs.append(f"{k}:{f}")
    return "--loadInputs=" + ",".join(specs)


def close(got, want, rtol, atol):
    """(ok, message): bools equal, NaN at the same places, the rest within atol + rtol*|want|."""
    if want.dtype == np.bool_ or got.dtype == np.bool_:
        bad = int(np.sum(got.astype(np.bool_) != want.astype(np.bool_)))
        return bad == 0, f"{bad} of {want.size} bools differ"
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    if np.any(nan_g != nan_w):
        return False, f"NaN at different places ({int(nan_g.sum())} vs {int(nan_w.sum())})"
    g, w = np.where(nan_g, 0, got).astype(np.float64), np.where(nan_w, 0, want)
    err = np.abs(g - w)
    bad = err > atol + rtol * np.abs(w)
    return not bad.any(), f"max abs err {err.max() if err.size else 0:.3g}, {int(bad.sum())} of {err.size} beyond tolerance"


def fused_layer_of(e, op_type):
    """The one layer of op_type in engine file e (engine_file.EngineFile)."""
    hits = [l for l in e.layers if l["op_type"] == op_type]
    if len(hits) != 1:
        raise RuntimeError(f"expected one {op_type} layer, found {len(hits)}")
    return hits[0]


def fusion_arg_parser():
    """The arguments every fusion script takes: S4DEXEC PLUGINS SCRATCH [--device] [-k NAME]."""
    ap = argparse.ArgumentParser()
    ap.add_argument("s4dexec")
    ap.add_argument("plugins")
    ap.add_argument("scratch")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("-k", default="")
    return ap


def prepared_cases(args, makers, rng):
    """Each case make(rng) of makers whose name holds args.k, its ONNX model saved under
    SCRATCH/<name> and its inputs there too: (case, folder, the --loadInputs flag)."""
    for make in makers:
        case = make(rng)
        if args.k and args.k not in case.name:
            continue
        d = os.path.join(args.scratch, case.name)
        os.makedirs(d, exist_ok=True)
        onnx.save(case.gr.model(case.gr.outputs), os.path.join(d, "model.onnx"))
        yield case, d, load_inputs_flag(d, case.gr.inputs)


def check_reload(args, engine, inputs, d, built, what, msgs):
    """The saved engine loads with the case's inputs and gives the outputs built (name -> array)
    bit for bit; what names the engine in the messages appended to msgs."""
    p = run(args.s4dexec, [f"--loadEngine={engine}", f"--plugins={args.plugins}", "--iterations=1",
                           "--warmUp=0", inputs, f"--exportOutput={d}/loaded"], check=False)
    if p.returncode != 0:
        msgs.append(f"the saved {what} does not load: {p.stderr.strip()}")
        return
    for k, a in built.items():
        if np.load(f"{d}/loaded/{k}.npy").tobytes() != a.tobytes():
            msgs.append(f"output {k}: the loaded {what} differs from the built one")


def run_dump(args, d, path, inputs, outd, device=None, env=None, flags=()):
    """One run of the model at path on the device (args.device by default) with the inputs saved
    under d, its layer list dumped and its outputs exported to outd; the layer types."""
    p = run(args.s4dexec, [f"--onnx={path}", f"--plugins={args.plugins}", f"--device={device or args.device}",
                           "--iterations=1", "--warmUp=0", "--dumpLayerInfo",
                           load_inputs_flag(d, inputs), f"--exportOutput={outd}"] + list(flags), env)
    return layer_types(p.stdout)


def report_case(name, msgs, layers_before, layers_after, fused, op_type, failures):
    """Prints a fusion case's line (ok or FAIL, the layer counts) and its messages; a failing
    case's name goes to failures."""
    print(f"{'ok' if not msgs else 'FAIL'} {name}: {layers_before} layers -> {layers_after} "
          f"({fused} {op_type})")
    for m in msgs:
        print("   ", m)
    if msgs:
        failures.append(name)


def summary(ran, failures):
    """The last line of a fusion test; its exit code (1 when a case failed or none ran)."""
    if not ran:
        print("no case matched")
        return 1
    print(f"{ran - len(failures)} of {ran} cases pass")
    return 1 if failures else 0


def s4dexec_plugins(exe, plugins, args):
    """s4dexec with the plugins, one iteration, no warm-up; the completed process."""
    return subprocess.run([exe, f"--plugins={plugins}", "--iterations=1", "--warmUp=0"] + args,
                          capture_output=True, text=True, errors="replace", timeout=120)


def layer_attr(layer, name):
    """The attribute `name` of an engine file's layer, or None."""
    for a in layer["attrs"]:
        if a["name"] == name:
            return a
    return None


def build_good_engine(exe, plugins, scratch, model):
    """Saves the ONNX model under scratch and builds SCRATCH/good.s4de from it, exporting its
    outputs to SCRATCH/built; the engine's path, or None (with a FAIL line) when the build fails."""
    os.makedirs(scratch, exist_ok=True)
    onnx_path = os.path.join(scratch, "model.onnx")
    onnx.save(model, onnx_path)
    engine = os.path.join(scratch, "good.s4de")
    p = s4dexec_plugins(exe, plugins, [f"--onnx={onnx_path}", f"--saveEngine={engine}",
                                       f"--exportOutput={scratch}/built"])
    if p.returncode != 0:
        print(f"FAIL building the engine: {p.stderr.strip()}")
        return None
    return engine


def check_hostile_layers(exe, plugins, scratch, engine, op_type, cases, what):
    """The engine file at `engine` (built with --exportOutput=SCRATCH/built, output "o") must
    load and run as built, as written and after a round trip through engine_file.py; then every
    (name, edit, want) of cases, edit applied to its op_type layer, must fail the load with exit 1
    and a message holding `want` and the layer's name. Returns the number of failures."""
    from engine_file import EngineFile  # tests/fuzz, on the caller's path

    def s4dexec(args):
        return s4dexec_plugins(exe, plugins, args)

    good = EngineFile.load(engine)
    name = fused_layer_of(good, op_type)["name"]
    failures = 0
    rt = os.path.join(scratch, "roundtrip.s4de")
    good.save(rt)
    for path in (engine, rt):
        p = s4dexec([f"--loadEngine={path}", f"--exportOutput={scratch}/loaded"])
        same = p.returncode == 0 and np.array_equal(np.load(f"{scratch}/built/o.npy"),
                                                    np.load(f"{scratch}/loaded/o.npy"))
        if not same:
            print(f"FAIL {os.path.basename(path)}: does not load and run as built: {p.stderr.strip()}")
            failures += 1
    for case, edit, want in cases:
        e = EngineFile.load(engine)
        edit(fused_layer_of(e, op_type))
        path = os.path.join(scratch, f"{case}.s4de")
        e.save(path)
        p = s4dexec([f"--loadEngine={path}"])
        msg = (p.stderr.strip().splitlines() or [""])[-1]
        ok = p.returncode == 1 and want in p.stderr and name in p.stderr
        print(f"{'ok' if ok else 'FAIL'} {case}: exit {p.returncode}: {msg}")
        if not ok:
            print(f"    expected exit 1 and a message with '{want}' naming '{name}'")
            failures += 1
    print(f"{len(cases)} hostile {what}, {failures} failures")
    return failures
