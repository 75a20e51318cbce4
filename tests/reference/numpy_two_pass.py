#!/usr/bin/python3
"""Bit-exact check of ordo's numpy-two-pass order against the installed numpy (float32).

The reference is the composite a numpy user writes:
    m = x.mean(-1, keepdims=True); v = x.var(-1, keepdims=True)
    y = (x - m) / np.sqrt(v + eps) * w + b
var_mean is checked in var and mean; layer_norm in y and mean, and its rstd output (which numpy
has no name for) against np.float32(1) / np.sqrt(v + eps). Shapes cross numpy's 8192-element
reduction buffer. A missing numpy is a failure, never a skip.
"""
import argparse
import os
import subprocess
import sys

from summary import print_summary
from scratch import scratch_dir

try:
    import numpy as np
except ImportError:
    print("FAIL: numpy is not importable by", sys.executable, "- install python3-numpy (scripts/setup.sh)")
    sys.exit(1)

N_SWEEP = [1, 2, 7, 8, 9, 17, 127, 128, 129, 1000, 4097, 8191, 8192, 8193, 16384, 20000, 65537, 100001]
RANGES = [("normal", 0.0, 1.0), ("offset1e4", 1e4, 1e-3), ("wide", 0.0, 1e3)]


def differing(got, want):
    g, w = got.view(np.uint32), want.view(np.uint32)
    return int(((g != w) & ~(np.isnan(got) & np.isnan(want))).sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ordo", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(1224)
    tmp = scratch_dir("ordo_np_")
    path = lambda name: os.path.join(tmp, name)
    passed = failed = 0
    counts = {}
    eps = np.float32(1e-5)
    for n in N_SWEEP:
        for rname, off, scale in RANGES:
            rows = 4 if n > 10000 else 12
            x = (off + scale * rng.standard_normal((rows, n))).astype(np.float32)
            if rname == "wide" and n > 2:
                x[0, n // 2] = np.nan  # numpy propagates NaN through every statistic
                x[1, 1] = np.inf
            w = (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)
            b = (0.1 * rng.standard_normal(n)).astype(np.float32)
            for name, a in (("x", x), ("w", w), ("b", b)):
                np.save(path(name + ".npy"), a)
            with np.errstate(invalid="ignore"):
                m = x.mean(-1, keepdims=True)
                v = x.var(-1, keepdims=True)
                want = {
                    ("var_mean", "var"): v[:, 0], ("var_mean", "mean"): m[:, 0],
                    ("layer_norm", "y"): (x - m) / np.sqrt(v + eps) * w + b, ("layer_norm", "mean"): m[:, 0],
                    ("layer_norm", "rstd"): (np.float32(1) / np.sqrt(v + eps))[:, 0],
                }
            for op, outs, extra in (("var_mean", ["var", "mean"], []),
                                    ("layer_norm", ["y", "mean", "rstd"], ["--in", "weight=" + path("w.npy"), "--in", "bias=" + path("b.npy")])):
                cmd = [args.ordo, "run", op, "--order", "numpy-two-pass", "--in", "x=" + path("x.npy")] + extra
                for o in outs:
                    cmd += ["--out", f"{o}={path('got_' + o + '.npy')}"]
                r = subprocess.run(cmd, capture_output=True, text=True)
                key = (op, "numpy-two-pass", "f32")
                counts.setdefault(key, [0, 0])
                counts[key][1] += 1
                label = f"{op} N={n} {rname}"
                if r.returncode != 0:
                    print(f"FAIL {label}: ordo exited {r.returncode}: {r.stderr.strip()}")
                    failed += 1
                    continue
                bad = {o: differing(np.load(path("got_" + o + ".npy")), want[(op, o)]) for o in outs}
                if any(bad.values()):
                    print(f"FAIL {label}: differing elements {bad}")
                    failed += 1
                else:
                    passed += 1
                    counts[key][0] += 1
    return print_summary(counts, passed, failed)


if __name__ == "__main__":
    sys.exit(main())
