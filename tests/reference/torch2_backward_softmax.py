"""Bit-exact check of ordo's softmax_backward and log_softmax_backward under the torch2.15-cpu-*
orders against PyTorch 2.15.0 as installed.

Runs with the python of the torch 2.15 venv that scripts/setup.sh makes (scripts/torch2-venv
--python); a missing or different torch is a failure, never a skip. For each CPU capability this
machine has, a worker process starts with ATEN_CPU_CAPABILITY set (torch reads it once, at
import), runs torch's _softmax_backward_data / _log_softmax_backward_data over the last dim on 1
and on 2 threads, and runs ordo's torch2.15-cpu-<cap>(threads=T) in the same process through the
Python package (build/python). dx must have the same bit patterns (every NaN equals every NaN).
The thread count matters: PyTorch's softmax backward fuses its sum's masked tail only when it
runs the rows inline (one thread, or one row), so every width with a tail runs on one row and
on several. y is torch's own forward output (torch.softmax / torch.log_softmax of random logits),
dy is random; a share of the cases also takes dx from autograd (x.grad after y.backward(dy)),
which must be the same tensor. The alias torch2.15-cpu runs on a share of the cases as well.

Widths: every tail mod 16 (1..33, the f32 vectors of AVX2 and AVX-512 and the 16-bit vectors of
two f32 halves), the boundaries of 64 and 128, and long rows. Values (logits, dy): ordinary,
wide, tiny (near-uniform rows, tiny gradients) and large logits (one-hot rows, exp(y) underflow).
"""
import itertools
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiers  # noqa: E402
from torch2_harness import order_row, parse_arguments, report, run_workers, torch_error  # noqa: E402


N_SWEEP = list(range(1, 34)) + [63, 64, 65, 127, 128, 129, 1000, 4097, 70001]
N_QUICK = [1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 129, 1000]
# (name, logit offset, logit scale, dy scale)
RANGES = [("normal", 0.0, 1.0, 1.0), ("wide", 0.0, 30.0, 1e3), ("tiny", 0.0, 1e-20, 1e-20), ("large", 5e3, 1e3, 1.0)]
# What every (op, dtype, N) runs: (value range, rows), rows None for several rows, rotating over
# MULTI_ROWS. Ordinary values run on one row (torch's inline path on any thread count) and on
# several (its OpenMP path on 2 threads): the sum's tail is fused on the one and not on the other,
# which shows in f32 softmax on ordinary values (one-hot rows of wide or large logits hide it).
RUNS = [("normal", 1), ("normal", None), ("wide", None), ("tiny", None), ("large", None)]
RUNS_QUICK = [("normal", 1), ("normal", None), ("large", None)]
MULTI_ROWS = [3, 5, 7, 16]


def cases(tier):
    """The case list, as plain data for the workers: op x dtype x N x (value range, rows)."""
    out = []
    i = 0
    for op, dtype, n in itertools.product(["softmax", "log_softmax"], ["f32", "bf16", "f16"], N_QUICK if tier == tiers.QUICK else N_SWEEP):
        for rng, rows in RUNS_QUICK if tier == tiers.QUICK else RUNS:
            out.append({"op": op, "dtype": dtype, "n": n, "range": rng, "rows": rows or MULTI_ROWS[i % len(MULTI_ROWS)], "seed": i})
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
RANGES = {name: (offset, scale, dy_scale) for name, offset, scale, dy_scale in json.loads(sys.argv[3])}

def inputs(c):
    """Logits x, torch's forward output y and dy, in the case's dtype."""
    rng = np.random.default_rng(5000 + c["seed"])
    off, scale, dy_scale = RANGES[c["range"]]
    dt = TORCH_DTYPE[c["dtype"]]
    shape = (c["rows"], c["n"])
    x = torch.from_numpy((off + scale * rng.standard_normal(shape)).astype(np.float32)).to(dt)
    dy = torch.from_numpy((dy_scale * rng.standard_normal(shape)).astype(np.float32)).to(dt)
    y = getattr(torch, c["op"])(x, -1)
    return x, y, dy

def torch_dx(c, y, dy):
    backward = torch.ops.aten._softmax_backward_data if c["op"] == "softmax" else torch.ops.aten._log_softmax_backward_data
    return backward(dy, y, -1, y.dtype)

def autograd_dx(c, x, dy):
    x = x.clone().requires_grad_(True)
    getattr(torch, c["op"])(x, -1).backward(dy)
    return x.grad

results = []
for threads in (1, 2):
    torch.set_num_threads(threads)
    for i, c in enumerate(cases):
        x, y, dy = inputs(c)
        want = torch_dx(c, y, dy)
        if i % 7 == 0:  # autograd calls the same kernel on the same y
            ok, why = same(want, autograd_dx(c, x, dy))
            if not ok:
                results.append({"case": i, "order": "autograd", "threads": threads, "ok": False, "why": f"torch autograd vs _backward_data: {why}"})
        for order in [f"torch2.15-cpu-{cap}"] + (["torch2.15-cpu"] if i % 5 == 0 else []):
            named = order if threads == 1 else f"{order}(threads={threads})"
            try:
                got = getattr(ordo, c["op"] + "_backward")(dy, y, order=named)
            except Exception as e:  # ordo refused the request: a failure, with its message
                results.append({"case": i, "order": named, "threads": threads, "ok": False, "why": f"ordo: {e}"})
                continue
            ok, why = same(want, got)
            results.append({"case": i, "order": named, "threads": threads, "ok": ok, "why": why})
print(json.dumps({"torch": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability(), "results": results}))
'''


def main():
    args = parse_arguments(__doc__)
    if error := torch_error():
        print(error)
        return 1
    all_cases = cases(tiers.chosen(args))
    # No disk cache: the kernels compile in tens of milliseconds, and writing hundreds of cache
    # entries took longer than the test (tests/unit cover the cache).
    result = run_workers(args.build, WORKER, all_cases, RANGES,
                         lambda c, r, cap: (c["op"] + "_backward", order_row(r, cap), c["dtype"]),
                         lambda c, r: f"{c['op']}_backward {r['order']} {c['dtype']} N={c['n']} rows={c['rows']} {c['range']} "
                                      f"threads={r['threads']}", env_extra={"ORDO_CACHE": "0"})
    return report(result)

if __name__ == "__main__":
    sys.exit(main())
