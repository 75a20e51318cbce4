"""Bit-exact check of ordo's torch2.15-cpu-* attention_backward orders against PyTorch 2.15.0 as
installed.

F.scaled_dot_product_attention's autograd on the CPU runs
`_scaled_dot_product_flash_attention_for_cpu_backward` (the flash kernel's backward), which reads
the forward's saved out and logsumexp. For each CPU capability this machine has, a worker process
starts with ATEN_CPU_CAPABILITY set and, on 1, 2 and 3 torch threads, runs the forward
(`_scaled_dot_product_flash_attention_for_cpu`, for out and lse), then that backward with a random
dout; ordo's torch2.15-cpu-<cap>(threads=T) gets the same q, k, v, out, dout and lse through the
Python package (build/python). dq, dk and dv must have torch's bit patterns (every NaN equals
every NaN). The alias torch2.15-cpu runs on a share of the cases and must agree as well.
On 3 torch threads (a third of the cases) ordo must refuse a launch of one (batch, head), where
PyTorch runs MKL on all its threads and MKL's splits are measured on 2 only, and match every other.

Cases, f32: S_q and S_k from 1 to 1100 across the query blocks (32, 64, 256 rows, by S_q) and the
512-key blocks, S_q != S_k both ways; D in {8, 16, 32, 64, 128} (the measured set) and 24, 40,
256 (dsum's tail past its last whole vector, and a wide head); batch*heads from 1 to 3, where
1 makes PyTorch call MKL on all its threads (the only way the backward's bits depend on the
thread count); shapes whose products take MKL's gemv (one query or one key), small-matrix
(fewer than 12 columns or 4 rows) and general kernels, and on 2 threads its split of 5..11 rows
into fours; causal (top-left aligned, as torch masks) and not. Values: normal, and sharp (logits 8
times larger: near one-hot rows).

Cases, bf16: the same shapes (D = 24 and 40 end bf16 dsum in a partial vector of 2V), CI's with
the causal flag f32's does not take: gemm_bf16bf16f32's products (its 2-thread key split
included), and the bf16 dq, dk, dv products, every partial rounded to bf16: on a CPU with
avx512_bf16 ATen's gemm_stub (m*n*k <= 4096) and oneDNN, on an Intel CPU with AVX-512 but no
avx512_bf16 gemm_stub and oneDNN's emulated gemm:jit:bf16, on one without AVX-512 gemm_stub at
every size (the orders' onednn= default follows the host). On that Intel CPU seven more bf16
cases of one (batch, head) aim at rules random data almost never shows (BF16_EMULATED_RULES:
oneDNN's one-row kernel, its 2-thread row cut and its two K blocks, MKL's 2-thread cut of 3 keys'
13 queries), six of them with crafted values. f16 likewise: on a CPU without avx512_fp16
gemm_stub at every size, with it gemm_stub and oneDNN's brgemm (one chain over K per element);
MKL's gemm_f16f16f32, which has no gemv kernel, for q @ k^T and dout @ v^T.

Grouped-query attention (k and v with fewer heads than q; PyTorch's flash kernels take it as it
is): query heads per K/V head 2, 3 and 4, batch * K/V heads 1 (MKL on torch's threads, PyTorch's
loop being over (batch, K/V head)) and more, query blocks that fall alike and otherwise in one
head and in the group's heads together, causal and not, every layout, f32, bf16 and f16.

Attention masks (attn_mask, PyTorch's float mask or a boolean one, which SDPA makes 0 / -inf in
the query's dtype): every way a mask spans or broadcasts (batch, head, S_q, S_k), random boolean
and float masks and a left-padded causal one as Hugging Face models build it (fully masked rows
included), grouped-query too; these cases also check the forward (out and lse) against
`_scaled_dot_product_flash_attention_for_cpu` with the mask, ordo given the boolean mask as is.

The orders model an AMD host's MKL (its generic kernels, with or without AVX-512) and, in f32,
an Intel AVX-512 host's (its avx512 sgemm kernels: where each applies alpha, the 'N','T' calls, the
2-thread choices) and, in bf16, one without avx512_bf16 (gemm_bf16bf16f32, with oneDNN's emulated
kernel), and in bf16 oneDNN's avx512_bf16 kernel, its emulated one or none; and in f16 an Intel
AVX-512 host's, with avx512_fp16 or without (gemm_f16f16f32 converts to f32 and runs the sgemm
kernels, no gemv); on an Intel host with avx512_bf16 bf16 is left out (the orders refuse it: where
its vdpbf16ps kernels apply the backward's alpha is not measured); elsewhere the test says what it
cannot verify.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiers  # noqa: E402
from torch2_harness import amd_host, has_cpu_flag, intel_avx512_host, order_row, parse_arguments, report, run_workers, torch_error  # noqa: E402


# (S_q, S_k, D, batch, heads)
SHAPES = [
    # one query / one key (MKL's gemv), tiny blocks (its small-matrix kernel)
    (1, 1, 8, 1, 1), (1, 300, 64, 1, 2), (5, 1, 32, 1, 1), (3, 13, 16, 1, 3), (2, 5, 32, 3, 1),
    # 5..11 queries or keys: on 2 threads with one (batch, head) MKL splits those rows in fours
    (7, 40, 32, 1, 1), (10, 9, 32, 1, 1), (6, 100, 64, 1, 1), (11, 7, 128, 1, 1), (9, 33, 64, 1, 3), (12, 17, 16, 1, 1),
    (17, 12, 8, 1, 1),
    # query blocks of 32 and 64 rows, their edges, key blocks of 512 and the rest
    (33, 33, 32, 1, 1), (64, 193, 16, 2, 1), (65, 65, 8, 1, 2), (191, 191, 32, 1, 1), (192, 200, 64, 1, 1),
    (257, 255, 128, 1, 1), (100, 513, 32, 1, 1), (40, 1025, 16, 1, 1), (300, 1100, 64, 1, 1),
    # 256-row query blocks
    (767, 100, 32, 1, 1), (768, 769, 64, 1, 1), (1100, 1100, 128, 1, 1),
    # D off the measured set: dsum's tail past the last whole vector (D mod 16 = 8), D = 256
    (40, 50, 24, 1, 2), (33, 70, 40, 1, 1), (100, 300, 256, 2, 1),
    # one (batch, head) on 2 threads, an Intel host's MKL: q @ k^T threaded, its rows few and C's
    # row stride a multiple of 256, so it packs the keys times scale (its threaded copy rule)
    (12, 512, 32, 1, 1),
    # one (batch, head) on 2 threads, an Intel host's MKL: q @ k^T of smalln's shape (under 16
    # queries, D at least 24 per query) threaded, so the general kernel without copying; 33 and 34
    # keys cut at 32, the last one or two keys by the small-matrix kernel
    (5, 384, 128, 1, 1), (7, 300, 200, 1, 1), (15, 33, 392, 1, 1), (15, 34, 400, 1, 1),
    # Intel: MKL on 2 threads inside PyTorch's parallel loop too (several (batch, head)s), with the
    # gradients' row stride H*D (a multiple of 256 at H = 2, D = 128) in its copy rules
    (32, 300, 128, 1, 2), (5, 384, 128, 1, 2), (59, 300, 64, 1, 2), (60, 200, 32, 1, 4), (33, 512, 64, 1, 2),
    # ... and q, k, v viewed from a [B, S, H, D] projection (rows 256 apart): the last query block's
    # q @ k^T (8 rows) runs as two one-thread calls over its keys (sixth field: the layout)
    (40, 800, 128, 1, 2, "bshd"),
]
# Grouped-query: (S_q, S_k, D, batch, heads, K/V heads).
GQA_SHAPES = [
    (48, 48, 32, 2, 4, 2), (48, 48, 32, 2, 8, 2), (300, 300, 64, 1, 4, 1), (12, 512, 32, 1, 2, 1), (100, 513, 32, 2, 4, 2),
    (33, 70, 64, 1, 8, 2), (1, 300, 64, 2, 6, 3), (7, 40, 32, 1, 3, 1), (256, 256, 32, 1, 8, 2),
]
GQA_SHAPES_QUICK = [(48, 48, 32, 2, 4, 2), (12, 512, 32, 1, 2, 1)]
SHAPES_QUICK = [(1, 300, 64, 1, 2), (7, 40, 32, 1, 1), (10, 9, 32, 1, 1), (3, 13, 16, 1, 3), (65, 65, 8, 1, 2),
                (100, 513, 32, 1, 1)]
# Masked: (S_q, S_k, D, batch, heads, K/V heads, the dims the mask spans (B, H, Q, K or 1), values).
MASK_SHAPES = [
    (37, 41, 16, 2, 3, 3, "B1QK", "bool"), (70, 600, 64, 1, 2, 2, "BHQK", "float"), (200, 33, 32, 2, 2, 2, "1HQK", "bool"),
    (1, 77, 64, 2, 2, 2, "B11K", "bool"), (48, 48, 32, 2, 4, 2, "B1QK", "bool"), (33, 65, 64, 1, 4, 1, "11QK", "float"),
    (300, 300, 64, 1, 2, 2, "11Q1", "float"), (40, 530, 32, 3, 2, 2, "B1QK", "left_pad"),
]
MASK_SHAPES_QUICK = [(37, 41, 16, 2, 3, 3, "B1QK", "bool"), (40, 530, 32, 3, 2, 2, "B1QK", "left_pad")]
RANGES = [("normal", 1.0), ("sharp", 8.0), ("tiny_dout", 1.0)]
# tiny_dout: dout near the smallest normal value (q unscaled), so that the gradient products' terms
# and sums are subnormal, which avx512_bf16's vdpbf16ps flushes to zero.
TINY_DOUT = {"f32": 1e-38, "bf16": 1e-38, "f16": 1e-7}

# bf16 on an Intel AVX-512 host without avx512_bf16 (oneDNN's emulated gemm:jit:bf16, this host's
# gemm_bf16bf16f32), one (batch, head), so that 2 threads reach MKL and oneDNN: rules random data
# almost never shows. Crafted inputs make every probability 1 (q = 0, lse = 0; out is not the
# forward's) and put +-2^30 and small terms in the sums, so that how a sum associates shows in
# its bf16 bits: "crafted": k, v (+-2^10) and dout hold per column +-2^30 and two small terms at
# random rows, out small integers; "crafted_dq": v = 0 and dout = out = 0 but for column 0
# (1 and -1), so every gradient of a probability is 1 and dq sums k's crafted columns times the
# scale; "crafted_ga": k = v = 1, out = 0 and each row of dout +-2^30 and two small terms, so
# dout @ v^T's association shows in dq. (S_q, S_k, D, values)
BF16_EMULATED_RULES = [
    (1, 200, 32, "crafted_dq"),  # one query: dq by oneDNN's one-row kernel (8-k blocks)
    (33, 35, 64, "crafted"),     # 2 threads: dv's 35 rows cut with the middle one a one-row call
    (13, 3, 32, "crafted_ga"),   # 3 keys, 13 queries: on 2 threads MKL cuts the queries at 6, both parts its small-matrix kernel
    (2, 400, 32, "crafted_dq"),  # dq over 400 keys: two K blocks; on 2 threads each of its rows a one-row call
    (200, 1, 128, "crafted"),    # one key: dv by the one-row kernel over blocks of 64 queries
    (3, 129, 64, "crafted_dq"),  # 3 query rows: on 2 threads each a one-row call
    (5, 513, 16, "crafted_dq"),  # dq over 512 keys (two K blocks; on 2 threads the middle row a one-row call), then one key
]


# bf16 on a CPU with avx512_bf16 (oneDNN's brg_matmul:avx512_core_bf16, and on an Intel host MKL's
# vdpbf16ps kernels), with the crafted values above. (S_q, S_k, D, heads, values)
BF16_AVX512_RULES = [
    (1, 200, 32, 1, "crafted_dq"),   # one query: dq by oneDNN's one-row kernel (dense weights: a plain chain)
    (2, 400, 32, 1, "crafted_dq"),   # dq over 400 keys: one pair chain (no K split up to 512)
    (200, 1, 128, 1, "crafted"),     # one key: dv by the one-row kernel (dense dout: a plain chain)
    (200, 513, 128, 2, "crafted"),   # the last key block of one key against 64-row query blocks (over 4096
                                     # multiply-adds), dout's rows H*D apart: dv by the pair kernel
    (33, 35, 64, 1, "crafted"),      # 2 threads on one (batch, head): no row cut on this kernel
]


def bf16_avx512_cases(tier):
    out = []
    for s_q, s_k, d, heads, values in BF16_AVX512_RULES[:2] if tier == tiers.QUICK else BF16_AVX512_RULES:
        for causal in ((False, True) if tier == tiers.FULL else (False,)):
            out.append({"sq": s_q, "sk": s_k, "d": d, "batch": 1, "heads": heads, "dtype": "bf16", "causal": causal,
                        "range": values, "seed": 6000 + len(out), "alias": False})
    return out


def bf16_emulated_cases(tier):
    out = []
    for s_q, s_k, d, values in BF16_EMULATED_RULES[:3] if tier == tiers.QUICK else BF16_EMULATED_RULES:
        for causal in ((False, True) if tier == tiers.FULL else (False,)):
            out.append({"sq": s_q, "sk": s_k, "d": d, "batch": 1, "heads": 1, "dtype": "bf16", "causal": causal,
                        "range": values, "seed": 5000 + len(out), "alias": False})
    return out


def cases(tier):
    out = []
    for i, (s_q, s_k, d, batch, heads, *layout) in enumerate(SHAPES_QUICK if tier == tiers.QUICK else SHAPES):
        # f32: causal and not for each shape but the largest, which runs causal only; CI's share
        # alternates causal between shapes. bf16 likewise, CI's with the other causal flag than f32's.
        largest = s_q * s_k * d > 5e7
        for dtype in ("f32", "bf16", "f16"):
            flip = dtype == "bf16"  # f16 takes f32's causal flag, bf16 the other
            for causal in ((True,) if largest else (((i + flip) % 2 == 1,) if tier == tiers.CI else (False, True))):
                out.append({"sq": s_q, "sk": s_k, "d": d, "batch": batch, "heads": heads, "dtype": dtype, "causal": causal,
                            "range": RANGES[(len(out) + i) % len(RANGES)][0],  # each dtype takes each range
                            "seed": len(out), "alias": i % 4 == 0,
                            "layout": layout[0] if layout else None})
    for i, (s_q, s_k, d, batch, heads, kv_heads) in enumerate(GQA_SHAPES_QUICK if tier == tiers.QUICK else GQA_SHAPES):
        for dtype in ("f32", "bf16", "f16"):
            for causal in ((i % 2 == 1,) if tier == tiers.CI else (False, True)):
                out.append({"sq": s_q, "sk": s_k, "d": d, "batch": batch, "heads": heads, "kv_heads": kv_heads, "dtype": dtype,
                            "causal": causal, "range": RANGES[(len(out) + i) % len(RANGES)][0], "seed": len(out),
                            "alias": i % 3 == 0, "layout": None})
    for i, (s_q, s_k, d, batch, heads, kv_heads, spans, values) in enumerate(MASK_SHAPES_QUICK if tier == tiers.QUICK else MASK_SHAPES):
        # CI: two of the three dtypes per shape, in rotation.
        for dtype in [t for j, t in enumerate(("f32", "bf16", "f16")) if tier != tiers.CI or j != i % 3]:
            out.append({"sq": s_q, "sk": s_k, "d": d, "batch": batch, "heads": heads, "kv_heads": kv_heads, "dtype": dtype,
                        "causal": False, "range": RANGES[(len(out) + i) % 2][0], "seed": len(out), "alias": i % 3 == 0,
                        "layout": None, "mask": [spans, values]})
    return out


WORKER = r'''
import json, sys
import torch
import ordo

cap, cases = sys.argv[1], json.load(open(sys.argv[2]))
RANGES = dict(json.loads(sys.argv[3]))
TINY_DOUT = {"f32": 1e-38, "bf16": 1e-38, "f16": 1e-7}  # as in the runner

from tensor_bits import THREAD_COUNTS, flash_blocks, layout_of, refusal_why, relayout, runs_on, same

def sparse(rows, cols, big, g):
    x = torch.zeros(rows, cols)
    for col in range(cols):
        rows_at = torch.randperm(rows, generator=g)[:4].tolist()
        small = [(1.0, 3.0, 0.5)[int(torch.randint(3, (1,), generator=g))], (-1.0, 2.0, 0.25)[int(torch.randint(3, (1,), generator=g))]]
        for r, value in zip(rows_at, [big, -big] + small):
            x[r, col] = value
    return x

def sparse_heads(shape, rows, cols, big, g):
    """sparse() for each (batch, head): shape + (rows, cols)."""
    return torch.stack([sparse(rows, cols, big, g) for _ in range(shape[0] * shape[1])]).reshape(*shape, rows, cols)

def inputs(c):
    g = torch.Generator().manual_seed(3000 + c["seed"])
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[c["dtype"]]
    shape = (c["batch"], c["heads"])
    kv_shape = (c["batch"], c.get("kv_heads", c["heads"]))  # grouped-query: fewer K/V heads
    if c["range"].startswith("crafted"):  # q = 0, lse = 0: every probability 1 (out is not the forward's)
        q = torch.zeros(*shape, c["sq"], c["d"], dtype=dt)
        k = sparse_heads(shape, c["sk"], c["d"], 2.0 ** 30, g).to(dt)
        if c["range"] == "crafted_ga":  # dsum = 0, dout @ v^T each row's sum of dout
            k = torch.ones(*shape, c["sk"], c["d"], dtype=dt)
            v = torch.ones(*shape, c["sk"], c["d"], dtype=dt)
            dout = sparse_heads(shape, c["d"], c["sq"], 2.0 ** 30, g).transpose(-2, -1).contiguous().to(dt)
            out = torch.zeros(*shape, c["sq"], c["d"], dtype=dt)
        elif c["range"] == "crafted_dq":  # dsum = -1 and dout @ v^T = 0: every gradient of a probability 1
            v = torch.zeros(*shape, c["sk"], c["d"], dtype=dt)
            dout = torch.zeros(*shape, c["sq"], c["d"], dtype=dt)
            out = torch.zeros(*shape, c["sq"], c["d"], dtype=dt)
            dout[..., 0] = 1
            out[..., 0] = -1
        else:
            v = sparse_heads(shape, c["sk"], c["d"], 2.0 ** 10, g).to(dt)
            dout = sparse_heads(shape, c["sq"], c["d"], 2.0 ** 30, g).to(dt)
            out = torch.randint(-2, 3, (*shape, c["sq"], c["d"]), generator=g).to(dt)
        return q, k, v, dout, (out, torch.zeros(*shape, c["sq"]))
    q = (torch.randn(*shape, c["sq"], c["d"], generator=g) * RANGES[c["range"]]).to(dt)
    k = torch.randn(*kv_shape, c["sk"], c["d"], generator=g).to(dt)
    v = torch.randn(*kv_shape, c["sk"], c["d"], generator=g).to(dt)
    dout = torch.randn(*shape, c["sq"], c["d"], generator=g)
    dout = (dout * TINY_DOUT[c["dtype"]] if c["range"] == "tiny_dout" else dout).to(dt)
    return q, k, v, dout, None

def mask_of(c, g, dt):
    """(the mask ordo is given, the additive mask torch's kernel takes): c["mask"]'s spans and values."""
    spans, values = c["mask"]
    full = (c["batch"], c["heads"], c["sq"], c["sk"])
    shape = tuple(n if letter in spans else 1 for n, letter in zip(full, "BHQK"))
    if values == "float":
        m = (torch.randn(shape, generator=g) * 3).to(dt)
        return m, m
    if values == "left_pad":  # causal, bottom-right aligned, and batch b's first 7b keys padding
        i = torch.arange(c["sq"]).view(1, 1, -1, 1)
        j = torch.arange(c["sk"]).view(1, 1, 1, -1)
        pad = (7 * torch.arange(c["batch"])).view(-1, 1, 1, 1)
        m = (j <= i + c["sk"] - c["sq"]) & (j >= pad)
        m = m.expand(c["batch"], 1, c["sq"], c["sk"])
    else:
        m = torch.rand(shape, generator=g) > 0.3
    return m, torch.zeros(m.shape, dtype=dt).masked_fill(~m, float("-inf"))

results = []
for threads in THREAD_COUNTS:
    torch.set_num_threads(threads)
    for i, c in enumerate(cases):
        if not runs_on(threads, i):
            continue
        q, k, v, dout, saved = inputs(c)
        q, k, v = (relayout(t, layout_of(c)) for t in (q, k, v))  # as models hand them to SDPA (tensor_bits.LAYOUTS)
        mask, additive = mask_of(c, torch.Generator().manual_seed(7000 + c["seed"]), q.dtype) if "mask" in c else (None, None)
        out, lse = saved or torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, c["causal"], attn_mask=additive)[:2]
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse, 0.0, c["causal"],
                                                                                         attn_mask=additive)
        want = {"dq": dq, "dk": dk, "dv": dv}
        for order in [f"torch2.15-cpu-{cap}"] + (["torch2.15-cpu"] if c["alias"] else []):
            named = f"{order}(threads={threads})" if threads > 1 else order
            try:
                got = dict(zip(("dq", "dk", "dv"), ordo.attention_backward(q, k, v, out.contiguous(), dout, lse.contiguous(), order=named,
                                                                          causal=c["causal"], mask=mask)))
                if mask is not None:  # the forward too, on K/V expanded to a head per query head
                    group = c["heads"] // c["kv_heads"]
                    got["out"], got["lse"] = ordo.attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), order=named,
                                                            mask=mask, return_lse=True)
                    want["out"], want["lse"] = out, lse
            except Exception as e:
                products = [p for qb, kb in flash_blocks(c) for p in ((True, qb, kb, c["d"]), (False, kb, c["d"], qb), (False, qb, c["d"], kb))]
                why = refusal_why(e, c, threads, products)
                results.append({"case": i, "order": named, "threads": threads, "ok": not why, "why": why})
                continue
            why = [f"{n}: {m}" for n in want for ok, m in [same(want[n], got[n])] if not ok]
            results.append({"case": i, "order": named, "threads": threads, "ok": not why, "why": "; ".join(why)})
print(json.dumps({"torch": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability(), "results": results}))
'''


def main():
    args = parse_arguments(__doc__)
    if error := torch_error():
        print(error)
        return 1
    all_cases = cases(tiers.chosen(args))
    if intel_avx512_host() and not has_cpu_flag("avx512_bf16"):
        # bf16: MKL's gemm_bf16bf16f32 kernels of this host, and oneDNN's gemm:jit:bf16, which
        # emulates bf16 here (measured on such a host). f16: MKL's gemm_f16f16f32 converts to f32
        # and runs the avx512 sgemm kernels, without gemv (measured on a CPU without avx512_fp16).
        print("bf16 gradient products: gemm_stub and oneDNN's emulated gemm:jit:bf16 (AVX-512 without avx512_bf16)")
        all_cases += bf16_emulated_cases(tiers.chosen(args))
    elif intel_avx512_host():
        # avx512_bf16: MKL's gemm_bf16bf16f32 runs vdpbf16ps kernels and oneDNN its avx512_core_bf16
        # brgemm (measured on such a host). f16: gemm_f16f16f32 converts to f32 as without avx512_fp16.
        print("bf16 gradient products: gemm_stub and oneDNN's avx512_bf16 kernel, with MKL's vdpbf16ps kernels")
        all_cases += bf16_avx512_cases(tiers.chosen(args))
    elif not amd_host():
        print("FAIL: compared nothing: no model of this host: torch2.15-cpu-* attention_backward (ordo models PyTorch's CPU attention backward with an AMD host's "
              "MKL kernels and an Intel AVX-512 host's in f32 only, and the orders refuse other hosts)")
        return 1
    elif has_cpu_flag("avx512f") and not has_cpu_flag("avx512_bf16"):
        # bf16's large gradient products go to oneDNN here, whose emulated bf16 kernel ordo models
        # as measured on an Intel host, together with that host's MKL, not this one's.
        print("NOT VERIFIED: torch2.15-cpu-* attention_backward in bf16 (this AMD CPU has AVX-512 without avx512_bf16; "
              "oneDNN's emulated bf16 kernel was measured on an Intel host only); f32 only")
        all_cases = [c for c in all_cases if c["dtype"] == "f32"]
    else:
        print("bf16 gradient products: " + ("gemm_stub and oneDNN's avx512_bf16 kernel" if has_cpu_flag("avx512_bf16")
                                            else "gemm_stub at every size (no AVX-512: PyTorch's oneDNN bf16 check fails)"))
    if amd_host():
        # D = 392 and 400 aim at the Intel model's threaded small-query rule; an AMD host's MKL
        # kernels are measured up to D = 256.
        print("NOT VERIFIED: torch2.15-cpu-* attention_backward with D above 256 (shapes aimed at the Intel model's "
              "threaded rules; an AMD host's MKL kernels are measured up to D = 256)")
        all_cases = [c for c in all_cases if c["d"] <= 256]
    if has_cpu_flag("avx512_fp16"):
        print("f16 gradient products: gemm_stub and oneDNN's avx512_fp16 brgemm")
    result = run_workers(args.build, WORKER, all_cases, RANGES,
                         lambda c, r, cap: ("attention_backward", order_row(r, cap), c["dtype"]),
                         lambda c, r: f"attention_backward {r['order']} {c['dtype']} Sq={c['sq']} Sk={c['sk']} D={c['d']} B={c['batch']} "
                                      f"H={c['heads']}{'/' + str(c['kv_heads']) if 'kv_heads' in c else ''} causal={c['causal']} {c['range']} "
                                      f"{'mask=' + ':'.join(c['mask']) + ' ' if 'mask' in c else ''}"
                                      f"threads={r['threads']}")
    return report(result, "each case is counted once per torch thread count, 1 and 2, and a third of them for 3")


if __name__ == "__main__":
    sys.exit(main())
