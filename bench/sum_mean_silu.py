#!/usr/bin/env python3
"""x.sum(-1), x.mean(-1) and F.silu(x) through ordo.torch (order torch2.15-cpu: torch's bits)
against torch's own call, as a user makes each: in one process, on torch's thread count, each
allocating its output as it normally does, with no gradient to record.

    PYTHONPATH=build/python "$(scripts/torch2-venv --python)" bench/sum_mean_silu.py [--rounds 5]

Each time is the median of a round's calls (more calls for small shapes), the median of --rounds
rounds, the two ways interleaved in every round. The ratio is torch's time over ordo.torch's
(above 1: ordo.torch is faster). torch's 16-bit mean sums an f32 copy of x, which it allocates
and writes first; ordo widens each element as it sums it.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import ordo.torch as ot

SHAPES = [((1, 4096), 4000), ((64, 1024), 2000), ((8192, 4096), 40)]


def median_us(fn, calls):
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e6 * statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds {args.rounds}: must be at least 1")
    order = f"torch2.15-cpu(threads={torch.get_num_threads()})"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, order {order}; microseconds per call")
    print(f"  {'op':<5} {'shape':<13} {'dtype':<9} {'torch':>10} {'ordo.torch':>11} {'ratio':>6}")
    with torch.no_grad():
        for op in ("sum", "mean", "silu"):
            for dtype in (torch.float32, torch.bfloat16):
                if op == "sum" and dtype != torch.float32:
                    continue  # the torch2.15 orders sum f32 rows only (torch rounds 16-bit partial sums)
                for shape, calls in SHAPES:
                    x = torch.randn(shape).to(dtype)
                    ours = getattr(ot, op)
                    theirs_fn = (lambda: F.silu(x)) if op == "silu" else (lambda: getattr(x, op)(-1))
                    want, got = theirs_fn(), ours(x, order=order)
                    as_int = torch.int32 if dtype == torch.float32 else torch.int16
                    if not torch.equal(want.view(as_int), got.view(as_int)):
                        raise SystemExit(f"FAIL: ordo.torch.{op} {shape} {dtype} differs from torch's bits")
                    rounds = [(median_us(theirs_fn, calls), median_us(lambda: ours(x, order=order), calls))
                              for _ in range(args.rounds)]
                    theirs, mine = statistics.median(t for t, _ in rounds), statistics.median(m for _, m in rounds)
                    print(f"  {op:<5} {'x'.join(map(str, shape)):<13} {str(dtype).replace('torch.', ''):<9} {theirs:>10.1f} "
                          f"{mine:>11.1f} {theirs / mine:>6.2f}")


if __name__ == "__main__":
    main()
