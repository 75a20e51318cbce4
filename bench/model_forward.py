#!/usr/bin/env python3
"""A small Hugging Face causal LM's forward pass three ways, to split pinned's cost from lite mode's:

    PYTHONPATH=build/python "$(scripts/torch2-venv --python)" bench/model_forward.py [--family llama] [--dtype f32]

  eager   the model as PyTorch runs it
  lite    torch.compile in Inductor's lite mode (every op an ATen call), outside pinned: what
          pinned's compiles cost without ordo
  pinned  torch.compile inside ordo.torch.pinned("torch2.15-cpu"): lite mode plus ordo's
          kernels for the calls pinned routes (the small model's SDPA)

The model is examples/hf_parity.py's (hidden 128, 2 layers, 4 heads with 2 K/V heads, batch
2x48, random weights), in eval mode with no gradient. Each time is the median of --calls forward
passes; the three ways take turns for --rounds rounds. Milliseconds; the ratio is eager's time over
the way's (above 1: faster than eager).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

# Inductor's cache key omits ATEN_CPU_CAPABILITY: a fresh cache per process.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="ordo_model_forward_"))

import torch  # noqa: E402

import ordo.torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import hf_parity  # noqa: E402


def median_ms(fn, calls):
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="llama")
    ap.add_argument("--dtype", default="f32", choices=sorted(hf_parity.DTYPES))
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for name in ("calls", "rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} {getattr(args, name)}: must be at least 1")
    sizes = argparse.Namespace(vocab=512, hidden=128, intermediate=256, layers=2, heads=4, kv_heads=2, head_dim=0, seq=48,
                               seed=0, batch=2, pad=0)
    warnings.filterwarnings("ignore", message=".*token_id.*")
    model = hf_parity.make_model(args.family, sizes, hf_parity.DTYPES[args.dtype]).eval()
    ids, _, _ = hf_parity.make_batch(sizes)
    block = ordo.torch.pinned("torch2.15-cpu")
    with torch.no_grad():
        want = model(ids).logits
        with ordo.torch._eager_kernels_config():
            lite = torch.compile(model)
            lite(ids)
        with block:
            pinned = torch.compile(model)
            got = pinned(ids).logits
        if hf_parity.differing(want, got):
            raise SystemExit("FAIL: the pinned model's logits differ from eager's")
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.family} {args.dtype}; "
              f"median ms of {args.calls} forward passes per round")
        print(f"  {'round':<6}{'eager':>8}{'lite':>8}{'pinned':>8}{'lite/eager':>12}{'pinned/eager':>14}")
        rows = []
        for r in range(args.rounds):
            eager_ms = median_ms(lambda: model(ids), args.calls)
            lite_ms = median_ms(lambda: lite(ids), args.calls)
            with block:
                pinned_ms = median_ms(lambda: pinned(ids), args.calls)
            rows.append((eager_ms, lite_ms, pinned_ms))
            print(f"  {r + 1:<6}{eager_ms:>8.3f}{lite_ms:>8.3f}{pinned_ms:>8.3f}{eager_ms / lite_ms:>12.2f}{eager_ms / pinned_ms:>14.2f}")
        e, l, p = (statistics.median(col) for col in zip(*rows))
        print(f"  {'median':<6}{e:>8.3f}{l:>8.3f}{p:>8.3f}{e / l:>12.2f}{e / p:>14.2f}")


if __name__ == "__main__":
    main()
