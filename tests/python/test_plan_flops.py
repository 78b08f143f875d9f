"""bench/plan_flops.py: the FLOPs it counts per op against the formulas worked by hand, on
layer lines in the format s4dexec --dumpLayerInfo prints, and its refusal of a file without
layer lines."""
import json

from engine_util import repo_module


def _script():
    return repo_module("bench/plan_flops.py")


LINES = [
    "[layers] 6 layers, 1 views (no kernel)",
    "   42 /head/weights_fc/MatMul FusedMatMul   cuda float32 in: float32[1,900,6,256] float32[256,416] "
    "float32[416] out: float32[1,900,6,416] plan: m 5400 n 416 k 256 batch 1: cuBLASLt algo 55",
    "   48 /head/MatMul MatMul   cuda float32 in: float32[1,1,11700,4] float32[1,6,4,3] out: float32[1,6,11700,3]",
    "   49 /head/mlp FusedMLP   cuda float32 in: float32[1,128,128] float32[128,256] float32[256] (none) (none) "
    "float32[256,64] float32[64] (none) (none) out: float32[1,128,64] workspace=262144",
    "  125 /head/attn FusedAttention   cuda float32 in: float32[1,8,900,64] float32[1,8,64,1500] "
    "float32[1,8,1500,64] bool[1,1,1,1500] out: float32[1,8,900,64]",
    "    4 /bb/conv2 FusedConv   cuda float32 in: float32[6,64,64,176] float32[64,32,3,3] float32[64] "
    "out: float32[6,64,64,176] workspace=25952256",
    "    5 /head/Add Add   cuda float32 in: float32[1,900,256] float32[1,900,256] out: float32[1,900,256]",
    "    6 /head/Reshape Reshape   cuda float32 in: float32[1,900,256] int64[3] out: float32[1,900,256] view",
]


def test_counts_match_the_formulas(tmp_path):
    mod = _script()
    rows = {name.split("/")[-1]: fl for name, _, fl in mod.parse(LINES)}
    assert rows["MatMul"] == 2 * 6 * 11700 * 3 * 4
    assert rows["mlp"] == 2 * 128 * (128 * 256 + 256 * 64)
    assert rows["attn"] == 2 * 8 * 900 * 1500 * (64 + 64)
    assert rows["conv2"] == 2 * (6 * 64 * 64 * 176) * 32 * 3 * 3
    assert rows["Add"] == 0 and rows["Reshape"] == 0
    fused = [fl for name, op, fl in mod.parse(LINES) if op == "FusedMatMul"]
    assert fused == [2 * 5400 * 416 * 256]

    listing = tmp_path / "layers.txt"
    listing.write_text("\n".join(LINES) + "\n")
    out = tmp_path / "flops.json"
    assert mod.main([str(listing), "--peak-tflops", "50", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    total = sum(rows.values()) + fused[0]
    assert abs(got["gflop"] - total / 1e9) < 1e-9
    assert abs(got["floor_ms"] - total / 50e12 * 1e3) < 1e-9
    assert got["by_op"]["FusedAttention"]["layers"] == 1
    assert "Add" not in got["by_op"]


def test_refuses_a_file_without_layer_lines(tmp_path, capsys):
    listing = tmp_path / "empty.txt"
    listing.write_text("s4dexec: error: no such file\n")
    assert _script().main([str(listing)]) == 1
    assert "no layer lines" in capsys.readouterr().err
