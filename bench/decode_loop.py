#!/usr/bin/env python3
"""A decode loop as a user runs one: one query per step against K and V that grow by a key each
step, through ordo.torch.scaled_dot_product_attention against torch's own, in a fresh process with
an empty kernel cache, compiles included.

    PYTHONPATH=build/python "$(scripts/torch2-venv --python)" bench/decode_loop.py [--steps 2048] [--orders fast,flash] [--pad P]

Batch 1, 8 heads, D 64, f32 and bf16. Each step appends a key and a value (torch.cat, as a
growing cache does; outside the timing) and times one attention call on each side: torch's F.sdpa,
then ordo's with each order. It prints, per dtype and order, the total time of the loop, that time
as a multiple of torch's (below 1: ordo is faster), the kernels compiled (ordo.cache_stats()'s misses) and the
slowest step (the first, which compiles). Every step's output is compared with the kernel built for
that S_k alone: the at-launch kernel must give its bits (the test test_launch_sizes checks this
exhaustively; here it is a spot check of the path a user takes, every 97th step). --pad P gives
every call a boolean padding mask [1, 1, 1, S_k] whose first P keys are masked (a left-padded
prompt, as transformers' generate passes it), to both sides.
"""
import argparse
import os
import sys
import tempfile
import time

# An empty disk cache, as on a first run (set before ordo loads).
os.environ["ORDO_CACHE_DIR"] = tempfile.mkdtemp(prefix="ordo_decode_loop_")
# OpenMP's wait policy is left as the user has it (torch's default: threads spin after each
# parallel region) and printed. ordo.torch runs ordo's kernels on torch's OpenMP threads
# (ordo.set_executor); ORDO_EXECUTOR=pool measures ordo's own pool instead, which on a 2-core
# machine competes with torch's spinning threads.

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import ordo  # noqa: E402
import ordo.torch as ot  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=2048, help="decode steps: S_k runs 1 .. steps")
    ap.add_argument("--orders", default="fast,flash", help="ordo orders, comma-separated")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--pad", type=int, default=0, help="mask the first P keys of every step (a boolean attn_mask); 0: no mask")
    args = ap.parse_args()
    torch.manual_seed(0)
    failures = 0
    print(f"decode loop: batch 1, {args.heads} heads, D {args.head_dim}, S_k 1..{args.steps}, torch {torch.__version__} on "
          f"{torch.get_num_threads()} threads, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}, "
          f"ordo executor {ordo.executor()}{f', a padding mask over the first {args.pad} keys' if args.pad else ''}")
    print(f"{'dtype':<6}{'order':<10}{'total s':>10}{'torch s':>10}{'x torch':>8}{'compiles':>10}{'slowest ms':>12}{'checked':>9}")
    for dtype_name in args.dtypes.split(","):
        dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
        shape = (1, args.heads, 1, args.head_dim)
        qs = [torch.randn(shape, dtype=dtype) for _ in range(args.steps)]
        new_k = [torch.randn(shape, dtype=dtype) for _ in range(args.steps)]
        new_v = [torch.randn(shape, dtype=dtype) for _ in range(args.steps)]
        keys = torch.arange(args.steps)
        masks = [(keys[:step + 1] >= min(args.pad, step)).view(1, 1, 1, step + 1) if args.pad else None for step in range(args.steps)]

        def loop(attend):
            k = v = None
            total, slowest, outs = 0.0, 0.0, []
            for step in range(args.steps):
                k = new_k[step] if k is None else torch.cat([k, new_k[step]], dim=-2)
                v = new_v[step] if v is None else torch.cat([v, new_v[step]], dim=-2)
                start = time.perf_counter()
                out = attend(qs[step], k, v, masks[step])
                elapsed = time.perf_counter() - start
                total += elapsed
                slowest = max(slowest, elapsed)
                if step % 97 == 0:
                    outs.append((step, out, k, v))
            return total, slowest, outs

        with torch.no_grad():
            torch_total, _, _ = loop(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m))
            for order in args.orders.split(","):
                misses = ordo.cache_stats()["misses"]
                total, slowest, outs = loop(lambda q, k, v, m: ot.scaled_dot_product_attention(q, k, v, attn_mask=m, order=order))
                compiles = ordo.cache_stats()["misses"] - misses
                checked = 0
                for step, out, k, v in outs:  # the kernel built for this S_k alone, through ordo.attention
                    mask = masks[step]
                    kernel = ordo._ordo.compile_attention(args.head_dim, 1, step + 1, dtype_name, order,
                                                          mask=f"{dtype_name}:111K" if mask is not None else "")
                    want = torch.empty_like(out)
                    additive = [] if mask is None else [torch.zeros(step + 1, dtype=dtype).masked_fill_(~mask.view(-1), float("-inf"))]
                    kernel.run_torch([qs[step].contiguous(), k, v] + additive + [want], args.heads, 0)
                    view = torch.int32 if dtype == torch.float32 else torch.int16
                    if not torch.equal(out.view(view), want.view(view)):
                        print(f"FAIL: {dtype_name} {order} step {step}: differs from the kernel built for S_k = {step + 1}")
                        failures += 1
                    checked += 1
                print(f"{dtype_name:<6}{order:<10}{total:>10.3f}{torch_total:>10.3f}{total / torch_total:>8.2f}{compiles:>10}"
                      f"{1e3 * slowest:>12.1f}{checked:>9}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
