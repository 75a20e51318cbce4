#!/usr/bin/env python3
"""Rows of a new length on every call, as a user's program meets them: layer_norm, rms_norm,
softmax and log_softmax through ordo.torch against torch's own, in a fresh process with an empty
kernel cache, compiles included.

    PYTHONPATH=build/python "$(scripts/torch2-venv --python)" bench/varying_lengths.py [--lengths 512] [--orders fast,torch2.15-cpu]

Call i reduces rows of N = 1000 + i (i < --lengths), over 1 + i mod 8 rows, f32 and bf16. Each call
is timed on each side, torch's F.op then ordo's with each order (inputs made outside the timing).
Per (op, dtype, order) it prints the loop's total time, that time as a multiple of torch's (below 1:
ordo is faster), the kernels compiled (ordo.cache_stats()'s misses) and the slowest call (one that
compiles). Where an order takes N at launch (docs/orders.md says which) the loop compiles one
kernel; the others compile one per N. Every 61st call is checked: an order that reproduces torch
must give torch's bits, and `fast` those of the kernel built for that N alone.

--kernel-only instead times the kernels alone: the one taking N at launch against the one built
for that N, on the same buffers, one thread, the fastest of 30 calls (microseconds, and the ratio).
"""
import argparse
import os
import sys
import tempfile
import time

# An empty disk cache, as on a first run (set before ordo loads).
os.environ["ORDO_CACHE_DIR"] = tempfile.mkdtemp(prefix="ordo_varying_lengths_")
# OpenMP's wait policy is left as the user has it and printed; ordo.torch runs ordo's kernels on
# torch's OpenMP threads (ordo.set_executor).

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import ordo  # noqa: E402
import ordo.torch as ot  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
EPS = 1e-5


def torch_call(op, x, w):
    n = x.shape[-1]
    if op == "layer_norm":
        return F.layer_norm(x, (n,), w, w, EPS)
    if op == "rms_norm":
        return F.rms_norm(x, (n,), w, EPS)
    return getattr(F, op)(x, -1)


def ordo_call(op, x, w, order):
    n = x.shape[-1]
    if op == "layer_norm":
        return ot.layer_norm(x, (n,), w, w, EPS, order=order)
    if op == "rms_norm":
        return ot.rms_norm(x, (n,), w, EPS, order=order)
    return getattr(ot, op)(x, -1, order=order)


def fixed_kernel_output(op, x, w, dtype_name, order):
    """The output of the kernel built for x's N alone."""
    n, rows = x.shape[-1], x.shape[0]
    norm = op in ("layer_norm", "rms_norm")
    kernel = ordo._ordo.compile(op, n, dtype_name, dtype_name if norm else "", order, EPS, norm, op == "layer_norm")
    given = {"x": x, "weight": w, "bias": w}
    tensors = [given[a] if not is_out else torch.empty((rows, n) if ext == "rows*N" else (rows,), dtype=x.dtype)
               for a, _, is_out, ext in kernel.args]
    kernel.run_torch(tensors, rows, 0)
    return tensors[[a for a, _, _, _ in kernel.args].index("y")]


def kernel_only(orders, dtypes):
    """The at-launch kernel's time over the fixed kernel's, kernel only."""
    def fastest(f, reps=30):
        f()
        best = float("inf")
        for _ in range(reps):
            start = time.perf_counter()
            f()
            best = min(best, time.perf_counter() - start)
        return best

    print(f"{'op':<12}{'order':<15}{'dtype':<6}{'rows x N':>12}{'fixed us':>10}{'launch us':>11}{'ratio':>7}")
    for op in ("layer_norm", "rms_norm", "softmax", "log_softmax"):
        norm = op in ("layer_norm", "rms_norm")
        for order in orders:
            for dtype_name in dtypes:
                dtype = DTYPES[dtype_name]
                at_launch = ordo._ordo.compile(op, 0, dtype_name, dtype_name if norm else "", order, EPS, norm, op == "layer_norm",
                                               cols_at_launch=True)
                for rows, n in ((4, 33), (256, 1000), (1024, 768), (64, 4096)):
                    fixed = ordo._ordo.compile(op, n, dtype_name, dtype_name if norm else "", order, EPS, norm, op == "layer_norm")
                    x = torch.randn(rows, n).to(dtype)
                    given = {"x": x, "weight": torch.randn(n).to(dtype), "bias": torch.randn(n).to(dtype)}
                    tensors = [given[a] if not is_out else torch.empty(rows * n if ext == "rows*N" else rows, dtype=DTYPES[dt])
                               for a, dt, is_out, ext in fixed.args]
                    t_fixed = fastest(lambda: fixed.run_torch(tensors, rows, 1, []))
                    t_launch = fastest(lambda: at_launch.run_torch(tensors, rows, 1, [n]))
                    print(f"{op:<12}{order:<15}{dtype_name:<6}{f'{rows}x{n}':>12}{1e6 * t_fixed:>10.1f}{1e6 * t_launch:>11.1f}"
                          f"{t_launch / t_fixed:>7.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", type=int, default=512, help="calls, each a new N: 1000 .. 1000 + lengths - 1")
    ap.add_argument("--orders", default="fast,torch2.15-cpu", help="ordo orders, comma-separated")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--ops", default="layer_norm,rms_norm,softmax,log_softmax")
    ap.add_argument("--kernel-only", action="store_true", help="time the kernels alone: N at launch against N fixed")
    args = ap.parse_args()
    if args.kernel_only:
        kernel_only(args.orders.split(","), args.dtypes.split(","))
        return 0
    gen = torch.Generator().manual_seed(0)
    failures = 0
    print(f"varying lengths: {args.lengths} calls, N = 1000 .. {999 + args.lengths}, 1 .. 8 rows; torch {torch.__version__} on "
          f"{torch.get_num_threads()} threads, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}, ordo executor "
          f"{ordo.executor()}")
    print(f"{'op':<12}{'dtype':<6}{'order':<15}{'total s':>9}{'torch s':>9}{'x torch':>8}{'compiles':>10}{'slowest ms':>12}{'checked':>9}")
    for dtype_name in args.dtypes.split(","):
        dtype = DTYPES[dtype_name]
        xs = [(3 * torch.randn(1 + i % 8, 1000 + i, generator=gen)).to(dtype) for i in range(args.lengths)]
        ws = [(1 + 0.1 * torch.randn(1000 + i, generator=gen)).to(dtype) for i in range(args.lengths)]
        for op in args.ops.split(","):
            def loop(call):
                total, slowest, outs = 0.0, 0.0, []
                for i, (x, w) in enumerate(zip(xs, ws)):
                    start = time.perf_counter()
                    out = call(x, w)
                    elapsed = time.perf_counter() - start
                    total += elapsed
                    slowest = max(slowest, elapsed)
                    if i % 61 == 0:
                        outs.append((i, out))
                return total, slowest, outs

            with torch.no_grad():
                torch_total, _, torch_outs = loop(lambda x, w: torch_call(op, x, w))
                for order in args.orders.split(","):
                    misses = ordo.cache_stats()["misses"]
                    total, slowest, outs = loop(lambda x, w: ordo_call(op, x, w, order))
                    compiles = ordo.cache_stats()["misses"] - misses
                    view = torch.int32 if dtype == torch.float32 else torch.int16
                    checked = 0
                    for (i, out), (_, want) in zip(outs, torch_outs):
                        if order != "torch2.15-cpu":
                            want = fixed_kernel_output(op, xs[i], ws[i], dtype_name, order)
                        if not torch.equal(out.view(view), want.view(view)):
                            print(f"FAIL: {op} {dtype_name} {order} N = {1000 + i}: differs from "
                                  f"{'torch' if order == 'torch2.15-cpu' else 'the kernel built for that N'}")
                            failures += 1
                        checked += 1
                    print(f"{op:<12}{dtype_name:<6}{order:<15}{total:>9.3f}{torch_total:>9.3f}{total / torch_total:>8.2f}"
                          f"{compiles:>10}{1e3 * slowest:>12.1f}{checked:>9}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
