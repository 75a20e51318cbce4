#!/usr/bin/python3
"""The flash orders (which claim no reference) against float64, within a stated error bound.

For query row i with exact logits z_j = scale * q_i.k_j, probabilities p_j = softmax(z)_j
(masked keys excluded) and row max m, every output element must satisfy

  |out_id - o_id| <= sum_j p_j |v_jd| * (2 E + (2 S_k + 6 n_b + 16) u)       (1)
                   + 2 u * sum_j p_j |z_j - m| |v_jd|                       (2)
                   + u_s (|o_id| + (1) + (2))                                (3)

with u = 2^-24, n_b = ceil(S_k / Bc) key blocks, and E = max_j (scale * g_D * sum_d |q_d k_jd| + 2 u |z_j|),
g_D = D u / (1 - D u). Why each term:
  * E bounds the error of one computed score: a sequential dot product of D terms (with or
    without fma) is within g_D sum |q_d k_jd| (the standard bound), and rounding the scale and
    the product adds at most 2u relative. A shift common to all scores cancels in softmax, so
    relative errors of p_j are at most twice the largest score error: the 2E in (1).
  * the sums of p_j (the running l) and of p_j v_jd are sequential sums of at most S_k terms
    each, rescaled once per block by exp(m - m'), each exp within 2 ulp (4u relative; Sleef u10
    is within 1 ulp, ordo's exp2 polynomial within 2) and each rescale a multiply: (2 S_k + 6 n_b + 16) u
    covers both sums, the rescales, the final division and the exps of the scores.
  * (2): exp(fl(s - m)) sees the rounding of s - m, a relative error of u |s - m| in p_j.
  * (3): 16-bit outputs are rounded once to storage (u_s = 2^-8 bf16, 2^-11 f16; 0 for f32), a
    relative error of the computed f32 value, which is within (1) + (2) of o.
The log-sum-exp output is checked against |lse - lse*| <= E + (S_k + 6 n_b + 16) u + 2 u (|m| + |lse*|).
With an additive mask a_j (the "masked" inputs: finite values, -inf hiding 30% of the keys and
every key of query 1) the logits are z_j = scale * q.k_j + a_j, and each score sees one more
rounding, of the sum (u |z_j|), and under exp2 one of a_j * log2(e) (u |a_j|, in natural units):
E = max_j (scale * g_D * sum_d |q_d k_jd| + 2 u |scale * q.k_j| + u |z_j| + u |a_j|) there. A query
whose every key is masked must give out = 0 and lse = -inf exactly.
The test prints the largest observed fraction of the bound (far below 1 when the bound is
reasonable, not vacuous) and fails on any element outside it.
"""
import argparse
import math
import os
import subprocess
import sys

import numpy as np

from bits import as_float, to_bf16_bits
from scratch import scratch_dir

U = 2.0 ** -24
CASES = [  # (heads, S_q, S_k, D, causal)
    (2, 17, 100, 64, False), (2, 33, 129, 64, True), (1, 64, 256, 128, False), (3, 7, 9, 32, True), (1, 1, 300, 128, False),
    (2, 40, 40, 256, True),
]
ORDERS = [("flash(16)", 16), ("flash", 64), ("flash(bc=32,exp2=on,scale=multiply,fma=all)", 32), ("fast", 64)]


def draw(rng, kind, shape):
    if kind in ("normal", "masked"):
        return rng.standard_normal(shape)
    if kind == "spread3":
        return 3 * rng.standard_normal(shape)
    if kind == "offset":  # scores with a large common part
        return 2 + 0.5 * rng.standard_normal(shape)
    raise ValueError(kind)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ordo", required=True)
    args = ap.parse_args()
    tmp = scratch_dir("ordo_flash_bounds_")
    rng = np.random.default_rng(7)
    failures = checked = 0
    worst = {}
    for ci, (heads, sq, sk, d, causal) in enumerate(CASES):
        for kind in ("normal", "spread3", "offset") + (() if causal else ("masked",)):
            q, k, v = (draw(rng, kind, (heads, s, d)).astype(np.float32) for s in (sq, sk, sk))
            add = None  # the additive mask, [S_q, S_k] (every head's), f32
            if kind == "masked":
                add = np.where(rng.random((sq, sk)) < 0.3, -np.inf, 2 * rng.standard_normal((sq, sk))).astype(np.float32)
                if sq > 1:
                    add[1] = -np.inf
            for dtype in ("f32", "bf16", "f16"):
                if dtype == "bf16":
                    stored = [to_bf16_bits(a) for a in (q, k, v)]
                    qf, kf, vf = (as_float(a).astype(np.float64) for a in stored)
                elif dtype == "f16":
                    stored = [a.astype(np.float16) for a in (q, k, v)]
                    qf, kf, vf = (a.astype(np.float64) for a in stored)
                else:
                    stored = [q, k, v]
                    qf, kf, vf = (a.astype(np.float64) for a in stored)
                paths = []
                for name, a in zip("qkv", stored):
                    paths.append(os.path.join(tmp, f"{ci}_{kind}_{dtype}_{name}.npy"))
                    np.save(paths[-1], a)
                mask_in = []  # an f32 mask serves every dtype
                if add is not None:
                    mask_path = os.path.join(tmp, f"{ci}_mask.npy")
                    np.save(mask_path, add)
                    mask_in = ["--in", "mask=" + mask_path]
                scale = 1 / math.sqrt(d)
                zd = np.einsum("hid,hjd->hij", qf, kf) * scale
                a_abs = np.einsum("hid,hjd->hij", np.abs(qf), np.abs(kf))
                mask = np.triu(np.ones((sq, sk), dtype=bool), 1) if causal else np.zeros((sq, sk), dtype=bool)
                finite_add = np.zeros((sq, sk))
                if add is not None:
                    mask = mask | np.isneginf(add)
                    finite_add = np.where(np.isneginf(add), 0, add).astype(np.float64)
                z = np.where(mask, -np.inf, zd + finite_add)
                empty = mask.all(-1)  # queries whose every key is masked: out 0, lse -inf
                m = np.where(empty[..., None], 0, z.max(-1, keepdims=True))
                e = np.where(mask, 0, np.exp(np.where(mask, 0, z) - m))
                l = e.sum(-1, keepdims=True)
                p = e / np.where(l == 0, 1, l)
                o = p @ vf
                lse = np.where(empty, -np.inf, (m + np.log(np.where(l == 0, 1, l)))[..., 0])
                g = d * U / (1 - d * U)
                zf = np.where(mask, 0, z)
                err_s = np.where(mask, 0, scale * g * a_abs + 2 * U * np.abs(np.where(mask, 0, zd)) +
                                 (U * (np.abs(zf) + np.abs(finite_add)) if add is not None else 0))
                E = err_s.max(-1, keepdims=True)
                dz = np.where(mask, 0, np.abs(zf - m))
                us = {"f32": 0.0, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}[dtype]
                for order, bc in ORDERS:
                    if dtype != "f32" and order != "flash":
                        continue
                    nb = math.ceil(sk / min(bc, sk))
                    bound32 = (p @ np.abs(vf)) * (2 * E + (2 * sk + 6 * nb + 16) * U) + 2 * U * ((p * dz) @ np.abs(vf))
                    bound = bound32 + us * (np.abs(o) + bound32)
                    lse_bound = E[..., 0] + (sk + 6 * nb + 16) * U + 2 * U * (np.abs(m[..., 0]) + np.abs(lse))
                    out_p, lse_p = os.path.join(tmp, "out.npy"), os.path.join(tmp, "lse.npy")
                    cmd = [args.ordo, "run", "attention", "--order", order, "--in", "q=" + paths[0], "--in", "k=" + paths[1],
                           "--in", "v=" + paths[2], "--out", "out=" + out_p, "--out", "lse=" + lse_p] + (["--causal"] if causal else [])
                    cmd += mask_in
                    r = subprocess.run(cmd, capture_output=True, text=True)
                    label = f"{order} {dtype} heads={heads} Sq={sq} Sk={sk} D={d} causal={causal} {kind}"
                    if r.returncode != 0:
                        print(f"FAIL {label}: ordo exited {r.returncode}: {r.stderr.strip()}")
                        failures += 1
                        continue
                    got = np.load(out_p)
                    got = as_float(got).astype(np.float64) if dtype == "bf16" else got.astype(np.float64)
                    got_lse = np.load(lse_p).astype(np.float64)
                    live = ~empty  # queries (dim 1) with a key to attend to
                    ratio = np.abs(got - o)[:, live] / bound[:, live]
                    lse_ratio = np.abs(got_lse - lse)[:, live] / lse_bound[:, live]
                    if empty.any() and not (np.all(got[:, empty] == 0) and np.all(np.isneginf(got_lse[:, empty]))):
                        print(f"FAIL {label}: a query with every key masked gave out {got[:, empty].ravel()[:3]}, lse "
                              f"{got_lse[:, empty].ravel()[:3]}, not 0 and -inf")
                        failures += 1
                    checked += 1
                    key = (order, dtype)
                    worst[key] = max(worst.get(key, 0.0), float(ratio.max()), float(lse_ratio.max()))
                    if not (np.all(ratio <= 1) and np.all(lse_ratio <= 1)):
                        failures += 1
                        i = int(np.argmax(ratio))
                        print(f"FAIL {label}: out error {np.abs(got - o).ravel()[i]:.3e} exceeds its bound {bound.ravel()[i]:.3e}; "
                              f"worst lse fraction {lse_ratio.max():.3f}")
    print()
    for (order, dtype), w in sorted(worst.items()):
        print(f"  attention   {order:<44} {dtype:<5} largest error / bound = {w:.4f}")
    print(f"\n{checked - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
