#!/usr/bin/env python3
"""ordo.torch against torch, as a user calls each: every op, from one row to thousands, each side
allocating its outputs as it normally does, in one process on torch's thread count.

    PYTHONPATH=build/python "$(scripts/torch2-venv --python)" bench/user_path.py [--quick] [--orders torch2.15-cpu,fast]

Rows (f32 and bf16, each order):
  * layer_norm (weight and bias), rms_norm (weight), softmax, log_softmax over rows x hidden, rows
    1, 16, 256, 4096 and hidden 768, 4096, 8192 (--quick: rows 1 and 256, hidden 768 and 4096);
  * scaled_dot_product_attention, batch 1, 8 heads, D 64: prefill (S 512, causal) and decode (one
    query against 2048 keys); and as Hugging Face models call it (strided q, k, v, grouped-query,
    causal): B x H/H_kv x S x D 2x4/2x48x32, 2x16/4x256x64, 1x32/8x512x128, and the same with a
    left-padded batch's boolean mask [B, 1, S, S] (causal, batch i's first 5i keys padding) in
    place of is_causal;
  * backward through autograd: layer_norm and softmax at 256 x 4096 (y.backward(dy));
  * the MLP activations: F.silu, F.gelu (the erf form) and F.gelu(approximate="tanh") over rows x
    11008, rows 1, 256 and 2048 (--quick: 1 and 256), and each forward and backward through
    autograd at 256 x 11008 (the torch2.15 orders name torch's thread count, as pinned does);
  * cross_entropy as a causal LM's loss (rows = batch x tokens, classes = vocabulary; f32 logits,
    a tenth of the targets -100, reduction mean): 96 x 32000 and 2048 x 32000 (--quick: the first),
    the loss alone and loss.backward() with it (F.cross_entropy against ordo.torch.cross_entropy).
Each time is the fastest, over --rounds rounds, of the mean over as many calls as fit in --seconds
after a warm-up (kernel compiles happen in the warm-up). The ratio is torch's time over ordo's:
above 1, ordo is faster. The last lines give the geometric mean of the forward norm and softmax
rows per order, and the rows below 1.0.
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F

import ordo.torch as ot

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def per_call_s(fn, seconds, rounds):
    fn()
    fn()  # compiles and first touches outside the timing
    best = float("inf")
    for _ in range(rounds):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds and calls >= 3:
                break
        best = min(best, elapsed / calls)
    return best


def forward_rows(args):
    rows = (1, 256) if args.quick else (1, 16, 256, 4096)
    hidden = (768, 4096) if args.quick else (768, 4096, 8192)
    for dt_name in args.dtypes:
        dt = DTYPES[dt_name]
        for n in hidden:
            w, b = torch.randn(n, dtype=dt), torch.randn(n, dtype=dt)
            for r in rows:
                x = torch.randn(r, n, dtype=dt)
                torch_calls = {
                    "layer_norm": lambda: F.layer_norm(x, (n,), w, b),
                    "rms_norm": lambda: F.rms_norm(x, (n,), w),
                    "softmax": lambda: torch.softmax(x, -1),
                    "log_softmax": lambda: torch.log_softmax(x, -1),
                }
                for op, torch_fn in torch_calls.items():
                    t_torch = per_call_s(torch_fn, args.seconds, args.rounds)
                    for order in args.orders:
                        ordo_fn = {
                            "layer_norm": lambda: ot.layer_norm(x, (n,), w, b, order=order),
                            "rms_norm": lambda: ot.rms_norm(x, (n,), w, order=order),
                            "softmax": lambda: ot.softmax(x, -1, order=order),
                            "log_softmax": lambda: ot.log_softmax(x, -1, order=order),
                        }[op]
                        yield (f"{op} {dt_name} {r}x{n}", order, t_torch, per_call_s(ordo_fn, args.seconds, args.rounds), True)


def attention_rows(args):
    for dt_name in args.dtypes:
        dt = DTYPES[dt_name]
        for name, sq, sk, causal in (("prefill S=512 causal", 512, 512, True), ("decode 1x2048", 1, 2048, False)):
            q = torch.randn(1, 8, sq, 64, dtype=dt)
            k, v = torch.randn(1, 8, sk, 64, dtype=dt), torch.randn(1, 8, sk, 64, dtype=dt)
            t_torch = per_call_s(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), args.seconds, args.rounds)
            for order in args.orders:
                t = per_call_s(lambda: ot.scaled_dot_product_attention(q, k, v, causal, order=order), args.seconds, args.rounds)
                yield (f"sdpa {dt_name} B1 H8 D64 {name}", order, t_torch, t, False)
        # As Hugging Face models call it: q, k, v projections [B, S, H*D] viewed as [B, H, S, D]
        # (strided), fewer K/V heads (enable_gqa), causal. B, H/H_kv, S, D.
        for b, h, hkv, s, d in ((2, 4, 2, 48, 32), (2, 16, 4, 256, 64), (1, 32, 8, 512, 128)):
            def heads(n):
                return torch.randn(b, s, n * d, dtype=dt).view(b, s, n, d).transpose(1, 2)
            q, k, v = heads(h), heads(hkv), heads(hkv)
            t_torch = per_call_s(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), args.seconds,
                                 args.rounds)
            for order in args.orders:
                t = per_call_s(lambda: ot.scaled_dot_product_attention(q, k, v, True, enable_gqa=True, order=order), args.seconds,
                               args.rounds)
                yield (f"sdpa {dt_name} HF GQA {b}x{h}/{hkv}x{s}x{d} causal", order, t_torch, t, False)
            keys = torch.arange(s).view(1, 1, 1, -1)
            mask = (keys <= torch.arange(s).view(1, 1, -1, 1)) & (keys >= 5 * torch.arange(b).view(-1, 1, 1, 1))
            t_torch = per_call_s(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True), args.seconds,
                                 args.rounds)
            for order in args.orders:
                t = per_call_s(lambda: ot.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True, order=order),
                               args.seconds, args.rounds)
                yield (f"sdpa {dt_name} HF GQA {b}x{h}/{hkv}x{s}x{d} padded mask", order, t_torch, t, False)


def backward_rows(args):
    for dt_name in args.dtypes:
        dt = DTYPES[dt_name]
        x = torch.randn(256, 4096, dtype=dt, requires_grad=True)
        w, b = torch.randn(4096, dtype=dt, requires_grad=True), torch.randn(4096, dtype=dt, requires_grad=True)
        dy = torch.randn(256, 4096, dtype=dt)
        for op in ("layer_norm", "softmax"):
            def step(fn):
                return lambda: fn().backward(dy)
            torch_fn = (lambda: F.layer_norm(x, (4096,), w, b)) if op == "layer_norm" else (lambda: torch.softmax(x, -1))
            t_torch = per_call_s(step(torch_fn), args.seconds, args.rounds)
            for order in args.orders:
                ordo_fn = ((lambda: ot.layer_norm(x, (4096,), w, b, order=order)) if op == "layer_norm"
                           else (lambda: ot.softmax(x, -1, order=order)))
                yield (f"{op} forward+backward {dt_name} 256x4096", order, t_torch, per_call_s(step(ordo_fn), args.seconds, args.rounds),
                       False)


def activation_rows(args):
    n = 11008
    acts = {"silu": (F.silu, lambda t, o: ot.silu(t, order=o)),
            "gelu": (F.gelu, lambda t, o: ot.gelu(t, order=o)),
            "gelu tanh": (lambda t: F.gelu(t, approximate="tanh"), lambda t, o: ot.gelu(t, "tanh", order=o))}
    for dt_name in args.dtypes:
        dt = DTYPES[dt_name]
        for name, (theirs, ours) in acts.items():
            for r in (1, 256) if args.quick else (1, 256, 2048):
                x = torch.randn(r, n, dtype=dt)
                with torch.no_grad():
                    t_torch = per_call_s(lambda: theirs(x), args.seconds, args.rounds)
                    for order in args.orders:
                        run = ot._with_threads(order, args.threads)
                        yield (f"{name} {dt_name} {r}x{n}", order, t_torch, per_call_s(lambda: ours(x, run), args.seconds, args.rounds), False)
            x = torch.randn(256, n, dtype=dt, requires_grad=True)
            dy = torch.randn(256, n, dtype=dt)
            t_torch = per_call_s(lambda: theirs(x).backward(dy), args.seconds, args.rounds)
            for order in args.orders:
                run = ot._with_threads(order, args.threads)
                yield (f"{name} forward+backward {dt_name} 256x{n}", order, t_torch,
                       per_call_s(lambda: ours(x, run).backward(dy), args.seconds, args.rounds), False)


def loss_rows(args):
    g = torch.Generator().manual_seed(3)
    for rows in (96,) if args.quick else (96, 2048):
        x = torch.randn(rows, 32000, generator=g, requires_grad=True)
        t = torch.randint(0, 32000, (rows,), generator=g)
        t[::10] = -100
        for backward in (False, True):
            def call(fn):
                if not backward:
                    return lambda: fn(x.detach(), t)
                return lambda: fn(x, t).backward()
            t_torch = per_call_s(call(lambda a, b: F.cross_entropy(a, b)), args.seconds, args.rounds)
            for order in args.orders:
                t_ordo = per_call_s(call(lambda a, b: ot.cross_entropy(a, b, order=order)), args.seconds, args.rounds)
                yield (f"cross_entropy{' forward+backward' if backward else ''} f32 {rows}x32000", order, t_torch, t_ordo, False)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--orders", default="torch2.15-cpu,fast", help="ordo orders, comma-separated")
    ap.add_argument("--dtypes", default="f32,bf16", help="f32, bf16 or both")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch's thread count")
    ap.add_argument("--seconds", type=float, default=0.2, help="time budget per measurement")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="fewer shapes")
    args = ap.parse_args()
    args.orders = args.orders.split(",")
    args.dtypes = args.dtypes.split(",")
    for d in args.dtypes:
        if d not in DTYPES:
            ap.error(f"--dtypes {d}: one of {', '.join(DTYPES)}")
    if args.threads < 1 or args.seconds <= 0 or args.rounds < 1:
        ap.error("--threads and --rounds must be at least 1, --seconds above 0")
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads; fastest of {args.rounds} rounds of {args.seconds} s; "
          f"ratio = torch time / ordo time")
    print(f"{'call':<42}{'order':<16}{'torch us':>11}{'ordo us':>11}{'ratio':>8}")
    rows = []
    with torch.no_grad():
        for row in list(forward_rows(args)) + list(attention_rows(args)):
            rows.append(row)
            print(f"{row[0]:<42}{row[1]:<16}{row[2] * 1e6:>11.1f}{row[3] * 1e6:>11.1f}{row[2] / row[3]:>8.2f}", flush=True)
    for row in list(backward_rows(args)) + list(activation_rows(args)) + list(loss_rows(args)):
        rows.append(row)
        print(f"{row[0]:<42}{row[1]:<16}{row[2] * 1e6:>11.1f}{row[3] * 1e6:>11.1f}{row[2] / row[3]:>8.2f}", flush=True)
    for order in args.orders:
        ratios = [r[2] / r[3] for r in rows if r[1] == order and r[4]]
        slow = [r for r in rows if r[1] == order and r[2] / r[3] < 1.0]
        print(f"{order}: geometric mean over {len(ratios)} norm and softmax rows {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}; "
              f"{len(slow)} of {sum(1 for r in rows if r[1] == order)} rows below 1.0"
              + (f" (the smallest: {min(r[2] / r[3] for r in slow):.2f}, {min(slow, key=lambda r: r[2] / r[3])[0]})" if slow else ""))


if __name__ == "__main__":
    main()
