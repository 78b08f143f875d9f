"""Writes the seed files of the fuzz corpus (tests/fuzz/corpus/<target>/seed-*).

usage: make_seeds.py BUILD_DIR

Run it after a build whose tests made the engine models (ctest -R
engine.make); it replaces every seed-* file and leaves regress-* files (the
reproducers of fixed defects) alone. Seeds: for ONNX, the smallest enabled
ONNX backend node test of each op type plus the engine tests' models; for
engines, the same models built with s4dexec (rerun after an engine format
change); for .npy, arrays of every dtype, rank 0 to 8, and each header
version. Also writes onnx.dict, the op and attribute names for libFuzzer.
"""
import glob
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NODE_DATA = "/usr/share/libonnx-testdata/data/node"
MAX_SEED_BYTES = 16384


def enabled_node_tests():
    names = []
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/onnx_node/enabled*.txt"))):
        for line in open(path):
            name = line.split("#")[0].strip()
            if name and name not in names:
                names.append(name)
    return names


def smallest_per_op(names):
    best = {}
    for name in names:
        path = os.path.join(NODE_DATA, name, "model.onnx")
        if not os.path.exists(path):
            continue
        size = os.path.getsize(path)
        if size > MAX_SEED_BYTES:
            continue
        ops = tuple(sorted({n.op_type for n in onnx.load(path).graph.node}))
        if ops not in best or size < best[ops][0]:
            best[ops] = (size, name, path)
    return sorted(best.values(), key=lambda v: v[1])


def clean(directory):
    os.makedirs(directory, exist_ok=True)
    for f in glob.glob(os.path.join(directory, "seed-*")):
        os.unlink(f)


def onnx_seeds(build, nodes):
    out = os.path.join(HERE, "corpus/onnx")
    clean(out)
    for _, name, path in nodes:
        shutil.copy(path, os.path.join(out, f"seed-{name}.onnx"))
    models = os.path.join(build, "tests/engine/models")
    for name in ("mlp.onnx", "da.onnx", "da_alias.onnx", "unsupported.onnx", "views.onnx", "mbconv.onnx"):
        shutil.copy(os.path.join(models, name), os.path.join(out, "seed-engine_" + name))
    return out


def engine_seeds(build, nodes):
    out = os.path.join(HERE, "corpus/engine")
    clean(out)
    exe = os.path.join(build, "bin/s4dexec")
    plugins = os.path.join(build, "lib/libs4d_plugins.so")
    models = os.path.join(build, "tests/engine/models")
    todo = [(os.path.join(models, n), "engine_" + n[:-5])
            for n in ("mlp.onnx", "da.onnx", "views.onnx", "mbconv.onnx")]
    todo += [(path, name) for _, name, path in nodes]
    made = 0
    for path, name in todo:
        dst = os.path.join(out, f"seed-{name}.s4de")
        p = subprocess.run([exe, f"--onnx={path}", f"--plugins={plugins}", f"--saveEngine={dst}",
                            "--iterations=1", "--warmUp=0"], capture_output=True, text=True)
        if p.returncode != 0 or not os.path.exists(dst):
            continue
        if os.path.getsize(dst) > MAX_SEED_BYTES:
            os.unlink(dst)
            continue
        made += 1
    return out, made


def npy_seeds():
    out = os.path.join(HERE, "corpus/npy")
    clean(out)
    rng = np.random.default_rng(3)
    arrays = {
        "f4_2x3": rng.standard_normal((2, 3)).astype("<f4"),
        "f8_4": rng.standard_normal(4),
        "f2_3x1": rng.standard_normal((3, 1)).astype("<f2"),
        "i8_scalar": np.array(7, "<i8"),
        "i4_2x2x2": np.arange(8, dtype="<i4").reshape(2, 2, 2),
        "i2_5": np.arange(5, dtype="<i2"),
        "i1_3": np.array([-1, 0, 1], "i1"),
        "u1_4": np.array([0, 1, 254, 255], "u1"),
        "u2_2": np.array([1, 65535], "<u2"),
        "u4_2": np.array([1, 2**32 - 1], "<u4"),
        "u8_1": np.array([2**63], "<u8"),
        "b1_3": np.array([True, False, True]),
        "f4_empty_0x3": np.zeros((0, 3), "<f4"),
        "f4_rank8": np.ones((1, 2, 1, 2, 1, 1, 2, 1), "<f4"),
        "f4_fortran": np.asfortranarray(rng.standard_normal((2, 3)).astype("<f4")),
        "f4_bigendian": rng.standard_normal(3).astype(">f4"),
    }
    for name, a in arrays.items():
        np.save(os.path.join(out, f"seed-{name}.npy"), a)
    for version in ((2, 0), (3, 0)):
        with open(os.path.join(out, f"seed-f4_v{version[0]}.npy"), "wb") as f:
            np.lib.format.write_array(f, arrays["f4_2x3"], version=version)
    return out


def write_dict(nodes):
    words = set()
    for _, _, path in nodes:
        for n in onnx.load(path).graph.node:
            words.add(n.op_type)
            words.update(a.name for a in n.attribute)
    words.update(["DeformableAggregation", "s4d", "ai.onnx", "com.microsoft"])
    with open(os.path.join(HERE, "onnx.dict"), "w") as f:
        f.write("# Op and attribute names of the ONNX seeds (make_seeds.py).\n")
        for w in sorted(words):
            f.write(f'"{w}"\n')


def main():
    build = os.path.abspath(sys.argv[1])
    nodes = smallest_per_op(enabled_node_tests())
    onnx_dir = onnx_seeds(build, nodes)
    engine_dir, engines = engine_seeds(build, nodes)
    npy_dir = npy_seeds()
    write_dict(nodes)
    for d in (onnx_dir, engine_dir, npy_dir):
        files = glob.glob(os.path.join(d, "*"))
        print(f"{os.path.relpath(d, ROOT)}: {len(files)} files, "
              f"{sum(os.path.getsize(f) for f in files)} bytes")


if __name__ == "__main__":
    main()
