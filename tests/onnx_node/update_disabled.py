"""Regenerates tests/onnx_node/disabled.txt: every ONNX backend node test that
no enabled*.txt lists, with the first line of what the runner says about it.

usage: /usr/bin/python3 tests/onnx_node/update_disabled.py build/bin/run_node_test
Tests marked "passes" can be moved into the enabled list of the op's owner.
"""
import glob
import os
import subprocess
import sys

DATA = "/usr/share/libonnx-testdata/data/node"
HERE = os.path.dirname(os.path.abspath(__file__))


def enabled():
    names = set()
    for path in glob.glob(os.path.join(HERE, "enabled*.txt")):
        for line in open(path):
            line = line.split("#", 1)[0].strip()
            if line:
                names.add(line)
    return names


def reason(runner, test):
    try:
        p = subprocess.run([runner, os.path.join(DATA, test)], capture_output=True, text=True,
                           errors="replace", timeout=60)
    except subprocess.TimeoutExpired:
        return "times out"
    if p.returncode == 0:
        return "passes"
    line = (p.stderr.strip().splitlines() or ["fails"])[0]
    line = line.replace(os.path.join(DATA, test) + "/model.onnx: ", "")
    return line.replace("FAIL: ", "")[:200]


def main():
    runner = sys.argv[1]
    on = enabled()
    rows = []
    for test in sorted(os.listdir(DATA)):
        if test not in on:
            rows.append(f"{test}  # {reason(runner, test)}")
    with open(os.path.join(HERE, "disabled.txt"), "w") as f:
        f.write("# ONNX backend node tests not enabled, with why (update_disabled.py writes this).\n")
        f.write("# Known gaps: no subgraphs (If/Loop/Scan), sequences, optionals, strings,\n")
        f.write("# training ops, data-dependent output shapes; ops not implemented yet.\n")
        for r in rows:
            f.write(r + "\n")
    print(f"{len(rows)} disabled, {sum('# passes' in r for r in rows)} of them pass")


if __name__ == "__main__":
    main()
