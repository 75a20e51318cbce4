"""Bit-exact check of ordo's torch2.15-cpu-math-* attention_backward orders against PyTorch 2.15.0's
autograd through the eager composite, as installed.

The composite is the materialized reference fused attention is compared with:
softmax((q @ k.transpose(-2, -1)) * scale) @ v, causal by masked_fill(-inf) above the diagonal.
For each CPU capability this machine has, a worker process starts with ATEN_CPU_CAPABILITY set
and, on 1, 2 and 3 torch threads, runs the composite forward on f32 q, k, v that require grad,
then out.backward(dout). ordo's torch2.15-cpu-math-<cap>(threads=T) gets q, k, v, out and dout
through the Python package (build/python); q.grad, k.grad and v.grad must have torch's bit
patterns (every NaN equals every NaN). The alias torch2.15-cpu-math runs on a share of the cases.
On 3 torch threads (a third of the cases) ordo must refuse a launch of one (batch, head), where
PyTorch runs MKL on all its threads and MKL's splits are measured on 2 only, and match every other.

Cases: S_q and S_k from 1 to 480 (P, its gradient and q^T @ grad stay within the order's 2 MiB
of scratch), D from 8 to 256, batch*heads from 1 to 3 (1 makes bmm call MKL on all of torch's
threads: the only way the bits depend on the thread count); products below 400 multiply-adds
(PyTorch's own bmm loop), MKL's gemv (one query), small-matrix and general kernels (K blocks of
192: S_q or S_k past 192 and 384); causal and not; the default scale and 0.3; logits normal,
sharp (8 times larger: near one-hot rows) and saturated (50 times: probabilities that underflow to
0 or to denormals, so gradients hold zeros of either sign; with S_q = 1 or 2 and one (batch,
head), the products of one or two terms show how MKL signs a zero sum).

bf16 and f16: every case again in each 16-bit type, q, k, v and dout rounded from the same f32
values, plus two more value ranges: "wide" (v and dout scaled element by element by 2^-12 to
2^12) and "crafted" (q = 0, so P is uniform, and +-2^30 in two rows of each column of v and of
dout, which cancel exactly in p @ v and p^T @ dout), and "crafted_dots" (2^15 times +-2^15 at two
dims of every row of q and k, and of dout and v, cancelling in q @ k^T and dout @ v^T), so that
sums in another order round otherwise; the five oneDNN shapes below take the two crafted ones. PyTorch's bmm then never calls MKL: where its
oneDNN check fails (f16 on a CPU without avx512_fp16 or AVX-NE-CONVERT; bf16 on one without
AVX-512 or AVX-NE-CONVERT) every product is ATen's own (gemm_stub, the avx2 build's under avx512
too, or its loop below 400 multiply-adds) and the thread count changes no bit; bf16 on an AVX-512
CPU without avx512_bf16 goes to oneDNN's emulated gemm:jit:bf16 when B*H*S_q*S_k*D > 4096 (the
shapes below include B*H of 2, 3 and 11 around that bound, K past 384 and 1536, and one (batch,
head) on 2 threads, whose split makes one-row calls). The forward's out is compared as well
(ordo.attention with the same order), since the 16-bit forward has no other test.

f16 on a CPU with avx512_fp16 (oneDNN's brgemm over the halves converted to f32, its gemv kernels, its K splits):
every case above in f16, plus SHAPES_AVX512_FP16 (one query or one key through lanes16 and the fma chains, K blocks,
the 'bwd_w' split where oneDNN's imbalance score takes it and where not, the gemv's 16384 cut and its K split, f16
subnormal results), some on 3 threads too ("three"), with "sparse" values (q = 0; a cancelling pair straddling a K
boundary among small markers), "crafted_dots16" (a cancelling pair of dims among six markers) and "tiny16" (results in
f16's subnormal range). Leaving out one rule fails cases (CI tier, f16 cases only): lanes16 and the chain swapped 42,
one K block 66, src-transposed 1024-blocks 60, no bwd_w split 15, the split whenever allowed 4, f16 subnormal results
flushed 234, no 16384 cut 9; in bf16 no 16384 cut fails its 9 runs of the case aimed at it.

The f32 orders model an AMD host's MKL (its generic kernels, with or without AVX-512; measured on
an AVX2-only EPYC) and an Intel AVX-512 host's (its avx512 kernels; measured on a Xeon). On other
hosts the test says what it cannot verify.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiers  # noqa: E402
from torch2_harness import amd_host, has_cpu_flag, intel_avx512_host, onednn_16bit_host, order_row, parse_arguments, report, run_workers, torch_error  # noqa: E402

# (S_q, S_k, D, batch, heads)
SHAPES = [
    # below 400 multiply-adds: PyTorch's own loop (any D and S_k)
    (1, 4, 8, 1, 1), (3, 5, 8, 2, 1), (5, 9, 8, 1, 3),
    # one query (gemv), few rows or columns (the small-matrix kernel), MKL's split of 5..11 rows in fours on 2 threads
    (1, 300, 64, 1, 2), (2, 64, 32, 1, 1), (1, 64, 32, 1, 1), (5, 8, 16, 1, 1), (3, 12, 16, 1, 3), (7, 40, 32, 1, 1), (10, 12, 32, 1, 1), (11, 16, 128, 1, 1),
    (17, 20, 128, 1, 1),
    # the general kernel, its K blocks (192, two halves up to 384, 192s beyond)
    (33, 36, 32, 1, 1), (64, 192, 16, 2, 1), (65, 64, 8, 1, 2), (100, 300, 32, 1, 1), (128, 128, 64, 1, 1), (200, 256, 64, 1, 1),
    (193, 196, 8, 1, 1), (385, 388, 16, 1, 1), (300, 400, 64, 1, 1), (40, 100, 256, 1, 1), (480, 480, 32, 1, 1),
    # dq over S_k > 768 keys on 2 threads (one (batch, head)): MKL's uniform 384-blocks
    (150, 800, 128, 1, 1),
]
# 16-bit only (bf16 on AVX-512 without avx512_bf16 is oneDNN's): B*H*S_q*S_k*D around 4096 (384 x 11 heads; 3840 x 2),
# K past 384 and 1536 (two halves, then blocks of 768), odd rows and columns for its thread split. (The AMD f32 model
# takes S_k multiples of 4 only.)
# Each takes crafted values (below) that tell oneDNN's kernels apart: the CI tier the one named, causal or not as
# named (a causal mask hides most keys from 2 or 9 queries), --full both values and both masks.
SHAPES_16BIT = [((3, 16, 8, 1, 11), "crafted_dots", True), ((10, 12, 32, 2, 1), "crafted", False),
                ((2, 1600, 32, 1, 1), "crafted", False), ((33, 35, 24, 1, 1), "crafted_dots", True),
                ((9, 1537, 16, 1, 3), "crafted", False)]
# bf16 on a CPU with avx512_bf16 (oneDNN's brgemm and gemv kernels), each with the values and mask named: one query
# with one (batch, head) (k^T copied: q @ k^T, p @ v and dq by the fma chain) and with three (q @ k^T and dout @ v^T by
# pairs16, K = 48 a masked 32-chunk), one key (q @ k^T by pairs16, dk^T and dv by the fma chain), P^T's 512-blocks (dv, dk^T with K = 1100), the 'bwd_w' K split of dv and
# dk^T (K = 2048, one (batch, head), 2 threads), the gemv's cut at K = 16384 and its K split on 2 threads (p @ v and dq of
# one query over 16400 keys; wide values show the cut), crafted dots through pairs16's lane reduction and one query's
# q @ k^T with one (batch, head), and "tiny" values (v and dout near 1e-38) through oneDNN's flushes and, below
# B*H*S_q*S_k*D = 4096, ATen's gemm_stub and its loop.
SHAPES_AVX512_BF16 = [((1, 700, 32, 1, 1), "crafted", False), ((1, 300, 48, 1, 3), "crafted_dots", False),
                      ((600, 1, 40, 1, 1), "crafted", False),
                      ((1100, 24, 16, 1, 2), "crafted", True), ((2048, 8, 16, 1, 1), "crafted", False),
                      ((1, 16400, 64, 1, 1), "crafted", False), ((64, 40, 16, 1, 1), "tiny", False),
                      ((1, 200, 32, 1, 2), "tiny", False), ((5, 40, 16, 1, 1), "tiny", True), ((3, 9, 8, 1, 1), "tiny", False),
                      ((1, 500, 64, 1, 1), "crafted_dots", False), ((1, 256, 128, 2, 1), "crafted_dots", False),
                      ((256, 1, 128, 1, 2), "crafted_dots", False), ((1, 16400, 64, 1, 2), "wide", False)]
# The same oneDNN kernels in bf16: the gemv's cut at K = 16384 alone (one query over 16500 keys, two heads, so no K split):
# p @ v is an m1 fma chain over S_k, and "sparse" values straddle 16384 with a cancelling pair (see the worker).
SHAPES_AVX512_BF16 += [((1, 16500, 64, 1, 2), "sparse", False, {"cuts": [16384]})]
# oneDNN's K splits of one (batch, head) on 3 threads too ("three"; sparse values: cancelling pairs straddling multiples of
# 512, or the cuts named): dv's 'bwd_w' split over 4096 queries where oneDNN's imbalance score takes 3 k-threads (S_k = D =
# 32; D = 96, which 2 threads leave whole), where it takes none on 3 (S_k = 48: three 16-row blocks balance better), and
# none at K = 3000 (bf16 splits a power-of-two K only); the gemv's K split over 3 threads (chunks of 5500): p @ v and dq of
# one query over 16500 keys, dv of one key under 16500 queries.
SHAPES_AVX512_BF16 += [((4096, 32, 32, 1, 1), "sparse", False, {"three": True}), ((4096, 48, 32, 1, 1), "sparse", False, {"three": True}),
                       ((4096, 32, 96, 1, 1), "sparse", False, {"three": True}), ((3000, 32, 32, 1, 1), "sparse", False, {"three": True}),
                       ((1, 16500, 64, 1, 1), "sparse", False, {"cuts": [5500, 8250, 11000, 16384], "three": True}),
                       ((16500, 1, 64, 1, 1), "sparse", False, {"cuts": [5500, 8250, 11000, 16384], "three": True})]
# f16 on a CPU with avx512_fp16 (oneDNN's f32 brgemm over the halves converted, and its gemv kernels; each with the values
# and mask named, and optionally the K boundaries "sparse" values straddle and "three": the case runs on 3 threads too).
# One query with one (batch, head) (k^T copied: q @ k^T, p @ v and dq fma chains) and with three (q @ k^T and dout @ v^T by
# lanes16, K = 40: two 16-chunks and a masked one); one key (q @ k^T by lanes16 over D, dk^T (n1_A_trans) and dv (m1_B_plain)
# fma chains over S_q); K blocks of 512 then the rest up to 1024 (p @ v over 700 keys), 1024-blocks (1100 keys) and P^T's
# 512-blocks (dv over 1100 queries); the 'bwd_w' split of dv and dk^T (one (batch, head), S_k = D = 32, so M = 32 allows an
# even row split and oneDNN's imbalance score lets K decide: split at 2048 and 3000, not at 2560; on 3 threads too); the
# gemv's cut at 16384 and its K split over 2 and 3 threads (one query over 16500 keys); "tiny16" values whose results are
# f16 subnormals (kept, not flushed) through oneDNN's kernels and, below 4096 and 400 multiply-adds, ATen's.
SHAPES_AVX512_FP16 = [((1, 700, 32, 1, 1), "sparse", False, {}), ((1, 300, 40, 1, 3), "crafted_dots16", False, {"three": True}),
                      ((1, 700, 32, 1, 1), "crafted_dots16", False, {}),
                      ((1, 520, 24, 1, 2), "crafted_dots16", False, {}), ((520, 1, 16, 1, 1), "sparse", False, {"three": True}),
                      ((40, 700, 16, 1, 2), "sparse", False, {}), ((33, 1100, 16, 1, 2), "sparse", True, {}),
                      ((1100, 24, 16, 1, 2), "sparse", False, {}),
                      ((2048, 32, 32, 1, 1), "sparse", False, {"three": True}), ((2560, 32, 32, 1, 1), "sparse", False, {"three": True}),
                      ((3000, 32, 32, 1, 1), "sparse", False, {"three": True}), ((2560, 32, 32, 1, 1), "normal", False, {"three": True}),
                      ((2048, 32, 32, 1, 1), "normal", True, {}), ((3000, 32, 32, 1, 1), "normal", False, {}),
                      ((1, 16500, 64, 1, 2), "sparse", False, {"cuts": [16384]}),
                      ((1, 16500, 64, 1, 1), "sparse", False, {"cuts": [5500, 8250, 11000, 16384], "three": True}),
                      ((64, 40, 16, 1, 1), "tiny16", False, {}), ((1, 200, 32, 1, 2), "tiny16", False, {}),
                      ((5, 40, 16, 1, 1), "tiny16", True, {}), ((3, 9, 8, 1, 1), "tiny16", False, {})]
# bf16 on every host, ATen's gemm_stub (B*H*S_q*S_k*D from 400 to 4096, below oneDNN's threshold): products that
# round to zero in f32 show which of the stub's steps are fused (under avx2 and avx512: the 'N','T' chain, ilp4's main
# loop, not its K mod 4 tail; under default none): dv over S_q = 4 and 5 queries (of which most keys are nobody's
# likeliest), dq over S_k = 16 and 9 keys.
SHAPES_STUB_TINY = [((4, 64, 16, 1, 1), "tiny_dv", False), ((5, 48, 16, 1, 1), "tiny_dv", False),
                    ((16, 16, 16, 1, 1), "tiny_dq", False), ((7, 9, 64, 1, 1), "tiny_dq", False)]
SHAPES_QUICK = [(3, 5, 8, 2, 1), (1, 300, 64, 1, 2), (1, 64, 32, 1, 1), (10, 12, 32, 1, 1), (65, 64, 8, 1, 2), (200, 256, 64, 1, 1)]
RANGES = [("normal", 1.0), ("sharp", 8.0), ("saturated", 50.0)]
RANGES_16BIT = RANGES + [("wide", 1.0), ("crafted", 0.0), ("crafted_dots", 1.0)]
RANGES_NAMED = RANGES_16BIT + [("tiny", 1.0), ("tiny16", 1.0), ("sparse", 0.0), ("crafted_dots16", 1.0),
                               ("tiny_dv", 30.0), ("tiny_dq", 1.0)]  # named by a case only


def cases(tier, dtypes):
    out = []
    for dtype in dtypes:
        shapes = SHAPES_QUICK if tier == tiers.QUICK else SHAPES + ([shape for shape, _, _ in SHAPES_16BIT] if dtype != "f32" else [])
        for i, (s_q, s_k, d, batch, heads) in enumerate(shapes):
            ci_causal = SHAPES_16BIT[i - len(SHAPES)][2] if tier != tiers.QUICK and i >= len(SHAPES) else i % 2 == 1
            for causal in ((ci_causal,) if tier == tiers.CI else (False, True)):
                ranges = RANGES if dtype == "f32" else RANGES_16BIT
                value_range = ranges[len(out) % len(ranges)][0]
                if i >= len(SHAPES):  # the oneDNN shapes
                    named = SHAPES_16BIT[i - len(SHAPES)][1]
                    causal_named = SHAPES_16BIT[i - len(SHAPES)][2]
                    value_range = named if tier == tiers.CI or causal == causal_named else ({"crafted", "crafted_dots"} - {named}).pop()
                out.append({"sq": s_q, "sk": s_k, "d": d, "batch": batch, "heads": heads, "causal": causal, "dtype": dtype,
                            "range": value_range, "scale": 0.3 if len(out) % 3 == 2 else None, "seed": len(out),
                            "alias": i % 4 == 0})
    host_cases = [("bf16", True, SHAPES_STUB_TINY), ("bf16", has_cpu_flag("avx512_bf16"), SHAPES_AVX512_BF16),
                  ("f16", has_cpu_flag("avx512_fp16"), SHAPES_AVX512_FP16)]
    for dtype, host, shapes in host_cases:
        if dtype not in dtypes or not host or tier == tiers.QUICK:
            continue
        for (s_q, s_k, d, batch, heads), value_range, causal, *extra in shapes:
            out.append({"sq": s_q, "sk": s_k, "d": d, "batch": batch, "heads": heads, "causal": causal, "dtype": dtype,
                        "range": value_range, "scale": None, "seed": len(out), "alias": False, **(extra[0] if extra else {})})
    return out


WORKER = r'''
import json, os, sys
import torch
import ordo

cap, cases = sys.argv[1], json.load(open(sys.argv[2]))
RANGES = dict(json.loads(sys.argv[3]))

from tensor_bits import THREAD_COUNTS, refusal_why, runs_on, same

def composite(q, k, v, c):
    scale = c["scale"] if c["scale"] is not None else 1.0 / c["d"] ** 0.5
    a = (q @ k.transpose(-2, -1)) * scale
    if c["causal"]:
        a = a.masked_fill(torch.ones(c["sq"], c["sk"], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(a, -1) @ v

results = []
for threads in THREAD_COUNTS:
    torch.set_num_threads(threads)
    for i, c in enumerate(cases):
        if not runs_on(threads, i) and not (threads == 3 and c.get("three")):
            continue
        g = torch.Generator().manual_seed(5000 + c["seed"])
        shape = (c["batch"], c["heads"])
        dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[c["dtype"]]
        q = (torch.randn(*shape, c["sq"], c["d"], generator=g) * RANGES[c["range"]]).to(dt).requires_grad_()
        k = torch.randn(*shape, c["sk"], c["d"], generator=g).to(dt).requires_grad_()
        v = torch.randn(*shape, c["sk"], c["d"], generator=g).to(dt).requires_grad_()
        dout = torch.randn(*shape, c["sq"], c["d"], generator=g)
        if c["range"] == "wide":
            with torch.no_grad():
                v.copy_(v.float() * torch.exp2(torch.randint(-12, 13, v.shape, generator=g).float()))
            dout = dout * torch.exp2(torch.randint(-12, 13, dout.shape, generator=g).float())
        if c["range"] == "crafted":
            # q = 0 makes P uniform, so +-2^30 in two rows of each column of v (dout) cancel exactly in
            # p @ v (p^T @ dout), and the sums' bits show which small terms joined before that.
            def cancelling(t):
                n = t.shape[-2]
                if n < 2:
                    return t
                a = torch.randint(0, n, t.shape[:-2] + (1, t.shape[-1]), generator=g)
                # close pairs: across oneDNN's K-block boundaries (384..800 for K = 1600) as often as inside
                b = (a + 1 + torch.randint(0, min(n - 1, 32), a.shape, generator=g)) % n
                return t.scatter(-2, a, 2.0 ** 30).scatter(-2, b, -2.0 ** 30)
            with torch.no_grad():
                v.copy_(cancelling(v.float()))
            dout = cancelling(dout)
        if c["range"] == "sparse":
            # q = 0 makes P uniform. Per column of v (even columns) and of dout (odd ones, so that dout @ v^T
            # stays finite) a cancelling pair +-2^30 (f16: +-2^15) straddles a K boundary (the case's "cuts",
            # else a multiple of 512), the rest are markers (f16: times 2^-12) that a sum holding the big
            # term loses: which markers survive shows where the sum was cut, and how its parts were grouped.
            big, small = (2.0 ** 15, 2.0 ** -12) if c["dtype"] == "f16" else (2.0 ** 30, 1.0)
            with torch.no_grad():
                q.zero_()
            def straddling(t, parity):
                t = t * small
                n = t.shape[-2]
                cuts = [x for x in c.get("cuts", range(512, n, 512)) if 8 < x < n - 8]
                if not cuts:
                    return t
                for col in range(parity, t.shape[-1], 2):
                    for bh in range(t.shape[0] * t.shape[1]):
                        cut = cuts[int(torch.randint(0, len(cuts), (1,), generator=g))]
                        a, b = cut - 1 - int(torch.randint(0, 8, (1,), generator=g)), cut + int(torch.randint(0, 8, (1,), generator=g))
                        t.view(-1, n, t.shape[-1])[bh, a, col] = big
                        t.view(-1, n, t.shape[-1])[bh, b, col] = -big
                return t
            with torch.no_grad():
                v.copy_(straddling(v.float(), 0))
            dout = straddling(dout, 1)
        if c["range"] == "tiny16":
            # v and dout near f16's smallest normal (2^-14): many inputs subnormal, outputs f16 subnormals
            with torch.no_grad():
                v.copy_(v.float() * 2.0 ** -15)
            dout = dout * 2.0 ** -15
        if c["range"] in ("tiny_dv", "tiny_dq"):
            # bf16, products that round to zero in f32: unfused, a sum of them is +0, while ATen's fused stub
            # steps keep the sign of the last (-0 where it is negative). dout near bf16's smallest values
            # (2^-128 times N(0, 1)); tiny_dv: sharp logits (q times 30) leave keys whose probabilities
            # are all below 2^-24, so their dv sums ('N','T') take only such products; tiny_dq: k times 2^-20,
            # so the gradient of the scores (about 2^-132) times k is (dq, 'N','N', ilp4 and its tail).
            dout = dout * 2.0 ** -128
            if c["range"] == "tiny_dq":
                with torch.no_grad():
                    k.copy_(k.float() * 2.0 ** -20)
        if c["range"] == "tiny":
            # v and dout near the smallest normal float: outputs on both sides of it, some inputs subnormal
            with torch.no_grad():
                v.copy_(v.float() * 1e-38)
            dout = dout * 1e-38
        if c["range"] in ("crafted_dots", "crafted_dots16"):
            # 2^15 * 2^15 and 2^15 * -2^15 at two dims of every row of q and k (dout and v) cancel
            # exactly in q @ k^T (dout @ v^T), and the small terms' order shows in the sum.
            # crafted_dots16 (f16): 2^8 * +-2^9 at two dims, markers (+-2^-4) * (+-2^-4 * (1 + j/8)) at six
            # others and zeros elsewhere: a marker is lost (below half an ulp of 2^17) if it joins a sum
            # holding the pair's term, and the markers that stay move the softmax visibly.
            def cancelling_dims(a, b):
                if c["range"] == "crafted_dots16":
                    dims = torch.randperm(c["d"], generator=g)[:8].tolist()
                    a, b = torch.zeros_like(a), torch.zeros_like(b)
                    a[..., dims[0]] = a[..., dims[1]] = 2.0 ** 8
                    b[..., dims[0]], b[..., dims[1]] = 2.0 ** 9, -2.0 ** 9
                    for d in dims[2:]:
                        a[..., d] = 2.0 ** -4 * (torch.randint(0, 2, a.shape[:-1], generator=g) * 2 - 1)
                        b[..., d] = 2.0 ** -4 * (1 + torch.randint(0, 8, b.shape[:-1], generator=g) / 8) * (torch.randint(0, 2, b.shape[:-1], generator=g) * 2 - 1)
                    return a, b
                d0, d1 = torch.randperm(c["d"], generator=g)[:2].tolist()
                a[..., d0] = a[..., d1] = 2.0 ** 15
                b[..., d0], b[..., d1] = 2.0 ** 15, -2.0 ** 15
                return a, b
            with torch.no_grad():
                qf, kf = cancelling_dims(q.float(), k.float())
                q.copy_(qf)
                k.copy_(kf)
                dout, vf = cancelling_dims(dout.clone(), v.float())
                v.copy_(vf)
        dout = dout.to(dt)
        out = composite(q, k, v, c)
        out.backward(dout)
        want = {"dq": q.grad, "dk": k.grad, "dv": v.grad}
        for order in [f"torch2.15-cpu-math-{cap}"] + (["torch2.15-cpu-math"] if c["alias"] else []):
            named = f"{order}(threads={threads})" if threads > 1 else order
            try:
                got = dict(zip(("dq", "dk", "dv"), ordo.attention_backward(q.detach(), k.detach(), v.detach(), out.detach(), dout,
                                                                          order=named, causal=c["causal"], scale=c["scale"])))
                if c["dtype"] != "f32":
                    want["out"] = out.detach()
                    got["out"] = ordo.attention(q.detach(), k.detach(), v.detach(), order=named, causal=c["causal"], scale=c["scale"])
            except Exception as e:
                sq, sk, d = c["sq"], c["sk"], c["d"]
                products = [(True, sq, sk, d), (False, sk, d, sq), (False, sq, d, sk), (False, d, sk, sq)]
                why = refusal_why(e, c, threads, products)
                results.append({"case": i, "order": named, "threads": threads, "ok": not why, "why": why})
                continue
            why = [f"{n}: {m}" for n in want for ok, m in [same(want[n].contiguous(), got[n])] if not ok]
            results.append({"case": i, "order": named, "threads": threads, "ok": not why, "why": "; ".join(why)})
print(json.dumps({"torch": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability(), "results": results}))
'''


def main():
    args = parse_arguments(__doc__)
    if error := torch_error():
        print(error)
        return 1
    dtypes = []
    if amd_host() or intel_avx512_host():
        dtypes.append("f32")
    else:
        print("NOT VERIFIED: torch2.15-cpu-math-* attention_backward in f32 (ordo models the MKL kernels of an AMD host and of an "
              "Intel AVX-512 host only, and the orders refuse other hosts)")
    ne_convert = has_cpu_flag("avx_ne_convert")
    if not onednn_16bit_host() or (has_cpu_flag("avx512f") and not ne_convert):
        dtypes.append("bf16")
    else:
        print("NOT VERIFIED: torch2.15-cpu-math-* in bf16 (this CPU has AVX-NE-CONVERT, whose oneDNN bf16 kernels "
              "for PyTorch's bmm ordo does not model, and the orders refuse it)")
    if has_cpu_flag("avx512_fp16") or not ne_convert:
        dtypes.append("f16")
    else:
        print("NOT VERIFIED: torch2.15-cpu-math-* in f16 (this CPU has AVX-NE-CONVERT without avx512_fp16, so PyTorch's f16 bmm "
              "is oneDNN's kernel for it, which ordo does not model, and the orders refuse it)")
    if not dtypes:
        return 0
    all_cases = cases(tiers.chosen(args), dtypes)
    result = run_workers(args.build, WORKER, all_cases, RANGES_NAMED,
                         lambda c, r, cap: ("attention_backward", order_row(r, cap), c["dtype"]),
                         lambda c, r: f"attention_backward {r['order']} {c['dtype']} Sq={c['sq']} Sk={c['sk']} D={c['d']} "
                                      f"B={c['batch']} H={c['heads']} causal={c['causal']} scale={c['scale']} {c['range']} "
                                      f"threads={r['threads']}")
    return report(result, "each case is counted once per torch thread count, 1 and 2, and a third of them for 3")


if __name__ == "__main__":
    sys.exit(main())
