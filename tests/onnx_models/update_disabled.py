"""Regenerates tests/onnx_models/disabled.txt: every whole-model test of
libonnx-testdata's pytorch-converted, pytorch-operator and simple suites that
enabled.txt does not list, with the first line of what the runner says.

usage: /usr/bin/python3 tests/onnx_models/update_disabled.py build/bin/run_node_test
Tests marked "passes" can be moved into enabled.txt.
"""
import os
import subprocess
import sys

DATA = "/usr/share/libonnx-testdata/data"
SUITES = ("pytorch-converted", "pytorch-operator", "simple")
HERE = os.path.dirname(os.path.abspath(__file__))


def enabled():
    names = set()
    for line in open(os.path.join(HERE, "enabled.txt")):
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(line)
    return names


def reason(runner, test):
    path = os.path.join(DATA, test)
    try:
        p = subprocess.run([runner, path], capture_output=True, text=True, errors="replace",
                           timeout=120)
    except subprocess.TimeoutExpired:
        return "times out"
    if p.returncode == 0:
        return "passes"
    line = (p.stderr.strip().splitlines() or ["fails"])[0]
    line = line.replace(path + "/model.onnx: ", "").replace(path + "/", "")
    return line.replace("FAIL: ", "")[:200]


def main():
    runner = sys.argv[1]
    on = enabled()
    rows = []
    for suite in SUITES:
        for test in sorted(os.listdir(os.path.join(DATA, suite))):
            name = f"{suite}/{test}"
            if name not in on:
                rows.append(f"{name}  # {reason(runner, name)}")
    with open(os.path.join(HERE, "disabled.txt"), "w") as f:
        f.write("# Whole-model tests not enabled, with why (update_disabled.py writes this).\n")
        f.write("# Out of scope for the engine: sequences (Sequence*, SplitToSequence), strings\n")
        f.write("# (StringNormalizer), training (Gradient), open input dimensions.\n")
        for r in rows:
            f.write(r + "\n")
    total = sum(len(os.listdir(os.path.join(DATA, s))) for s in SUITES)
    print(f"{len(on)} enabled, {len(rows)} disabled of {total}; "
          f"{sum('# passes' in r for r in rows)} disabled ones pass")


if __name__ == "__main__":
    main()
