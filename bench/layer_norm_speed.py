#!/usr/bin/python3
"""Speed of layer_norm orders, as ratios against baselines measured in the same run.

    /usr/bin/python3 bench/layer_norm_speed.py [--rows 8192 --cols 4096] [--orders a,b,...]

Every number comes from this one invocation on one machine state, with both cores:
  * copy bandwidth: the bytes of x copied to another buffer on ordo's thread pool (read + write),
    timed in alternation with each order's runs so both see the same machine state;
  * ordo layer_norm per order (`ordo bench --json`): bytes read + written per second;
  * PyTorch's own layer_norm on the same shape and dtype, torch.set_num_threads(all cores);
  * JIT compile of the kernel, cold (median of 7), and an in-memory cache hit.
Timings are the fastest of repeated runs; the machine is shared, so compare ratios, not seconds.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ORDO = os.path.join(HERE, "..", "build", "bin", "ordo")


def torch_layer_norm_gbps(rows, cols, seconds):
    import torch

    torch.set_num_threads(os.cpu_count())
    x = torch.randn(rows, cols)
    w, b = torch.randn(cols), torch.randn(cols)
    nbytes = (2 * rows * cols + 2 * cols + 2 * rows) * 4  # x, y, weight, bias, mean, rstd
    torch.nn.functional.layer_norm(x, [cols], w, b)
    best, start, runs = float("inf"), time.perf_counter(), 0
    while runs < 5 or (time.perf_counter() - start < seconds and runs < 1000):
        t = time.perf_counter()
        torch.native_layer_norm(x, [cols], w, b, 1e-5)
        best = min(best, time.perf_counter() - t)
        runs += 1
    return nbytes / best / 1e9, torch.__version__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--orders", default="fast,torch1.13-cpu-avx2,torch1.13-cpu-default,two-pass-lanes,lane-welford,sequential-welford")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    results = []
    for order in args.orders.split(","):
        out = subprocess.run([ORDO, "bench", "layer_norm", "--order", order, "--rows", str(args.rows), "--cols", str(args.cols),
                              "--baseline", "copy", "--seconds", str(args.seconds), "--json"], capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            return 1
        results.append(json.loads(out.stdout))
    torch_gbps, torch_version = torch_layer_norm_gbps(args.rows, args.cols, args.seconds)

    print(f"layer_norm {args.rows}x{args.cols} f32, {os.cpu_count()} threads; torch {torch_version}")
    print(f"PyTorch layer_norm {torch_gbps:.2f} GB/s")
    print("x copy: against a copy of the same bytes timed in alternation with that order's runs\n")
    print(f"  {'order':<24} {'GB/s':>7} {'copy GB/s':>10} {'x copy':>7} {'x torch':>8} {'compile ms':>11} {'disk hit ms':>11} {'hit us':>7} {'rows/iter':>9}")
    for r in results:
        print(f"  {r['order']:<24} {r['gbps']:>7.2f} {r['copy_gbps']:>10.2f} {r['ratio_to_copy']:>7.2f} {r['gbps'] / torch_gbps:>8.2f} "
              f"{r['compile_ms_cold']:>11.1f} {r['disk_cache_hit_ms']:>11.2f} {r['cache_hit_us']:>7.2f} {r['rows_in_flight']:>9}")
    if args.json:
        json.dump({"torch_gbps": torch_gbps, "orders": results}, open(args.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
