#!/usr/bin/python3
"""attention_backward's tiled orders (flash, fast; no reference) against float64, within a stated
error bound. f32 inputs; out and lse are the float64 forward's, rounded to f32, and are given to
ordo (--in lse) or left out (the kernel recomputes lse by the order's forward).

Exact quantities, per (batch*head): z_ij = scale q_i.k_j (masked: -inf), P = softmax(z),
o = P v, D_i = dout_i.o_i, dP_ij = dout_i.v_j, t_ij = dP_ij - D_i, dS = P t,
dv = P^T dout, dk = scale dS^T q, dq = scale dS k. With u = 2^-24 and g_n = n u / (1 - n u), the
first-order error of each computed quantity (ir/order.hpp, AttentionBackwardOrder::Tiled):
  * lse: given, |dlse| <= u |lse| (rounded to f32 once); recomputed, the bound of the forward's
    lse in flash_bounds.py: E_i + (S_k + 6 n_b + 16) u + 2 u (|m_i| + |lse_i|).
  * score s = fl(fl(q.k) * fl(scale)): |ds| <= scale g_D sum_d |q_d k_d| + 2 u |z| (a sequential
    dot of D terms, with or without fma, and two roundings).
  * P = exp(fl(s - lse)) by Sleef u10 (1 ulp): relative error rp <= expm1(|ds| + |dlse| +
    u |z - lse| + 2 u) (the argument's errors and rounding, the exp's ulp).
  * D_i from out rounded to f32: |dD| <= (g_D + u) sum_d |dout_d o_d|; dP: |ddP| <= g_D sum_d |dout_d v_d|.
  * t = fl(dP - D): |dt| <= ddP + dD + u (|t| + ddP + dD); dS = fl(P t):
    |ddS| <= P (dt + |t| rp) + u P |t| (masked: exactly 0).
  * dv_j[d] = a chain of S_q terms P_ij dout_id: sum_i P_ij |dout_id| (rp_ij + g_{S_q+1}).
  * dk_j[d] = fl(fl(scale) * chain of S_q terms dS_ij q_id):
    scale (sum_i |dS_ij q_id| (g_{S_q+1} + 2u) + sum_i ddS_ij |q_id|); dq alike over the S_k keys.
With an additive mask a_ij (the "masked" inputs: finite values, -inf hiding 30% of the keys and
every key of query 1) z_ij = scale q_i.k_j + a_ij, and the score's sum adds one rounding: u |z|
more in |ds|, and in the recomputed lse's E (fast's forward: exp2, a_ij * log2(e) rounded) u |a| more.
A query whose every key is masked has no gradient: its dq, and its terms in dk and dv, are exactly 0.
Products of two error terms are second order; they are below 1e-3 of the bound for these inputs
(every relative error above is under 1e-4), and the check allows 1% for them.
The test prints the largest observed fraction of the bound (a bound far above the errors would
be vacuous; measured: 0.03 to 0.18) and fails on any element outside it.
"""
import argparse
import math
import os
import subprocess
import sys

import numpy as np
from scratch import scratch_dir

U = 2.0 ** -24
CASES = [  # (heads, S_q, S_k, D, causal)
    (2, 17, 100, 64, False), (2, 33, 40, 64, True), (1, 64, 70, 128, False), (3, 7, 9, 32, True), (1, 1, 30, 16, False),
    (2, 40, 40, 32, True),
]
ORDERS = [("flash", 64), ("fast", 64), ("flash(bc=16,queries=3,fma=all)", 16)]


def g(n):
    return n * U / (1 - n * U)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ordo", required=True)
    args = ap.parse_args()
    tmp = scratch_dir("ordo_flash_backward_bounds_")
    rng = np.random.default_rng(11)
    failures = checked = 0
    worst = {}
    for ci, (heads, sq, sk, d, causal) in enumerate(CASES):
        for variant in ("spread1", "spread3") + (() if causal else ("masked",)):
            spread = 3.0 if variant == "spread3" else 1.0
            q, k, v, dout = ((spread * rng.standard_normal((heads, s, d))).astype(np.float32) for s in (sq, sk, sk, sq))
            qf, kf, vf, gf = (a.astype(np.float64) for a in (q, k, v, dout))
            scale = 1 / math.sqrt(d)
            mask = np.triu(np.ones((sq, sk), dtype=bool), 1) if causal else np.zeros((sq, sk), dtype=bool)
            add = None  # the additive mask, [S_q, S_k] (every head's), f32
            finite_add = np.zeros((sq, sk))
            if variant == "masked":
                add = np.where(rng.random((sq, sk)) < 0.3, -np.inf, 2 * rng.standard_normal((sq, sk))).astype(np.float32)
                if sq > 1:
                    add[1] = -np.inf
                mask = mask | np.isneginf(add)
                finite_add = np.where(mask, 0, add).astype(np.float64)
            zd = np.einsum("hid,hjd->hij", qf, kf) * scale
            z = np.where(mask, -np.inf, zd + finite_add)
            empty = mask.all(-1)[..., None]  # queries whose every key is masked
            m = np.where(empty, 0, z.max(-1, keepdims=True))
            e = np.where(mask, 0, np.exp(np.where(mask, 0, z) - m))
            l = e.sum(-1, keepdims=True)
            p = e / np.where(l == 0, 1, l)
            o = p @ vf
            lse = np.where(empty, -np.inf, m + np.log(np.where(l == 0, 1, l)))
            o32, lse32 = o.astype(np.float32), lse[..., 0].astype(np.float32)
            big_d = (gf * o).sum(-1, keepdims=True)
            dp = np.einsum("hid,hjd->hij", gf, vf)
            t = dp - big_d
            ds = p * t
            ref = {"dv": np.einsum("hij,hid->hjd", p, gf), "dk": scale * np.einsum("hij,hid->hjd", ds, qf),
                   "dq": scale * np.einsum("hij,hjd->hid", ds, kf)}
            zf = np.where(mask, 0, z)
            err_s = np.where(mask, 0, scale * g(d) * np.einsum("hid,hjd->hij", np.abs(qf), np.abs(kf)) + 2 * U * np.abs(np.where(mask, 0, zd))
                             + (U * np.abs(zf) if add is not None else 0))
            e_dp = g(d) * np.einsum("hid,hjd->hij", np.abs(gf), np.abs(vf))
            e_d = (g(d) + U) * (np.abs(gf) * np.abs(o)).sum(-1, keepdims=True)
            names = {}
            for n, a in (("q", q), ("k", k), ("v", v), ("out", o32), ("dout", dout), ("lse", lse32)) + ((("mask", add),) if add is not None else ()):
                names[n] = os.path.join(tmp, f"{ci}_{variant}_{n}.npy")
                np.save(names[n], a)
            for order, bc in ORDERS:
                for given in (True, False):
                    live_lse = np.where(empty, 0, lse)  # a masked query's terms are all 0 below
                    if given:
                        e_lse = U * np.abs(live_lse)
                    else:
                        nb = math.ceil(sk / min(bc, sk))
                        E = (err_s + U * np.abs(finite_add)).max(-1, keepdims=True)
                        e_lse = E + (sk + 6 * nb + 16) * U + 2 * U * (np.abs(m) + np.abs(live_lse))
                    rp = np.where(mask, 0, np.expm1(err_s + e_lse + U * np.abs(zf - live_lse) + 2 * U))
                    e_t = e_dp + e_d + U * (np.abs(t) + e_dp + e_d)
                    e_ds = np.where(mask, 0, p * (e_t + np.abs(t) * rp) + U * p * np.abs(t))
                    bound = {
                        "dv": np.einsum("hij,hid->hjd", p * (rp + g(sq + 1)), np.abs(gf)),
                        "dk": scale * (np.einsum("hij,hid->hjd", np.abs(ds), np.abs(qf)) * (g(sq + 1) + 2 * U)
                                       + np.einsum("hij,hid->hjd", e_ds, np.abs(qf))),
                        "dq": scale * (np.einsum("hij,hjd->hid", np.abs(ds), np.abs(kf)) * (g(sk + 1) + 2 * U)
                                       + np.einsum("hij,hjd->hid", e_ds, np.abs(kf))),
                    }
                    outs = {n: os.path.join(tmp, f"{n}.npy") for n in ("dq", "dk", "dv")}
                    cmd = [args.ordo, "run", "attention_backward", "--order", order]
                    for n in ("q", "k", "v", "out", "dout") + (("lse",) if given else ()) + (("mask",) if add is not None else ()):
                        cmd += ["--in", f"{n}={names[n]}"]
                    for n, path in outs.items():
                        cmd += ["--out", f"{n}={path}"]
                    cmd += ["--causal"] if causal else []
                    r = subprocess.run(cmd, capture_output=True, text=True)
                    label = f"{order} lse={'given' if given else 'recomputed'} heads={heads} Sq={sq} Sk={sk} D={d} causal={causal} {variant}"
                    if r.returncode != 0:
                        print(f"FAIL {label}: ordo exited {r.returncode}: {r.stderr.strip()}")
                        failures += 1
                        continue
                    checked += 1
                    for n in ("dq", "dk", "dv"):
                        err = np.abs(np.load(outs[n]).astype(np.float64) - ref[n])
                        allowed = 1.01 * bound[n]
                        ratio = np.where(allowed > 0, err / np.where(allowed > 0, allowed, 1), np.where(err > 0, np.inf, 0))
                        key = (order, given, n)
                        worst[key] = max(worst.get(key, 0.0), float(ratio.max()))
                        if not np.all(ratio <= 1):
                            failures += 1
                            i = int(np.argmax(ratio))
                            print(f"FAIL {label} {n}: error {err.ravel()[i]:.3e} exceeds its bound {allowed.ravel()[i]:.3e}")
    print()
    for (order, given, n), w in sorted(worst.items()):
        print(f"  attention_backward {order:<34} lse={'given' if given else 'recomputed':<10} {n}: largest error / bound = {w:.4f}")
    print(f"\n{checked} runs, {failures} failures")
    return 1 if failures or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
