"""ordo against the installed PyTorch 2.15, every row of issue 21's target table, in one process.

    PYTHONPATH=build/python $(scripts/torch2-venv --python) bench/vs_torch.py [--threads 2] [--seconds 2] [--rounds 1] [--json out.json]

Each row is measured three ways, right after each other so all see the same machine state:
  * torch's op (eager, torch.set_num_threads(T)), allocating its outputs as it always does;
  * **the user path, the headline**: the same call through `ordo.torch` with the row's order, in
    this process, allocating its outputs as users get them (ordo's kernels on torch's threads);
    `user` = torch's time over this one;
  * **kernel-only**: ordo's kernels through `build/bin/ordo bench ... --threads T --json`, on
    buffers prepared beforehand. Torch's side is put on the same footing by subtracting what
    allocating its outputs costs it, measured and shown (`torch alloc`: a fresh output's fill
    minus a reused one's, so the page faults of a new allocation without the write itself);
    `kernel` = (torch's time - torch alloc) over ordo's kernel time. The targets apply to it.
A ratio above 1: ordo is faster. Times are the fastest of the runs in the time budget; the machine
is shared, so read the ratios, not the seconds. With --rounds N the whole table runs N times and
each time is its fastest over the rounds (the ratios recomputed from those), so a slow spell of
the machine moves one round, not the table.

Rows:
  * layer_norm, rms_norm, softmax over 8192 x 4096, f32 and bf16, order torch2.15-cpu (the bits
    of the torch it is timed against): target 3x in f32, 2x in bf16;
  * attention, batch*heads 8, S = 1024, D = 64, f32 and bf16, against
    F.scaled_dot_product_attention: torch2.15-cpu (target 1.0x), exact-tiled and
    torch1.13-cpu-math (1.0x f32, 0.7x bf16), fast (2.0x f32, 1.5x bf16), flash(64) (no target);
  * causal fast: its time over non-causal fast's (target <= 0.6), with torch's own ratio;
  * the honest peak: `fast` attention's fraction_of_peak (<= 1, target >= 0.6);
  * compile latency: compile_ms_cold of each order above (norms <= 20 ms, attention <= 50 ms);
  * layer_norm_backward over 8192 x 4096, f32 and bf16, weight and bias, against torch autograd's
    backward of F.layer_norm (torch.autograd.grad of the saved graph): torch2.15-cpu(threads=T)
    (its bits; target 1.5x) and fast (target 3x);
  * attention backward, batch*heads 8, S = 1024, D = 64, f32 and bf16: `fast` against torch
    autograd's backward of F.scaled_dot_product_attention (target 1.0x).
It prints the table and writes the bar chart, a user-path and a kernel-only bar per row (--png, default bench/vs_torch.png, the chart in docs/speed.md,
which a run of one group (--only) writes only when --png is given; needs ordo's Python package from
build/python); --json also writes the rows.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ORDO = os.path.join(HERE, "..", "build", "bin", "ordo")
sys.path.insert(0, os.path.join(HERE, "..", "build", "python"))
import ordo.torch as ot  # noqa: E402  (the user path; from the build, like build/bin/ordo)
TORCH_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16}


def recompress_png(path):
    """ordo's PNG writer stores the image uncompressed (it links no zlib); deflate its IDAT here,
    so the chart is small enough to keep in the repository."""
    import struct
    import zlib
    data = open(path, "rb").read()
    out, idat, pos = [data[:8]], b"", 8
    chunks = []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IDAT":
            idat += body
        else:
            chunks.append((kind, body))
    for kind, body in chunks:
        if kind == b"IEND":
            body_new = zlib.compress(zlib.decompress(idat), 9)
            out.append(struct.pack(">I", len(body_new)) + b"IDAT" + body_new + struct.pack(">I", zlib.crc32(b"IDAT" + body_new)))
        out.append(struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body)))
    with open(path, "wb") as f:
        f.write(b"".join(out))


def best_seconds(fn, budget):
    """The fastest of at least 3 runs within `budget` seconds (after one warm-up)."""
    fn()
    best, start, runs = float("inf"), time.perf_counter(), 0
    while runs < 3 or (time.perf_counter() - start < budget and runs < 2000):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
        runs += 1
    return best


def allocation_seconds(outputs, budget):
    """What allocating outputs like these costs torch on each call: a fresh tensor's fill minus a
    reused one's (the write is the same; the difference is the allocation and the first touch of
    its pages, which torch's allocator hands back to the OS for large blocks)."""
    reused = [torch.empty_like(t) for t in outputs]
    fresh = best_seconds(lambda: [torch.empty_like(t).fill_(1) for t in outputs], budget)
    again = best_seconds(lambda: [t.fill_(1) for t in reused], budget)
    return max(0.0, fresh - again)


def row(name, order, t_torch, t_alloc, t_user, kernel, target, compile_target_ms):
    """One table row: torch, the user path (headline) and kernel-only, with their ratios."""
    return {"row": name, "order": order, "torch_ms": 1e3 * t_torch, "torch_alloc_ms": 1e3 * t_alloc, "user_ms": 1e3 * t_user,
            "user_ratio": t_torch / t_user, "ordo_ms": 1e3 * kernel["seconds_min"],
            "ratio": (t_torch - t_alloc) / kernel["seconds_min"], "target": target, "compile_ms_cold": kernel["compile_ms_cold"],
            "compile_target_ms": compile_target_ms}


def ordo_bench(args, op, order, dtype, extra):
    cmd = [ORDO, "bench", op, "--order", order, "--dtype", dtype, "--threads", str(args.threads), "--seconds", str(args.seconds),
           "--json"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"ordo bench failed ({' '.join(cmd)}):\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def norm_rows(args):
    rows, cols = 8192, 4096
    out = []
    for op in ("layer_norm", "rms_norm", "softmax"):
        for dtype in ("f32", "bf16"):
            x = torch.randn(rows, cols).to(TORCH_DTYPE[dtype])
            w = torch.randn(cols).to(TORCH_DTYPE[dtype])
            b = torch.randn(cols).to(TORCH_DTYPE[dtype])
            fn = {"layer_norm": lambda: F.layer_norm(x, [cols], w, b, 1e-5), "rms_norm": lambda: F.rms_norm(x, [cols], w, 1e-5),
                  "softmax": lambda: torch.softmax(x, -1)}[op]
            user = {"layer_norm": lambda: ot.layer_norm(x, [cols], w, b, 1e-5, order="torch2.15-cpu"),
                    "rms_norm": lambda: ot.rms_norm(x, [cols], w, 1e-5, order="torch2.15-cpu"),
                    "softmax": lambda: ot.softmax(x, -1, order="torch2.15-cpu")}[op]
            t_torch = best_seconds(fn, args.seconds)
            t_user = best_seconds(user, args.seconds)
            t_alloc = allocation_seconds([fn()], args.seconds)
            extra = ["--rows", str(rows), "--cols", str(cols)] + (["--no-bias"] if op == "rms_norm" else [])
            j = ordo_bench(args, op, "torch2.15-cpu", dtype, extra)
            out.append(row(f"{op} {dtype} 8192x4096", "torch2.15-cpu", t_torch, t_alloc, t_user, j, 3.0 if dtype == "f32" else 2.0, 20.0))
    return out


def backward_rows(args):
    rows, cols = 8192, 4096
    out = []
    for dtype in ("f32", "bf16"):
        x = torch.randn(rows, cols).to(TORCH_DTYPE[dtype]).requires_grad_(True)
        w = torch.randn(cols).to(TORCH_DTYPE[dtype]).requires_grad_(True)
        b = torch.randn(cols).to(TORCH_DTYPE[dtype]).requires_grad_(True)
        dy = torch.randn(rows, cols).to(TORCH_DTYPE[dtype])
        y = F.layer_norm(x, [cols], w, b, 1e-5)
        t_torch = best_seconds(lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True), args.seconds)
        t_alloc = allocation_seconds(torch.autograd.grad(y, (x, w, b), dy, retain_graph=True), args.seconds)
        for order, target in ((f"torch2.15-cpu(threads={args.threads})", 1.5), ("fast", 3.0)):
            y_user = ot.layer_norm(x, [cols], w, b, 1e-5, order=order)
            t_user = best_seconds(lambda: torch.autograd.grad(y_user, (x, w, b), dy, retain_graph=True), args.seconds)
            j = ordo_bench(args, "layer_norm_backward", order, dtype, ["--rows", str(rows), "--cols", str(cols)])
            out.append(row(f"layer_norm_backward {dtype} 8192x4096", order.split("(")[0], t_torch, t_alloc, t_user, j, target, 20.0))
    # Attention's backward: torch's SDPA backward (its CPU flash kernel) against ordo's fast.
    bh, s, d = 8, 1024, 64
    for dtype in ("f32", "bf16"):
        q, k, v = (torch.randn(1, bh, s, d).to(TORCH_DTYPE[dtype]).requires_grad_(True) for _ in range(3))
        o = F.scaled_dot_product_attention(q, k, v)
        do = torch.randn_like(o)
        t_torch = best_seconds(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True), args.seconds)
        t_alloc = allocation_seconds(torch.autograd.grad(o, (q, k, v), do, retain_graph=True), args.seconds)
        o_user = ot.scaled_dot_product_attention(q, k, v, order="fast")
        t_user = best_seconds(lambda: torch.autograd.grad(o_user, (q, k, v), do, retain_graph=True), args.seconds)
        j = ordo_bench(args, "attention_backward", "fast", dtype, ["--rows", str(bh), "--sq", str(s), "--cols", str(d)])
        out.append(row(f"attention_backward {dtype} B*H={bh} S={s} D={d}", "fast", t_torch, t_alloc, t_user, j, 1.0, 50.0))
    return out


ATTENTION_TARGETS = {"torch2.15-cpu": (1.0, 1.0), "exact-tiled": (1.0, 0.7), "torch1.13-cpu-math": (1.0, 0.7), "fast": (2.0, 1.5),
                     "flash(64)": (None, None)}


def attention_rows(args):
    bh, s, d = 8, 1024, 64
    out, extras = [], {}
    for dtype in ("f32", "bf16"):
        q, k, v = (torch.randn(1, bh, s, d).to(TORCH_DTYPE[dtype]) for _ in range(3))
        t_torch = best_seconds(lambda: F.scaled_dot_product_attention(q, k, v), args.seconds)
        t_alloc = allocation_seconds([F.scaled_dot_product_attention(q, k, v)], args.seconds)
        t_torch_causal = best_seconds(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), args.seconds)
        for order, targets in ATTENTION_TARGETS.items():
            t_user = best_seconds(lambda: ot.scaled_dot_product_attention(q, k, v, order=order), args.seconds)
            j = ordo_bench(args, "attention", order, dtype, ["--rows", str(bh), "--sq", str(s), "--cols", str(d)])
            out.append(row(f"attention {dtype} B*H={bh} S={s} D={d}", order, t_torch, t_alloc, t_user, j, targets[0 if dtype == "f32" else 1],
                           50.0))
            if order == "fast":
                extras[dtype] = j
        causal = ordo_bench(args, "attention", "fast", dtype, ["--rows", str(bh), "--sq", str(s), "--cols", str(d), "--causal"])
        out.append({"row": f"attention {dtype} causal/non-causal time", "order": "fast", "torch_ms": 1e3 * t_torch_causal,
                    "ordo_ms": 1e3 * causal["seconds_min"], "ratio": causal["seconds_min"] / extras[dtype]["seconds_min"],
                    "torch_ratio": t_torch_causal / t_torch, "target": 0.6, "lower_is_better": True,
                    "noncausal_torch_ms": 1e3 * t_torch, "noncausal_ordo_ms": 1e3 * extras[dtype]["seconds_min"]})
        out.append({"row": f"attention {dtype} fraction_of_peak", "order": "fast", "ratio": extras[dtype]["fraction_of_peak"],
                    "peak_fma_gflops": extras[dtype]["peak_fma_gflops"], "target": 0.6})
    return out


def merge_rounds(rounds):
    """One row per row of a round, from all the rounds: each time is its fastest over the rounds
    (the machine's noise only adds time), the compile time too; a ratio of two times is recomputed
    from those; the fraction of peak, a ratio measured within one process, is the median."""
    rows = []
    for same in zip(*rounds):
        r = dict(same[0])
        for key in ("torch_ms", "ordo_ms", "user_ms", "torch_alloc_ms", "compile_ms_cold", "noncausal_torch_ms", "noncausal_ordo_ms"):
            if key in r:
                r[key] = min(x[key] for x in same)
        if "user_ms" in r:
            r["ratio"] = (r["torch_ms"] - r["torch_alloc_ms"]) / r["ordo_ms"]
            r["user_ratio"] = r["torch_ms"] / r["user_ms"]
        elif "peak_fma_gflops" in r:
            r["ratio"] = sorted(x["ratio"] for x in same)[len(same) // 2]
        elif "noncausal_ordo_ms" in r:
            r["ratio"] = r["ordo_ms"] / r["noncausal_ordo_ms"]
            r["torch_ratio"] = r["torch_ms"] / r["noncausal_torch_ms"]
        else:
            r["ratio"] = r["torch_ms"] / r["ordo_ms"]
        rows.append(r)
    return rows


def met(r):
    if r.get("target") is None:
        return "-"
    return "yes" if (r["ratio"] <= r["target"] if r.get("lower_is_better") else r["ratio"] >= r["target"]) else "NO"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads and ordo's pool (2)")
    ap.add_argument("--seconds", type=float, default=2.0, help="time budget per measurement (2)")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--only", choices=("norms", "attention", "backward"), help="one group of rows")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run every row this many times, torch and ordo in turn, and keep each one's fastest (1)")
    ap.add_argument("--png", help="the bar chart (bench/vs_torch.png; with --only, none unless given)")
    args = ap.parse_args()
    if args.png is None and args.only is None:
        args.png = os.path.join(HERE, "vs_torch.png")
    if not os.path.exists(ORDO):
        raise SystemExit(f"{ORDO} is missing: build ordo first (scripts/setup.sh)")
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    groups = {"norms": norm_rows, "attention": attention_rows, "backward": backward_rows}
    if args.rounds < 1:
        raise SystemExit(f"--rounds {args.rounds}: give 1 or more")
    rounds = [[r for name, fn in groups.items() if args.only in (None, name) for r in fn(args)] for _ in range(args.rounds)]
    rows = merge_rounds(rounds)
    print(f"torch {torch.__version__}, {args.threads} threads, capability {torch.backends.cpu.get_cpu_capability()}"
          + (f", fastest of {args.rounds} rounds" if args.rounds > 1 else ""))
    print("user: ordo.torch against torch, each allocating its outputs (the headline); kernel: ordo bench on prepared buffers "
          "against torch's time less its allocation (torch alloc); targets apply to kernel")
    print(f"{'row':<42} {'order':<20} {'torch ms':>9} {'alloc ms':>9} {'user ms':>9} {'user':>6} {'kernel ms':>10} {'kernel':>7} "
          f"{'target':>7} {'met':>4} {'compile ms':>11}")
    nan = float("nan")
    for r in rows:
        target = "" if r.get("target") is None else (f"<={r['target']}" if r.get("lower_is_better") else f">={r['target']}")
        print(f"{r['row']:<42} {r['order']:<20} {r.get('torch_ms', nan):>9.3f} {r.get('torch_alloc_ms', nan):>9.3f} "
              f"{r.get('user_ms', nan):>9.3f} {r.get('user_ratio', nan):>6.2f} {r.get('ordo_ms', nan):>10.3f} "
              f"{r['ratio']:>7.2f} {target:>7} {met(r):>4} {r.get('compile_ms_cold', nan):>11.1f}")
    user = [r["user_ratio"] for r in rows if "user_ratio" in r]
    if user:
        slow = [r for r in rows if r.get("user_ratio", 1.0) < 1.0]
        print(f"user path: {len(slow)} of {len(user)} rows below 1.0x torch"
              + (f" ({', '.join(r['order'] + ' ' + r['row'] for r in slow)})" if slow else ""))
    for r in rows:
        if "torch_ratio" in r:
            print(f"torch's own causal/non-causal time ({r['row'].split()[1]}): {r['torch_ratio']:.2f}")
    slow = [r for r in rows if "compile_ms_cold" in r and r["compile_ms_cold"] > r["compile_target_ms"]]
    print(f"compile latency: {len(slow)} of {sum('compile_ms_cold' in r for r in rows)} rows over their target "
          f"(norms and their backward 20 ms, attention 50 ms){': ' + ', '.join(r['order'] + ' ' + r['row'] for r in slow) if slow else ''}")
    if args.png:
        import ordo
        bars = []
        for r in rows:
            if "user_ratio" in r:
                bars.append((f"{r['row']} {r['order']} (user path)", r["user_ratio"], 0.0, False))
            label = f"{r['row']} {r['order']}" + (" (kernel-only)" if "user_ratio" in r else "")
            bars.append((label, r["ratio"], r.get("target") or 0.0, bool(r.get("lower_is_better"))))
        ordo._ordo.write_ratio_chart(args.png, f"ordo vs torch {torch.__version__}, {args.threads} threads, "
                                     f"{torch.backends.cpu.get_cpu_capability()} (bench/vs_torch.py)", bars)
        recompress_png(args.png)
        print(f"wrote {args.png}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "threads": args.threads, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
