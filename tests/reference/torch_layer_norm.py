#!/usr/bin/python3
"""Bit-exact check of ordo's PyTorch 1.13 layer_norm, torch.compile-decomposition and var_mean orders
against the installed torch.

For every case (shape x value range x affine) and every CPU capability, torch runs in a
subprocess started with ATEN_CPU_CAPABILITY set (it is read once, at import), writes its
outputs as .npy, and `ordo run` must produce the same bit patterns in y, mean and rstd.
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
cases = json.load(open(sys.argv[1]))

def load(path):  # bf16 travels as uint16 bit patterns
    a = np.load(path)
    return torch.from_numpy(a.astype(np.int16)).view(torch.bfloat16) if a.dtype == np.uint16 else torch.from_numpy(a)

def save(path, t):
    np.save(path, t.view(torch.int16).numpy().astype(np.uint16) if t.dtype == torch.bfloat16 else t.numpy())

for c in cases:
    x = load(c["x"])
    if c["op"] == "layer_norm":
        w = load(c["weight"]) if c.get("weight") else None
        b = load(c["bias"]) if c.get("bias") else None
        y, mean, rstd = torch.native_layer_norm(x, [x.shape[-1]], w, b, c["eps"])
        save(c["want_y"], y)
        save(c["want_mean"], mean.reshape(x.shape[:-1]))
        save(c["want_rstd"], rstd.reshape(x.shape[:-1]))
    elif c["op"] == "layer_norm_decomp":
        # torch.compile's decomposition (aot_eager_decomp_partition), one eager op at a time.
        var, mean = torch.var_mean(x, -1, unbiased=False, keepdim=True)
        rstd = torch.rsqrt(var + c["eps"])
        y = (x - mean) * rstd
        if c.get("weight"):
            y = y * load(c["weight"]) + load(c["bias"])
        save(c["want_y"], y)
        save(c["want_mean"], mean.reshape(x.shape[:-1]))
        save(c["want_rstd"], rstd.reshape(x.shape[:-1]))
    elif c["op"] == "rms_norm":
        # The usual RMSNorm composite (1.13 has no rms_norm op).
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c["eps"])
        y = x * rstd
        if c.get("weight"):
            y = y * load(c["weight"])
        save(c["want_y"], y)
        save(c["want_rstd"], rstd.reshape(x.shape[:-1]))
    elif c["op"] == "var_mean":
        var, mean = torch.var_mean(x, -1, unbiased=False)
        np.save(c["want_var"], var.numpy())
        np.save(c["want_mean"], mean.numpy())
print(torch.__version__, torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "")
'''

N_SWEEP = [1, 2, 7, 8, 9, 15, 16, 17, 100, 127, 128, 129, 255, 256, 1000, 1024, 4095, 4096, 4097, 12345, 65537]
# CI's share: below a vector, each side of the vector and chunk boundaries once, the long rows.
N_CI = [1, 7, 8, 9, 16, 17, 100, 129, 256, 1000, 4097, 65537]
N_QUICK = [7, 8, 17, 128, 1000, 4097]
# (name, offset, scale): ordinary values, a large offset with a tiny spread, a wide range.
RANGES = [("normal", 0.0, 1.0), ("offset1e4", 1e4, 1e-3), ("wide", 0.0, 1e3)]


def rows_for(n):
    return 6 if n > 10000 else 24


def bf16_sweep_decomp(tier):
    return tiers.pick(tier, [17, 1025], [1, 17, 100, 1025, 65537], [1, 7, 17, 100, 1025, 4097, 65537])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ordo", required=True)
    tiers.add_arguments(ap)
    args = ap.parse_args()
    tier = tiers.chosen(args)
    try:
        import torch  # noqa: F401  (the workers import it; fail here with a clear message)
    except ImportError:
        print("FAIL: PyTorch is not importable by", sys.executable, "- install python3-torch (scripts/setup.sh)")
        return 1

    rng = np.random.default_rng(20261122)
    tmp = scratch_dir("ordo_ref_")
    cases = []
    sweep = tiers.pick(tier, N_QUICK, N_CI, N_SWEEP)
    for n, (rname, off, scale), affine in itertools.product(sweep, RANGES, [True, False]):
        rows = rows_for(n)
        base = os.path.join(tmp, f"ln_{n}_{rname}_{int(affine)}")
        x = (off + scale * rng.standard_normal((rows, n))).astype(np.float32)
        c = {"op": "layer_norm", "x": base + "_x.npy", "eps": 1e-5, "n": n, "range": rname, "affine": affine}
        np.save(c["x"], x)
        if affine:
            c["weight"], c["bias"] = base + "_w.npy", base + "_b.npy"
            np.save(c["weight"], (1 + 0.1 * rng.standard_normal(n)).astype(np.float32))
            np.save(c["bias"], (0.1 * rng.standard_normal(n)).astype(np.float32))
        cases.append(c)
    # The decomposition torch.compile applies, evaluated op by op in eager.
    for n, (rname, off, scale), affine in itertools.product(sweep, RANGES, [True, False]):
        base = os.path.join(tmp, f"lnd_{n}_{rname}_{int(affine)}")
        c = {"op": "layer_norm_decomp", "x": base + "_x.npy", "eps": 1e-5, "n": n, "range": rname, "affine": affine}
        np.save(c["x"], (off + scale * rng.standard_normal((rows_for(n), n))).astype(np.float32))
        if affine:
            c["weight"], c["bias"] = base + "_w.npy", base + "_b.npy"
            np.save(c["weight"], (1 + 0.1 * rng.standard_normal(n)).astype(np.float32))
            np.save(c["bias"], (0.1 * rng.standard_normal(n)).astype(np.float32))
        cases.append(c)
    # bf16 rounding points differ in few elements, so these cases use more rows, and a spread
    # where var is comparable to eps (so how eps is added matters).
    decomp_ranges = RANGES[:2] + [("var~eps", 0.0, 3e-3)]
    for n, (rname, off, scale), affine in itertools.product(bf16_sweep_decomp(tier), decomp_ranges, [True, False]):
        base = os.path.join(tmp, f"lndb_{n}_{rname}_{int(affine)}")
        c = {"op": "layer_norm_decomp", "x": base + "_x.npy", "eps": 1e-5, "n": n, "range": rname, "affine": affine,
             "dtype": "bf16"}
        np.save(c["x"], to_bf16_bits(off + scale * rng.standard_normal((8 if n > 10000 else 256, n))))
        if affine:
            c["weight"], c["bias"] = base + "_w.npy", base + "_b.npy"
            np.save(c["weight"], to_bf16_bits(1 + 0.1 * rng.standard_normal(n)))
            np.save(c["bias"], to_bf16_bits(0.1 * rng.standard_normal(n)))
        cases.append(c)
    # rms_norm: the composite over N across the sum's levels (512, 8192, 131072 elements).
    rms_sweep = sweep + tiers.pick(tier, [], [512, 8193, 140000], [511, 512, 513, 8192, 8193, 140000])
    for n, (rname, off, scale), affine in itertools.product(rms_sweep, RANGES, [True, False]):
        base = os.path.join(tmp, f"rms_{n}_{rname}_{int(affine)}")
        c = {"op": "rms_norm", "x": base + "_x.npy", "eps": 1e-5, "n": n, "range": rname, "affine": affine}
        np.save(c["x"], (off + scale * rng.standard_normal((4 if n > 10000 else 12, n))).astype(np.float32))
        if affine:
            c["weight"] = base + "_w.npy"
            np.save(c["weight"], (1 + 0.1 * rng.standard_normal(n)).astype(np.float32))
        cases.append(c)
    # Weight without bias and bias without weight are calls users make too.
    for n, which in itertools.product([17, 1000, 4097], ["weight", "bias"]):
        base = os.path.join(tmp, f"ln_{n}_only_{which}")
        c = {"op": "layer_norm", "x": base + "_x.npy", "eps": 1e-5, "n": n, "range": "normal", "affine": which + " only"}
        np.save(c["x"], rng.standard_normal((8, n)).astype(np.float32))
        c[which] = base + "_" + which + ".npy"
        np.save(c[which], (1 + 0.1 * rng.standard_normal(n)).astype(np.float32))
        cases.append(c)
    # bf16: PyTorch 1.13 rounds every statistics intermediate to bf16 (the order's Cast pairs).
    bf16_sweep = tiers.pick(tier, [17, 1025], [7, 16, 17, 100, 1025, 4097, 65537], [7, 16, 17, 40, 100, 1025, 4096, 4097, 65537])
    for n, (rname, off, scale), affine in itertools.product(bf16_sweep, RANGES[:2], [True, False]):
        rows = rows_for(n)
        base = os.path.join(tmp, f"lnb_{n}_{rname}_{int(affine)}")
        c = {"op": "layer_norm", "x": base + "_x.npy", "eps": 1e-5, "n": n, "range": rname, "affine": affine, "dtype": "bf16"}
        np.save(c["x"], to_bf16_bits(off + scale * rng.standard_normal((rows, n))))
        if affine:
            c["weight"], c["bias"] = base + "_w.npy", base + "_b.npy"
            np.save(c["weight"], to_bf16_bits(1 + 0.1 * rng.standard_normal(n)))
            np.save(c["bias"], to_bf16_bits(0.1 * rng.standard_normal(n)))
        cases.append(c)
    # Rows with NaN and Inf propagate through layer_norm in torch; include them.
    x = rng.standard_normal((4, 300)).astype(np.float32)
    x[0, 5], x[1, 17], x[2, 299], x[3, 0] = np.nan, np.inf, -np.inf, np.nan
    base = os.path.join(tmp, "ln_special")
    np.save(base + "_x.npy", x)
    cases.append({"op": "layer_norm", "x": base + "_x.npy", "eps": 1e-5, "n": 300, "range": "nan_inf", "affine": False})
    for n, (rname, off, scale) in itertools.product(sweep, RANGES):
        base = os.path.join(tmp, f"vm_{n}_{rname}")
        np.save(base + "_x.npy", (off + scale * rng.standard_normal((rows_for(n), n))).astype(np.float32))
        cases.append({"op": "var_mean", "x": base + "_x.npy", "n": n, "range": rname, "affine": False})

    orders = {"layer_norm": {"default": "torch1.13-cpu-default", "avx2": "torch1.13-cpu-avx2", "avx512": "torch1.13-cpu-avx512"},
              "layer_norm_decomp": {"default": "torch-decomp-cpu", "avx2": "torch-decomp-cpu"},
              "rms_norm": {"default": "torch-composite-cpu", "avx2": "torch-composite-cpu"},
              "var_mean": {"default": "torch1.13-cpu", "avx2": "torch1.13-cpu"}}
    failures = passed = 0
    table = {}
    for cap in capabilities(print):
        cap_cases = []
        for i, c in enumerate(cases):
            if cap == "avx512" and c["op"] != "layer_norm":
                continue  # no order of the other ops here names the avx512 capability
            c = dict(c)
            outs = {"var_mean": ["var", "mean"], "rms_norm": ["y", "rstd"]}.get(c["op"], ["y", "mean", "rstd"])
            for o in outs:
                c["want_" + o] = os.path.join(tmp, f"want_{cap}_{i}_{o}.npy")
                c["got_" + o] = os.path.join(tmp, f"got_{cap}_{i}_{o}.npy")
            c["outs"] = outs
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
            order = orders[c["op"]][cap]
            if c["op"] == "layer_norm_decomp" and c.get("dtype") == "bf16":
                order = "torch-decomp-cpu-" + cap  # bf16 rsqrt rounds differently per capability
            op = "layer_norm" if c["op"] == "layer_norm_decomp" else c["op"]
            cmd = [args.ordo, "run", op, "--order", order, "--eps", str(c.get("eps", 1e-5)), "--in", "x=" + c["x"]]
            for name in ("weight", "bias"):
                if c.get(name):
                    cmd += ["--in", f"{name}={c[name]}"]
            for o in c["outs"]:
                cmd += ["--out", f"{o}={c['got_' + o]}"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            key = (op, order, c.get("dtype", "f32"))
            table.setdefault(key, [0, 0])
            table[key][1] += 1
            label = f"{op} {order} {c.get('dtype', 'f32')} N={c['n']} {c['range']} affine={c['affine']}"
            if r.returncode != 0:
                print(f"FAIL {label}: ordo exited {r.returncode}: {r.stderr.strip()}")
                failures += 1
                continue
            ok_all, why = True, []
            for o in c["outs"]:
                ok, msg = same_bits(np.load(c["got_" + o]), np.load(c["want_" + o]))
                if not ok:
                    ok_all = False
                    why.append(f"{o}: {msg}")
            if ok_all:
                passed += 1
                table[key][0] += 1
            else:
                failures += 1
                print(f"FAIL {label}: " + "; ".join(why))
    return print_summary(table, passed, failures)


if __name__ == "__main__":
    sys.exit(main())
