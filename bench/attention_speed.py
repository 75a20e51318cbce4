#!/usr/bin/python3
"""Attention speed: ordo's orders against the machine's fma peak and PyTorch's math path.

For each configuration (B=1, H=8, S in {1024, 4096}, D in {64, 128}, f32) this runs, each in its
own process so that peak RSS is per order:
  * `ordo bench attention --order O --json` for fast, flash(64), exact-tiled, torch1.13-cpu-math;
    it measures the fma peak in the same process (6 and 12 independent 16-lane fma chains per thread, the better);
  * PyTorch 1.13's math path, `torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D), -1) @ v`, with
    as many threads as ordo uses.
GFLOP/s counts 4*S*S*D flops per head for every order. The targets (issue 4): fast >= 40% of
the peak; exact-tiled >= 5x PyTorch's math path; exact-tiled and flash memory O(S*D).

usage: bench/attention_speed.py [--ordo build/bin/ordo] [--quick]
"""
import argparse
import json
import os
import subprocess
import sys

TORCH = r'''
import json, math, resource, sys, time
import torch
torch.set_num_threads(int(sys.argv[4]))
S, D, runs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
g = torch.Generator().manual_seed(1)
q, k, v = (torch.randn(1, 8, S, D, generator=g) for _ in range(3))
best = float("inf")
for _ in range(runs):
    t = time.perf_counter()
    o = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D), -1) @ v
    best = min(best, time.perf_counter() - t)
print(json.dumps({"seconds_min": best, "gflops": 4.0 * 8 * S * S * D / best / 1e9,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))
'''

ORDERS = ["fast", "flash(64)", "exact-tiled", "torch1.13-cpu-math"]


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--ordo", default=os.path.join(here, "..", "build", "bin", "ordo"))
    ap.add_argument("--quick", action="store_true", help="S = 1024 only")
    args = ap.parse_args()
    threads = os.cpu_count()
    configs = [(s, d) for s in ((1024,) if args.quick else (1024, 4096)) for d in (64, 128)]
    rows = []
    for s, d in configs:
        res = {}
        for order in ORDERS:
            seconds = "2" if s == 1024 else "6"
            out = subprocess.run([args.ordo, "bench", "attention", "--order", order, "--sq", str(s), "--cols", str(d), "--rows", "8",
                                  "--seconds", seconds, "--json"], check=True, capture_output=True, text=True)
            res[order] = json.loads(out.stdout)
        runs = "3" if s == 1024 else "1"
        t = subprocess.run([sys.executable, "-c", TORCH, str(s), str(d), runs, str(threads)], check=True, capture_output=True, text=True)
        res["torch-math"] = json.loads(t.stdout)
        rows.append((s, d, res))
        print(json.dumps({"S": s, "D": d, **res}), flush=True)

    print(f"\nB=1 H=8 f32, {threads} threads; GFLOP/s = 4*S*S*D*8 / time; peak = same-process fma peak of each ordo run")
    print(f"{'S':>5} {'D':>4}  {'order':<20} {'GFLOP/s':>8} {'of peak':>8} {'vs torch':>9} {'RSS MB':>8}")
    for s, d, res in rows:
        torch_gf = res["torch-math"]["gflops"]
        for order in ORDERS:
            r = res[order]
            print(f"{s:>5} {d:>4}  {order:<20} {r['gflops']:>8.2f} {100 * r['fraction_of_peak']:>7.1f}% {r['gflops'] / torch_gf:>8.2f}x "
                  f"{r['peak_rss_mb']:>8.1f}")
        print(f"{s:>5} {d:>4}  {'torch math path':<20} {torch_gf:>8.2f} {'':>8} {1.0:>8.2f}x {res['torch-math']['peak_rss_mb']:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
