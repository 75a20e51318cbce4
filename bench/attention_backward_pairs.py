"""torch's SDPA backward against ordo's attention_backward, timed in interleaved pairs in one process.

On a machine whose speed drifts between runs (bench/vs_torch.py's rows moved by up to 1.7x within
ten minutes on 2026-11-27), two timings taken seconds apart disagree; a torch call and an ordo
call taken back to back share the machine's state. Each round alternates the two for --seconds
and prints both minimums and medians and their ratios (torch's time over ordo's).

ordo runs through its Python package (build/python) on the same tensors as torch, with the lse
torch's forward saves (computed here by torch.logsumexp), so neither recomputes the forward.

    $(scripts/torch2-venv --python) bench/attention_backward_pairs.py [--order fast] [--dtype f32]
        [--bh 8] [--s 1024] [--d 64] [--threads 2] [--rounds 3] [--seconds 4] [--build build]
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--order", default="fast")
    ap.add_argument("--dtype", default="f32", choices=sorted(DTYPES))
    ap.add_argument("--bh", type=int, default=8, help="batch x heads")
    ap.add_argument("--s", type=int, default=1024, help="sequence length (queries and keys)")
    ap.add_argument("--d", type=int, default=64, help="head dimension")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0, help="per round")
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"))
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import ordo  # noqa: E402  (from the build named above)

    torch.set_num_threads(args.threads)
    dtype = DTYPES[args.dtype]
    shape = (1, args.bh, args.s, args.d)
    q, k, v = (torch.randn(shape).to(dtype).requires_grad_(True) for _ in range(3))
    out = F.scaled_dot_product_attention(q, k, v)
    dout = torch.randn_like(out)
    q3, k3, v3, out3, dout3 = (t.detach().reshape(args.bh, args.s, args.d).contiguous() for t in (q, k, v, out, dout))
    scores = (q3.float() @ k3.float().transpose(-2, -1)) * args.d ** -0.5
    lse = torch.logsumexp(scores, -1).contiguous()

    def run_torch():
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    def run_ordo():
        ordo.attention_backward(q3, k3, v3, out3, dout3, lse=lse, order=args.order, threads=args.threads)

    run_torch()
    run_ordo()  # compiles
    print(f"torch {torch.__version__}, {args.threads} threads; attention_backward {args.dtype} B*H={args.bh} S={args.s} "
          f"D={args.d}, order {args.order}")
    for r in range(args.rounds):
        t_torch, t_ordo = [], []
        start = time.perf_counter()
        while time.perf_counter() - start < args.seconds or len(t_torch) < 3:
            for fn, times in ((run_torch, t_torch), (run_ordo, t_ordo)):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
        t_torch.sort()
        t_ordo.sort()
        med = len(t_torch) // 2
        print(f"round {r}: {len(t_torch)} pairs; torch min {1e3 * t_torch[0]:.1f} median {1e3 * t_torch[med]:.1f} ms; "
              f"ordo min {1e3 * t_ordo[0]:.1f} median {1e3 * t_ordo[med]:.1f} ms; ratio of minimums {t_torch[0] / t_ordo[0]:.2f}, "
              f"of medians {t_torch[med] / t_ordo[med]:.2f}", flush=True)


if __name__ == "__main__":
    main()
