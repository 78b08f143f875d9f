"""Lays a golden sequence out the way s4d_demo reads frames.

    /usr/bin/python3 examples/demo/frames_from_manifest.py DIR

DIR holds the output of `python3 -m s4d.sparse4d.golden` (manifest.json and
one .npy per tensor record). This writes DIR/frames.txt, one line per frame
("frame_NNN scene_start timestamp"), and DIR/frame_NNN/<tensor name>.npy as
relative symbolic links to the recorded files, so that a C program finds a
frame's inputs and reference outputs by the graphs' tensor names without a
JSON parser.
"""
import json
import os
import sys


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    d = argv[0]
    try:
        with open(os.path.join(d, "manifest.json")) as f:
            m = json.load(f)
        if m.get("format") != "s4d-golden" or m.get("version") != 1:
            raise ValueError(f"not an s4d-golden version 1 manifest: format "
                             f"{m.get('format')!r}, version {m.get('version')!r}")
        lines = [f"# frames of {d}/manifest.json (preset {m.get('preset')}): "
                 "directory scene_start timestamp"]
        for fr in m["frames"]:
            sub = "frame_%03d" % int(fr["frame"])
            os.makedirs(os.path.join(d, sub), exist_ok=True)
            lines.append("%s %d %.6f" % (sub, int(bool(fr["scene_start"])), fr["timestamp"]))
        for r in m["tensors"]:
            name, file = r["name"], r["file"]
            if "/" in name or "/" in file or not os.path.exists(os.path.join(d, file)):
                raise ValueError(f"tensor record {r} names a missing or nested file")
            link = os.path.join(d, "frame_%03d" % int(r["frame"]), name + ".npy")
            if os.path.lexists(link):
                os.remove(link)
            os.symlink(os.path.join("..", file), link)
        with open(os.path.join(d, "frames.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"frames_from_manifest: {d}: {e}", file=sys.stderr)
        return 1
    print(f"frames_from_manifest: {len(m['frames'])} frames, {len(m['tensors'])} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
