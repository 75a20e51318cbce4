#!/usr/bin/env python3
"""`ordo build` end to end: the shared library it writes is used from C with no LLVM and no ordo
library at run time, and computes the same bits as `ordo run`; the manifest describes it.

Run: /usr/bin/python3 tests/unit/offline_so.py --ordo build/bin/ordo
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "offline_so.c")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ordo", required=True)
    ordo = os.path.abspath(ap.parse_args().ordo)
    failures = []
    with tempfile.TemporaryDirectory() as d:
        lib = os.path.join(d, "libln.so")
        subprocess.run([ordo, "build", "layer_norm", "--orders", "torch1.13-cpu-avx2,fast", "--cols", "1024", "-o", lib],
                       check=True)
        exe = os.path.join(d, "offline_so")
        subprocess.run(["cc", "-O2", "-Wall", "-Werror", f"-I{d}", EXAMPLE, f"-L{d}", "-lln", "-lm", f"-Wl,-rpath,{d}", "-o", exe],
                       check=True)
        ldd = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
        if "LLVM" in ldd or "ordo" in ldd.replace("libln", ""):
            failures.append(f"the example links more than the library and libc/libm:\n{ldd}")
        x = (np.random.default_rng(5).standard_normal((37, 1024)) * 2 + 0.5).astype(np.float32)
        np.save(os.path.join(d, "x.npy"), x)
        np.save(os.path.join(d, "w.npy"), np.ones(1024, np.float32))
        np.save(os.path.join(d, "b.npy"), np.zeros(1024, np.float32))
        subprocess.run([exe, os.path.join(d, "x.npy"), os.path.join(d, "y_so.npy")], check=True)
        subprocess.run([ordo, "run", "layer_norm", "--order", "torch1.13-cpu-avx2", "--in", f"x={d}/x.npy", "--in", f"weight={d}/w.npy",
                        "--in", f"bias={d}/b.npy", "--out", f"y={d}/y_jit.npy"], check=True)
        y_so, y_jit = np.load(os.path.join(d, "y_so.npy")), np.load(os.path.join(d, "y_jit.npy"))
        if not np.array_equal(y_so.view(np.uint32), y_jit.view(np.uint32)):
            failures.append(f"offline y differs from ordo run in {(y_so.view(np.uint32) != y_jit.view(np.uint32)).sum()} elements")
        manifest = json.load(open(os.path.join(d, "libln.json")))
        names = [k["name"] for k in manifest["kernels"]]
        if names != ["ordo_layer_norm_torch1_13_cpu_avx2_n1024_f32", "ordo_layer_norm_fast_n1024_f32"]:
            failures.append(f"manifest kernels: {names}")
        if [a["name"] for a in manifest["kernels"][0]["args"]] != ["x", "weight", "bias", "y", "mean", "rstd"]:
            failures.append("manifest argument layout")
        # Bad input: no partial output set.
        bad = subprocess.run([ordo, "build", "layer_norm", "--order", "no-such-order", "--cols", "8", "-o", os.path.join(d, "libbad.so")],
                             capture_output=True, text=True)
        if bad.returncode != 2 or "no-such-order" not in bad.stderr or any(n.startswith("libbad") for n in os.listdir(d)):
            failures.append(f"bad build: exit {bad.returncode}, stderr {bad.stderr!r}, files {os.listdir(d)}")
    for f in failures:
        print("FAIL", f)
    print("offline .so:", "ok" if not failures else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
