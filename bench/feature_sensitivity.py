"""How sensitive the boxes-matched measure is to small errors in the head's
input features or in its carried state: the float32 PyTorch head over a
golden sequence, its own state carried, with the backbone's features (the
golden ones, float32) or the state it carries perturbed on every frame,
against the golden head outputs.

    PYTHONPATH=python /usr/bin/python3 bench/feature_sensitivity.py GOLDEN_DIR OUT_DIR
        [--checkpoint FILE | --preset tiny|v3] [--perturb none,fp16,noise:1e-4,...]
        [--seed 0] [--aggregation ext|reference] [--target features|state:NAME+NAME...]

--target: what is perturbed. `features` (the default): the head's input
features. `state:bank_feature+bank_anchor` (any of the float state inputs):
those state tensors as the head carries them into the next frame, each
perturbed on its own (noise:E gives each a relative L2 of E), which is what
an error in the head's own state outputs (bank_*_out) does to the following
frames.

Perturbations (each a run over the whole sequence):
  none       the features as they are: the check that the measure reads 100%
             and relative L2 0 when nothing changes (same model, same device);
  fp16       every feature rounded to float16 and back: what storing the
             backbone's output in float16 costs at least;
  noise:E    Gaussian noise scaled per frame to a relative L2 of E
             (||noise|| = E ||features||), seeded.
A float16 backbone computes with float16 inside as well, so its features
carry more error than `fp16` alone (the guarded tiny backbone measured
5e-4 relative L2, docs/precision.md).

The measure is the demo's and the frame benchmark's (s4d.sparse4d.agreement):
per frame the top-100 decoded boxes matched with the same class and track
id and a centre within 0.1 m ("matched"), and with the track ids mapped one
to one over the sequence ("ids mapped"). Writes OUT_DIR/feature_sensitivity
.md and .json (per perturbation: the summary and every frame's counts).
"""
import argparse
import datetime
import json
import os
import platform
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

from s4d.sparse4d import agreement  # noqa: E402
from s4d.sparse4d.head import DETECTION_NAMES, STATE_NAMES, HeadState  # noqa: E402


def perturber(spec, seed):
    """A function features -> perturbed features for one perturbation spec."""
    if spec == "none":
        return lambda f: f
    if spec == "fp16":
        return lambda f: f.astype(np.float16).astype(np.float32)
    if spec.startswith("noise:"):
        try:
            level = float(spec[len("noise:"):])
        except ValueError:
            raise SystemExit(f"feature_sensitivity: bad perturbation '{spec}' (noise:E, E a number)")
        if not level > 0:
            raise SystemExit(f"feature_sensitivity: noise level must be > 0, got '{spec}'")
        rng = np.random.default_rng(seed)

        def noisy(f):
            n = rng.standard_normal(f.shape)
            n *= level * np.linalg.norm(f.astype(np.float64)) / np.linalg.norm(n)
            return (f.astype(np.float64) + n).astype(np.float32)
        return noisy
    raise SystemExit(f"feature_sensitivity: unknown perturbation '{spec}' (none, fp16, noise:E)")


def run(model, golden_dir, feats, perturb, state_names=()):
    """agreement.run_sequence of the float32 head on perturbed golden features
    (`feats`: the golden sequence's features, frame by frame), or, with
    `state_names`, on the golden features with those carried state tensors
    perturbed (`perturb`: one function per name)."""
    counter = iter(range(len(feats)))
    errs = []

    def step(images, frame_in, state):
        i = next(counter)
        if state_names:
            f = feats[i]
            state = dict(state)
            for n in state_names:
                clean = state[n]
                state[n] = perturb[n](clean)
                if np.any(clean):  # a fresh bank (zeros) has no relative error
                    errs.append(agreement.rel_l2(state[n], clean))
        else:
            f = perturb(feats[i])
            errs.append(agreement.rel_l2(f, feats[i]))
        with torch.no_grad():
            ins = [torch.from_numpy(frame_in[k]) for k in ("projection", "image_wh", "timestamp",
                                                           "ego_pose")]
            st = HeadState(*[torch.from_numpy(state[n]) for n in STATE_NAMES])
            out = model.head(torch.from_numpy(f), *ins, st)
        o = {k: out[k].numpy() for k in DETECTION_NAMES + agreement.RAW_OUTPUTS}
        nxt = {n: t.numpy() for n, t in zip(STATE_NAMES, out["state"])}
        return o, nxt

    init = {n: t.numpy() for n, t in zip(STATE_NAMES, model.initial_state())}
    res = agreement.run_sequence(step, golden_dir, model.cfg, init)
    return res, errs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("golden")
    ap.add_argument("out")
    ap.add_argument("--checkpoint", default=None,
                    help="the weights the golden sequence was made with (s4d checkpoint)")
    ap.add_argument("--preset", default="tiny", help="seeded weights (seed 0) without --checkpoint")
    ap.add_argument("--perturb", default="none,fp16,noise:1e-5,noise:3e-5,noise:1e-4,noise:3e-4,noise:1e-3")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--aggregation", default="ext", choices=("ext", "reference"),
                    help="the aggregation op's implementation; the golden sequence's (default ext)")
    ap.add_argument("--target", default="features",
                    help="features, or state:NAME+NAME (float state inputs, e.g. "
                         "state:bank_feature+bank_anchor)")
    a = ap.parse_args(argv)
    state_names = ()
    if a.target.startswith("state:"):
        state_names = tuple(n for n in a.target[len("state:"):].split("+") if n)
        bad = [n for n in state_names
               if n not in STATE_NAMES or n in ("bank_track_id", "bank_valid", "bank_next_id")]
        if not state_names or bad:
            print(f"feature_sensitivity: --target {a.target}: give float state inputs among "
                  f"{', '.join(n for n in STATE_NAMES[:3] + STATE_NAMES[4:6])}", file=sys.stderr)
            return 2
    elif a.target != "features":
        print(f"feature_sensitivity: --target {a.target}: features or state:NAME+NAME",
              file=sys.stderr)
        return 2
    if not os.path.isfile(os.path.join(a.golden, "manifest.json")):
        print(f"feature_sensitivity: {a.golden}/manifest.json not found (s4d.sparse4d.golden "
              "writes it)", file=sys.stderr)
        return 2
    specs = [s for s in a.perturb.split(",") if s]
    if state_names:  # one generator per state tensor, seeded apart
        perturbs = {s: {n: perturber(s, a.seed + 1000 * k) for k, n in enumerate(state_names)}
                    for s in specs}
    else:
        perturbs = {s: perturber(s, a.seed) for s in specs}
    torch.manual_seed(0)
    if a.checkpoint:
        from s4d.sparse4d.checkpoint import load_model
        model = load_model(a.checkpoint, aggregation=a.aggregation, preset=a.preset)
        weights = os.path.basename(a.checkpoint)
    else:
        from s4d.sparse4d.model import build_model
        model = build_model(a.preset, aggregation=a.aggregation, seed=0)
        weights = "seeded (seed 0)"
    model.eval()
    os.makedirs(a.out, exist_ok=True)
    _, golden = agreement.load_golden(a.golden)
    feats = [fr["head_in"]["features"] for fr in golden]
    results = []
    for s in specs:
        frames, errs = run(model, a.golden, feats, perturbs[s], state_names)
        summ = agreement.summary(frames)
        below = sum(1 for f in frames if f["boxes"] and f["matched"] < 0.99 * f["boxes"])
        below_m = sum(1 for f in frames if f["boxes"] and f["matched_ids_mapped"] < 0.99 * f["boxes"])
        r = {"perturbation": s, "target": a.target,
             "features_rel_l2": float(np.median(errs)) if errs else 0.0,
             "frames_below_99": below, "frames_below_99_ids_mapped": below_m, **summ,
             "per_frame": [{"frame": f["frame"], "matched": f["matched"],
                            "matched_ids_mapped": f["matched_ids_mapped"], "boxes": f["boxes"],
                            "rel_l2": f["rel_l2"]} for f in frames]}
        results.append(r)
        print(f"{s:>12}: {a.target} rel L2 {r['features_rel_l2']:.2e}; worst frame "
              f"{summ['boxes_matched']:.2f} matched, {summ['boxes_matched_ids_mapped']:.2f} with ids "
              f"mapped; frames below 99%: {below} ({below_m} mapped) of {summ['frames']}; "
              f"worst output rel L2 {summ['rel_l2']:.2e}", flush=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    cmd = "bench/feature_sensitivity.py " + " ".join(argv if argv is not None else sys.argv[1:])
    doc = {"date": stamp, "host": platform.node(), "device": "cpu (torch float32)",
           "torch": torch.__version__, "weights": weights, "golden": a.golden,
           "command": cmd, "results": results}
    with open(os.path.join(a.out, "feature_sensitivity.json"), "w") as f:
        json.dump(doc, f, indent=1)
    what = "features" if not state_names else "carried " + "+".join(state_names)
    lines = [f"# Boxes matched under perturbed {what} ({stamp}, float32 PyTorch head on the CPU)",
             "", f"Command: `{cmd}`. Weights: {weights}. {results[0]['frames'] if results else 0} "
             "frames, state carried; the reference is the golden sequence (the same head on the "
             f"unperturbed {what}). The rel L2 column is the median over frames of each "
             "perturbed tensor's relative L2.", "",
             f"| perturbation | {what} rel L2 | worst frame matched | worst, ids mapped | "
             "frames < 99% | frames < 99%, ids mapped | worst output rel L2 |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(f"| {r['perturbation']} | {r['features_rel_l2']:.1e} | {r['boxes_matched']:.2f} | "
                     f"{r['boxes_matched_ids_mapped']:.2f} | {r['frames_below_99']} | "
                     f"{r['frames_below_99_ids_mapped']} | {r['rel_l2']:.1e} |")
    with open(os.path.join(a.out, "feature_sensitivity.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
