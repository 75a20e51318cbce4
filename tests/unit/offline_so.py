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


# A backward op is two kernels; its _run launches both (and allocates the workspace of the one-pass
# schedule, batch-invariant's). C that reads raw f32 inputs, runs the layer_norm_backward kernel of
# one order, and writes dx, dweight and dbias raw.
BACKWARD_C = r'''
#include <stdio.h>
#include <stdlib.h>
#include "liblnb.h"
static float* read_all(const char* path, long n) {
  float* p = malloc(sizeof(float) * n);
  FILE* f = fopen(path, "rb");
  if (!f || fread(p, sizeof(float), n, f) != (size_t)n) exit(3);
  fclose(f);
  return p;
}
static void write_all(const char* path, const float* p, long n) {
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(p, sizeof(float), n, f) != (size_t)n) exit(4);
  fclose(f);
}
int main(int argc, char** argv) {
  const long rows = 37, n = 100;
  float *dy = read_all(argv[1], rows * n), *x = read_all(argv[2], rows * n), *w = read_all(argv[3], n);
  float *mean = read_all(argv[4], rows), *rstd = read_all(argv[5], rows);
  float *dx = malloc(sizeof(float) * rows * n), *dw = malloc(sizeof(float) * n), *db = malloc(sizeof(float) * n);
  void* buffers[] = {dy, x, w, mean, rstd, dx, dw, db};
  const int status = argv[6][0] == 't' ? ordo_layer_norm_backward_torch2_15_cpu_avx2_threads_2_n100_f32_run(buffers, rows)
                                         : ordo_layer_norm_backward_batch_invariant_n100_f32_run(buffers, rows);
  if (status != 0) return 5;
  write_all(argv[7], dx, rows * n);
  write_all(argv[8], dw, n);
  write_all(argv[9], db, n);
  return 0;
}
'''


def backward_so(ordo, d):
    """layer_norm_backward's two stages from a .so equal `ordo run`'s outputs."""
    failures = []
    lib = os.path.join(d, "liblnb.so")
    subprocess.run([ordo, "build", "layer_norm_backward", "--orders", "torch2.15-cpu-avx2(threads=2),batch-invariant", "--cols", "100",
                    "-o", lib], check=True)
    kernels = json.load(open(os.path.join(d, "liblnb.json")))["kernels"]
    names = [k["name"] for k in kernels]
    if len(names) != 4 or not names[1].endswith("_stage2"):
        failures.append(f"backward manifest kernels: {names}")
    # batch-invariant's one pass: an instance per block of 32 rows, and a workspace of dweight's
    # and dbias's sums for each block, after the op's own arguments, in both stages.
    elif kernels[2]["launch"]["grid"] != ["ceil(rows/32)"] or kernels[0]["launch"]["grid"] != ["rows"]:
        failures.append(f"backward manifest grids: {kernels[0]['launch']['grid']}, {kernels[2]['launch']['grid']}")
    else:
        for k in kernels:
            want = [{"name": "block_sums", "dtype": "f32", "elements": "ceil(rows/32)*200", "output": True, "workspace": True}]
            got = [a for a in k["args"] if a.get("workspace")]
            if got != (want if "batch_invariant" in k["name"] else []) or (got and k["args"][-1] != got[0]):
                failures.append(f"{k['name']}: workspace arguments {got}")
    src, exe = os.path.join(d, "lnb.c"), os.path.join(d, "lnb")
    open(src, "w").write(BACKWARD_C)
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", f"-I{d}", src, f"-L{d}", "-llnb", "-lm", f"-Wl,-rpath,{d}", "-o", exe], check=True)
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((37, 100)) * 2 + 3).astype(np.float32)
    arrays = {"dy": rng.standard_normal((37, 100)).astype(np.float32), "x": x, "weight": (1 + rng.standard_normal(100) / 4).astype(np.float32),
              "mean": x.mean(-1).astype(np.float32), "rstd": (1 / np.sqrt(x.var(-1) + 1e-5)).astype(np.float32)}
    for k, a in arrays.items():
        a.tofile(os.path.join(d, f"{k}.raw"))
        np.save(os.path.join(d, f"{k}.npy"), a)
    for order, tag in (("torch2.15-cpu-avx2(threads=2)", "t"), ("batch-invariant", "b")):
        outs = [os.path.join(d, f"{o}_so.raw") for o in ("dx", "dweight", "dbias")]
        subprocess.run([exe] + [os.path.join(d, f"{k}.raw") for k in ("dy", "x", "weight", "mean", "rstd")] + [tag] + outs, check=True)
        run = [ordo, "run", "layer_norm_backward", "--order", order] + sum((["--in", f"{k}={d}/{k}.npy"] for k in arrays), [])
        run += sum((["--out", f"{o}={d}/{o}_jit.npy"] for o in ("dx", "dweight", "dbias")), [])
        subprocess.run(run, check=True)
        for o, so in zip(("dx", "dweight", "dbias"), outs):
            got, want = np.fromfile(so, np.float32), np.load(os.path.join(d, f"{o}_jit.npy")).reshape(-1)
            if not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
                failures.append(f"{order} {o}: the .so differs from ordo run in {(got.view(np.uint32) != want.view(np.uint32)).sum()} elements")
    return failures


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
        failures += backward_so(ordo, d)
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
