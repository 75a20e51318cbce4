#!/usr/bin/python3
"""Bit-exact check of ordo's PyTorch 1.13 softmax, log_softmax and cross_entropy orders against the installed torch.

torch runs in a subprocess per CPU capability (ATEN_CPU_CAPABILITY is read once, at import)
and writes torch.softmax / torch.log_softmax over the last dim as .npy; `ordo run` with the
capability's order must produce the same bit patterns. The value ranges include masked rows
(-inf), rows with NaN and +inf (which propagate), huge offsets and underflowing exponentials.
cross_entropy (F.cross_entropy with int64 class indices, a quarter of them ignore_index) compares
its loss under each reduction, over row counts on both sides of nll_loss's cascade levels.
A missing torch is a failure, never a skip.
"""
import argparse
import itertools
import json
import os
import subprocess
import sys

import numpy as np

from bits import capabilities, same_bits, to_bf16_bits
from summary import print_summary
import tiers
from scratch import scratch_dir

TORCH_WORKER = r'''
import json, sys
import numpy as np
import torch
torch.set_num_threads(1)
for c in json.load(open(sys.argv[1])):
    a = np.load(c["x"])
    x = torch.from_numpy(a.astype(np.int16)).view(torch.bfloat16) if a.dtype == np.uint16 else torch.from_numpy(a)
    if c["op"] == "cross_entropy":
        y = torch.nn.functional.cross_entropy(x, torch.from_numpy(np.load(c["target"])), ignore_index=c["ignore_index"],
                                              reduction=c["reduction"])
    else:
        y = torch.softmax(x, -1) if c["op"] == "softmax" else torch.log_softmax(x, -1)
    np.save(c["want"], y.view(torch.int16).numpy().astype(np.uint16) if y.dtype == torch.bfloat16 else y.numpy())
print(torch.__version__)
'''

N_SWEEP = [1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 127, 128, 129, 1000, 1023, 1024, 1025, 4096, 4097,
           10000, 65537, 70001]
# CI's share: each tail mod 8 and 16 once, each side of the vector and chunk boundaries, the long rows.
N_CI = [1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 33, 129, 1000, 1025, 4096, 10000, 70001]
N_QUICK = [1, 7, 9, 17, 129, 1025]


def make_x(rng, kind, rows, n):
    """Rows of one value range. Every kind is chosen to exercise a different part of the order."""
    if kind == "normal":
        return rng.standard_normal((rows, n))
    if kind == "spread10":  # exps spanning many binades: the sum order matters
        return 10 * rng.standard_normal((rows, n))
    if kind == "offset1e4":  # x - max must be exact before exp
        return 1e4 + 1e-3 * rng.standard_normal((rows, n))
    if kind == "underflow":  # exp near and below its subnormal and zero cutoffs
        return rng.uniform(-120, 0, (rows, n))
    if kind == "masked":  # attention-style masking; one row keeps a single finite entry
        x = rng.standard_normal((rows, n))
        x[rng.random((rows, n)) < 0.4] = -np.inf
        x[0, :] = -np.inf
        x[0, n // 2] = 1.5
        return x
    if kind == "nan_inf":  # NaN and +inf propagate; an all -inf row gives NaN
        x = rng.standard_normal((rows, n))
        x[0, n // 3] = np.nan
        if rows > 1:
            x[1, n - 1] = np.inf
        if rows > 2:
            x[2, :] = -np.inf
        return x
    if kind == "equal":
        return np.full((rows, n), 0.75)
    raise ValueError(kind)


KINDS = ["normal", "spread10", "offset1e4", "underflow", "masked", "nan_inf", "equal"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ordo", required=True)
    tiers.add_arguments(ap)
    args = ap.parse_args()
    try:
        import torch  # noqa: F401  (the workers import it; fail here with a clear message)
    except ImportError:
        print("FAIL: PyTorch is not importable by", sys.executable, "- install python3-torch (scripts/setup.sh)")
        return 1

    rng = np.random.default_rng(20261122)
    tmp = scratch_dir("ordo_softmax_")
    sweep = tiers.pick(tiers.chosen(args), N_QUICK, N_CI, N_SWEEP)
    cases = []
    for op, dtype, n, kind in itertools.product(["softmax", "log_softmax"], ["f32", "bf16"], sweep, KINDS):
        rows = 2 if n > 10000 else 8
        x = make_x(rng, kind, rows, n).astype(np.float32)
        path = os.path.join(tmp, f"{op}_{dtype}_{n}_{kind}_x.npy")
        np.save(path, to_bf16_bits(x) if dtype == "bf16" else x)
        cases.append({"op": op, "dtype": dtype, "n": n, "kind": kind, "x": path})
    # The reduction rotates with the width (each ordo run is a process: a share keeps the test short).
    for k, (dtype, n) in enumerate(itertools.product(["f32", "bf16"], sweep)):
        reduction = ["mean", "sum", "none"][k % 3]
        rows = [1, 17, 257, 300][k % 4] if n <= 10000 else 3
        kind = KINDS[k % 4]  # finite logits: the loss of a NaN row is NaN in any order
        x = make_x(rng, kind, rows, n).astype(np.float32)
        target = rng.integers(0, n, rows)
        target[rng.random(rows) < 0.25] = -100
        path = os.path.join(tmp, f"ce_{dtype}_{n}_{reduction}_x.npy")
        np.save(path, to_bf16_bits(x) if dtype == "bf16" else x)
        np.save(path + ".target.npy", target)
        cases.append({"op": "cross_entropy", "dtype": dtype, "n": n, "kind": f"{kind} rows={rows} reduction={reduction}", "x": path,
                      "target": path + ".target.npy", "reduction": reduction, "ignore_index": -100})
    # bf16 log_softmax rounds its row sum to bf16, which hides the sum's order in almost every
    # random row. These rows were found by a search over 10^7 random rows (see
    # docs/research/log-softmax-bf16-torch1.13.md): in each, a plausible alternative order
    # (the other capability's tree or exp, sequential or float64 sums, ...) changes the output.
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    for cap in ["avx2", "default"]:
        rows = np.load(os.path.join(data, f"bf16_log_softmax_rows_{cap}.npz"))
        for key in sorted(rows.files):
            path = os.path.join(tmp, f"disc_{cap}_{key}_x.npy")
            np.save(path, rows[key].astype(np.uint16))
            cases.append({"op": "log_softmax", "dtype": "bf16", "n": rows[key].shape[1], "kind": f"discriminating({cap})",
                          "x": path})

    failures = passed = 0
    table = {}
    control_differs = {}  # capability -> discriminating cases where the other capability's order differs from torch
    for cap in capabilities(print):
        order = "torch1.13-cpu-" + cap
        cap_cases = []
        for i, c in enumerate(cases):
            c = dict(c, want=os.path.join(tmp, f"want_{cap}_{i}.npy"), got=os.path.join(tmp, f"got_{cap}_{i}.npy"))
            cap_cases.append(c)
        spec = os.path.join(tmp, f"cases_{cap}.json")
        json.dump(cap_cases, open(spec, "w"))
        env = dict(os.environ, ATEN_CPU_CAPABILITY=cap)
        worker = subprocess.run([sys.executable, "-c", TORCH_WORKER, spec], env=env, capture_output=True, text=True)
        if worker.returncode != 0:
            print(f"FAIL: torch worker ({cap}) failed:\n{worker.stderr}")
            return 1
        print(f"torch {worker.stdout.strip()} with ATEN_CPU_CAPABILITY={cap}")
        for c in cap_cases:
            cmd = [args.ordo, "run", c["op"], "--order", order, "--in", "x=" + c["x"], "--out", "y=" + c["got"]]
            if c["op"] == "cross_entropy":
                cmd[-1] = "loss=" + c["got"]
                cmd += ["--in", "target=" + c["target"], "--reduction", c["reduction"], "--ignore-index", str(c["ignore_index"])]
            r = subprocess.run(cmd, capture_output=True, text=True)
            key = (c["op"], order, c["dtype"])
            table.setdefault(key, [0, 0])
            table[key][1] += 1
            label = f"{c['op']} {order} {c['dtype']} N={c['n']} {c['kind']}"
            if r.returncode != 0:
                print(f"FAIL {label}: ordo exited {r.returncode}: {r.stderr.strip()}")
                failures += 1
                continue
            ok, why = same_bits(np.load(c["got"]), np.load(c["want"]))
            if c["kind"].startswith("discriminating") and cap in ("default", "avx2"):
                # Negative control: the other capability's order must miss some of these rows,
                # or they would not discriminate anything.
                other = "torch1.13-cpu-" + ("default" if cap == "avx2" else "avx2")
                alt = c["got"] + ".control.npy"
                subprocess.run([args.ordo, "run", c["op"], "--order", other, "--in", "x=" + c["x"], "--out", "y=" + alt],
                               check=True, capture_output=True)
                control_differs[cap] = control_differs.get(cap, 0) + (not same_bits(np.load(alt), np.load(c["want"]))[0])
            if ok:
                passed += 1
                table[key][0] += 1
            else:
                failures += 1
                print(f"FAIL {label}: {why}")
    for cap in ("default", "avx2"):
        n = control_differs.get(cap, 0)
        print(f"negative control: the other capability's order differs from torch ({cap}) on {n} discriminating cases")
        if n == 0:
            print(f"FAIL: the discriminating rows do not discriminate on {cap}")
            failures += 1
    return print_summary(table, passed, failures)


if __name__ == "__main__":
    sys.exit(main())
