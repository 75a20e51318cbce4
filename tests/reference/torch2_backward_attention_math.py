"""Bit-exact check of ordo's torch2.15-cpu-math-* attention_backward orders against PyTorch 2.15.0's
autograd through the eager composite, as installed.

The composite is the materialized reference fused attention is compared with:
softmax((q @ k.transpose(-2, -1)) * scale) @ v, causal by masked_fill(-inf) above the diagonal.
For each CPU capability this machine has, a worker process starts with ATEN_CPU_CAPABILITY set
and, on 1 and on 2 torch threads, runs the composite forward on f32 q, k, v that require grad,
then out.backward(dout). ordo's torch2.15-cpu-math-<cap>(threads=T) gets q, k, v, out and dout
through the Python package (build/python); q.grad, k.grad and v.grad must have torch's bit
patterns (every NaN equals every NaN). The alias torch2.15-cpu-math runs on a share of the cases.

Cases: S_q and S_k from 1 to 480 (P, its gradient and q^T @ grad stay within the order's 2 MiB
of scratch), D from 8 to 256, batch*heads from 1 to 3 (1 makes bmm call MKL on all of torch's
threads: the only way the bits depend on the thread count); products below 400 multiply-adds
(PyTorch's own bmm loop), MKL's gemv (one query), small-matrix and general kernels (K blocks of
192: S_q or S_k past 192 and 384); causal and not; the default scale and 0.3; logits normal,
sharp (8 times larger: near one-hot rows) and saturated (50 times: probabilities that underflow to
0 or to denormals, so gradients hold zeros of either sign; with S_q = 1 or 2 and one (batch,
head), the products of one or two terms show how MKL signs a zero sum).

bf16 and f16: every case again in each 16-bit type, q, k, v and dout rounded from the same f32
values. PyTorch's bmm then never calls MKL: on a CPU without AVX-512 (or AVX-NE-CONVERT) its
oneDNN check fails and every product is ATen's own (gemm_stub, or its loop below 400
multiply-adds), whose orders ordo models under the default and avx2 builds; the thread count
changes no bit there. The forward's out is compared as well (ordo.attention with the same order),
since the 16-bit forward has no other test. Under ATEN_CPU_CAPABILITY=avx512 the orders refuse
16-bit inputs (16-lane dot, unmeasured).

The f32 orders model an AMD host's MKL (its generic kernels, with or without AVX-512; measured on
an AVX2-only EPYC) and an Intel AVX-512 host's (its avx512 kernels; measured on a Xeon). On other
hosts the test says what it cannot verify.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiers  # noqa: E402
from torch2_harness import amd_host, intel_avx512_host, onednn_16bit_host, order_row, parse_arguments, report, run_workers, torch_error  # noqa: E402

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
]
SHAPES_QUICK = [(3, 5, 8, 2, 1), (1, 300, 64, 1, 2), (1, 64, 32, 1, 1), (10, 12, 32, 1, 1), (65, 64, 8, 1, 2), (200, 256, 64, 1, 1)]
RANGES = [("normal", 1.0), ("sharp", 8.0), ("saturated", 50.0)]


def cases(tier, dtypes):
    out = []
    for dtype in dtypes:
        for i, (s_q, s_k, d, batch, heads) in enumerate(SHAPES_QUICK if tier == tiers.QUICK else SHAPES):
            for causal in (((i % 2 == 1),) if tier == tiers.CI else (False, True)):
                out.append({"sq": s_q, "sk": s_k, "d": d, "batch": batch, "heads": heads, "causal": causal, "dtype": dtype,
                            "range": RANGES[len(out) % 3][0], "scale": 0.3 if len(out) % 3 == 2 else None, "seed": len(out),
                            "alias": i % 4 == 0})
    return out


WORKER = r'''
import json, os, sys
import torch
import ordo

cap, cases = sys.argv[1], json.load(open(sys.argv[2]))
RANGES = dict(json.loads(sys.argv[3]))

from tensor_bits import same

def composite(q, k, v, c):
    scale = c["scale"] if c["scale"] is not None else 1.0 / c["d"] ** 0.5
    a = (q @ k.transpose(-2, -1)) * scale
    if c["causal"]:
        a = a.masked_fill(torch.ones(c["sq"], c["sk"], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(a, -1) @ v

results = []
for threads in (1, 2):
    torch.set_num_threads(threads)
    for i, c in enumerate(cases):
        if c["dtype"] != "f32" and cap == "avx512":
            continue
        g = torch.Generator().manual_seed(5000 + c["seed"])
        shape = (c["batch"], c["heads"])
        dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[c["dtype"]]
        q = (torch.randn(*shape, c["sq"], c["d"], generator=g) * RANGES[c["range"]]).to(dt).requires_grad_()
        k = torch.randn(*shape, c["sk"], c["d"], generator=g).to(dt).requires_grad_()
        v = torch.randn(*shape, c["sk"], c["d"], generator=g).to(dt).requires_grad_()
        dout = torch.randn(*shape, c["sq"], c["d"], generator=g).to(dt)
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
                results.append({"case": i, "order": named, "threads": threads, "ok": False, "why": f"ordo: {e}"})
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
    if not onednn_16bit_host():
        dtypes += ["bf16", "f16"]
    else:
        print("NOT VERIFIED: torch2.15-cpu-math-* in bf16 and f16 (this CPU has AVX-512 or AVX-NE-CONVERT, so PyTorch's 16-bit bmm "
              "is oneDNN's, which ordo does not model, and the orders refuse it)")
    if not dtypes:
        return 0
    all_cases = cases(tiers.chosen(args), dtypes)
    result = run_workers(args.build, WORKER, all_cases, RANGES,
                         lambda c, r, cap: ("attention_backward", order_row(r, cap), c["dtype"]),
                         lambda c, r: f"attention_backward {r['order']} {c['dtype']} Sq={c['sq']} Sk={c['sk']} D={c['d']} "
                                      f"B={c['batch']} H={c['heads']} causal={c['causal']} scale={c['scale']} {c['range']} "
                                      f"threads={r['threads']}")
    return report(result)


if __name__ == "__main__":
    sys.exit(main())
