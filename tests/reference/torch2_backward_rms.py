"""Bit-exact check of ordo's rms_norm_backward under the torch2.15-cpu-* orders against PyTorch
2.15.0 as installed: the gradients autograd gives through torch.nn.functional.rms_norm.

Runs with the python of the torch 2.15 venv (scripts/torch2-venv --python); a missing or
different torch is a failure, never a skip. For each CPU capability this machine has, a worker
process starts with ATEN_CPU_CAPABILITY set, runs F.rms_norm forward and backward with
x.requires_grad and weight.requires_grad on 1 and 2 threads, and runs ordo's
torch2.15-cpu-<cap>(threads=T) in the same process through the Python package (build/python).
dx and dweight must have torch's bit patterns (every NaN equals every NaN). rstd is the tensor
autograd saved (RsqrtBackward0's result, f32), given to ordo on alternate cases and recomputed by
ordo on the others. Single rows of more than 32768 elements and one-column launches of more than
32768 rows, which torch sums in per-thread chunks, also run on 3 threads.

Cases: f32, bf16, f16, and bf16/f16 input with an f32 weight; with and without weight; N across
every tail mod 16 and long rows; row counts 1..7 and larger; several value ranges and eps.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiers  # noqa: E402
from torch2_harness import parse_arguments, report, run_workers, torch_error  # noqa: E402


# Every tail mod 16, SumKernel's 32-column groups and their edges, and long rows.
N_SWEEP = list(range(1, 18)) + [31, 32, 33, 40, 63, 64, 65, 100, 127, 129, 255, 257, 1000, 4097]
# CI's share: the tails mod 8 and 16 on each side of a vector, each side of the 32-column groups, long rows.
N_CI = [1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 33, 40, 64, 129, 1000, 4097]
N_QUICK = [1, 3, 7, 8, 9, 17, 33, 40, 100, 1000]
ROWS = [1, 2, 3, 4, 5, 6, 7, 300, 40, 17]
# (name, offset, scale): ordinary values, an offset with a small spread, tiny values, a wide range.
RANGES = [("normal", 0.5, 2.0), ("offset", 100.0, 0.1), ("tiny", 0.0, 1e-20), ("wide", 0.0, 1e3)]
EPS = [1e-6, 1e-5, 0.1]
DTYPES = [("f32", "f32"), ("bf16", "bf16"), ("f16", "f16"), ("bf16", "f32"), ("f16", "f32")]


def cases(tier):
    out = []
    i = 0
    for (xd, wd) in DTYPES:
        for n in tiers.pick(tier, N_QUICK, N_CI, N_SWEEP):
            for weight in (True, False):
                if not weight and wd != xd:
                    continue  # without a weight there is no mixed case
                out.append({"dtype": xd, "weight_dtype": wd, "weight": weight, "n": n, "rows": ROWS[i % len(ROWS)],
                            "range": RANGES[i % len(RANGES)][0], "eps": EPS[i % len(EPS)], "saved": i % 2 == 0, "seed": i})
                i += 1
    # The thread-split regimes: one long row (the row sum), one column of many rows (dweight's sum).
    long_shapes = tiers.pick(tier, [(1, 40000), (40000, 1)], [(1, 40000), (40000, 1), (1, 70001)],
                             [(1, 40000), (2, 40000), (40000, 1), (1, 70001)])
    for rows, n in long_shapes:
        for xd, wd in (DTYPES[:2] if tier == tiers.QUICK else DTYPES):
            out.append({"dtype": xd, "weight_dtype": wd, "weight": True, "n": n, "rows": rows, "range": "normal",
                        "eps": 1e-6, "saved": i % 2 == 0, "seed": i})
            i += 1
    return out


WORKER = r'''
import json, sys
import numpy as np
import torch
import torch.nn.functional as F
import ordo
from tensor_bits import same

cap, cases = sys.argv[1], json.load(open(sys.argv[2]))
RANGES = {name: (offset, scale) for name, offset, scale in json.loads(sys.argv[3])}
TD = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}

def saved_rstd(y):
    """The rsqrt result autograd saved (RsqrtBackward0), as the backward reads it."""
    seen, todo = set(), [y.grad_fn]
    while todo:
        f = todo.pop()
        if f is None or f in seen:
            continue
        seen.add(f)
        if type(f).__name__ == "RsqrtBackward0":
            return f._saved_result
        todo.extend(g for g, _ in f.next_functions)
    raise RuntimeError("no RsqrtBackward0 in F.rms_norm's graph: not the composite this test models")

def split_regime(c):
    return (c["rows"] == 1 and c["n"] > 32768) or (c["n"] == 1 and c["rows"] > 32768)

results = []
for threads in (1, 2, 3):
    torch.set_num_threads(threads)
    for i, c in enumerate(cases):
        if threads == 3 and not split_regime(c):
            continue
        rng = np.random.default_rng(2000 + c["seed"])
        off, scale = RANGES[c["range"]]
        shape = (c["rows"], c["n"])
        x = torch.from_numpy((off + scale * rng.standard_normal(shape)).astype(np.float32)).to(TD[c["dtype"]]).requires_grad_()
        dy = torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(TD[c["dtype"]])
        w = None
        if c["weight"]:
            w = torch.from_numpy((1 + 0.5 * rng.standard_normal(c["n"])).astype(np.float32)).to(TD[c["weight_dtype"]]).requires_grad_()
        y = F.rms_norm(x, [c["n"]], w, c["eps"])
        rstd = saved_rstd(y).detach().reshape(-1).clone()
        y.backward(dy)
        want = {"dx": x.grad}
        if w is not None:
            want["dweight"] = w.grad
        order = f"torch2.15-cpu-{cap}" + ("" if threads == 1 else f"(threads={threads})")
        try:
            dx, dw = ordo.rms_norm_backward(dy, x.detach(), None if w is None else w.detach(), rstd if c["saved"] else None,
                                            order=order, eps=c["eps"], allow_mixed_dtypes=c["weight_dtype"] != c["dtype"])
        except Exception as e:  # ordo refused the request: a failure, with its message
            results.append({"case": i, "threads": threads, "ok": False, "why": f"ordo: {e}"})
            continue
        got = {"dx": dx, "dweight": dw}
        why = [f"{k}: {m}" for k in want for ok, m in [same(want[k], got[k])] if not ok]
        results.append({"case": i, "threads": threads, "ok": not why, "why": "; ".join(why)})
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

    result = run_workers(args.build, WORKER, all_cases, RANGES,
                         lambda c, r, cap: ("rms_norm_backward" + ("" if c["weight"] else " (no weight)"), f"torch2.15-cpu-{cap}", dtype(c)),
                         lambda c, r: f"{dtype(c)} weight={c['weight']} N={c['n']} rows={c['rows']} {c['range']} eps={c['eps']} "
                                      f"rstd={'given' if c['saved'] else 'recomputed'} threads={r['threads']}",
                         env_extra={"PYTHONWARNINGS": "ignore"})
    return report(result, "each case is counted once per torch thread count, 1 and 2; the thread-split regimes also on 3")

if __name__ == "__main__":
    sys.exit(main())
