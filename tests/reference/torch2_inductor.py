"""Bit-exact check of ordo's inductor2.15-cpu-* orders against torch.compile in PyTorch 2.15.0.

Runs with the python of the torch 2.15 venv that scripts/setup.sh makes (scripts/torch2-venv
--python); a missing or different torch is a failure, never a skip. For avx2 and (when the CPU
has it) avx512, and for 1 and 2 torch threads, a worker process starts with ATEN_CPU_CAPABILITY
set (Inductor picks its vector ISA from it) and a fresh Inductor cache, compiles each case with
torch.compile(dynamic=False) and the default config, and runs the order
inductor2.15-cpu-<cap>(threads=T) through ordo's Python package (build/python) on the same
inputs. Every output must have the same bit patterns (every NaN equals every NaN).

Inductor's ISA probe needs TORCH_USE_RTLD_GLOBAL=1 on a machine whose linker finds another
libtorch_cpu.so first (Debian's python3-torch here): without it the probe fails and Inductor
emits scalar C++, which no inductor order models (docs/research/inductor2.15-cpu.md). The
workers set it and fail if Inductor still reports no vector ISA.

Ops, each compiled as the user writes it: F.layer_norm (f32, bf16, f16; with and without
weight and bias) and, for f32, torch.native_layer_norm's mean and rstd; F.rms_norm (with and
without weight); torch.softmax and torch.log_softmax over the last dim. Each torch.compile call
compiles a batch of cases of one thread count into one graph (independent ops: one kernel each),
so gcc runs once per batch; every case then runs on four value ranges.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bits import cpu_has_avx512  # noqa: E402
from summary import print_summary  # noqa: E402
import tiers  # noqa: E402
from torch2_harness import torch_error  # noqa: E402


# Every tail mod 8, 16 and 32 (the kernels' f32 and 16-bit vector widths under avx2 and avx512),
# below and above the unrolled-reduction bound (8) and AVX-512's scalar bound (4), the two-pass /
# Welford bound of layer_norm (1024), long rows past the chunk stack's first level (4096 vectors:
# 32768 floats on avx2, 65536 on avx512).
N_SWEEP = list(range(1, 18)) + [23, 31, 32, 33, 47, 63, 64, 65, 100, 1000, 1023, 1024, 1025, 4097, 32769, 65537, 70001]
# CI's share: each tail mod 8, 16 and 32 on both sides of the vector, the bounds, the long rows.
N_CI = [1, 3, 4, 5, 8, 9, 15, 16, 17, 31, 33, 64, 1000, 1024, 1025, 4097, 32769, 70001]
N_QUICK = [1, 3, 5, 9, 17, 33, 1000, 1025]
RANGES = [("normal", 0.0, 1.0), ("offset1e4", 1e4, 1e-3), ("tiny", 0.0, 1e-20), ("wide", 0.0, 1e3)]
EPS = [1e-5, 1e-12, 0.1]
LN_AFFINE = ["weight+bias", "none", "weight", "bias"]
# Row counts: one row (the launch Inductor splits between threads when it is long), and counts
# that split unevenly over 2 threads.
ROWS = [3, 1, 5, 7, 2]
BATCH = 24  # cases per compiled graph


def cases(tier):
    out = []
    ns = tiers.pick(tier, N_QUICK, N_CI, N_SWEEP)
    i = 0
    for dtype in ("f32", "bf16", "f16"):
        for n in ns:
            rows = ROWS[i % len(ROWS)] if n < 30000 else 1 + i % 2
            out.append({"op": "layer_norm", "dtype": dtype, "n": n, "rows": rows, "affine": LN_AFFINE[i % 4], "eps": EPS[i % 3]})
            i += 1
            rows = ROWS[i % len(ROWS)] if n < 30000 else 1 + i % 2
            out.append({"op": "rms_norm", "dtype": dtype, "n": n, "rows": rows, "affine": "weight" if i % 3 else "none",
                        "eps": EPS[i % 3]})
            i += 1
            for op in ("softmax", "log_softmax"):
                rows = ROWS[i % len(ROWS)] if n < 30000 else 1 + i % 2
                out.append({"op": op, "dtype": dtype, "n": n, "rows": rows})
                i += 1
    # Two rows on both sides of the bound where Inductor splits each row between its threads
    # (N / step > 300 R, R = 2): steps of 8 (AVX2 f32), 16 (AVX-512 f32, AVX2 16-bit), 32
    # (AVX-512 16-bit).
    if tier != tiers.QUICK:
        for n in tiers.pick(tier, (), (4700, 4900, 19100, 19300), (4700, 4900, 9500, 9700, 19100, 19300)):
            for dtype in ("f32", "bf16"):
                for op in ("layer_norm", "rms_norm", "softmax", "log_softmax"):
                    c = {"op": op, "dtype": dtype, "n": n, "rows": 2}
                    if op in ("layer_norm", "rms_norm"):
                        c.update(affine="weight", eps=1e-5)
                    out.append(c)
    # native_layer_norm's mean and rstd (f32; the decomposition's own outputs).
    for n in ns:
        rows = ROWS[i % len(ROWS)] if n < 30000 else 1 + i % 2
        out.append({"op": "native_layer_norm", "dtype": "f32", "n": n, "rows": rows, "affine": LN_AFFINE[i % 4], "eps": EPS[i % 3]})
        i += 1
    for k, c in enumerate(out):
        c["seed"] = k
    return out


WORKER = r'''
import json, os, sys, warnings
import numpy as np
import torch
import torch.nn.functional as F
import ordo

cap, threads, cases, ranges = sys.argv[1], int(sys.argv[2]), json.load(open(sys.argv[3])), json.loads(sys.argv[4])
batch, dynamic = int(sys.argv[5]), sys.argv[6] == "dynamic"
torch.set_num_threads(threads)
TORCH_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}

from torch._inductor import cpu_vec_isa
picked = cpu_vec_isa.pick_vec_isa()
if not picked:  # InvalidVecISA is falsy (its str, "INVALID_VEC_ISA", is not empty)
    print(json.dumps({"error": "Inductor found no vector ISA (it would emit scalar C++); is TORCH_USE_RTLD_GLOBAL=1 set?"}))
    sys.exit(0)
isa = str(picked)  # the base ISA, then its extensions: "avx512 avx512_vnni" is 512-bit code as "avx512" is
if isa.split()[0] != cap:
    print(json.dumps({"error": f"Inductor picked vector ISA {isa} under ATEN_CPU_CAPABILITY={cap}; the cases test {cap}"}))
    sys.exit(0)

from tensor_bits import same

def params(c):
    """The case's weight and bias (fixed per case: they are inputs of the compiled graph)."""
    rng = np.random.default_rng(7000 + c["seed"])
    w = b = None
    dt = TORCH_DTYPE[c["dtype"]]
    if "weight" in c.get("affine", ""):
        w = torch.from_numpy((1 + 0.1 * rng.standard_normal(c["n"])).astype(np.float32)).to(dt)
    if "bias" in c.get("affine", ""):
        b = torch.from_numpy((0.1 * rng.standard_normal(c["n"])).astype(np.float32)).to(dt)
    return w, b

def x_of(c, r):
    off, scale = ranges[r][1], ranges[r][2]
    rng = np.random.default_rng(1000 + 7 * c["seed"] + r)
    return torch.from_numpy((off + scale * rng.standard_normal((c["rows"], c["n"]))).astype(np.float32)).to(TORCH_DTYPE[c["dtype"]])

def torch_op(c, x, w, b):
    """The case's op as a user writes it; a dict of named outputs. normalized_shape is x's last
    dim, so under dynamic=True it stays symbolic (a Python int would specialize it)."""
    if c["op"] == "layer_norm":
        return {"y": F.layer_norm(x, x.shape[-1:], w, b, c["eps"])}
    if c["op"] == "native_layer_norm":
        y, mean, rstd = torch.native_layer_norm(x, x.shape[-1:], w, b, c["eps"])
        return {"y": y, "mean": mean.reshape(-1), "rstd": rstd.reshape(-1)}
    if c["op"] == "rms_norm":
        return {"y": F.rms_norm(x, x.shape[-1:], w, c["eps"])}
    return {"y": getattr(torch, c["op"])(x, -1)}

def ordo_op(c, x, w, b, order):
    if c["op"] in ("layer_norm", "native_layer_norm"):
        y, mean, rstd = ordo.layer_norm(x, w, b, eps=c["eps"], order=order)
        return {"y": y, "mean": mean.reshape(-1), "rstd": rstd.reshape(-1)}
    if c["op"] == "rms_norm":
        return {"y": ordo.rms_norm(x, w, eps=c["eps"], order=order)[0]}
    return {"y": getattr(ordo, c["op"])(x, order=order)}

order = f"inductor2.15-cpu-{cap}" + (f"(threads={threads})" if threads > 1 else "")
results = []
torch._dynamo.config.cache_size_limit = 64
mine = [i for i, c in enumerate(cases) if threads in c.get("threads", (1, 2))]
for start in range(0, len(mine), batch):
    group = mine[start:start + batch]
    wb = [params(cases[i]) for i in group]
    def graph(*xs):
        return [torch_op(cases[i], x, *wb[k]) for k, (i, x) in enumerate(zip(group, xs))]
    torch._dynamo.reset()
    compiled = torch.compile(graph, dynamic=dynamic, fullgraph=True)
    for r in range(len(ranges)):
        xs = [x_of(cases[i], r) for i in group]
        with torch.no_grad():
            want = compiled(*xs)
        for k, i in enumerate(group):
            c = cases[i]
            try:
                got = ordo_op(c, xs[k], *wb[k], order)
            except Exception as e:  # ordo refused: a failure, with its message
                results.append({"case": i, "range": ranges[r][0], "ok": False, "why": f"ordo: {e}"})
                continue
            why = [f"{name}: {m}" for name in want[k] for ok, m in [same(want[k][name], got[name])] if not ok]
            results.append({"case": i, "range": ranges[r][0], "ok": not why, "why": "; ".join(why)})
print(json.dumps({"torch": torch.__version__, "isa": isa, "results": results}))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"), help="ordo's build directory")
    tiers.add_arguments(ap)
    ap.add_argument("--batch", type=int, default=BATCH, help="cases per compiled graph")
    ap.add_argument("--dynamic-report", action="store_true",
                    help="a measurement, not a test: compile with dynamic=True on 1 thread (the short sweep) and count the "
                         "cases where the dynamic=False orders still match; exits 0")
    args = ap.parse_args()
    if error := torch_error("the inductor2.15 orders"):
        print(error)
        return 1

    if args.dynamic_report:
        args.batch = 1  # one graph per case: cases of equal sizes in one graph would share their symbols
    tier = tiers.QUICK if args.dynamic_report else tiers.chosen(args)
    all_cases = cases(tier)
    if tier == tiers.CI:
        # CI's share on 2 threads: the launches Inductor may split between threads (one row, or
        # past the split bound) and every third other case; the full tier runs all on both.
        for i, c in enumerate(all_cases):
            if not (c["rows"] == 1 or c["n"] >= 4097 or i % 3 == 0):
                c["threads"] = [1]
    mode = "dynamic" if args.dynamic_report else "static"
    caps = ["avx2"] + (["avx512"] if cpu_has_avx512() else [])
    if "avx512" not in caps:
        print("NOT VERIFIED: inductor2.15-cpu-avx512 (this CPU has no AVX-512; Inductor would pick avx2)")
    spec = tempfile.NamedTemporaryFile("w", suffix=".json", prefix="ordo_inductor_", delete=False)
    json.dump(all_cases, spec)
    spec.close()
    table, passed, failed = {}, 0, 0
    for cap in caps:
        for threads in (1,) if args.dynamic_report else (1, 2):
            with tempfile.TemporaryDirectory(prefix="ordo_inductor_cache_") as cache:
                # A fresh cache: Inductor must generate and compile every kernel here. Passive
                # OpenMP waits keep torch's threads from spinning on cores other tests share.
                env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(os.path.abspath(args.build), "python"), HERE]), ATEN_CPU_CAPABILITY=cap,
                           TORCHINDUCTOR_CACHE_DIR=cache, TORCH_USE_RTLD_GLOBAL="1", OMP_WAIT_POLICY="PASSIVE")
                worker = subprocess.run([sys.executable, "-c", WORKER, cap, str(threads), spec.name, json.dumps(RANGES), str(args.batch), mode],
                                        env=env, capture_output=True, text=True)
            if worker.returncode != 0:
                print(f"FAIL: worker for ATEN_CPU_CAPABILITY={cap}, {threads} threads exited {worker.returncode}:\n{worker.stderr[-4000:]}")
                return 1
            out = json.loads(worker.stdout.strip().splitlines()[-1])
            if "error" in out:
                print(f"FAIL: ATEN_CPU_CAPABILITY={cap}: {out['error']}")
                return 1
            print(f"torch {out['torch']}, ATEN_CPU_CAPABILITY={cap} (Inductor's ISA {out['isa']}), {threads} thread(s), "
                  f"dynamic={args.dynamic_report}")
            for r in out["results"]:
                c = all_cases[r["case"]]
                key = (c["op"], f"inductor2.15-cpu-{cap}", c["dtype"])
                entry = table.setdefault(key, [0, 0])
                entry[1] += 1
                if r["ok"]:
                    entry[0] += 1
                    passed += 1
                else:
                    failed += 1
                    detail = f" affine={c['affine']}" if "affine" in c else ""
                    detail += f" eps={c['eps']}" if "eps" in c else ""
                    print(f"FAIL {c['op']} inductor2.15-cpu-{cap} {c['dtype']} N={c['n']} rows={c['rows']} {r['range']}{detail} "
                          f"threads={threads}: {r['why']}")
    os.unlink(spec.name)
    if args.dynamic_report:
        print("\ntorch.compile(dynamic=True) against the dynamic=False orders (a measurement: not modelled)")
        print_summary(table, passed, failed)
        return 0
    print("\n(each case is counted once per value range and per torch thread count, 1 and 2)")
    return print_summary(table, passed, failed)


if __name__ == "__main__":
    sys.exit(main())
