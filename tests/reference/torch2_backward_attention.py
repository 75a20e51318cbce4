"""Bit-exact check of ordo's torch2.15-cpu-* attention_backward orders against PyTorch 2.15.0 as
installed.

F.scaled_dot_product_attention's autograd on the CPU runs
`_scaled_dot_product_flash_attention_for_cpu_backward` (the flash kernel's backward), which reads
the forward's saved out and logsumexp. For each CPU capability this machine has, a worker process
starts with ATEN_CPU_CAPABILITY set and, on 1 and on 2 torch threads, runs the forward
(`_scaled_dot_product_flash_attention_for_cpu`, for out and lse), then that backward with a random
dout; ordo's torch2.15-cpu-<cap>(threads=T) gets the same q, k, v, out, dout and lse through the
Python package (build/python). dq, dk and dv must have torch's bit patterns (every NaN equals
every NaN). The alias torch2.15-cpu runs on a share of the cases and must agree as well.

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
avx512_bf16 ATen's gemm_stub (m*n*k <= 4096) and oneDNN, on one without AVX-512 gemm_stub at
every size (the orders' onednn= default follows the host). f16 likewise, on a CPU without
avx512_fp16 (gemm_stub at every size; MKL's gemm_f16f16f32, which has no gemv kernel, for
q @ k^T and dout @ v^T).

The orders model an AMD host's MKL only (its generic kernels, with or without AVX-512; no backward
was measured on an Intel host, and the orders refuse one), and in bf16 oneDNN's avx512_bf16
kernel or none; elsewhere the test says what it cannot verify.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiers  # noqa: E402
from torch2_harness import amd_host, has_cpu_flag, order_row, parse_arguments, report, run_workers, torch_error  # noqa: E402


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
]
SHAPES_QUICK = [(1, 300, 64, 1, 2), (7, 40, 32, 1, 1), (10, 9, 32, 1, 1), (3, 13, 16, 1, 3), (65, 65, 8, 1, 2),
                (100, 513, 32, 1, 1)]
RANGES = [("normal", 1.0), ("sharp", 8.0)]


def cases(tier):
    out = []
    for i, (s_q, s_k, d, batch, heads) in enumerate(SHAPES_QUICK if tier == tiers.QUICK else SHAPES):
        # f32: causal and not for each shape but the largest, which runs causal only; CI's share
        # alternates causal between shapes. bf16 likewise, CI's with the other causal flag than f32's.
        largest = s_q * s_k * d > 5e7
        for dtype in ("f32", "bf16", "f16"):
            flip = dtype == "bf16"  # f16 takes f32's causal flag, bf16 the other
            for causal in ((True,) if largest else (((i + flip) % 2 == 1,) if tier == tiers.CI else (False, True))):
                out.append({"sq": s_q, "sk": s_k, "d": d, "batch": batch, "heads": heads, "dtype": dtype, "causal": causal,
                            "range": RANGES[len(out) % 2][0], "seed": len(out), "alias": i % 4 == 0})
    return out


WORKER = r'''
import json, sys
import torch
import ordo

cap, cases = sys.argv[1], json.load(open(sys.argv[2]))
RANGES = dict(json.loads(sys.argv[3]))

from tensor_bits import same

def inputs(c):
    g = torch.Generator().manual_seed(3000 + c["seed"])
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[c["dtype"]]
    shape = (c["batch"], c["heads"])
    q = (torch.randn(*shape, c["sq"], c["d"], generator=g) * RANGES[c["range"]]).to(dt)
    k = torch.randn(*shape, c["sk"], c["d"], generator=g).to(dt)
    v = torch.randn(*shape, c["sk"], c["d"], generator=g).to(dt)
    dout = torch.randn(*shape, c["sq"], c["d"], generator=g).to(dt)
    return q, k, v, dout

results = []
for threads in (1, 2):
    torch.set_num_threads(threads)
    for i, c in enumerate(cases):
        q, k, v, dout = inputs(c)
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, c["causal"])[:2]
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse, 0.0, c["causal"])
        want = {"dq": dq, "dk": dk, "dv": dv}
        for order in [f"torch2.15-cpu-{cap}"] + (["torch2.15-cpu"] if c["alias"] else []):
            named = f"{order}(threads={threads})" if threads > 1 else order
            try:
                got = dict(zip(("dq", "dk", "dv"), ordo.attention_backward(q, k, v, out, dout, lse.contiguous(), order=named,
                                                                          causal=c["causal"])))
            except Exception as e:
                results.append({"case": i, "order": named, "threads": threads, "ok": False, "why": f"ordo: {e}"})
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
    if not amd_host():
        print("NOT VERIFIED: torch2.15-cpu-* attention_backward (ordo models PyTorch's CPU attention backward with an AMD host's "
              "MKL kernels only, and the orders refuse other hosts)")
        return 0
    all_cases = cases(tiers.chosen(args))
    if has_cpu_flag("avx512f") and not has_cpu_flag("avx512_bf16"):
        # bf16's large gradient products go to oneDNN here, whose bf16 kernel follows the CPU: ordo
        # models its avx512_bf16 kernel, and gemm_stub where PyTorch has no oneDNN bf16 (no AVX-512).
        print("NOT VERIFIED: torch2.15-cpu-* attention_backward in bf16 (this CPU has AVX-512 without avx512_bf16, whose "
              "oneDNN bf16 kernel is not modelled and the orders refuse); f32 only")
        all_cases = [c for c in all_cases if c["dtype"] == "f32"]
    else:
        print("bf16 gradient products: " + ("gemm_stub and oneDNN's avx512_bf16 kernel" if has_cpu_flag("avx512_bf16")
                                            else "gemm_stub at every size (no AVX-512: PyTorch's oneDNN bf16 check fails)"))
    if has_cpu_flag("avx512_fp16"):
        print("NOT VERIFIED: torch2.15-cpu-* attention_backward in f16 (this CPU has avx512_fp16, where PyTorch's f16 gradient "
              "products are oneDNN's, not modelled; the orders refuse)")
        all_cases = [c for c in all_cases if c["dtype"] != "f16"]
    result = run_workers(args.build, WORKER, all_cases, RANGES,
                         lambda c, r, cap: ("attention_backward", order_row(r, cap), c["dtype"]),
                         lambda c, r: f"attention_backward {r['order']} {c['dtype']} Sq={c['sq']} Sk={c['sk']} D={c['d']} B={c['batch']} "
                                      f"H={c['heads']} causal={c['causal']} {c['range']} threads={r['threads']}")
    return report(result)


if __name__ == "__main__":
    sys.exit(main())
