#!/usr/bin/env python3
"""The fixed cost of a small call, each way a user can make it, against torch's own call.

    PYTHONPATH=build/python "$(scripts/torch2-venv --python)" bench/small_calls.py [--rows 96 --cols 128]

Each call is timed as the mean of --calls calls after a warm-up, the fastest of --rounds rounds
(interleaved: every way once per round),
in one process on torch's thread count, each allocating its outputs as it normally does:
  - one layer_norm of rows x cols (f32, no weight): torch's F.layer_norm; ordo.layer_norm (the
    Python API: compile lookup, outputs, kernel); ordo.torch.layer_norm (with no gradient to
    record, its direct call: one native call, Kernel.run_rows); F.layer_norm inside
    ordo.torch.pinned (the TorchFunctionMode's routing too); then with weight and bias, and a
    softmax, the same ways;
  - a small model's grouped-query SDPA, the same ways;
  - an op pinned does not route (aten.add), outside and inside the block: what each op of a
    graph compiled inside pinned pays for the mode.
Microseconds per call; the ratio is the first row's time over the row's (above 1: faster).

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


def table(title, ways, order, calls, rounds):
    """Times each (name, fn, in_pinned) and prints it against the first row's time. The rounds
    are interleaved (each way once per round, in turn), so a slow spell of the machine costs every
    way one round, not one way all of them; each time is the fastest of its rounds."""
    times = [float("inf")] * len(ways)
    for _ in range(rounds):
        for i, (name, fn, in_pinned) in enumerate(ways):
            if in_pinned:  # timed inside one block, as a program enters it once
                with ot.pinned(order):
                    times[i] = min(times[i], per_call_us(fn, calls, 1))
            else:
                times[i] = min(times[i], per_call_us(fn, calls, 1))
    print(f"\n{title}")
    print(f"  {'call':<34}{'us per call':>12}{'first/this':>12}")
    for (name, _, _), t in zip(ways, times):
        print(f"  {name:<34}{t:>12.1f}{times[0] / t:>12.2f}")


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
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY', '(unset)')}; order {args.order}; fastest of {args.rounds} rounds of "
          f"{args.calls} calls")
    x = torch.randn(args.rows, args.cols)
    w, b = torch.randn(args.cols), torch.randn(args.cols)
    shape = (args.cols,)
    table(f"layer_norm f32 {args.rows}x{args.cols}", [
        ("torch F.layer_norm", lambda: F.layer_norm(x, shape), False),
        ("ordo.layer_norm", lambda: ordo.layer_norm(x, None, None, order=args.order), False),
        ("ordo.torch.layer_norm", lambda: ot.layer_norm(x, shape, order=args.order), False),
        ("F.layer_norm inside pinned", lambda: F.layer_norm(x, shape), True)], args.order, args.calls, args.rounds)
    table(f"layer_norm f32 {args.rows}x{args.cols} with weight and bias", [
        ("torch F.layer_norm", lambda: F.layer_norm(x, shape, w, b), False),
        ("ordo.torch.layer_norm", lambda: ot.layer_norm(x, shape, w, b, order=args.order), False),
        ("F.layer_norm inside pinned", lambda: F.layer_norm(x, shape, w, b), True)], args.order, args.calls, args.rounds)
    table(f"softmax f32 {args.rows}x{args.cols}", [
        ("torch.softmax", lambda: torch.softmax(x, -1), False),
        ("ordo.torch.softmax", lambda: ot.softmax(x, -1, order=args.order), False),
        ("torch.softmax inside pinned", lambda: torch.softmax(x, -1), True)], args.order, args.calls, args.rounds)
    # Grouped-query SDPA as a small Hugging Face model calls it: [B, S, H, D] projections viewed [B, H, S, D].
    q = torch.randn(2, 48, 4, 32).transpose(1, 2)
    k, v = (torch.randn(2, 48, 2, 32).transpose(1, 2) for _ in range(2))
    with torch.no_grad():
        table("scaled_dot_product_attention f32 B=2 H=4/2 S=48 D=32, causal, no grad", [
            ("torch F.sdpa", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), False),
            ("ordo.torch.sdpa", lambda: ot.scaled_dot_product_attention(q, k, v, True, enable_gqa=True, order=args.order),
             False),
            ("F.sdpa inside pinned", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
             True)], args.order, args.calls, args.rounds)
    # What an op pinned does not route pays for the mode, as each op of a graph compiled inside it does.
    a = torch.ones(4)
    add = torch.ops.aten.add.Tensor
    table("an op pinned does not route (aten.add of 4 floats)", [
        ("outside pinned", lambda: add(a, a), False),
        ("inside pinned", lambda: add(a, a), True)], args.order, args.calls * 10, args.rounds)


if __name__ == "__main__":
    main()
