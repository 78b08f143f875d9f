#!/usr/bin/env bash
# Proves that scripts/install-deps.sh names every Debian package the build and
# the tests actually use, so that a fresh Debian 12 machine builds what this
# one builds. It collects what was used:
#   - every header the compilers read (the depfiles of BUILD and of the
#     PyTorch extension's build under python/build),
#   - every shared library the built programs and modules load (ldd),
#   - every Python module the test interpreter imports for the s4d packages
#     and the tests (onnx, numpy, torch, pytest, scipy, ...),
#   - the tools the build runs (cmake, make, compilers, protoc-c, pkg-config),
# maps each file to its package (dpkg -S), and fails, naming the package and a
# file that needed it, when a package is neither listed by install-deps.sh (set
# "test") nor pulled in by a listed package's Depends/Pre-Depends, nor part of
# every Debian system (Essential or Priority required).
#
#   scripts/check_deps.sh [BUILD]          (default build)
#   S4D_DEPS_EXCLUDE="pkg ..."             pretend install-deps.sh lacks these (tests the check)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PY=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! command -v dpkg >/dev/null; then
  echo "check_deps: not a Debian system (no dpkg): nothing to check" >&2
  exit 0
fi

# What install-deps.sh installs, minus the pretended omissions.
scripts/install-deps.sh --print test | tr ' ' '\n' | grep -v '^$' | sort -u > "$work/listed"
for p in ${S4D_DEPS_EXCLUDE:-}; do sed -i "/^${p}$/d" "$work/listed"; done

# 1. Files used.
{
  find "$BUILD" python/build -name '*.d' -print0 2>/dev/null | xargs -0 -r cat |
    tr ' \\' '\n\n' | grep '^/' | grep -v ':$'
  # The extension builds with ninja and -MMD, which leaves system headers (pybind11,
  # Python's) out of its depfiles: ask the compiler again with its own flags and -M.
  for d in python/build/temp*; do
    [ -f "$d/build.ninja" ] || continue
    flags=$(sed -n 's/^cflags = //p' "$d/build.ninja")
    for src in python/s4d/csrc/*.cpp; do
      eval "c++ $flags -M $src" 2>/dev/null | tr ' \\' '\n\n' | grep '^/'
    done
  done
  for f in "$BUILD"/bin/* "$BUILD"/lib/*.so* "$BUILD"/plugins/example/*.so python/s4d/*.so; do
    [ -f "$f" ] && ldd "$f" 2>/dev/null | awk '/=> \//{print $3}'
  done
  # The modules the Python tests import, as collected by pytest, plus the packages'.
  PYTHONPATH=python S4D_BUILD="$BUILD" "$PY" - <<'PY'
import contextlib, io, subprocess, sys
# Modules a bare interpreter already has (site's .pth files) are not the tests' doing.
bare = set(subprocess.run([sys.executable, "-c", "import sys; print(chr(10).join(sys.modules))"],
                          capture_output=True, text=True).stdout.split())
import pytest
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "tests/python"])
for m in ("s4d", "s4d.ops", "s4d.sparse4d"):
    try:
        __import__(m)
    except Exception:
        pass
for name, mod in list(sys.modules.items()):
    if name in bare or name.split(".")[0] in bare:
        continue
    f = getattr(mod, "__file__", None)
    if f and f.startswith("/usr/"):
        print(f)
PY
  for t in cmake make cc gcc g++ c++ protoc-c pkg-config "$PY"; do
    p=$(command -v "$t" 2>/dev/null) && readlink -f "$p"
  done
} | sort -u > "$work/files"

# 2. Files -> packages, through dpkg's own file lists (one pass, not one dpkg -S per file);
#    a file found under another spelling of its path (a symlinked directory) is tried resolved.
for l in /var/lib/dpkg/info/*.list; do
  pkg=$(basename "$l" .list)
  sed "s|^|${pkg%%:*} |" "$l"
done | awk '{print $2, $1}' | sort -u -k1,1 > "$work/index"
awk '{print $1, $1}' "$work/files" > "$work/pairs"
while read -r f _; do
  r=$(readlink -f "$f" 2>/dev/null) && [ "$r" != "$f" ] && echo "$r $f"
done < "$work/files" >> "$work/pairs"
sort -k1,1 "$work/pairs" | join - "$work/index" | awk '{print $3, $2}' | sort -u -k1,1 > "$work/used"

# 3. What the listed packages bring (Depends and Pre-Depends, recursively), and the base system.
{
  cat "$work/listed"
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances $(cat "$work/listed") 2>/dev/null |
    awk '/^[a-z0-9]/{print $1} /(Depends|PreDepends):/{print $2}' | tr -d '<>' | sed 's/:.*//'
  dpkg-query -W -f='${Package} ${Essential} ${Priority}\n' | awk '$2=="yes" || $3=="required" {print $1}'
} | sort -u > "$work/covered"

missing=0
while read -r pkg file; do
  if ! grep -qx "$pkg" "$work/covered"; then
    echo "check_deps: package '$pkg' is used (e.g. $file) but scripts/install-deps.sh neither lists it nor pulls it in" >&2
    missing=$((missing + 1))
  fi
done < "$work/used"
n_used=$(wc -l < "$work/used")
if [ "$missing" -ne 0 ]; then
  echo "check_deps: FAILED: $missing of $n_used packages in use are not installed by scripts/install-deps.sh" >&2
  exit 1
fi
echo "check_deps: all $n_used Debian packages the build and tests used are covered by scripts/install-deps.sh"
