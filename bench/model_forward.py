#!/usr/bin/env python3
"""A small Hugging Face causal LM's forward pass four ways, to split pinned's cost from lite mode's:

    PYTHONPATH=build/python "$(scripts/torch2-venv --python)" bench/model_forward.py [--family llama] [--dtype f32]

  eager   the model as PyTorch runs it
  lite    torch.compile in Inductor's lite mode (every op an ATen call), outside pinned: what
          pinned's compiles cost without ordo
  pinned  torch.compile inside ordo.torch.pinned("torch2.15-cpu"): lite mode, and for each call
          pinned routes (the small model's SDPA) the faster of torch's kernel and ordo's, both
          eager's bits (kernels="fastest", the default)
  ordo    the same inside pinned("torch2.15-cpu", kernels="ordo"): ordo's kernel for every call
          pinned routes, whatever its speed

The model is examples/hf_parity.py's (hidden 128, 2 layers, 4 heads with 2 K/V heads, batch
2x48, random weights), in eval mode with no gradient. --pad P left-pads the batch as hf_parity
does (row i starts with P*i masked tokens): the model's SDPA then takes an attention mask. Each time is the median of --calls forward
passes; eager, lite and pinned take turns for --rounds rounds, then eager and ordo (Dynamo keeps
one graph per mode type, so ordo's compile replaces pinned's). Milliseconds; the ratio is eager's time over
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
    ap.add_argument("--pad", type=int, default=0, help="left padding: row i starts with pad*i masked tokens")
    args = ap.parse_args()
    for name in ("calls", "rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} {getattr(args, name)}: must be at least 1")
    sizes = argparse.Namespace(vocab=512, hidden=128, intermediate=256, layers=2, heads=4, kv_heads=2, head_dim=0, seq=48,
                               seed=0, batch=2, pad=max(0, args.pad))
    warnings.filterwarnings("ignore", message=".*token_id.*")
    model = hf_parity.make_model(args.family, sizes, hf_parity.DTYPES[args.dtype]).eval()
    ids, mask, _ = hf_parity.make_batch(sizes)
    block, ordo_block = ordo.torch.pinned("torch2.15-cpu"), ordo.torch.pinned("torch2.15-cpu", kernels="ordo")
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.family} {args.dtype}"
              f"{', left pad ' + str(args.pad) if args.pad else ''}; median ms of {args.calls} forward passes per round; ratio: eager's time "
              f"over the way's")
        with ordo.torch._eager_kernels_config():
            lite = torch.compile(model)
            lite(ids, attention_mask=mask)
        with block:
            pinned = torch.compile(model)
            if hf_parity.differing(want, pinned(ids, attention_mask=mask).logits):
                raise SystemExit("FAIL: the pinned model's logits differ from eager's")
        interleaved(args, [("eager", lambda: model(ids, attention_mask=mask), None), ("lite", lambda: lite(ids, attention_mask=mask), None),
                           ("pinned", lambda: pinned(ids, attention_mask=mask), block)])
        # Dynamo keeps one graph per mode type: the kernels="ordo" block compiles its own, after
        # the others are dropped, and takes turns with eager alone.
        torch._dynamo.reset()
        with ordo_block:
            pinned_ordo = torch.compile(model)
            if hf_parity.differing(want, pinned_ordo(ids, attention_mask=mask).logits):
                raise SystemExit("FAIL: the kernels='ordo' model's logits differ from eager's")
        interleaved(args, [("eager", lambda: model(ids, attention_mask=mask), None), ("ordo", lambda: pinned_ordo(ids, attention_mask=mask), ordo_block)])


def interleaved(args, ways):
    """Each way's median time for --rounds rounds, the ways taking turns; ratios against the first."""
    print(f"  {'round':<7}" + "".join(f"{name:>8}" for name, _, _ in ways) + "".join(f"{name + '/x':>10}" for name, _, _ in ways[1:]))
    rows = []
    for r in range(args.rounds):
        row = []
        for _, fn, block in ways:
            if block is None:
                row.append(median_ms(fn, args.calls))
            else:
                with block:
                    row.append(median_ms(fn, args.calls))
        rows.append(row)
        print(f"  {r + 1:<7}" + "".join(f"{t:>8.3f}" for t in row) + "".join(f"{row[0] / t:>10.2f}" for t in row[1:]))
    med = [statistics.median(col) for col in zip(*rows)]
    print(f"  {'median':<7}" + "".join(f"{t:>8.3f}" for t in med) + "".join(f"{med[0] / t:>10.2f}" for t in med[1:]))

if __name__ == "__main__":
    main()
