"""`import s4d` and `import s4d.ops` work without the compiled extension;
only a call that needs it fails, with a message saying how to build it."""
import os
import subprocess
import sys

PYTHON_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "python")

_SCRIPT = r'''
import importlib.abc, sys

class HideExtension(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "s4d._C":
            raise ImportError("hidden for the test")
        return None

sys.meta_path.insert(0, HideExtension())
import s4d
assert "torch" not in sys.modules, "import s4d must stay cheap"
import s4d.ops as ops
assert not ops.extension_available()
import torch
from s4d.ops.workload import realistic_inputs
f, ss, si, loc, w = realistic_inputs(anchors=8)
assert ops.deformable_aggregation_reference(f, ss, si, loc, w).abs().sum() > 0
try:
    ops.deformable_aggregation(f, ss, si, loc, w)
except ops.ExtensionNotBuiltError as exc:
    assert "make python" in str(exc), str(exc)
    print("ok")
'''


def test_import_without_extension():
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    result = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")
