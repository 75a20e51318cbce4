#!/usr/bin/python3
"""The deterministic backward orders (fast, batch-invariant; no reference library) of
layer_norm_backward, rms_norm_backward, softmax_backward and log_softmax_backward, and fast's
silu_backward and gelu_tanh_backward, against float64, within a stated error bound. f32 storage.

The reference is the gradient evaluated in float64 from the same f32 inputs: dy, x, the weight g,
and the forward's statistics as given to the op (mean and rstd are inputs, so they count as
exact; they are the float64 statistics of x rounded to f32). With xhat = (x - mean) rstd (rms:
x rstd) and wdy = dy g, per row of N:
  layer_norm  dx = (wdy - (xhat s2/N + s1/N)) rstd,  s1 = sum wdy,  s2 = sum wdy xhat
  rms_norm    dx = (wdy - xhat s2/N) rstd
  dweight = sum over the rows of dy xhat,  dbias = sum over the rows of dy
  softmax     dx = (dy - s) y,  s = sum dy y;   log_softmax  dx = dy - exp(y) s,  s = sum dy

The orders' steps are in ir/order.hpp (NormBackwardOrder::Centered, ColumnSumOrder::BlockTree,
SoftmaxBackwardOrder). With u = 2^-24 and g_n = n u / (1 - n u), the first-order error of each
computed quantity:
  * row sums by a lane tree (fast: 8 lanes x 4 accumulators, batch-invariant: 16 lanes x 1; fma):
    each term passes at most d = ceil(nv/A)-1 + A-1 + [N mod L > 0] + log2 L adds (nv = N div L;
    N < L: N-1), as tests/reference/numpy_bounds.py counts them. A term that is itself computed
    with k roundings gives |ds| <= g_{d+k+1} sum |term| (the +1 covers the product's rounding
    when the sum does not fuse it).
  * xhat: x - mean and the product with rstd, 2 roundings (rms: 1); wdy: 1.
  * a = s2/N and b = s1/N: |da| <= |ds2|/N + 2u|a| (a division, or a product with a rounded 1/N).
  * inner = xhat a + b (one fma or two roundings): |dinner| <= |dxhat a| + |xhat da| + |db| + 2u(|xhat a| + |b|).
  * dx = fl(fl(wdy - inner) rstd): |ddx| <= (|dwdy| + |dinner| + u|wdy - inner|) rstd + u|dx|.
  * column sums by BlockTree (fast: blocks of 64 rows, batch-invariant: 32): a block accumulates its
    rows from +0 in order, each step one rounding (B of them for a block of B rows); the blocks
    combine by a binary counter and then the held levels, at most 2 ceil(log2(blocks + 1)) adds
    more. dweight's term dy xhat carries xhat's roundings: |ddweight| <= g_{B + 2 lvl + 2} sum|dy xhat|
    (+1 for rms's one rounding fewer, kept as slack); dbias: g_{B + 2 lvl} sum|dy|.
  * softmax: |ddx| <= (|ds| + u|dy - s|) |y| + u|dx|; log_softmax, exp by Sleef u10 (1 ulp, 2u
    relative): |ddx| <= exp(y) (2u |s| + |ds|) + u |dx|, plus u exp(y) |s| for the product's
    rounding where it is not fused.
The elementwise backward ops (fast: Sleef's u10 functions, within 1 ulp, so 2u relative; every
a*b + c the op has is one fma), per element, x and dy exact:
  * silu_backward  dx = (dy s)(1 + x(1 - s)), s = 1/(1 + e), e = exp(-x): s within 4u relative
    (e's 2u, the add's and the division's roundings); 1 - s within 4u s + u(1 - s); the fma
    within |x| d(1 - s) + u|1 + x(1 - s)|; dy s within 5u|dy s|; the product one more u.
  * gelu_tanh_backward  dx = dy (L + R), L = (1 + t)/2, R = ((x/2)(1 - t^2)) (k (1 + c3 x^2)),
    t = tanh(inner), inner = k (x + c x^3), with k, c and c3 = 3c the op's f32 constants (the
    reference uses k and c as rounded to f32, and 3c exactly, so c3's rounding is an error term):
    x^3 within 2u, the fma x + c x^3 within 2u c|x^3| + u|.|, inner one u more, t within
    (1 - t^2) dinner + 2u|t|, 1 - t^2 (an fma) within 2|t| dt + u|.|, k (1 + c3 x^2) within
    k(2u c3 x^2 + u|.|) + u|.|, R two roundings more, L + R and the product one each.
  A subnormal result adds 2^-149. Each such (op, order) also prints its largest error in units
  in the last place of the float64 value rounded to f32, over the elements where nothing cancels
  (the bound within 32u of the value): what fast costs there. Where a sum cancels (silu's
  1 + x(1 - s) near x = -1.28, gelu's L + R near x = -0.75) the error is the bound's absolute
  terms, not a few ulps of the small result.
Products of two error terms are second order; the check allows 1% for them (every relative error
above is under 1e-3 for these inputs). Each (order, op, output) prints the largest observed
fraction of its bound; a bound far above the errors would be vacuous. A negative control checks
that an error of 2^-12 relative in dx, and in dweight, is outside the bounds.
"""
import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

U = 2.0 ** -24
ORDERS = {  # order: (lanes, accumulators, block rows), from gen/order_table.cpp
    "fast": (8, 4, 64),
    "batch-invariant": (16, 1, 32),
}
NS = [1, 7, 16, 17, 100, 1000, 4097]
ROWS = [1, 7, 33, 300]
OPS = ["layer_norm_backward", "rms_norm_backward", "softmax_backward", "log_softmax_backward", "silu_backward",
       "gelu_tanh_backward"]
POINTWISE = ("silu_backward", "gelu_tanh_backward")  # fast only: batch-invariant does not have them
F32 = {"k": float(np.float32(math.sqrt(2 / math.pi))), "c": float(np.float32(0.044715)),
       "c3": float(np.frombuffer(np.uint32(0x3E095D4E).tobytes(), np.float32)[0])}


def g(n):
    return n * U / (1 - n * U)


def lane_depth(n, lanes, accumulators):
    nv = n // lanes
    if nv == 0:
        return max(n - 1, 0)
    a = min(accumulators, nv)
    return (-(-nv // a) - 1) + (a - 1) + (1 if n % lanes else 0) + int(math.log2(lanes))


def block_depth(rows, block):
    blocks = -(-rows // block)
    return min(block, rows) + 2 * math.ceil(math.log2(blocks + 1))


def inputs(op, rows, n, spread, rng):
    """The op's f32 inputs by name."""
    dy = rng.standard_normal((rows, n)).astype(np.float32)
    if op in POINTWISE:
        return {"dy": dy, "x": (spread * rng.standard_normal((rows, n))).astype(np.float32)}
    if op in ("softmax_backward", "log_softmax_backward"):
        z = spread * rng.standard_normal((rows, n))
        p = np.exp(z - z.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        y = (np.log(p) if op == "log_softmax_backward" else p).astype(np.float32)
        return {"dy": dy, "y": y}
    x = (spread + rng.standard_normal((rows, n))).astype(np.float32)  # spread: x's mean
    xf = x.astype(np.float64)
    w = (1 + 0.5 * rng.standard_normal(n)).astype(np.float32)
    eps = 1e-5
    if op == "rms_norm_backward":
        rstd = (1 / np.sqrt((xf * xf).mean(-1) + eps)).astype(np.float32)
        return {"dy": dy, "x": x, "weight": w, "rstd": rstd}
    mean = xf.mean(-1)
    rstd = (1 / np.sqrt(((xf - mean[:, None]) ** 2).mean(-1) + eps)).astype(np.float32)
    return {"dy": dy, "x": x, "weight": w, "mean": mean.astype(np.float32), "rstd": rstd}


def reference_and_bound(op, t, lanes, accumulators, block):
    """The float64 outputs and each element's error bound."""
    f = {k: v.astype(np.float64) for k, v in t.items()}
    dy = f["dy"]
    rows, n = dy.shape
    d = lane_depth(n, lanes, accumulators)
    if op in POINTWISE:
        return pointwise_reference_and_bound(op, dy, f["x"])
    if op in ("softmax_backward", "log_softmax_backward"):
        y = f["y"]
        if op == "softmax_backward":
            s = (dy * y).sum(-1, keepdims=True)
            ds = g(d + 1) * np.abs(dy * y).sum(-1, keepdims=True)
            dx = (dy - s) * y
            return {"dx": dx}, {"dx": (ds + U * np.abs(dy - s)) * np.abs(y) + U * np.abs(dx)}
        s = dy.sum(-1, keepdims=True)
        ds = g(d) * np.abs(dy).sum(-1, keepdims=True)
        e = np.exp(y)
        dx = dy - e * s
        return {"dx": dx}, {"dx": e * (3 * U * np.abs(s) + ds) + U * np.abs(dx)}
    rms = op == "rms_norm_backward"
    wgt, rstd = f["weight"], f["rstd"][:, None]
    mean = 0.0 if rms else f["mean"][:, None]
    xhat = (f["x"] - mean) * rstd
    dxhat = (1 if rms else 2) * U * np.abs(xhat) + (0 if rms else U * np.abs(f["x"] - mean) * rstd)
    wdy = dy * wgt
    dwdy = U * np.abs(wdy)
    s2 = (wdy * xhat).sum(-1, keepdims=True)
    ds2 = g(d + 4) * np.abs(wdy * xhat).sum(-1, keepdims=True)
    a, da = s2 / n, ds2 / n + 2 * U * np.abs(s2 / n)
    if rms:
        b = db = 0.0
    else:
        s1 = wdy.sum(-1, keepdims=True)
        b, db = s1 / n, g(d + 2) * np.abs(wdy).sum(-1, keepdims=True) / n + 2 * U * np.abs(s1 / n)
    inner = xhat * a + b
    dinner = dxhat * np.abs(a) + np.abs(xhat) * da + db + 2 * U * (np.abs(xhat * a) + np.abs(b))
    dx = (wdy - inner) * rstd
    bound_dx = (dwdy + dinner + U * np.abs(wdy - inner)) * rstd + U * np.abs(dx)
    depth = block_depth(rows, block)
    ref = {"dx": dx, "dweight": (dy * xhat).sum(0)}
    bound = {"dx": bound_dx, "dweight": g(depth + 3) * np.abs(dy * xhat).sum(0)}
    if not rms:
        ref["dbias"] = dy.sum(0)
        bound["dbias"] = g(depth) * np.abs(dy).sum(0)
    return ref, bound


def pointwise_reference_and_bound(op, dy, x):
    """silu_backward and gelu_tanh_backward under fast (see the docstring)."""
    tiny = 2.0 ** -149
    if op == "silu_backward":
        with np.errstate(over="ignore"):
            s = 1 / (1 + np.exp(-x))
        factor = 1 + x * (1 - s)
        dx = dy * s * factor
        dfactor = np.abs(x) * (4 * U * s + U * (1 - s)) + U * np.abs(factor)
        bound = np.abs(dy * s) * (dfactor + 5 * U * np.abs(factor)) + U * np.abs(dx)
        return {"dx": dx}, {"dx": bound + tiny}
    k, c, c3 = F32["k"], F32["c"], F32["c3"]
    x2, x3 = x * x, x * x * x
    a = x + c * x3
    inner = k * a
    t = np.tanh(inner)
    left = 0.5 * (1 + t)
    td = 1 - t * t
    ide = k * (1 + 3 * c * x2)
    right = 0.5 * x * td * ide
    dx = dy * (left + right)
    dinner = k * (2 * U * c * np.abs(x3) + U * np.abs(a)) + U * np.abs(inner)
    dt = td * dinner + 2 * U * np.abs(t)
    dleft = 0.5 * (dt + U * np.abs(1 + t))
    dtd = 2 * np.abs(t) * dt + U * td
    fma = 1 + c3 * x2
    dide = k * (2 * U * c3 * x2 + np.abs(c3 - 3 * c) * x2 + U * fma) + U * ide
    dright = 0.5 * np.abs(x) * (dtd * ide + td * dide) + 2 * U * np.abs(right)
    bound = np.abs(dy) * (dleft + dright + U * np.abs(left + right)) + U * np.abs(dx)
    return {"dx": dx}, {"dx": bound + tiny}


def ulps(got, want):
    """|got - want| in units in the last place of want rounded to f32."""
    w32 = want.astype(np.float32)
    ulp = np.spacing(np.abs(w32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / ulp


def ratio(got, want, bound):
    err = np.abs(got.astype(np.float64) - want)
    allowed = 1.01 * bound
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(allowed > 0, err / allowed, np.where(err > 0, np.inf, 0.0))
    return np.where(np.isfinite(got), q, np.inf)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ordo", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ordo_norm_backward_bounds_")
    rng = np.random.default_rng(29)
    failures = runs = 0
    worst, worst_ulps = {}, {}
    control = {}  # (op, output) -> elements a 2^-12 relative error puts outside the bound, and elements
    try:
        for op in OPS:
            for i, n in enumerate(NS):
                rows = ROWS[i % len(ROWS)] if n < 4000 else 7
                # layer norm: x's mean 0 and 30 (xhat's cancellation); softmax: logits' spread 1 and 8;
                # silu and gelu: x's spread 1 and 8
                for spread in ((1.0, 8.0) if op.startswith(("softmax", "log_softmax")) or op in POINTWISE else (0.0, 30.0)):
                    t = inputs(op, rows, n, spread, rng)
                    names = {}
                    for k, v in t.items():
                        names[k] = os.path.join(tmp, f"{k}.npy")
                        np.save(names[k], v)
                    outs = ["dx"] + (["dweight"] if op.startswith(("layer", "rms")) else []) + (["dbias"] if op.startswith("layer") else [])
                    for order, (lanes, accumulators, block) in ORDERS.items():
                        if op in POINTWISE and order != "fast":
                            continue
                        ref, bound = reference_and_bound(op, t, lanes, accumulators, block)
                        paths = {o: os.path.join(tmp, f"out_{o}.npy") for o in outs}
                        cmd = [args.ordo, "run", op, "--order", order]
                        for k, p in names.items():
                            cmd += ["--in", f"{k}={p}"]
                        for o, p in paths.items():
                            cmd += ["--out", f"{o}={p}"]
                        r = subprocess.run(cmd, capture_output=True, text=True)
                        label = f"{op} {order} N={n} rows={rows} spread={spread}"
                        if r.returncode != 0:
                            print(f"FAIL {label}: ordo exited {r.returncode}: {r.stderr.strip()}")
                            failures += 1
                            continue
                        runs += 1
                        for o in outs:
                            got = np.load(paths[o])
                            q = ratio(got, ref[o], bound[o])
                            key = (order, op, o)
                            worst[key] = max(worst.get(key, 0.0), float(q.max()))
                            if op in POINTWISE:  # ulps where nothing cancels: the bound within 32u of the value
                                calm = (bound[o] <= 32 * U * np.abs(ref[o])) & (np.abs(ref[o]) >= 2.0 ** -126)
                                if calm.any():
                                    worst_ulps[key] = max(worst_ulps.get(key, 0.0), float(ulps(got[calm], ref[o][calm]).max()))
                            if not np.all(q <= 1):
                                failures += 1
                                j = int(np.argmax(q))
                                print(f"FAIL {label} {o}: error {abs(float(got.ravel()[j]) - ref[o].ravel()[j]):.3e} "
                                      f"exceeds its bound {1.01 * bound[o].ravel()[j]:.3e} (element {j})")
                            # Negative control: the same output off by 2^-12 relative.
                            off = ratio((got.astype(np.float64) * (1 + 2.0 ** -12)).astype(np.float32), ref[o], bound[o])
                            big = np.abs(ref[o]) > 1e-3 * np.abs(ref[o]).max()
                            c = control.setdefault((op, o), [0, 0])
                            c[0] += int((off[big] > 1).sum())
                            c[1] += int(big.sum())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    for (order, op, o), w in sorted(worst.items()):
        cost = f", {worst_ulps[(order, op, o)]:.2f} ulp" if (order, op, o) in worst_ulps else ""
        print(f"  {op:<22} {order:<16} {o:<8} largest error / bound = {w:.4f}{cost}")
    print()
    for (op, o), (outside, total) in sorted(control.items()):
        print(f"  control: {op} {o} off by 2^-12 relative: {outside} of {total} elements outside the bound")
        if outside == 0:
            failures += 1
            print(f"FAIL control: a 2^-12 relative error in {op}'s {o} stays inside every bound (the bound is vacuous)")
    print(f"\n{runs} runs, {failures} failures")
    return 1 if failures or not runs else 0


if __name__ == "__main__":
    sys.exit(main())
