"""Bit-exact check of ordo's layer_norm_backward under the torch2.15-cpu-* orders against PyTorch 2.15.0.

Runs with the python of the torch 2.15 venv (scripts/torch2-venv --python); a missing or
different torch is a failure, never a skip. For each CPU capability this machine has, a worker
process starts with ATEN_CPU_CAPABILITY set, runs torch's forward (native_layer_norm, for its
mean and rstd) and then aten.native_layer_norm_backward on 1 and on 2 threads, and runs
`torch2.15-cpu-<cap>(threads=T)` on the same tensors through ordo's Python package. dx, dweight
and dbias must have the same bit patterns. The weight gradients are sums over the rows that
torch splits between its threads, so the row counts include ones that split unevenly, and a
few thousand-row launches.

Dtypes: f32, bf16, f16, and bf16/f16 input with f32 weight (PyTorch's mixed kernel); with and
without weight and bias (the mixed kernel needs a weight).
"""
import itertools
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiers  # noqa: E402
from torch2_harness import order_row, parse_arguments, report, run_workers, torch_error  # noqa: E402


# Every tail mod 8 and mod 16 (the kernels' f32 and 16-bit vectors), both sides of the short-row
# paths (N < 8, 8 < N < 16), several whole vectors with and without tails, and long rows.
N_SWEEP = list(range(1, 34)) + [47, 48, 49, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1000, 1024, 4097, 12345]
# CI's share: every tail mod 16 once, then one width on each side of each boundary class.
N_CI = list(range(1, 18)) + [24, 31, 33, 64, 129, 1000, 4097, 12345]
N_QUICK = [1, 7, 8, 9, 15, 16, 17, 33, 129, 1000]
# (name, offset, scale) of x: ordinary values; a mean far from zero (ds and db*mean cancel in
# dx's b2); a wide range.
RANGES = [("normal", 1.0, 3.0), ("offset", 60.0, 3.0), ("wide", 0.0, 1e3)]
AFFINE = ["weight+bias", "weight", "bias", "none"]
# Row counts: single rows (torch's serial path), uneven splits over 2 threads, more rows than a
# vector of columns.
ROWS = [1, 2, 3, 5, 7, 64, 129]
DTYPES = [("f32", "f32"), ("bf16", "bf16"), ("f16", "f16"), ("bf16", "f32"), ("f16", "f32")]
BIG = [(1000, 300), (999, 1000), (4000, 33)]


def cases(tier):
    out = []
    ns = tiers.pick(tier, N_QUICK, N_CI, N_SWEEP)
    i = 0
    for k, ((xd, wd), n) in enumerate(itertools.product(DTYPES, ns)):
        affine = AFFINE[k % 4] if wd == xd else ["weight+bias", "weight"][k % 2]
        out.append({"dtype": xd, "weight_dtype": wd, "n": n, "range": RANGES[k % 3][0], "affine": affine,
                    "rows": ROWS[i % len(ROWS)] if n < 5000 else 1 + i % 3, "seed": i})
        i += 1
    for (xd, wd), (rows, n) in itertools.product(DTYPES, tiers.pick(tier, BIG[1:2], BIG[1:], BIG)):
        out.append({"dtype": xd, "weight_dtype": wd, "n": n, "range": "offset", "affine": "weight+bias", "rows": rows, "seed": i})
        i += 1
    return out


WORKER = r'''
import json, sys
import numpy as np
import torch
import ordo
from tensor_bits import same

cap, cases = sys.argv[1], json.load(open(sys.argv[2]))
TORCH_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
RANGES = {name: (offset, scale) for name, offset, scale in json.loads(sys.argv[3])}

def inputs(c):
    rng = np.random.default_rng(2000 + c["seed"])
    off, scale = RANGES[c["range"]]
    xd, wd = TORCH_DTYPE[c["dtype"]], TORCH_DTYPE[c["weight_dtype"]]
    shape = (c["rows"], c["n"])
    x = torch.from_numpy((off + scale * rng.standard_normal(shape)).astype(np.float32)).to(xd)
    dy = torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(xd)
    w = torch.from_numpy((1 + 0.5 * rng.standard_normal(c["n"])).astype(np.float32)).to(wd) if "weight" in c["affine"] else None
    b = torch.from_numpy((0.1 * rng.standard_normal(c["n"])).astype(np.float32)).to(wd) if "bias" in c["affine"] else None
    return x, dy, w, b

results = []
for threads in (1, 2):
    torch.set_num_threads(threads)
    for i, c in enumerate(cases):
        x, dy, w, b = inputs(c)
        _, mean, rstd = torch.native_layer_norm(x, [c["n"]], w, b, 1e-5)
        mask = [True, w is not None, b is not None]
        dx, dw, db = torch.ops.aten.native_layer_norm_backward(dy, x, [c["n"]], mean, rstd, w, b, mask)
        want = {"dx": dx, "dweight": dw, "dbias": db}
        orders = [f"torch2.15-cpu-{cap}"] + (["torch2.15-cpu"] if i % 5 == 0 else [])
        for order in orders:
            named = f"{order}(threads={threads})"
            try:
                gdx, gdw, gdb = ordo.layer_norm_backward(dy, x, w, mean.reshape(-1), rstd.reshape(-1), order=named, bias=b is not None,
                                                         allow_mixed_dtypes=c["weight_dtype"] != c["dtype"])
            except Exception as e:  # ordo refused the request: a failure, with its message
                results.append({"case": i, "order": named, "threads": threads, "ok": False, "why": f"ordo: {e}"})
                continue
            got = {"dx": gdx, "dweight": gdw, "dbias": gdb}
            why = []
            for k in want:
                if (want[k] is None) != (got[k] is None):
                    why.append(f"{k}: torch gives {want[k] is not None}, ordo {got[k] is not None}")
                elif want[k] is not None:
                    ok, m = same(want[k], got[k])
                    if not ok:
                        why.append(f"{k}: {m}")
            results.append({"case": i, "order": named, "threads": threads, "ok": not why, "why": "; ".join(why)})
print(json.dumps({"torch": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability(), "results": results}))
'''


def main():
    args = parse_arguments(__doc__)
    if error := torch_error():
        print(error)
        return 1
    all_cases = cases(tiers.chosen(args))

    def dtype(c):
        return c["dtype"] if c["weight_dtype"] == c["dtype"] else f"{c['dtype']}+{c['weight_dtype']}"

    result = run_workers(args.build, WORKER, all_cases, RANGES, lambda c, r, cap: ("layer_norm_backward", order_row(r, cap), dtype(c)),
                         lambda c, r: f"layer_norm_backward {r['order']} {dtype(c)} N={c['n']} rows={c['rows']} {c['range']} "
                                      f"affine={c['affine']}")
    return report(result)

if __name__ == "__main__":
    sys.exit(main())
