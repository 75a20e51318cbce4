#!/usr/bin/env python3
"""Hugging Face generate() inside ordo.torch.pinned, against eager generate(), as a user calls it:

    PYTHONPATH=build/python "$(scripts/torch2-venv --python)" bench/generate_loop.py [--family llama] [--dtype f32]

A small causal LM (examples/hf_parity.py's model: random weights, --hidden, --layers, 4 heads
with 2 K/V heads) greedily generates --tokens tokens after a prompt of --prompt tokens. Each
decode step's attention has a new K/V length, so every step is a new call signature for pinned.

  eager   model.generate() as PyTorch runs it
  pinned  the same inside ordo.torch.pinned(--order) with --kernels ("fastest", the default, or
          "ordo": ordo's kernel for every call it can run)

Printed, per dtype: the first generate() of the process (ordo's compiles included, with an
empty kernel cache: run it with a fresh ORDO_CACHE_DIR), then the fastest of --rounds more,
eager and pinned taking turns, in milliseconds; the kernels pinned requested from ordo; and
whether every generated token equals eager's. The run fails (exit 1) if any differs.
"""
import argparse
import os
import sys
import time
import types
import warnings

import torch

import ordo
import ordo.torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import hf_parity  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="llama", help="a transformers model type (llama, qwen2, gpt2, ...)")
    ap.add_argument("--dtype", default="f32,bf16", help="f32, bf16 or both (comma-separated)")
    ap.add_argument("--order", default="torch2.15-cpu")
    ap.add_argument("--kernels", default="fastest", choices=("fastest", "ordo"))
    ap.add_argument("--tokens", type=int, default=64, help="new tokens per generate()")
    ap.add_argument("--prompt", type=int, default=20, help="prompt tokens")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    for name, value in (("tokens", args.tokens), ("prompt", args.prompt), ("hidden", args.hidden), ("layers", args.layers),
                        ("rounds", args.rounds), ("threads", args.threads)):
        if value < 1:
            ap.error(f"--{name} {value}: must be at least 1")
    if args.hidden % 4:
        ap.error(f"--hidden {args.hidden}: must be a multiple of the 4 heads")
    torch.set_num_threads(args.threads)
    sizes = types.SimpleNamespace(vocab=1000, hidden=args.hidden, intermediate=2 * args.hidden, layers=args.layers, heads=4,
                                  kv_heads=2, head_dim=0, seq=args.prompt + args.tokens, seed=0)
    ids = torch.randint(3, sizes.vocab, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    failed = False
    print(f"{args.family}, hidden {args.hidden}, {args.layers} layers, prompt {args.prompt}, {args.tokens} new tokens, "
          f"{args.threads} threads, pinned({args.order!r}, kernels={args.kernels!r})")
    print("| dtype | eager first ms | pinned first ms | eager ms | pinned ms | pinned / eager | kernels requested | tokens equal |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for dtype_name in args.dtype.split(","):
        if dtype_name not in hf_parity.DTYPES:
            ap.error(f"--dtype {dtype_name}: f32 or bf16")
        model = hf_parity.make_model(args.family, sizes, hf_parity.DTYPES[dtype_name]).eval()

        def generate():
            with torch.no_grad():
                return model.generate(ids, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False)

        def timed(inside_pinned):
            start = time.perf_counter()
            if inside_pinned:
                with warnings.catch_warnings(), ordo.torch.pinned(args.order, kernels=args.kernels):
                    warnings.simplefilter("ignore", ordo.torch.OrdoFallbackWarning)
                    out = generate()
            else:
                out = generate()
            return out, (time.perf_counter() - start) * 1e3

        requested = ordo.cache_stats()["misses"]
        want, eager_first = timed(False)
        got, pinned_first = timed(True)
        equal = torch.equal(want, got)
        best = [float("inf"), float("inf")]
        for _ in range(args.rounds):
            for i in (0, 1):
                out, ms = timed(i == 1)
                best[i] = min(best[i], ms)
                equal &= torch.equal(out, want)
        requested = ordo.cache_stats()["misses"] - requested
        failed |= not equal
        print(f"| {dtype_name} | {eager_first:.1f} | {pinned_first:.1f} | {best[0]:.1f} | {best[1]:.1f} | {best[1] / best[0]:.2f} | "
              f"{requested} | {'yes' if equal else 'NO'} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
