#!/usr/bin/env python3
"""The fixed cost of a small call, each way a user can make it, against torch's own call.

    PYTHONPATH=build/python "$(scripts/torch2-venv --python)" bench/small_calls.py [--rows 96 --cols 128]

One layer_norm of rows x cols (f32, no weight), timed as the mean of --calls calls after a
warm-up, the fastest of --rounds rounds, in one process on torch's thread count:
  torch            F.layer_norm
  ordo             ordo.layer_norm (the Python API: compile lookup, outputs, kernel)
  ordo.torch       ordo.torch.layer_norm (the custom op and its autograd wrapper)
  pinned           F.layer_norm inside ordo.torch.pinned (the TorchFunctionMode's routing too)
Each allocates its outputs as it normally does. Microseconds per call; the ratio is torch's time
over the row's (above 1: faster than torch).

OpenMP's wait policy is left as the user has it and printed: torch's own call depends on it. With
OMP_WAIT_POLICY=PASSIVE (what ordo's examples set on a 2-core machine) each of torch's parallel
regions wakes sleeping threads, and a 96x128 layer_norm took 78 µs here against 12 µs with
OpenMP's default spinning.
"""
import argparse
import os
import time

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import ordo  # noqa: E402
import ordo.torch as ot  # noqa: E402


def per_call_us(fn, calls, rounds):
    best = float("inf")
    for _ in range(rounds):
        for _ in range(max(10, calls // 20)):
            fn()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=96)
    ap.add_argument("--cols", type=int, default=128)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--order", default="torch2.15-cpu")
    args = ap.parse_args()
    for name in ("rows", "cols", "calls", "rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} {getattr(args, name)}: must be at least 1")
    x = torch.randn(args.rows, args.cols)
    shape = (args.cols,)
    ways = [("torch", lambda: F.layer_norm(x, shape)),
            ("ordo", lambda: ordo.layer_norm(x, None, None, order=args.order)),
            ("ordo.torch", lambda: ot.layer_norm(x, shape, order=args.order)),
            ("pinned", lambda: F.layer_norm(x, shape))]  # timed inside one block, as a program enters it once
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY', '(unset)')}; layer_norm f32 {args.rows}x{args.cols}, "
          f"order {args.order}; fastest of {args.rounds} rounds of {args.calls} calls")
    times = {}
    for name, fn in ways:
        if name == "pinned":
            with ot.pinned(args.order):
                times[name] = per_call_us(fn, args.calls, args.rounds)
        else:
            times[name] = per_call_us(fn, args.calls, args.rounds)
    print(f"  {'call':<12}{'us per call':>12}{'torch/this':>12}")
    for name, _ in ways:
        print(f"  {name:<12}{times[name]:>12.1f}{times['torch'] / times[name]:>12.2f}")


if __name__ == "__main__":
    main()
