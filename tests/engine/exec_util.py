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


def output_on_threads(exe, args, d, name="y", threads=(1, 2, 3), env=None):
    """{t: output `name`} of s4dexec with args and --threads=t for each t, exported to d/t<t>."""
    outs = {}
    for t in threads:
        out = os.path.join(d, f"t{t}")
        run(exe, args + [f"--threads={t}", f"--exportOutput={out}"], env=env)
        outs[t] = np.load(os.path.join(out, f"{name}.npy"))
    return outs


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


def engine_tensor(e, name):
    """The index of the one tensor called name in engine file e (engine_file.EngineFile)."""
    hits = [i for i, t in enumerate(e.tensors) if t["name"] == name]
    if len(hits) != 1:
        raise RuntimeError(f"expected one tensor '{name}' in the engine, found {len(hits)}")
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


def check_reload(args, engine, inputs, d, built, what, msgs, env=None, outdir="loaded"):
    """The saved engine loads with the case's inputs and gives the outputs built (name -> array)
    bit for bit; what names the engine in the messages appended to msgs. env: the run's
    environment; outdir: where under d its outputs go."""
    p = run(args.s4dexec, [f"--loadEngine={engine}", f"--plugins={args.plugins}", "--iterations=1",
                           "--warmUp=0", inputs, f"--exportOutput={d}/{outdir}"], env=env, check=False)
    if p.returncode != 0:
        msgs.append(f"the saved {what} does not load: {p.stderr.strip()}")
        return
    for k, a in built.items():
        if np.load(f"{d}/{outdir}/{k}.npy").tobytes() != a.tobytes():
            msgs.append(f"output {k}: the loaded {what} differs from the built one")


def run_dump_text(args, d, path, inputs, outd, device=None, env=None, flags=()):
    """One run of the model at path on the device (args.device by default) with the inputs saved
    under d, its layer list dumped and its outputs exported to outd; s4dexec's output."""
    p = run(args.s4dexec, [f"--onnx={path}", f"--plugins={args.plugins}", f"--device={device or args.device}",
                           "--iterations=1", "--warmUp=0", "--dumpLayerInfo",
                           load_inputs_flag(d, inputs), f"--exportOutput={outd}"] + list(flags), env)
    return p.stdout


def run_dump(args, d, path, inputs, outd, device=None, env=None, flags=()):
    """run_dump_text's run; the layer types."""
    return layer_types(run_dump_text(args, d, path, inputs, outd, device, env, flags))


def pass_run(args, d, tag, path, case, off_var, on, extra=(), save=True):
    """One build and run of case (inputs, outputs) from the model at path, with the pass on, or
    off (off_var=0 in the environment); the engine saved as d/<tag>.s4d (unless save is false)
    and the outputs exported to d/out_<tag>: (s4dexec's output, {output name: array})."""
    outd = os.path.join(d, f"out_{tag}")
    env = dict(os.environ)
    if not on:
        env[off_var] = "0"
    text = run_dump_text(args, d, path, case.inputs, outd, env=env,
                         flags=([f"--saveEngine={d}/{tag}.s4d"] if save else []) + list(extra))
    return text, {k: np.load(os.path.join(outd, f"{k}.npy")) for k in case.outputs}


NO_GPU = 77


def saved_cases(args, cases, model_of):
    """Each case whose name holds args.k, with model_of(case) saved as SCRATCH/<name>/model.onnx:
    (case, its folder, the model's path)."""
    for case in cases:
        if args.k not in case.name:
            continue
        d = os.path.join(args.scratch, case.name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "model.onnx")
        onnx.save(model_of(case), path)
        yield case, d, path


def eltwise_tolerance(args):
    """(rtol, atol) of element-wise chains against float64: glibc's expf, logf, tanhf, atanf are
    within 1 ulp of the correctly rounded value (the CPU and the guarded device), CUDA's within
    2: up to nine of them in a chain on a real GPU."""
    return (1e-6, 1e-6) if args.device == "cpu" or os.environ.get("S4D_TEST_BACKEND") else (4e-6, 2e-6)


def says_no_gpu(text):
    """Whether s4dexec's message says there is no CUDA device, or no CUDA backend in this build."""
    return "no usable CUDA device" in text or "no CUDA device" in text or "has no backend for it" in text


def pair_runs(args, name, first, second, failures):
    """first() and second() (each a run: (layer types, outputs)) of one case: both results, or
    None with the failure recorded; raises SystemExit(NO_GPU) when --device cuda finds no GPU or
    no CUDA backend here (the script's exit status: skipped)."""
    try:
        return first(), second()
    except RuntimeError as e:
        said = str(e)
        if args.device == "cuda" and says_no_gpu(said):
            print(f"{name}: no CUDA device or backend here; skipping")
            raise SystemExit(NO_GPU)
        failures.append(f"{name}: {e}")
        print(f"FAIL {name}: {e}")
        return None


def case_pairs(args, cases, model_of, run, tags, ran, failures):
    """Each case of saved_cases run twice, run(folder, tag, path, case, tag is tags[0]): yields
    (case, folder, path, (layer types, outputs) of each run) where both runs worked (pair_runs).
    Every case tried is appended to ran."""
    for case, d, path in saved_cases(args, cases, model_of):
        ran.append(case.name)
        runs = pair_runs(args, case.name, lambda: run(d, tags[0], path, case, True),
                         lambda: run(d, tags[1], path, case, False), failures)
        if runs is not None:
            yield case, d, path, runs[0], runs[1]


def compare_pair(names, got_a, got_b, want, tol, tags, msgs, bitwise=True):
    """For each output name: the two runs' arrays equal bit for bit (unless bitwise is False:
    then of one dtype and shape), and each within tol (rtol, atol) of the float64 reference
    want[name]; tags name the runs in msgs."""
    for k in names:
        a, b = got_a[k], got_b[k]
        if a.dtype != b.dtype or a.shape != b.shape or (bitwise and a.tobytes() != b.tobytes()):
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64)) if a.shape == b.shape else None
            msgs.append(f"output {k}: {tags[0]} != {tags[1]} bit for bit"
                        + (f" (max abs diff {np.nanmax(diff):.3g})" if diff is not None and diff.size else ""))
        for tag, got in zip(tags, (a, b)):
            if got.shape != want[k].shape:
                msgs.append(f"output {k} ({tag}) has shape {got.shape}, float64 {want[k].shape}")
                continue
            ok, what = close(got, want[k], *tol)
            if not ok:
                msgs.append(f"output {k} ({tag}) vs float64: {what}")


def fp16_close(want, runs, msgs, tol=(2e-2, 2e-2)):
    """For each (tag, {output name: array}) of runs (--fp16 builds): every output within tol
    (rtol, atol) of the float64 reference want[name]; failures appended to msgs."""
    for tag, outs in runs:
        for k, got in outs.items():
            ok, what = close(got.astype(np.float64), want[k], *tol)
            if not ok:
                msgs.append(f"output {k} ({tag}) vs float64: {what}")


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
    """The last line of a fusion test; its exit code (1 when a case failed or none ran). ran: the
    number of cases tried, or their names."""
    ran = ran if isinstance(ran, int) else len(ran)
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
