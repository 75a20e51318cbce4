#!/usr/bin/python3
"""Error-bound check of every ordo order that does not claim bit-exactness, against float64 numpy.

Bit-exact orders are tested elsewhere (torch_layer_norm.py). The other orders promise only a
reduction ORDER, so the strongest honest test is a rigorous error bound derived from that order:
each output must lie within the bound of a float64 two-pass reference computed from the same
float32 inputs. The bound is per element (per row for statistics), derived below, and NOT
tuned to the observed errors; the negative controls at the end show it is tight enough that a
wrong statistic or a 2^-10 relative error in y is caught.

Notation. u = 2^-24 (f32), u = 2^-53 for anything accumulated in f64 (acc=f64); u32 is the
rounding of an f64 accumulator to the f32 output ("u_out"; 0 when acc=f32).
gamma_d = d*u/(1-d*u). Standard result (Higham, ASNA ch. 4): if a sum is evaluated by any
tree in which every term passes through at most d roundings, |err| <= gamma_d * sum|t_i|.
A product term a*b adds one rounding (with fma the product is exact, so d+1 still bounds it).

d for each sum order (terms x_i; structure from ir/order.hpp, counted exactly, not estimated):
  Sequential            acc=0; acc+=t_i: the first add is exact, t_0 sees N-1 adds:  d = N-1.
  LaneTree(L lanes,A)   nv = N//L vectors, A' = min(A, nv): accumulator 0 takes ceil(nv/A')
                        vectors (first one initialises, no add), the A' accumulators fold in
                        A'-1 adds, the N mod L tail adds 1 to a lane, the halving fold log2 L:
                        d = ceil(nv/A')-1 + A'-1 + [N mod L > 0] + log2 L;  N < L: d = N-1.
  Pairwise(block B, L)  leaf of n<=B terms: n<L sequential from 0 (d=n-1), else
                        n//L-1 vector adds + log2 L fold + n mod L leftovers added after;
                        each split adds 1. The split tree is walked exactly as gen/ does, so
                        d = max over leaves of (leaf d + depth) ~ B/L + log2(N/B) + log2 L + L.

Moments (mean mu, var = M2/N; e_m = bound on |mean_acc - mu| in the accumulation type):
  two-pass   mean = fl(sum/N): e_m = gamma_{d+1} * mean|x|. M2 sums (fl(x-m))^2: the
             difference's rounding appears twice (squared), the product once, /N once, all terms
             >= 0, so with the computed mean m = mu+e:  |dvar| <= gamma_{d+4}(var+e_m^2) + e_m^2,
             i.e. relative gamma_{d+4} + (e_m/sigma)^2 (the often-quoted gamma_{d+2} counts
             neither the square of the rounded difference nor the /N).
  one-pass   var = E[x^2] - mean^2: |dvar| <= gamma_{d+2} E[x^2] + 2|mu| e_m + e_m^2 + u mu^2
             + u var. Divided by var this is gamma_{d+2} * E[x^2]/var + ...: the condition
             number E[x^2]/var = 1 + mu^2/sigma^2 multiplies the rounding error. Clamping at 0
             only moves var toward the truth.
  Welford    Sequential Welford is NOT a plain sum: its running mean m_k has absolute error E_k
             and M2 accumulates d_k*(x_k - m_k) with d_k = x_k - m_{k-1}, so mean errors enter
             M2 at FIRST order (unlike two-pass) -- Chan, Golub & LeVeque 1983 give relative
             error ~ N*kappa*u, kappa = sqrt(E[x^2]/var). Treating it "like a sequential sum of
             length N" alone would not be a bound for mu >> sigma (measured: lane-welford at
             N=1000, x ~ N(1000,1) has relative var error 8e-6 > 2*gamma_31 = 3.7e-6, the
             "chunk + log2(chunks) + lanes" count), so it is derived here:
               m_k = m_{k-1}(1-1/k) + x_k/k, so an error made at step j is damped by j/k:
               E_k <= (1/k) sum_{j<=k} j*eps_j, eps_j = u(r|d_j|/j + |m_j|), eps_1 = 0 (exact),
             r = 2 roundings on the increment (sub, div) -- r = 3 in lane-Welford chunks (sub,
             rounded constant 1/(j+1), mul). The exact m_j, d_j come from the data (cumsum in
             f64), so E_k is evaluated per row. M2: each term has 3 roundings and passes <= N-1
             adds (the sequential sum), plus the coupling of the perturbed means:
               |dvar| <= gamma_{N+3} var + (1/N) sum_k (E_{k-1}|g_k| + E_k|d_k| + E_{k-1}E_k),
               g_k = x_k - m_k;  e_m = E_N.
  lane-Welford  L lanes x chunks of K vectors (each a Welford stream as above, length <= K,
             r = 3), merged by Chan's formula through the binary-counter cascade (depth levels),
             the stack flushed into level 0, then the L lanes merged into a scalar tail stream
             (r = 2). An element passes D <= 2*depth - 1 + L merges ("chunk + log2(chunks) +
             lanes"). One merge m = ma + c*(mb-ma) averages the input mean errors and adds
             <= 3u|c d| + u|m|; ma, mb, m are count-weighted averages of block (chunk, tail)
             means and a merge with an empty state is exact, so |m| <= max|block mean| and
             |c d| <= |mb-ma| <= (max - min block mean): e_m <= max_stream E + D u (max|block
             mean| + 3 (max - min block mean)), block means from the data. M2 terms:
             chunk terms <= K+2 roundings, a merge term ((d*d)*c)*na has 8 and each later merge
             adds <= 2, /N one more: relative gamma_{max(K+2, tail+2, 8) + 2D + 1}. The merge
             term w d^2 (w = na nb/n) sees the mean error on d at first order; by Cauchy-Schwarz
             with sum w d^2 <= M2 (Chan's decomposition) and sum w <= sum min(na,nb) <= N D/2:
             (1/N) sum_merges |d(w d^2)| <= 4 e sqrt(var D/2) + 2 D e^2. This is conservative:
             every merge is charged the largest mean error and the largest count of merges.

  block-Welford (torch-cuda-tree: a team of T = 128 threads, thread t a Welford stream over the
             4-wide vectors t, t+T, ...; r = 3: sub, rounded 1/n, fma). The streams merge in a
             tree of D = log2 T = 7 levels (5 shuffle steps, 2 cross-warp steps) by PyTorch's
             m = fma(ma, fl(na*c), fl(mb*fl(nb*c))), c = fl(1/n): the weights are na/n and nb/n
             within 4u each and sum to 1 within 8u, so a merge averages the input mean errors
             and adds at most 6u max|block mean| (also when one side is empty: nb*c need not be
             exactly 1): e_m <= max_stream E + 6 D u max|stream mean|. M2 merges
             a2 + b2 + ((d*d)*na)*(nb*c) are Chan's w d^2 with w = na nb/n, so the lane-Welford
             terms apply with K = the longest stream: relative gamma_{max(K+2, 8) + 2D + 1},
             plus the same first-order coupling and Cauchy-Schwarz merge terms.
  block-reduce Welford (torch-cuda-tree for N % 4 != 0 or N > 2^24, PyTorch's two-kernel path:
             T = 512 threads, thread t a Welford stream over the elements t, t+T, ... with a
             true division, r = 2 as in the sequential Welford). The streams merge by a
             shuffle-down tree in each warp, then warp 0 merges the 16 warp results the same
             way (a merge with an empty stream returns the other: exact), D = 10 levels at most,
             by m = fma(fl(mb - ma), fl(nb/n), ma): Chan's update as in the lane-Welford
             cascade, so its terms apply with D = 10, K = the longest stream and no tail.
From moments to outputs (all first order in u; the reference's own f64 error, bounded the
same way with u = 2^-53 and d = N (numpy's pairwise sum needs far fewer), is added to each):
  mean_out   e_mo = e_m + u32 (|mu| + e_m) + e_ref.   var_out: dvar + u32 (var + dvar) + dvar_ref.
  rstd       var_f32 + eps (1 rounding), sqrt, 1/x (1 each): the var interval [var-dv, var+dv]
             is mapped through 1/sqrt(.+eps) exactly -- this equals "half the var relative error"
             to first order but stays a valid bound when dv is not small -- widened by u for the
             add and 2u for sqrt and divide. rho_r = |drstd|/rstd.
  rms_norm   mean(x^2) is a sum of non-negative products: relative gamma_{d+2} (+u32), then as rstd.
  y, layer_norm, CenterScale ((x-m)*rstd)*w + b, 4 roundings:
             |dy| <= |w| rstd (|x-mu| (rho_r + 3u) + e_mo) + u|y|
             (a 3u(|y|+|b|) term for the final add would be looser than needed: that add's
             rounding is relative to its result).
  y, ScaleBias with fma ("fast": t = fma(x, rstd, -(rstd*m)), y = fma(t, w, b)): the rounded
             shift adds u|m| rstd, everything else as above with one rounding instead of three:
             |dy| <= |w| rstd (|x-mu| (rho_r + u) + e_mo + u(|mu| + e_mo)) + u|y|.
  y, rms_norm (x*rstd)*w: |dy| <= |w| |x| rstd (rho_r + 2u).
softmax and log_softmax (orders `fast`: two-pass lane tree, `online`: per-lane running max and
rescaled sum; exp and log are Sleef's u10 functions, each within 1 ulp, i.e. relative 2u):
  every term e_i = exp(fl(x_i - M)): the subtraction's rounding moves the exponent by
             u|x_i - M|, so e_i has relative error 2u + u|x_i - M| <= 2u + u R, R = max - min
             of the row (finite rows).
  s, two-pass: a sum of positive terms with depth d (lane tree as above): rho_s = gamma_d +
             2u + uR.
  s, warp-butterfly: thread l sums its I = max(1, 2^ceil(log2 N)/32) terms from 0 (d = I-1;
             padding adds exact zeros), then 5 xor-butterfly adds: rho_s = gamma_{I+4} + 2u + uR.
             y = e / s (one rounding, within the 2u the bound below allows for 1/s and *).
  s, online: a lane's partial sum is rescaled by exp(m - m') at most once per vector step and
             once when the lanes merge; each rescale is an exp (2u), a multiply and an add (2u),
             and the exponent roundings add u|m - m'| whose total along one partial sum is at
             most R (the running max only grows), R again at the merge. With k = N/L + L + N mod L
             steps: rho_s = gamma_{4k} + 2uR + 2u + uR.
  softmax    y = e * fl(1/s): |dy| <= y (2u + uR + rho_s + 2u).
  log_softmax y = (x - M) - log s: |dy| <= u|x - M| + rho_s + 2u|log s| + u|y|.
The bounds are first order: products of two error terms (gamma*coupling, u*rho, ...) are not
carried; they are folded into one SAFETY factor of 2 applied to every bound, and nothing else
inflates them. A case whose bound is so wide that it says nothing (relative var bound >= 1 or
relative rstd bound >= 0.5, e.g. one-pass at mean 100) still has to hold and is counted as
"vacuous rows" in the summary rather than silently passing.

Data: N in {1, 7, 8, 17, 127, 128, 129, 1000, 4096, 4097, 65537}; 8 rows per value range (3 for
N = 65537), ranges N(0,1), N(3,1), N(100,1). N(1e4, 1e-3) (sigma/mu = 1e-7, below f32's u) is
added only where the bound still means something:
  * mean/var ops (layer_norm, var_mean) with f64 accumulation and a stable algorithm: even one
    f32 rounding of a mean near 1e4 is an error of ~6e-4 = 0.6 sigma, so no order that sums in
    f32 without compensated summation has a useful bound there -- that regime is what the study
    tool (`ordo compare --offset 1e4 --scale 1e-3`) is for, not a pass/fail bound; one-pass in
    f64 is excluded too (E[x^2]/var = 1e14 times 2^-53 d exceeds 1).
  * rms_norm for every order: mean(x^2) has no cancellation, its relative bound ignores the offset.
All ranges of one N are rows of one x file, so a case is one `ordo run` per (op, order, N).
"""
import argparse
import concurrent.futures
import functools
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

U32 = 2.0 ** -24
U64 = 2.0 ** -53
SAFETY = 2.0
EPS = 1e-5
NS = [1, 7, 8, 17, 127, 128, 129, 1000, 4096, 4097, 65537]
RANGES = [("N(0,1)", 0.0, 1.0), ("N(3,1)", 3.0, 1.0), ("N(100,1)", 100.0, 1.0), ("N(1e4,1e-3)", 1e4, 1e-3)]
# Parameterized variants: other lane counts / chunks / accumulators / fma, and f64 accumulation.
VARIANTS = [
    "online(lanes=4)",
    "lane-welford(fma=all)",
    "lane-welford(lanes=4,chunk=5,fma=update)",
    "lane-welford(acc=f64)",
    "sequential-welford(acc=f64)",
    "two-pass-lanes(accumulators=3,fma=all)",
    "two-pass-pairwise(block=32,lanes=4)",
    "two-pass-sequential(acc=f64)",
    "one-pass(acc=f64)",
    "fast(acc=f64)",
]
OUTS = {"layer_norm": ["y", "mean", "rstd"], "rms_norm": ["y", "rstd"], "var_mean": ["var", "mean"], "softmax": ["y"],
        "log_softmax": ["y"], "sum": ["sum"], "mean": ["mean"], "silu": ["y"], "gelu_tanh": ["y"],
        "gelu": ["y"]}
POINTWISE_OPS = ("silu", "gelu_tanh", "gelu")
SOFTMAX_OPS = ("softmax", "log_softmax")
# Softmax-family orders without a reference: (kind, lanes), from gen/order_table.cpp.
SOFTMAX_MODELS = {"fast": ("two-pass", 16), "online": ("online", 8), "warp-butterfly": ("butterfly", 32)}
# Shapes an order takes (gen/resolve.cpp, shape_error): warp-butterfly keeps a row in a warp's
# shared memory.
SHAPES = {"warp-butterfly": lambda n: n <= 8192}
NEG_N = 1000  # negative controls use the N(0,1) rows of this N


def rows_for(n):
    return 3 if n > 10000 else 8


def gamma(d, u):
    d = np.asarray(d, dtype=np.float64)
    return np.where(d * u < 1, d * u / np.maximum(1 - d * u, 1e-300), np.inf)


# ------------------------------------------------------------------------------------------
# Order models: a mirror of gen/order_table.cpp, so that a bound follows the order's structure.
# An order without a model is a failure: a new order must come with its bound.

BASE_MODELS = {
    "fast": dict(moments="two-pass", sum=dict(kind="lanes", lanes=8, A=4), affine="scale-bias-fma"),
    "lane-welford": dict(moments="lane-welford", lanes=8, chunk=16),
    "sequential-welford": dict(moments="seq-welford"),
    "two-pass-sequential": dict(moments="two-pass", sum=dict(kind="seq", lanes=8, block=128)),
    "two-pass-pairwise": dict(moments="two-pass", sum=dict(kind="pairwise", lanes=8, block=128)),
    "two-pass-lanes": dict(moments="two-pass", sum=dict(kind="lanes", lanes=8, A=1)),
    "one-pass": dict(moments="one-pass", sum=dict(kind="lanes", lanes=8, A=1)),
    "torch-cuda-tree": dict(moments="block-welford", team=128, lanes=4),
}


def model_of(order, n):
    base, _, params = order.partition("(")
    if base not in BASE_MODELS:
        raise KeyError(f"no bound model for order '{base}'")
    m = dict(BASE_MODELS[base])
    if base == "torch-cuda-tree" and (n % 4 or n > 2 ** 24):  # PyTorch's two-kernel path (gen/order_table.cpp, torch_cuda)
        m.update(moments="block-reduce-welford", team=512, lanes=1)
    m["sum"] = dict(m.get("sum", dict(kind="seq", lanes=8, block=128)))
    m.setdefault("lanes", 8)
    m.setdefault("chunk", 16)
    m.setdefault("affine", "center-scale")
    m["acc"] = "f32"
    for item in filter(None, params.rstrip(")").split(",")):
        k, v = item.split("=")
        if k == "lanes":
            m["lanes"] = m["sum"]["lanes"] = int(v)
        elif k == "chunk":
            m["chunk"] = int(v)
        elif k == "accumulators":
            m["sum"]["A"] = int(v)
        elif k == "block":
            m["sum"]["block"] = int(v)
        elif k == "acc":
            m["acc"] = v
        elif k != "fma":  # fma only removes roundings; every d below already allows for them
            raise KeyError(f"no bound model for parameter '{k}'")
    return m


def sum_depth(s, n):
    """Most roundings any term of an n-term sum passes through (see the docstring)."""
    L = s.get("lanes", 8)
    if s["kind"] == "seq":
        return max(n - 1, 0)
    if s["kind"] == "lanes":
        nv = n // L
        if nv == 0:
            return max(n - 1, 0)
        a = min(s["A"], nv)
        return (-(-nv // a) - 1) + (a - 1) + (1 if n % L else 0) + int(math.log2(L))
    block = s["block"]

    @functools.lru_cache(maxsize=None)
    def node(m):
        if m <= block:
            return max(m - 1, 0) if m < L else (m // L - 1) + int(math.log2(L)) + m % L
        h = m // 2
        h -= h % L
        if h == 0:  # gen/ would recurse forever here too
            raise ValueError(f"pairwise split of {m} terms with lanes {L} is empty")
        return 1 + max(node(h), node(m - h))

    return node(n)


def welford_streams(s, u, r):
    """Welford streams s (rows, streams, len), NaN-padded at the end. Returns, per row, the M2
    coupling sum_k (E_{k-1}|g_k| + E_k|d_k| + E_{k-1}E_k), the largest E_k, and E at the last
    position (the docstring's Welford analysis, with the exact running means of the data)."""
    valid = ~np.isnan(s)
    s0 = np.where(valid, s, 0.0)
    k = np.arange(1, s.shape[-1] + 1, dtype=np.float64)
    m = np.cumsum(s0, axis=-1) / k
    zero = np.zeros(s.shape[:-1] + (1,))
    d = s0 - np.concatenate([zero, m[..., :-1]], axis=-1)
    g = s0 - m
    eps = u * (r * np.abs(d) / k + np.abs(m))
    eps[..., 0] = 0.0
    eps = np.where(valid, eps, 0.0)
    E = np.cumsum(k * eps, axis=-1) / k
    Ep = np.concatenate([zero, E[..., :-1]], axis=-1)
    coup = np.where(valid, Ep * np.abs(g) + E * np.abs(d) + Ep * E, 0.0).sum(axis=(-2, -1))
    return coup, np.where(valid, E, 0.0).max(axis=(-2, -1)), E[..., -1].max(axis=-1)


class Ref:
    """float64 two-pass reference from the f32 inputs, and the bound on its own error."""

    def __init__(self, x32):
        X = x32.astype(np.float64)
        n = X.shape[1]
        self.X = X
        self.mu = X.mean(axis=1)
        self.var = ((X - self.mu[:, None]) ** 2).mean(axis=1)
        self.ms = (X * X).mean(axis=1)
        self.absmean = np.abs(X).mean(axis=1)
        self.maxabs = np.abs(X).max(axis=1)
        self.e = gamma(n + 1, U64) * self.absmean
        self.dv = gamma(n + 4, U64) * (self.var + self.e ** 2) + self.e ** 2
        self.dms = gamma(n + 2, U64) * self.ms


def moments_bound(model, ref):
    """(e_m, dvar): absolute bounds on the accumulation-type mean and var, per row."""
    ua = U64 if model["acc"] == "f64" else U32
    X, var, n = ref.X, ref.var, ref.X.shape[1]
    kind = model["moments"]
    if kind in ("two-pass", "one-pass"):
        d = sum_depth(model["sum"], n)
        e = gamma(d + 1, ua) * ref.absmean
        if kind == "two-pass":
            return e, gamma(d + 4, ua) * (var + e * e) + e * e
        return e, gamma(d + 2, ua) * ref.ms + 2 * np.abs(ref.mu) * e + e * e + ua * ref.mu ** 2 + ua * var
    if kind == "seq-welford":
        coup, _, e_end = welford_streams(X[:, None, :], ua, 2)
        return e_end, gamma(n + 3, ua) * var + coup / n
    if kind == "block-welford":
        T, V = model["team"], model["lanes"]
        rows, nv = X.shape[0], n // V
        K = -(-nv // T) * V  # the longest stream
        streams = np.full((rows, T, K), np.nan)
        for t in range(min(T, nv)):
            mine = X[:, : nv * V].reshape(rows, nv, V)[:, t::T, :].reshape(rows, -1)
            streams[:, t, : mine.shape[1]] = mine
        streams = streams[:, : min(T, nv), :]
        coup, emax, _ = welford_streams(streams, ua, 3)
        means = np.nanmean(streams, axis=-1)
        D = int(math.log2(T))
        e = emax + 6 * D * ua * np.abs(means).max(axis=-1)
        dv = gamma(max(K + 2, 8) + 2 * D + 1, ua) * var + coup / n + 4 * e * np.sqrt(var * D / 2) + 2 * D * e * e
        return e, dv
    if kind == "block-reduce-welford":
        T, rows = model["team"], X.shape[0]
        K = -(-n // T)  # the longest stream
        streams = np.full((rows, min(T, n), K), np.nan)
        for t in range(min(T, n)):
            mine = X[:, t::T]
            streams[:, t, : mine.shape[1]] = mine
        coup, emax, _ = welford_streams(streams, ua, 2)
        means = np.nanmean(streams, axis=-1)
        hi, lo = means.max(axis=-1), means.min(axis=-1)
        D = 10
        e = emax + D * ua * (np.maximum(np.abs(hi), np.abs(lo)) + 3 * (hi - lo))
        dv = gamma(max(K + 2, 8) + 2 * D + 1, ua) * var + coup / n + 4 * e * np.sqrt(var * D / 2) + 2 * D * e * e
        return e, dv
    V, K = model["lanes"], model["chunk"]
    nv, tail = n // V, n % V
    chunks = -(-nv // K)
    depth = 1
    if chunks > 2:
        while (1 << depth) < chunks:
            depth += 1
    D = 2 * depth - 1 + V
    rows = X.shape[0]
    coup, emax = np.zeros(rows), np.zeros(rows)
    hi, lo = np.full(rows, -np.inf), np.full(rows, np.inf)  # range of the block (chunk, tail) means
    blocks = []
    if nv:
        xv = np.concatenate([X[:, : nv * V].reshape(rows, nv, V), np.full((rows, chunks * K - nv, V), np.nan)], axis=1)
        blocks.append((xv.reshape(rows, chunks, K, V).transpose(0, 1, 3, 2).reshape(rows, chunks * V, K), 3))
    if tail:
        blocks.append((X[:, None, nv * V:], 2))
    for streams, r in blocks:
        c, em, _ = welford_streams(streams, ua, r)
        coup, emax = coup + c, np.maximum(emax, em)
        means = np.nanmean(streams, axis=-1)
        hi, lo = np.maximum(hi, means.max(axis=-1)), np.minimum(lo, means.min(axis=-1))
    e = emax + D * ua * (np.maximum(np.abs(hi), np.abs(lo)) + 3 * (hi - lo))
    dv = gamma(max(K + 2, tail + 2, 8) + 2 * D + 1, ua) * var + coup / n + 4 * e * np.sqrt(var * D / 2) + 2 * D * e * e
    return e, dv


def rstd_bound(v, dv, r_ref):
    """|rstd - r_ref| for rstd = 1/sqrt(fl(v32 + eps)) with v32 within dv of v."""
    lo = np.maximum(v - dv, 0.0) + EPS
    hi = v + dv + EPS
    r_hi = (1 + 2 * U32) / np.sqrt(lo * (1 - U32))
    r_lo = (1 - 2 * U32) / np.sqrt(hi * (1 + U32))
    return np.maximum(r_hi - r_ref, r_ref - r_lo) + 2 * U64 * r_ref


def softmax_model(order):
    base, _, params = order.partition("(")
    if base not in SOFTMAX_MODELS:
        raise KeyError(f"no softmax bound model for order '{base}'")
    kind, lanes = SOFTMAX_MODELS[base]
    for item in filter(None, params.rstrip(")").split(",")):
        k, v = item.split("=")
        if k == "lanes":
            lanes = int(v)
        elif k != "acc":  # the softmax family always accumulates in f32; acc applies to the norms only
            raise KeyError(f"no softmax bound model for parameter '{k}'")
    return dict(softmax=kind, lanes=lanes, acc="f32")


def softmax_bounds(op, model, X):
    """Softmax-family outputs in float64 and their first-order bounds (see the docstring)."""
    n, L = X.shape[1], model["lanes"]
    M = X.max(axis=1, keepdims=True)
    R = (M - X.min(axis=1, keepdims=True))
    e = np.exp(X - M)
    s = e.sum(axis=1, keepdims=True)
    if model["softmax"] == "two-pass":
        d = sum_depth(dict(kind="lanes", lanes=L, A=1), n)
        rho_s = gamma(d, U32) + 2 * U32 + U32 * R
    elif model["softmax"] == "butterfly":
        per_thread = max(1, (1 << (n - 1).bit_length()) // 32)
        rho_s = gamma(per_thread + 4, U32) + 2 * U32 + U32 * R
    else:
        k = n // L + L + n % L
        rho_s = gamma(4 * k, U32) + 3 * U32 * R + 2 * U32
    if op == "softmax":
        y = e / s
        return {"y": (y, y * (4 * U32 + U32 * R + rho_s) + 4 * U64 * y)}, np.zeros(len(X), bool)
    y = (X - M) - np.log(s)
    return {"y": (y, U32 * np.abs(X - M) + rho_s + 2 * U32 * np.abs(np.log(s)) + U32 * np.abs(y) + 4 * U64 * np.abs(y))}, \
        np.zeros(len(X), bool)


def silu_bounds(X):
    """silu = x / (1 + e), e = exp(-x) within one ulp (Sleef's expf_u10, the exp fast takes:
    |de| <= 2u e), then a rounded add and a rounded divide: |dy| <= (2u e/(1 + e) + 2u)|y| + O(u^2),
    so 4u|y|, and a subnormal quantum for results below 2^-126. Where exp(-x) overflows f32
    (-x > ln FLT_MAX) the formula gives -0: the bound is |y| itself (the true value is below
    100 e^-88, an underflow of the formula, not of the order)."""
    with np.errstate(over="ignore"):
        y = X / (1 + np.exp(-X))
    overflow = -X > np.log(np.finfo(np.float32).max)
    return {"y": (y, np.where(overflow, np.abs(y), 4 * U32 * np.abs(y)) + 2.0 ** -149 + 4 * U64 * np.abs(y))}


def gelu_tanh_bounds(X):
    """gelu_tanh = (x/2)(1 + t), t = tanh(k (x + c x^3)) with k, c rounded to f32 and x^3 = (x*x)*x.
    x^3 within 2u, the fma x + c x^3 within u of its exact value plus u|c x^3| (c's rounding), so
    3u relative (both terms have x's sign); times k: u for k's rounding, u for the product, 6u|inner|
    in all. tanh within one ulp (Sleef's tanhf_u10, 2u|t|) plus (1 - t^2) times inner's error; 1 + t
    rounded (u|1 + t|); x/2 exact; the product rounded (u|y|). Where t rounds to -1 (x below about
    -9) the result is -0 and the bound |x|u covers the true value's e^-87."""
    x = X.astype(np.float64)
    inner = np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)
    t = np.tanh(inner)
    y = 0.5 * x * (1 + t)
    dt = (1 - t * t) * 6 * U32 * np.abs(inner) + 2 * U32 * np.abs(t)
    dy = 0.5 * np.abs(x) * (dt + U32 * np.abs(1 + t)) + U32 * np.abs(y)
    return {"y": (y, dy + 2.0 ** -149 + 4 * U64 * np.abs(y))}


# oneDNN's minimax erf (the one gelu's orders take with AVX-512, fast on every host) against
# erf(x/sqrt 2) in float64, polynomial and evaluation together: at most 6.9e-7 absolute over 80
# million f32 |x| in [0, 50] (largest near |x| = 0.5 to 6; a scratch run, 2026-12-07); the bound
# takes 2^-20 (9.5e-7).
GELU_ERF_ABS = 2.0 ** -20
_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_bounds(X):
    """gelu = fl(fl(x * fl(1 + p)) * 0.5), p within GELU_ERF_ABS of erf(x/sqrt 2): |dy| <=
    (|x|/2)(GELU_ERF_ABS + u|1 + erf|) + 2u|y| (the sum's and the product's roundings; the
    halving is exact above the subnormals), and a subnormal quantum. Where erf is near -1 (x below
    about -3) this is large against |y|, as in PyTorch's own result: the absolute bound stands."""
    x = X.astype(np.float64)
    e = _erf(x / np.sqrt(2.0))
    y = 0.5 * x * (1 + e)
    dy = 0.5 * np.abs(x) * (GELU_ERF_ABS + U32 * np.abs(1 + e)) + 2 * U32 * np.abs(y)
    return {"y": (y, dy + 2.0 ** -149 + 4 * U64 * np.abs(y))}


def row_sum_bounds(op, model, X, u_out):
    """sum: every term through at most d = sum_depth roundings in the accumulation type, so
    |ds| <= gamma_d sum|x|, then the rounding to f32 (acc=f64) and the float64 reference's own
    gamma_N(2^-53) sum|x|. mean = fl(sum / N): |ds|/N and one more rounding of the quotient."""
    ua = U64 if model["acc"] == "f64" else U32
    n = X.shape[1]
    absum = np.abs(X).sum(axis=1)
    s = X.sum(axis=1)
    ds = gamma(sum_depth(model["sum"], n), ua) * absum
    ds = ds + u_out * (np.abs(s) + ds) + gamma(n, U64) * absum
    if op == "sum":
        return {"sum": (s, ds)}
    m, dm = s / n, ds / n
    return {"mean": (m, dm + (ua + u_out) * (np.abs(m) + dm))}


def bounds(op, model, ref, w, b):
    """{output: (reference value, first-order bound)} and a per-row 'vacuous' flag."""
    if op in SOFTMAX_OPS:
        return softmax_bounds(op, model, ref.X)
    if op == "silu":
        return silu_bounds(ref.X), np.zeros(len(ref.X), bool)
    if op == "gelu_tanh":
        return gelu_tanh_bounds(ref.X), np.zeros(len(ref.X), bool)
    if op == "gelu":
        return gelu_bounds(ref.X), np.zeros(len(ref.X), bool)
    u_out = U32 if model["acc"] == "f64" else 0.0
    if op in ("sum", "mean"):
        return row_sum_bounds(op, model, ref.X, u_out), np.zeros(len(ref.X), bool)
    X, mu, var = ref.X, ref.mu, ref.var
    if op == "rms_norm":
        ua = U64 if model["acc"] == "f64" else U32
        g = gamma(sum_depth(model["sum"], X.shape[1]) + 2, ua)
        dms = g * ref.ms + u_out * ref.ms * (1 + g) + ref.dms
        r = 1 / np.sqrt(ref.ms + EPS)
        dr = rstd_bound(ref.ms, dms, r)
        rho = (dr / r)[:, None]
        y = X * r[:, None] * w
        return {"y": (y, np.abs(w) * np.abs(X) * r[:, None] * (rho + 2 * U32) + 2 * U64 * np.abs(y)),
                "rstd": (r, dr)}, np.zeros(len(r), bool)
    e, dv = moments_bound(model, ref)
    e_mo = e + u_out * (np.abs(mu) + e) + ref.e
    dv32 = dv + u_out * (var + dv)
    with np.errstate(divide="ignore", invalid="ignore"):
        vac = np.where(var > 0, (dv32 + ref.dv) / var >= 1, False)
    if op == "var_mean":
        return {"var": (var, dv32 + ref.dv), "mean": (mu, e_mo)}, vac
    r = 1 / np.sqrt(var + EPS)
    dr = rstd_bound(var, dv32 + ref.dv, r)
    rho = (dr / r)[:, None]
    vac |= dr / r >= 0.5
    xc = X - mu[:, None]
    t = xc * r[:, None] * w
    y = t + b
    em = e_mo[:, None]
    if model["affine"] == "scale-bias-fma":
        by = np.abs(w) * r[:, None] * (np.abs(xc) * (rho + U32) + em + U32 * (np.abs(mu)[:, None] + em)) + U32 * np.abs(y)
    else:
        by = np.abs(w) * r[:, None] * (np.abs(xc) * (rho + 3 * U32) + em) + U32 * np.abs(y)
    by = by + 4 * U64 * (np.abs(t) + np.abs(b))
    return {"y": (y, by), "mean": (mu, e_mo), "rstd": (r, dr)}, vac


def ratios(got, want, bound):
    err = np.abs(got.astype(np.float64) - want)
    b = SAFETY * bound
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(b > 0, err / b, np.where(err > 0, np.inf, 0.0))
    return np.where(np.isfinite(got), q, np.inf)


# ------------------------------------------------------------------------------------------

def list_orders(ordo):
    out = subprocess.run([ordo, "orders"], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"^(\S+)\s+(exact|unverified)?\s*\[([^\]]*)\]\s*\[([^\]]*)\]", line)
        if m and not m.group(2) and "f32" in m.group(4).split(","):
            found[m.group(1)] = m.group(3).split(",")
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ordo", required=True)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    t0 = time.time()
    try:
        named = list_orders(args.ordo)
    except (OSError, subprocess.CalledProcessError) as ex:
        print(f"FAIL: `{args.ordo} orders` did not run: {ex}\n0 passed, 1 failed")
        return 1
    orders = list(named) + [v for v in VARIANTS if v.partition("(")[0] in named]

    rng = np.random.default_rng(20240611)
    tmp = tempfile.mkdtemp(prefix="ordo_bounds_")
    try:
        return run_all(args, named, orders, rng, tmp, t0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_all(args, named, orders, rng, tmp, t0):
    data = {}  # N -> x (all 4 ranges), w, b, file names, row labels
    for n in NS:
        rows = rows_for(n)
        x = np.concatenate([(off + sc * rng.standard_normal((rows, n))).astype(np.float32) for _, off, sc in RANGES])
        w = (1 + 0.5 * rng.standard_normal(n)).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        f = {k: os.path.join(tmp, f"{k}_{n}.npy") for k in ("x4", "x3", "w", "b")}
        np.save(f["x4"], x)
        np.save(f["x3"], x[: 3 * rows])
        np.save(f["w"], w)
        np.save(f["b"], b)
        labels = [name for name, _, _ in RANGES for _ in range(rows)]
        data[n] = dict(x=x, w=w.astype(np.float64), b=b.astype(np.float64), files=f, labels=labels, rows=rows, refs={})

    cases = []
    for order in orders:
        for op in named[order.partition("(")[0]]:
            if op == "attention":  # its float64 bounds are tests/reference/flash_bounds.py
                continue
            # The backward ops' inputs (dy and the forward's statistics) and bounds are not modelled
            # here: attention_backward's are tests/reference/flash_backward_bounds.py, the norm and
            # softmax backward orders' tests/reference/norm_backward_bounds.py.
            if op.endswith("_backward"):
                continue
            # cross_entropy's logp is the order's log_softmax (bounded here as log_softmax), and its
            # loss is summed by one LossOrder under every order that has it, PyTorch's nll_loss
            # cascade (reference_torch2_cpu checks it bit for bit against torch 2.15 under the
            # torch2.15-cpu orders): fast's loss differs from theirs only through its logp.
            if op == "cross_entropy":
                continue
            for n in NS:
                try:
                    model = softmax_model(order) if op in SOFTMAX_OPS else {} if op in POINTWISE_OPS else model_of(order, n)
                except KeyError as ex:
                    model = str(ex)
                # softmax is shift-invariant (x - max is exact near the max), so the offset rows stay meaningful
                wide = (op in ("rms_norm", "sum", "mean") or op in POINTWISE_OPS or op in SOFTMAX_OPS or
                        (isinstance(model, dict) and model.get("acc") == "f64" and model["moments"] != "one-pass"))
                if SHAPES.get(order.partition("(")[0], lambda _: True)(n):
                    cases.append((order, model, op, n, "x4" if wide else "x3"))

    def run(idx):
        order, model, op, n, xf = cases[idx]
        f = data[n]["files"]
        outs = {o: os.path.join(tmp, f"out_{idx}_{o}.npy") for o in OUTS[op]}
        cmd = [args.ordo, "run", op, "--order", order, "--in", "x=" + f[xf]]
        if op in ("layer_norm", "rms_norm"):
            cmd += ["--eps", repr(EPS), "--in", "weight=" + f["w"]]
        if op == "layer_norm":
            cmd += ["--in", "bias=" + f["b"]]
        for o, p in outs.items():
            cmd += ["--out", f"{o}={p}"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as ex:  # a missing or unrunnable binary is a failed case, not a crash
            r = subprocess.CompletedProcess(cmd, -1, "", str(ex))
        return r, outs

    passed = failed = 0
    summary = {o: dict(worst=0.0, where="", cases=0, vacuous=0, rows=0, per_out={}) for o in orders}
    neg_inputs = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run, i): c for i, c in enumerate(cases) if isinstance(c[1], dict)}
        for c in cases:
            if not isinstance(c[1], dict):
                print(f"FAIL {c[2]} {c[0]} N={c[3]}: {c[1]}")
                failed += 1
        for fut in concurrent.futures.as_completed(futures):
            order, model, op, n, xf = futures[fut]
            r, outs = fut.result()
            label = f"{op} {order} N={n}"
            s = summary[order]
            s["cases"] += 1
            if r.returncode != 0:
                print(f"FAIL {label}: ordo exited {r.returncode}: {r.stderr.strip()[:300]}")
                failed += 1
                continue
            D = data[n]
            nrows = D["rows"] * (4 if xf == "x4" else 3)
            ref = D["refs"].get(xf) or D["refs"].setdefault(xf, Ref(D["x"][:nrows]))
            try:
                want, vac = bounds(op, model, ref, D["w"], D["b"])
            except ValueError as ex:
                print(f"FAIL {label}: {ex}")
                failed += 1
                continue
            got = {o: np.load(p) for o, p in outs.items()}
            for p in outs.values():
                os.remove(p)
            s["vacuous"] += int(vac.sum())
            s["rows"] += nrows
            bad = []
            for o in OUTS[op]:
                ref_v, bnd = want[o]
                g = got[o].reshape(ref_v.shape)
                q = ratios(g, ref_v, bnd)
                i = np.unravel_index(int(np.argmax(q)), q.shape)
                worst = float(q[i])
                key = f"{op}.{o}"
                s["per_out"][key] = max(s["per_out"].get(key, 0.0), worst)
                if worst > s["worst"]:
                    s["worst"], s["where"] = worst, f"{op} {o} N={n} {D['labels'][i[0]]}"
                if worst > 1:
                    nbad = int((q > 1).sum())
                    bad.append(f"{o}: {nbad}/{q.size} over bound, worst ratio {worst:.3g} at row {i[0]} "
                               f"({D['labels'][i[0]]}) index {i}: got {float(g[i])!r} ref {float(ref_v[i])!r} "
                               f"bound {SAFETY * float(bnd[i]):.3g}")
            if bad:
                failed += 1
                print(f"FAIL {label}: " + "; ".join(bad))
            else:
                passed += 1
            if n == NEG_N:
                neg_inputs[(order, op)] = (got, want, D["rows"])

    # Negative controls: the same bounds applied to outputs that are wrong by a known amount
    # must be violated in most places; otherwise the bound would be too loose to catch them.
    print("\nnegative controls (N=%d, N(0,1) rows; fraction of elements/rows outside the bound):" % NEG_N)
    for (order, op), (got, want, rows) in sorted(neg_inputs.items()):
        parts, ok = [], True
        for o in OUTS[op]:
            ref_v, bnd = want[o]
            g = got[o].reshape(ref_v.shape)[:rows].astype(np.float64)
            if o == "y":
                wrong, how = g * (1 + 2.0 ** -10), "y*(1+2^-10)"
            else:
                wrong, how = np.roll(g, 1, axis=0), f"{o} of another row"
            frac = float((ratios(wrong, ref_v[:rows], bnd[:rows]) > 1).mean())
            ok &= frac > 0.5
            parts.append(f"{how}: {100 * frac:.1f}%")
        line = f"  {op:<10} {order:<42} " + ", ".join(parts)
        if ok:
            passed += 1
            print(line)
        else:
            failed += 1
            print(f"FAIL negative control {op} {order}: bound did not flag most elements: " + ", ".join(parts))

    print(f"\nworst err/bound per order (bound = {SAFETY:g} x first-order bound; must be <= 1):")
    for order in orders:
        s = summary[order]
        per = ", ".join(f"{k} {v:.3g}" for k, v in sorted(s["per_out"].items()))
        print(f"  {order:<42} {s['worst']:.3g}  at {s['where'] or '-'}  ({s['cases']} cases; "
              f"vacuous rows {s['vacuous']}/{s['rows']})\n      {per}")
    print(f"runtime {time.time() - t0:.1f} s")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
