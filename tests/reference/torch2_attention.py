"""Bit-exact check of ordo's torch2.15-cpu-* and torch2.15-cpu-math-* attention orders against
PyTorch 2.15.0 as installed.

torch.nn.functional.scaled_dot_product_attention on the CPU runs its flash kernel for 4-D inputs
without dropout; `_scaled_dot_product_flash_attention_for_cpu` is that kernel and also returns the
log-sum-exp. For each CPU capability this machine has, a worker process starts with
ATEN_CPU_CAPABILITY set and runs torch on 1, 2 and 3 threads, and ordo's order for that capability
(with threads=1, 2 or 3) in the same process through the Python package (build/python). out
(through F.scaled_dot_product_attention) and lse must have torch's bit patterns (every NaN equals
every NaN). The alias torch2.15-cpu runs on a share of the cases and must agree as well.
On 3 torch threads (a third of the cases) ordo must refuse a launch of one (batch, head), where
PyTorch runs MKL on all its threads and MKL's splits are measured on 2 only, and match every other.
torch2.15-cpu-math-* is compared, in f32, with the eager composite
softmax((q @ k.transpose(-2, -1)) * scale) @ v (causal: masked_fill(-inf) above the diagonal
before the softmax), which makes no lse. (Its bf16 and f16 forward is compared, with the backward,
in torch2_backward_attention_math.py.)

Cases: f32, bf16 and f16 (gemm_f16f16f32 converts to f32 on an Intel host, with avx512_fp16 too); D from 8 to 256, and 392 and 400 on an Intel host (a 16-lane tail where D mod 16 = 8); S_q and S_k from 1 to
above 512 (several key blocks) and above 768 (the 256-row query blocks), S_q != S_k both ways;
causal (top-left aligned, as torch masks) and not; the default scale and others; batch*heads = 1,
where PyTorch's parallel loop may have a single iteration and MKL then runs on all threads, and
more. Values: normal, sharp (logits 8 times larger: near one-hot rows), flat (logits near 0) and
tiny_v (v near the smallest normal value, so that p @ v's products and sums are subnormal).

The MKL kernels inside are the running host's (the orders take them as a parameter, mkl=, from
this host by default). An Intel AVX-512 host, with or without avx512_bf16 (whose gemm_bf16bf16f32
runs other kernels), and an AMD host (with or without AVX-512: MKL runs its generic kernels on
both) are modelled; on another host the test says what it cannot verify and checks the rest. On an
AMD host MKL's small kernels peel rows to 16-byte boundaries, and the output rows live in the
scratch of whichever PyTorch thread runs the block: shapes with several (batch, head)s on 2 threads
check that; a 16-bit block of 3 keys against 11 or more queries on one (batch, head), whose 2-thread
cut on such a host is not modelled, is compared on 1 thread, and on 2 the test checks that ordo
refuses the launch.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bits import capabilities  # noqa: E402
from summary import print_summary  # noqa: E402
import tiers  # noqa: E402
from torch2_harness import torch_error  # noqa: E402


# (S_q, S_k, D, batch, heads): one query (gemv), one key, tiny blocks (MKL's small-matrix
# kernels), D mod 16 = 8, the 64- and 256-row query blocks, several key blocks.
SHAPES = [
    (1, 1, 64, 1, 1), (1, 17, 64, 1, 2), (1, 300, 128, 1, 1), (1, 700, 64, 2, 1), (2, 5, 32, 1, 1), (3, 47, 64, 1, 1),
    (5, 5, 32, 1, 1), (5, 40, 64, 1, 1), (3, 9, 8, 1, 1), (14, 4, 64, 1, 1), (6, 7, 128, 1, 1), (7, 700, 64, 1, 2), (9, 20, 32, 1, 1), (16, 16, 64, 1, 1), (30, 30, 64, 1, 1),
    (33, 33, 32, 1, 1), (35, 35, 8, 1, 1), (17, 9, 24, 1, 1), (40, 31, 40, 1, 2), (12, 100, 16, 1, 1),
    (64, 193, 32, 1, 1), (65, 40, 64, 1, 1), (66, 66, 32, 2, 1), (100, 100, 80, 1, 1), (191, 191, 32, 1, 1),
    (200, 200, 128, 1, 1), (257, 255, 64, 1, 1), (32, 385, 32, 1, 1), (40, 513, 32, 1, 1), (70, 600, 256, 1, 1),
    (32, 1030, 32, 1, 1), (300, 1100, 32, 1, 1), (800, 900, 64, 1, 1), (100, 300, 256, 1, 2),
    # MKL's K blocks of p @ v when S_k > 768: uniform once S_q and D are both at least 192
    (192, 800, 192, 1, 1), (191, 800, 256, 1, 2), (200, 1600, 256, 1, 1),
    # ... and the composite's p @ v on 2 threads (one (batch, head)), which MKL sums in uniform
    # 384-blocks (C wide enough) or as on one thread (its rows or columns cut between the threads)
    # rather than cutting K in two
    (150, 800, 128, 1, 1), (400, 800, 40, 1, 1), (40, 800, 400, 1, 1),
    # AMD: the output rows' scratch of PyTorch's thread 1 starts at another 16-byte offset than
    # thread 0's, which MKL's small-matrix and gemv kernels peel by
    (2, 7, 32, 2, 3), (3, 13, 48, 1, 3), (1, 33, 96, 3, 1),
    # f16 on 2 threads: MKL cuts p @ v's columns at D/2 for D above 8; D = 56 and 200 are outside
    # the D of the shapes above
    (40, 70, 56, 1, 1), (130, 300, 200, 1, 1),
    # Intel, MKL on 2 threads (one (batch, head)): a block of 3 keys against 11..15 query rows is
    # cut at row 6, both parts by the small-matrix kernel (16-bit on an AMD host: 1 thread only)
    (13, 3, 64, 1, 1), (12, 515, 32, 1, 1), (15, 3, 128, 1, 1),
    # Intel, MKL on 2 threads (one (batch, head)): q @ k^T of smalln's shape (under 16 queries, D at
    # least 24 per query) threaded, so the general kernel; 33 and 34 keys cut at 32, the last one
    # or two keys by the small-matrix kernel
    (5, 384, 128, 1, 1), (7, 300, 200, 1, 1), (15, 33, 392, 1, 1), (15, 34, 400, 1, 1),
    # Intel: MKL on 2 threads inside PyTorch's parallel loop too (several (batch, head)s): its
    # threaded kernels for every f32 product but a gemv (one query row: 1 thread there)
    (5, 384, 128, 1, 2), (5, 384, 128, 2, 1), (1, 512, 64, 1, 4), (65, 300, 32, 1, 2),
]
SHAPES_QUICK = [(1, 17, 64, 1, 2), (5, 40, 64, 1, 1), (17, 9, 24, 1, 1), (66, 66, 32, 2, 1), (200, 200, 128, 1, 1),
                (40, 513, 32, 1, 1)]
# (name, q's scale, v's scale by dtype). tiny_v: p @ v's products and sums near and below the
# smallest normal float (and half), where avx512_bf16's vdpbf16ps flushes to zero and sgemm does not.
NOT_SCALED = {"f32": 1.0, "bf16": 1.0, "f16": 1.0}
RANGES = [("normal", 1.0, NOT_SCALED), ("sharp", 8.0, NOT_SCALED), ("flat", 1e-3, NOT_SCALED),
          ("tiny_v", 1.0, {"f32": 1e-37, "bf16": 1e-37, "f16": 1e-6})]
SCALES = [None, None, 0.3, 1.0]


def cases(tier):
    out = []
    i = 0
    # CI's share: every shape in every dtype, causal in some of them (alternating).
    for k, (s_q, s_k, d, batch, heads) in enumerate(SHAPES_QUICK if tier == tiers.QUICK else SHAPES):
        for j, dtype in enumerate(("f32", "bf16", "f16")):
            for causal in (False, True) if tier != tiers.CI else ((k + j) % 2 == 1,):
                out.append({"sq": s_q, "sk": s_k, "d": d, "batch": batch, "heads": heads, "dtype": dtype, "causal": causal,
                            "range": RANGES[i % len(RANGES)][0],
                            "scale": SCALES[(i + i // len(RANGES)) % len(SCALES)], "seed": i})  # every range with every scale
                i += 1
    return out


WORKER = r'''
import json, sys
import numpy as np
import torch
import torch.nn.functional as F
import ordo

cap, cases, skip, host = sys.argv[1], json.load(open(sys.argv[2])), json.loads(sys.argv[4]), sys.argv[5]
RANGES = {name: (q_scale, v_scale) for name, q_scale, v_scale in json.loads(sys.argv[3])}

from tensor_bits import THREAD_COUNTS, flash_blocks, layout_of, refusal_why, relayout, runs_on, same

def inputs(c):
    g = torch.Generator().manual_seed(2000 + c["seed"])
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[c["dtype"]]
    shape = (c["batch"], c["heads"])
    q_scale, v_scale = RANGES[c["range"]]
    q = (torch.randn(*shape, c["sq"], c["d"], generator=g) * q_scale).to(dt)
    k = torch.randn(*shape, c["sk"], c["d"], generator=g).to(dt)
    v = (torch.randn(*shape, c["sk"], c["d"], generator=g) * v_scale[c["dtype"]]).to(dt)
    return q, k, v

def flash_products(c):
    """The MKL products of PyTorch's flash forward for case c: (nt, n, m, K) of q @ k^T and p @ v."""
    return [p for qb, kb in flash_blocks(c) for p in ((True, qb, kb, c["d"]), (False, qb, c["d"], kb))]

def composite_products(c):
    return [(True, c["sq"], c["sk"], c["d"]), (False, c["sq"], c["d"], c["sk"])]

def amd_three_keys(c):
    """16-bit flash on one (batch, head) and one query block (of 32 rows at most here) of 11 or more
    rows with a key block of 3: MKL on 2 threads cuts such a q @ k^T's rows on an AMD host at a
    place not found (docs/research/torch2.15-attention.md), so ordo refuses that launch there; the
    Intel host's cut is modelled."""
    return (host == "amd" and c["dtype"] != "f32" and c["batch"] * c["heads"] == 1 and 11 <= c["sq"] <= 32
            and c["sk"] % 512 == 3)

results = []
for threads in THREAD_COUNTS:
    torch.set_num_threads(threads)
    for i, c in enumerate(cases):
        if not runs_on(threads, i):
            continue
        if c["dtype"] in skip:
            continue
        q, k, v = inputs(c)
        # The flash kernel on the case's layout; the composite (which copies strided operands) on q, k, v as made.
        fq, fk, fv = (relayout(t, layout_of(c)) for t in (q, k, v))
        out = F.scaled_dot_product_attention(fq, fk, fv, is_causal=c["causal"], scale=c["scale"])
        _, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(fq, fk, fv, 0.0, c["causal"], scale=c["scale"])[:2]
        want = {"out": out, "lse": lse}
        orders = [f"torch2.15-cpu-{cap}"] + (["torch2.15-cpu"] if i % 5 == 0 else [])
        if threads == 2 and amd_three_keys(c):
            for order in orders:  # ordo must refuse, not guess (on 3 threads it refuses every such launch)
                named = f"{order}(threads={threads})"
                try:
                    ordo.attention(q, k, v, order=named, causal=c["causal"], scale=c["scale"])
                    why = "ordo ran a launch whose MKL cut on this host is not modelled; it must refuse it"
                except Exception as e:
                    why = "" if "16-bit block of 3 keys" in str(e) else f"ordo: {e}"
                results.append({"case": i, "order": named, "threads": threads, "ok": not why, "why": why})
            orders = []
        if c["dtype"] == "f32":
            scale = c["scale"] if c["scale"] is not None else 1.0 / c["d"] ** 0.5
            a = (q @ k.transpose(-2, -1)) * scale
            if c["causal"]:
                a = a.masked_fill(torch.ones(c["sq"], c["sk"], dtype=torch.bool).triu(1), float("-inf"))
            composite = torch.softmax(a, -1) @ v
            for order in [f"torch2.15-cpu-math-{cap}"] + (["torch2.15-cpu-math"] if i % 5 == 0 else []):
                named = f"{order}(threads={threads})" if threads > 1 else order
                try:
                    o = ordo.attention(q, k, v, order=named, causal=c["causal"], scale=c["scale"])
                    ok, m = same(composite, o)
                    results.append({"case": i, "order": named, "threads": threads, "ok": ok, "why": "" if ok else f"out: {m}"})
                except Exception as e:
                    why = refusal_why(e, c, threads, composite_products(c))
                    results.append({"case": i, "order": named, "threads": threads, "ok": not why, "why": why})
        for order in orders:
            named = f"{order}(threads={threads})" if threads > 1 else order
            try:
                o, l = ordo.attention(fq, fk, fv, order=named, causal=c["causal"], scale=c["scale"], return_lse=True)
            except Exception as e:
                why = refusal_why(e, c, threads, flash_products(c))
                results.append({"case": i, "order": named, "threads": threads, "ok": not why, "why": why})
                continue
            got = {"out": o, "lse": l}
            why = [f"{n}: {m}" for n in want for ok, m in [same(want[n], got[n])] if not ok]
            results.append({"case": i, "order": named, "threads": threads, "ok": not why, "why": "; ".join(why)})
print(json.dumps({"torch": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability(), "results": results}))
'''


def mkl_host():
    """(modelled f32, modelled bf16, description, model) for this host's MKL kernels."""
    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        info = ""
    intel = "GenuineIntel" in info
    flags = set()
    for line in info.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    avx512 = "avx512f" in flags
    if "AuthenticAMD" in info:
        return True, True, f"an AMD CPU {'with' if avx512 else 'without'} AVX-512 (MKL's generic kernels, mkl=amd)", "amd"
    if not (intel and avx512):
        return False, False, "neither an AMD CPU nor an Intel CPU with AVX-512", ""
    if "avx512_bf16" in flags:
        return True, True, "an Intel CPU with AVX-512 and avx512_bf16 (mkl=intel-avx512bf16)", "intel-avx512bf16"
    return True, True, "an Intel CPU with AVX-512, without avx512_bf16 (mkl=intel)", "intel"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"), help="ordo's build directory")
    tiers.add_arguments(ap)
    args = ap.parse_args()
    if error := torch_error():
        print(error)
        return 1
    f32_ok, bf16_ok, host, model = mkl_host()
    print(f"MKL host: {host}")
    if not f32_ok:
        print("FAIL: compared nothing: no model of this host: torch2.15-cpu-* attention (ordo models the MKL kernels of Intel AVX-512 hosts and AMD hosts only; "
              "this host's are other ones, and the orders refuse to run here without mkl=intel or mkl=amd)")
        return 1
    skip = [] if bf16_ok else ["bf16"]
    if not bf16_ok:
        print("NOT VERIFIED: torch2.15-cpu-* attention in bf16 (this host's bf16 MKL kernels are not modelled)")

    if model == "amd":
        print("NOT VERIFIED: torch2.15-cpu-* attention in bf16 and f16 on 2 threads with one (batch, head), 11 or more "
              "queries and a block of 3 keys (MKL's cut of that q @ k^T on an AMD host is not modelled): those shapes are "
              "compared on 1 thread, and on 2 the test checks that ordo refuses them")
    all_cases = cases(tiers.chosen(args))
    if model == "amd":
        # D = 392 and 400 aim at the Intel model's threaded rules (a small query block's q @ k^T, the
        # composite's p @ v cut by columns); an AMD host's MKL kernels are measured up to D = 256.
        print("NOT VERIFIED: torch2.15-cpu-* attention with D above 256 (shapes aimed at the Intel model's threaded rules; "
              "an AMD host's MKL kernels are measured up to D = 256)")
        all_cases = [c for c in all_cases if c["d"] <= 256]
    import tempfile
    spec = tempfile.NamedTemporaryFile("w", suffix=".json", prefix="ordo_torch2_attention_", delete=False)
    json.dump(all_cases, spec)
    spec.close()
    table, passed, failed = {}, 0, 0
    env_base = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(os.path.abspath(args.build), "python"), HERE]))
    for cap in capabilities(print, "torch2.15-cpu-avx512"):
        env = dict(env_base, ATEN_CPU_CAPABILITY=cap, OMP_WAIT_POLICY="PASSIVE")
        worker = subprocess.run([sys.executable, "-c", WORKER, cap, spec.name, json.dumps(RANGES), json.dumps(skip), model],
                                env=env, capture_output=True, text=True)
        if worker.returncode != 0:
            print(f"FAIL: worker for ATEN_CPU_CAPABILITY={cap} exited {worker.returncode}:\n{worker.stderr}")
            return 1
        out = json.loads(worker.stdout.strip().splitlines()[-1])
        print(f"torch {out['torch']}, ATEN_CPU_CAPABILITY={cap} (torch reports {out['capability']}), threads 1, 2 and 3")
        for r in out["results"]:
            c = all_cases[r["case"]]
            base = r["order"].split("(")[0]
            key = ("attention", base + ("" if base.endswith(cap) else f"[{cap}]"), c["dtype"])
            entry = table.setdefault(key, [0, 0])
            entry[1] += 1
            if r["ok"]:
                entry[0] += 1
                passed += 1
            else:
                failed += 1
                print(f"FAIL attention {r['order']} {c['dtype']} Sq={c['sq']} Sk={c['sk']} D={c['d']} B={c['batch']} H={c['heads']} "
                      f"causal={c['causal']} scale={c['scale']} {c['range']} threads={r['threads']}: {r['why']}")
    os.unlink(spec.name)
    print("\n(each case is counted once per torch thread count, 1 and 2, and a third of them for 3)")
    return print_summary(table, passed, failed)


if __name__ == "__main__":
    sys.exit(main())
