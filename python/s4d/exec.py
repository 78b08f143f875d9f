"""python3 -m s4d.exec: s4dexec's main flags, through s4d.engine.

    python3 -m s4d.exec --onnx=head.onnx --plugins=build/lib/libs4d_plugins.so \\
        --saveEngine=head.s4de --loadInputs=x:x.npy --exportOutput=out/

Same flags, defaults, generated inputs (--seed) and report lines as
build/bin/s4dexec (docs/s4dexec.md), for users who stay in Python. Exit
status 0 only on success; each failure prints one line on stderr.
"""
import os
import re
import sys
import time

import numpy as np

USAGE = """usage: python3 -m s4d.exec (--onnx=FILE | --loadEngine=FILE) [options]

Builds an s4d engine from an ONNX model or loads a saved one, runs it and
reports latency, like build/bin/s4dexec. Exit status 0 only on success.

  --onnx=FILE            build the engine from this ONNX model
  --plugins=FILE         load a plugin library (repeatable) before building or loading
  --saveEngine=FILE      write the built engine to FILE
  --loadEngine=FILE      load an engine file instead of building
  --device=cpu|cuda      device to build for (default cpu)
  --fp16                 float16 layers where their kernel runs them (refused on the CPU)
  --layerPrecisions=name:fp32|fp16[,...]  pin layers to a precision (--fp16)
  --precisionConstraints=obey|prefer      obey: a pin the kernel cannot run fails
  --calib=DIR            the fp16 accuracy guard's calibration inputs
  --accuracy=X[,name:X]  the guard's relative L2 tolerance per output (default 1e-2);
                         name:X:ordered|matched|auto or name:matched: how the output
                         is compared (auto: rows matched where a TopK orders them)
  --shapes=name:AxBxC[,name:...]
                         fix an input's symbolic dimensions, or the values of a
                         shape-carrying input, at build
  --allowFallback        run nodes the device cannot run on the CPU
  --tf32 / --noTF32      CUDA float32 layers may use TF32 (default --noTF32)
  --convLayout=auto|nchw|nhwc
                         memory layout of 2-D convolutions (auto: channels-last on
                         CUDA with --tf32 or --fp16)
  --loadInputs=name:file.npy[,name:file.npy...]
                         input values; inputs not given get seeded random values
  --seed=N               seed for generated inputs (default 1)
  --exportOutput=DIR     write every output of the last run to DIR/<name>.npy
  --compareOutputs=DIR   compare each output with DIR/<name>.npy (max-abs, relative
                         L2, cosine); exit 1 if any element is outside atol + rtol*|want|
  --rtol=X / --atol=X    tolerances for --compareOutputs (default 1e-3 / 1e-5)
  --iterations=N         timed runs (default 10)
  --warmUp=N             untimed runs first (default 2)
  --threads=N            CPU threads per context (default: all cores)
  --useCudaGraph         replay the layers as a CUDA graph
  --graphStreams=N       streams the graph's independent branches spread over (1..8)
  --dumpLayerInfo        print each layer and the activation memory plan
  --dumpProfile          print the mean time of each layer over the timed runs
  --verbose              print the plugin creators, where inputs came from, the layers
  --help                 this text
"""

PROG = "s4d.exec"


class UsageError(Exception):
    pass


def _int(v, flag, lo):
    try:
        i = int(v, 10)
    except ValueError:
        i = None
    if i is None or i < lo or i > 100000000:
        raise UsageError(f"{flag} expects an integer >= {lo}, got '{v}'")
    return i


def _float(v, flag):
    try:
        f = float(v)
    except ValueError:
        f = float("nan")
    if not (f >= 0) or f == float("inf"):
        raise UsageError(f"{flag} expects a finite non-negative number, got '{v}'")
    return f


def _pairs(v, flag, what):
    out = {}
    if not v:
        raise UsageError(f"{flag} expects {what} entries, got nothing")
    for entry in v.split(","):
        name, sep, rest = entry.rpartition(":")
        if not sep or not name or not rest:
            raise UsageError(f"{flag} expects {what} entries, got '{entry}'"
                             + ("" if entry else " (an empty entry)"))
        if name in out:
            raise UsageError(f"{flag}: input '{name}' is given twice ('{out[name]}' and "
                             f"'{rest}')")
        out[name] = rest
    return out


def _shapes(v, specs):
    for entry in v.split(","):
        name, sep, nums = entry.rpartition(":")
        if not sep or not name:
            raise UsageError(f"--shapes: '{entry}' is not name:AxBxC")
        if name in specs:
            raise UsageError(f"--shapes names input '{name}' twice")
        if not nums:
            raise UsageError(f"--shapes {name}: no dimensions given")
        parts = nums.split("x")
        if len(parts) > 1 and not parts[-1]:
            parts.pop()  # s4dexec reads "2x" as [2]
        try:
            vals = [float(x) for x in parts]
        except ValueError:
            vals = None
        if not vals or any(x != x for x in vals):
            raise UsageError(f"--shapes {name}: '{nums}' is not a list of numbers joined by 'x'")
        specs[name] = vals


def _npy(path):
    try:
        return np.load(path, allow_pickle=False)
    except OSError as e:
        if e.strerror:
            raise ValueError(f"cannot open '{path}': {e.strerror}") from None
        raise ValueError(f"{path}: {e}") from None
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def _layer_precisions(v, out):
    """--layerPrecisions=name:fp32,name2:fp16 (s4dexec's rules and messages)."""
    if not v:
        raise UsageError("--layerPrecisions: no layers given")
    for item in v.split(","):
        name, colon, prec = item.rpartition(":")
        if not colon or not name:
            raise UsageError(f"--layerPrecisions: '{item}' is not name:fp32 or name:fp16")
        if prec not in ("fp32", "float32", "fp16", "float16"):
            raise UsageError(f"--layerPrecisions: layer '{name}': precision '{prec}' is not "
                             f"fp32 or fp16")
        out[name] = "fp16" if prec in ("fp16", "float16") else "fp32"


def _tolerance(text, what):
    try:
        d = float(text)
    except ValueError:
        d = float("nan")
    if not d > 0:
        raise UsageError(f"--accuracy: {what}: '{text}' is not a relative L2 tolerance > 0 "
                         f"(or inf)")
    return d


_METRICS = ("ordered", "matched", "auto")


def _is_number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


def _accuracy(v, o):
    """--accuracy=1e-2 or --accuracy=1e-2,name:tol[:metric],name:metric (s4dexec's rules and
    messages; the metric is ordered, matched or auto)."""
    if not v:
        raise UsageError("--accuracy: no tolerance given")
    for item in v.split(","):
        name, colon, tol = item.rpartition(":")
        if not colon and item in _METRICS:
            raise UsageError(f"--accuracy: '{item}' needs an output name (name:{item})")
        if colon and tol in _METRICS:
            if not name:
                raise UsageError("--accuracy: an item has no output name before ':'")
            metric = tol
            head, colon, tol = name.rpartition(":")
            if not colon or not _is_number(tol):
                o["metrics"][name] = metric  # name:metric (the name may hold ':')
                continue
            o["metrics"][head] = metric
            name = head
        if not colon:
            o["accuracy"] = _tolerance(item, "default")
        elif not name:
            raise UsageError("--accuracy: an item has no output name before ':'")
        else:
            o["tolerances"][name] = _tolerance(tol, name)


def parse_args(argv):
    o = {"onnx": None, "plugins": [], "save": None, "load": None, "device": "cpu",
         "device_given": False, "fp16": False, "shapes": {}, "fallback": False, "tf32": False,
         "inputs": {}, "seed": 1, "export": None, "compare": None, "rtol": 1e-3, "atol": 1e-5,
         "iterations": 10, "warmup": 2, "threads": 0, "graph": False, "graph_streams": 0, "dump": False,
         "profile": False, "verbose": False, "help": False, "precisions": {}, "obey": False,
         "calib": None, "accuracy": None, "tolerances": {}, "metrics": {}, "conv_layout": None}
    valued = {"--onnx": "onnx", "--saveEngine": "save", "--loadEngine": "load",
              "--exportOutput": "export", "--compareOutputs": "compare"}
    switches = {"--fp16": ("fp16", True), "--allowFallback": ("fallback", True),
                "--tf32": ("tf32", True), "--noTF32": ("tf32", False),
                "--useCudaGraph": ("graph", True), "--dumpLayerInfo": ("dump", True),
                "--dumpProfile": ("profile", True), "--verbose": ("verbose", True)}
    for a in argv:
        flag, eq, v = a.partition("=")
        if a in ("--help", "-h"):
            o["help"] = True
            return o
        if a in switches:
            key, val = switches[a]
            o[key] = val
        elif not eq:
            raise UsageError(f"unknown argument '{a}' (see --help)")
        elif flag in valued:
            o[valued[flag]] = v
        elif flag == "--plugins":
            o["plugins"].append(v)
        elif flag == "--device":
            o["device"], o["device_given"] = v, True
        elif flag == "--convLayout":
            if v not in ("auto", "nchw", "nhwc"):
                raise UsageError(f"--convLayout expects auto, nchw or nhwc, got '{v}'")
            o["conv_layout"] = v
        elif flag == "--shapes":
            _shapes(v, o["shapes"])
        elif flag == "--loadInputs":
            for name, path in _pairs(v, "--loadInputs", "name:file.npy").items():
                if name in o["inputs"]:
                    raise UsageError(f"--loadInputs: input '{name}' is given twice "
                                     f"('{o['inputs'][name]}' and '{path}')")
                o["inputs"][name] = path
        elif flag in ("--iterations", "--warmUp", "--threads", "--seed"):
            key = {"--iterations": "iterations", "--warmUp": "warmup", "--threads": "threads",
                   "--seed": "seed"}[flag]
            o[key] = _int(v, flag, 1 if flag == "--iterations" else 0)
        elif flag == "--graphStreams":
            o["graph_streams"] = _int(v, flag, 1)
            if o["graph_streams"] > 8:
                raise UsageError(f"--graphStreams expects 1 .. 8, got {o['graph_streams']}")
        elif flag in ("--rtol", "--atol"):
            o[flag[2:]] = _float(v, flag)
        elif flag == "--layerPrecisions":
            _layer_precisions(v, o["precisions"])
        elif flag == "--precisionConstraints":
            if v not in ("obey", "prefer", "none"):
                raise UsageError(f"--precisionConstraints={v}: give obey or prefer")
            o["obey"] = v == "obey"
        elif flag == "--calib":
            if not v:
                raise UsageError("--calib: no directory given")
            o["calib"] = v
        elif flag == "--accuracy":
            _accuracy(v, o)
        else:
            raise UsageError(f"unknown argument '{a}' (see --help)")
    if not o["onnx"] and not o["load"]:
        raise UsageError("give --onnx=FILE or --loadEngine=FILE (see --help)")
    if o["onnx"] and o["load"]:
        raise UsageError("give either --onnx or --loadEngine, not both")
    if o["device"] not in ("cpu", "cuda"):
        raise UsageError(f"--device expects cpu or cuda, got '{o['device']}'")
    return o


_PROFILE_ROW = re.compile(r"\s*(\d+) (\S+)\s+(\S+)\s+([0-9.]+) ms\s+[0-9.]+%$")


def read_profile(text):
    """The per-layer rows of a --dumpProfile listing (build/bin/s4dexec's or this module's,
    which print the same lines) in text: (index, layer name, op, mean ms) in the listing's
    order. Lines before its "[profile]" header, such as --dumpLayerInfo's, are not read."""
    rows, inside = [], False
    for line in text.splitlines():
        if line.startswith("[profile]"):
            inside = True
            continue
        m = _PROFILE_ROW.match(line) if inside else None
        if m:
            rows.append((int(m.group(1)), m.group(2), m.group(3), float(m.group(4))))
    return rows


def file_name_of(tensor):
    """s4dexec's file name for a tensor: [A-Za-z0-9._-] kept, the rest '_'."""
    return (re.sub(r"[^A-Za-z0-9._-]", "_", tensor) or "_") + ".npy"


def dump_layers(engine):
    t = engine.target
    extra = ", ".join(x for x in (t.get("arch"), t.get("libraries")) if x)
    extra = ", " + extra if extra else ""
    print(f"[engine] device {t['device']} ({t.get('device_name', '')}{extra}), built by s4d "
          f"{t.get('library_version', '')}")
    layers = engine.layer_info()
    views = sum(li["is_view"] for li in layers)
    in_place = sum(li["in_place"] for li in layers)
    print(f"[layers] {len(layers)} layers, {views} views (no kernel), {in_place} Concats in "
          f"place (no kernel)")

    def ts(x):
        return " (none)" if x is None else f" {x['dtype']}[{','.join(map(str, x['shape']))}]"

    for li in layers:
        line = (f"  {li['index']:3d} {li['name']:<28} {li['op']:<32} {li['device']:<4} "
                f"{li['precision'] or '':<7} in:" + "".join(ts(x) for x in li["inputs"])
                + " out:" + "".join(ts(x) for x in li["outputs"]))
        if li["workspace_bytes"]:
            line += f" workspace={li['workspace_bytes']}"
        if li["kernel_info"]:
            line += f" plan: {li['kernel_info']}"
        if li["is_view"]:
            line += " view"
        if li["in_place"]:
            line += " in place"
        print(line)
    print(f"[memory] activations: {engine.activation_bytes} bytes planned (peak), "
          f"{engine.activation_bytes_unplanned} bytes without reuse; weights: "
          f"{engine.weight_bytes} bytes")


def run_main(o):
    import s4d.engine as se
    for p in o["plugins"]:
        try:
            se.load_plugins(p)
        except se.S4DError as e:
            raise UsageError(f"--plugins={p}: {e.message}") from None
        if o["verbose"]:
            print(f"[plugins] loaded {p}")
    if o["verbose"]:
        creators = se.plugin_creators()
        print(f"[plugins] {len(creators)} registered creator{'' if len(creators) == 1 else 's'}")
        for ns, name, ver in creators:
            print(f"  namespace '{ns}' name '{name}' version '{ver}'")
    if o["onnx"]:
        if o["verbose"]:
            os.environ["S4D_BUILD_LOG"] = "1"  # the fp16 guard's progress on stderr
        b = se.Builder(device=o["device"], fp16=o["fp16"], tf32=o["tf32"],
                       allow_fallback=o["fallback"], layer_precisions=o["precisions"] or None,
                       obey_precisions=o["obey"], calib_dir=o["calib"], accuracy=o["accuracy"],
                       output_tolerances=o["tolerances"] or None,
                       output_metrics=o["metrics"] or None,
                       conv_layout=o["conv_layout"] or "auto")
        b._auto = o["shapes"]
        t0 = time.perf_counter()
        engine = b.build(o["onnx"])
        print(f"[build] {o['onnx']}: {engine.num_layers} layers in "
              f"{(time.perf_counter() - t0) * 1e3:.1f} ms")
    else:
        if (o["fp16"] or o["shapes"] or o["fallback"] or o["tf32"] or o["precisions"]
                or o["obey"] or o["calib"] or o["accuracy"] or o["tolerances"]
                or o["metrics"] or o["conv_layout"]):
            raise UsageError("--fp16, --shapes, --allowFallback, --tf32, --convLayout, --layerPrecisions, "
                             "--precisionConstraints, --calib and --accuracy apply when building "
                             "(--onnx); a loaded engine keeps what it was built with")
        engine = se.Engine.load(o["load"])
        if o["device_given"] and engine.device != o["device"]:
            raise UsageError(f"--device={o['device']}, but {o['load']} was built for "
                             f"{engine.device}")
        print(f"[load] {o['load']}: {engine.num_layers} layers")
    for line in (engine.precision_report or "").splitlines():
        print(f"[precision] {line}")
    with engine:
        if o["save"]:
            try:
                engine.save(o["save"])
            except se.S4DError as e:
                raise UsageError(f"--saveEngine={o['save']}: {e.message}") from None
            print(f"[save] {o['save']}")
        if o["dump"] or o["verbose"]:
            dump_layers(engine)
        with engine.create_context(num_threads=o["threads"], profile=o["profile"],
                                   use_graph=o["graph"],
                                   graph_streams=o["graph_streams"]) as ctx:
            return run_all(o, engine, ctx, se)


def run_all(o, engine, ctx, se):
    names = [s.name for s in engine.inputs]
    for name in o["inputs"]:
        if name not in names:
            raise UsageError(f"--loadInputs: the engine has no input named '{name}'")
    inputs = {}
    for name, path in o["inputs"].items():
        try:
            inputs[name] = _npy(path)
        except ValueError as e:
            raise UsageError(f"input '{name}': {e}") from None
        if o["verbose"]:
            print(f"[inputs] {name} <- {path}")
    generated = se.random_inputs(engine, seed=o["seed"], given=inputs)
    if o["verbose"]:
        for name in generated:
            print(f"[inputs] {name} <- random (seed {o['seed']})")
    inputs.update(generated)
    for name in names:
        try:
            ctx.bind(name, inputs[name])
        except se.S4DError as e:
            src = f" from {o['inputs'][name]}" if name in o["inputs"] else ""
            raise UsageError(f"input '{name}'{src}: {e.message}") from None
    outs = {s.name: np.empty(s.shape, s.numpy_dtype) for s in engine.outputs}
    for _ in range(o["warmup"]):
        ctx.run(outputs=outs)
    lat = []
    nl = engine.num_layers
    layer_sum = [0.0] * nl
    for _ in range(o["iterations"]):
        t0 = time.perf_counter()
        ctx.run(outputs=outs)
        lat.append((time.perf_counter() - t0) * 1e3)
        if o["profile"]:
            layer_sum = [a + b for a, b in zip(layer_sum, ctx.layer_times())]
    n = len(lat)
    mean = sum(lat) / n
    lat.sort()
    p90 = max(int(np.ceil(0.9 * n)) - 1, 0)
    median = lat[n // 2] if n % 2 else 0.5 * (lat[n // 2 - 1] + lat[n // 2])
    print(f"[latency] {n} iterations (after {o['warmup']} warm-up): min {lat[0]:.3f} ms, "
          f"median {median:.3f} ms, p90 {lat[p90]:.3f} ms, max {lat[-1]:.3f} ms, "
          f"mean {mean:.3f} ms")
    if o["profile"]:
        total = sum(layer_sum)
        print(f"[profile] mean time per layer over {n} iterations")
        for li in engine.layer_info():
            i = li["index"]
            share = 100 * layer_sum[i] / total if total > 0 else 0
            print(f"  {i:3d} {li['name']:<28} {li['op']:<32} {layer_sum[i] / n:9.4f} ms "
                  f"{share:5.1f}%")
        print(f"  total {total / n:.4f} ms")
    if o["export"]:
        try:
            os.makedirs(o["export"], exist_ok=True)
        except OSError as e:
            raise UsageError(f"--exportOutput: cannot create directory '{o['export']}': "
                             f"{e.strerror}") from None
        for name, arr in outs.items():
            path = os.path.join(o["export"], file_name_of(name))
            np.save(path, arr)
            print(f"[outputs] {name} -> {path}")
    if o["compare"]:
        return compare_dir(o, outs, se)
    return 0


def compare_dir(o, outs, se):
    want = {}
    for name in outs:
        path = os.path.join(o["compare"], file_name_of(name))
        try:
            want[name] = _npy(path)
        except ValueError as e:
            raise UsageError(f"--compareOutputs: output '{name}': {e}") from None
    report = se.compare_outputs(outs, want, rtol=o["rtol"], atol=o["atol"])
    print(report.table())
    failures = [r.failure() for r in report if not r.passed]
    for f in failures:
        print(f"{PROG}: error: {f}", file=sys.stderr)
    return 1 if failures else 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        o = parse_args(argv)
        if o["help"]:
            sys.stdout.write(USAGE)
            return 0
        rc = run_main(o)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # S4DError, LibraryNotFoundError: one line, no traceback
        from s4d.engine import S4DError
        if isinstance(e, (S4DError, ImportError)):
            print(f"{PROG}: error: {getattr(e, 'message', e)}", file=sys.stderr)
            return 1
        raise
    if rc == 0:
        print("[done] PASSED")
    return rc


if __name__ == "__main__":
    sys.exit(main())
