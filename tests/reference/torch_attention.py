#!/usr/bin/python3
"""Bit-exact check of ordo's eager-attention orders against the installed PyTorch 1.13.

torch runs in a subprocess per CPU capability (ATEN_CPU_CAPABILITY is read once, at import) and
writes `torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D), -1) @ v` (causal: the scaled
scores masked_fill'ed with -inf above the diagonal, key j > query i) as .npy. `ordo run attention`
with the capability's orders must give the same bit patterns: torch1.13-cpu-math and exact-tiled
(which never keeps the score matrix), in f32 and bf16. The shapes cover S not a multiple of the
query block (8) or key group, S_q != S_k, one query or key, D = 32, 64, 128, 256, bf16's
small-shape kernel (S_q*S_k*D < 400) on both sides of its threshold, and a non-default scale.
The value ranges include peaky softmaxes, subnormal and overflowing products, NaN and Inf.
A missing torch is a failure, never a skip.

bf16 matmul: on a CPU with AVX-512 (BW/VL/DQ), PyTorch 1.13 hands a bf16 matmul to oneDNN
(use_mkldnn_bf16_matmul in LinearAlgebra.cpp) instead of its own kernels, which are what the
bf16 orders reproduce (docs/research/attention-torch1.13.md). The reference is therefore torch
with torch.backends.mkldnn disabled, which is torch's default path on other CPUs; the worker also
runs each bf16 case with oneDNN enabled, and the test prints on how many cases that changes
torch's result on this CPU. oneDNN's bf16 order is not reproduced.
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
import json, math, sys
import numpy as np
import torch
torch.set_num_threads(1)
def tensor(a):
    return torch.from_numpy(a.astype(np.int16)).view(torch.bfloat16) if a.dtype == np.uint16 else torch.from_numpy(a)
def attention(q, k, v, c):
    D = q.shape[-1]
    divisor = math.sqrt(D) if c["scale"] is None else 1.0 / c["scale"]
    s = q @ k.transpose(-2, -1) / divisor
    if c["causal"]:
        s = s.masked_fill(torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1), float("-inf"))
    o = torch.softmax(s, -1) @ v
    return o.view(torch.int16).numpy().astype(np.uint16) if o.dtype == torch.bfloat16 else o.numpy()
for c in json.load(open(sys.argv[1])):
    q, k, v = (tensor(np.load(c[n])) for n in ("q", "k", "v"))
    with torch.backends.mkldnn.flags(enabled=False):
        np.save(c["want"], attention(q, k, v, c))
    if c["dtype"] == "bf16":
        np.save(c["want_onednn"], attention(q, k, v, c))
print(torch.__version__)
'''

# (S_q, S_k) pairs; D = 256 uses the smaller ones to bound the run time.
SEQ = [(1, 1), (1, 7), (7, 1), (7, 17), (17, 7), (3, 4), (1, 100), (100, 17), (17, 129), (64, 64), (65, 130), (129, 100)]
HEADS = [(1, 1), (1, 2), (2, 3), (2, 1)]
# bf16 q @ k^T switches kernels at S_q*S_k*D = 400: both sides.
THRESHOLD = [(5, 5, 16), (7, 7, 8), (3, 4, 32), (2, 6, 32), (5, 5, 32)]


def make_qkv(rng, kind, shape_q, shape_kv, scale):
    def draw(shape):
        if kind == "normal":
            return rng.standard_normal(shape)
        if kind == "spread3":
            return 3 * rng.standard_normal(shape)
        if kind == "peaky":  # scores in the hundreds: softmax close to one-hot
            return 30 * rng.standard_normal(shape)
        if kind == "spikes":  # mostly small, 5 % large
            x = rng.uniform(-1, 1, shape)
            return np.where(rng.random(shape) < 0.05, 40 * x, x)
        if kind == "tiny":  # products below the float32 normal range
            return 1e-22 * rng.standard_normal(shape)
        if kind == "overflow":  # products overflow to +-inf: inf - inf in the softmax
            return np.sign(rng.standard_normal(shape)) * 2.0 ** rng.uniform(55, 64, shape)
        if kind == "nan_inf":
            x = rng.standard_normal(shape)
            flat = x.reshape(-1)
            flat[rng.integers(0, flat.size)] = np.nan
            flat[rng.integers(0, flat.size)] = np.inf
            flat[rng.integers(0, flat.size)] = -np.inf
            return x
        raise ValueError(kind)
    # v alone at the edges of the float32 range, q and k ordinary: products p*v near and below
    # 2^-126 (bf16 subnormal v included), or near overflow with v*(2^16+1) past it, where
    # exact-tiled's bf16 p @ v must leave its Veltkamp split for the integer rounding.
    if kind in ("tiny_v", "huge_v"):
        lo, hi = (-136, -110) if kind == "tiny_v" else (90, 126)
        v = np.sign(rng.standard_normal(shape_kv)) * 2.0 ** rng.uniform(lo, hi, shape_kv)
        return rng.standard_normal(shape_q), rng.standard_normal(shape_kv), v
    # q and k near 2^64: products q_d*k_d past the float32 range, where an fma and PyTorch 1.13's
    # separate multiply and add differ (exact-tiled-default's bf16 q @ k^T must not fuse them).
    # Scores 0 for key 0 and -88 to -92 for the others, so every p but key 0's is subnormal
    # (bf16), and v of key 0 zero: the output is the sum of subnormal products, which
    # exact-tiled's bf16 p @ v must round with the integer rounding, not its Veltkamp split.
    if kind == "subnormal_p":
        d = shape_q[-1]
        q = np.zeros(shape_q)
        q[..., 0] = 1.0
        k = np.zeros(shape_kv)
        k[..., 0] = -rng.uniform(88, 92, shape_kv[:-1]) / (scale if scale is not None else 1.0 / np.sqrt(d))
        k[..., 0, 0] = 0.0
        v = rng.standard_normal(shape_kv)
        v[..., 0, :] = 0.0
        return q, k, v
    if kind == "huge_qk":
        def huge(shape):
            return np.sign(rng.standard_normal(shape)) * 2.0 ** rng.uniform(61, 65, shape)
        return huge(shape_q), huge(shape_kv), rng.standard_normal(shape_kv)
    return draw(shape_q), draw(shape_kv), draw(shape_kv)


KINDS = ["normal", "spread3", "peaky", "spikes", "tiny", "overflow", "nan_inf", "tiny_v", "huge_v", "huge_qk", "subnormal_p"]


def ordo_run(ordo, order, c, out):
    """`ordo run attention` for case c with `order`, writing out to `out`."""
    cmd = [ordo, "run", "attention", "--order", order, "--in", "q=" + c["q"], "--in", "k=" + c["k"], "--in", "v=" + c["v"],
           "--out", "out=" + out]
    if c["causal"]:
        cmd.append("--causal")
    if c["scale"] is not None:
        cmd += ["--scale", repr(c["scale"])]
    return subprocess.run(cmd, capture_output=True, text=True)


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
    tmp = scratch_dir("ordo_attention_")
    # CI's share: every sequence pair at the smallest and a large head size, the largest on a few.
    head_dims, long_seqs = tiers.pick(tiers.chosen(args), ((64,), 0), ((32, 128), 4), ((32, 64, 128), 8))
    shapes = [(sq, sk, d) for d in head_dims for sq, sk in SEQ] + [(sq, sk, 256) for sq, sk in SEQ[:long_seqs]]
    cases = []
    i = 0
    for dtype in ("f32", "bf16"):
        for (sq, sk, d), causal in itertools.product(shapes + THRESHOLD, (False, True)):
            kind = KINDS[i % len(KINDS)]
            b, h = HEADS[i % len(HEADS)]
            scale = 0.3 if i % 11 == 5 else None
            i += 1
            q, k, v = make_qkv(rng, kind, (b, h, sq, d), (b, h, sk, d), scale)
            c = {"dtype": dtype, "sq": sq, "sk": sk, "d": d, "causal": causal, "kind": kind, "scale": scale, "heads": [b, h]}
            for name, a in (("q", q), ("k", k), ("v", v)):
                a = a.astype(np.float32)
                c[name] = os.path.join(tmp, f"case{i}_{name}.npy")
                np.save(c[name], to_bf16_bits(a) if dtype == "bf16" else a)
            cases.append(c)

    failures = passed = 0
    table = {}
    control_differs = {}
    for cap in capabilities(print):
        if cap == "avx512":
            continue  # no attention order claims the avx512 build
        suffix = "" if cap == "avx2" else "-default"
        cap_cases = [dict(c, want=os.path.join(tmp, f"want_{cap}_{j}.npy"), want_onednn=os.path.join(tmp, f"onednn_{cap}_{j}.npy"))
                     for j, c in enumerate(cases)]
        spec = os.path.join(tmp, f"cases_{cap}.json")
        json.dump(cap_cases, open(spec, "w"))
        env = dict(os.environ, ATEN_CPU_CAPABILITY=cap)
        worker = subprocess.run([sys.executable, "-c", TORCH_WORKER, spec], env=env, capture_output=True, text=True)
        if worker.returncode != 0:
            print(f"FAIL: torch worker ({cap}) failed:\n{worker.stderr}")
            return 1
        print(f"torch {worker.stdout.strip()} with ATEN_CPU_CAPABILITY={cap}")
        bf16_cases = [c for c in cap_cases if c["dtype"] == "bf16"]
        onednn_differs = sum(not same_bits(np.load(c["want_onednn"]), np.load(c["want"]))[0] for c in bf16_cases)
        print(f"oneDNN's bf16 matmul changes torch's result on {onednn_differs} of {len(bf16_cases)} bf16 cases on this CPU "
              f"({cap}; the reference has oneDNN disabled, and no order reproduces oneDNN)")
        for j, c in enumerate(cap_cases):
            orders = ["torch1.13-cpu-math" + suffix, "exact-tiled" + suffix]
            for order in orders:
                got = os.path.join(tmp, f"got_{cap}_{j}_{order}.npy")
                r = ordo_run(args.ordo, order, c, got)
                key = ("attention", order, c["dtype"])
                table.setdefault(key, [0, 0])
                table[key][1] += 1
                label = (f"{order} {c['dtype']} heads={c['heads']} Sq={c['sq']} Sk={c['sk']} D={c['d']} causal={c['causal']} "
                         f"scale={c['scale']} {c['kind']}")
                if r.returncode != 0:
                    print(f"FAIL {label}: ordo exited {r.returncode}: {r.stderr.strip()}")
                    failures += 1
                    continue
                ok, why = same_bits(np.load(got), np.load(c["want"]))
                if ok:
                    passed += 1
                    table[key][0] += 1
                else:
                    failures += 1
                    print(f"FAIL {label}: {why}")
            if c["dtype"] == "f32" and c["kind"] in ("normal", "spread3"):
                # Negative control: the other capability's softmax must miss some cases.
                other = "torch1.13-cpu-math" + ("-default" if cap == "avx2" else "")
                alt = os.path.join(tmp, f"control_{cap}_{j}.npy")
                if ordo_run(args.ordo, other, c, alt).returncode != 0:
                    print(f"FAIL: negative control {other} did not run")
                    failures += 1
                    continue
                control_differs[cap] = control_differs.get(cap, 0) + (not same_bits(np.load(alt), np.load(c["want"]))[0])
    for cap in ("default", "avx2"):
        n = control_differs.get(cap, 0)
        print(f"negative control: the other capability's order differs from torch ({cap}) on {n} cases")
        if n == 0:
            print(f"FAIL: the cases do not tell the capabilities apart on {cap}")
            failures += 1
    return print_summary(table, passed, failures)


if __name__ == "__main__":
    sys.exit(main())
