#!/usr/bin/env python3
"""The CUDA backend's and the op library's kernels launch with programmatic
dependent launch (kernels/common/pdl.cuh): a kernel may start while the one
before it on the stream still runs, so each must wait for it before it touches
memory. Checks, for every kernel source given: no launch bypasses s4d_launch
(no <<< >>>), and every __global__ function's body begins with
S4D_KERNEL_BEGIN(), or with S4D_KERNEL_BEGIN_CONSTANTS_FIRST() and holds an
S4D_KERNEL_WAIT() (it reads only constants before it). Exit 1 naming each
offender."""
import re
import sys


def kernels(src):
    """(name, first statement, body) of each __global__ definition."""
    for m in re.finditer(r"__global__", src):
        brace, semi = src.find("{", m.end()), src.find(";", m.end())
        if brace < 0 or (0 <= semi < brace):
            continue  # a declaration
        head = src[m.end():brace]
        name = [n for n in re.findall(r"([A-Za-z_]\w*)\s*\(", head) if not n.startswith("__")]
        body = src[brace + 1:].lstrip()
        yield (name[0] if name else "?"), body.split("\n", 1)[0].strip(), body_of(body)


def body_of(rest):
    """The text of a function body up to its closing brace (rest starts inside it)."""
    depth = 1
    for i, ch in enumerate(rest):
        depth += (ch == "{") - (ch == "}")
        if depth == 0:
            return rest[:i]
    return rest


def main(paths):
    bad, seen = [], 0
    for path in paths:
        src = open(path, encoding="utf-8").read()
        for ln, line in enumerate(src.split("\n"), 1):
            if "<<<" in line and not line.lstrip().startswith(("//", "*", "/*")):
                bad.append(f"{path}:{ln}: launch with <<< >>> instead of s4d_launch()")
        for name, first, body in kernels(src):
            seen += 1
            if first == "S4D_KERNEL_BEGIN_CONSTANTS_FIRST();":
                if "S4D_KERNEL_WAIT();" not in body:
                    bad.append(f"{path}: kernel {name} begins with S4D_KERNEL_BEGIN_CONSTANTS_FIRST() "
                               f"but never calls S4D_KERNEL_WAIT()")
            elif first != "S4D_KERNEL_BEGIN();":
                bad.append(f"{path}: kernel {name} does not begin with S4D_KERNEL_BEGIN() "
                           f"(first statement: {first!r})")
    if seen == 0:
        bad.append("no __global__ function found in " + " ".join(paths))
    for b in bad:
        print(b)
    print(f"{seen} kernels checked, {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
