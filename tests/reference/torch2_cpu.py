"""Bit-exact check of ordo's torch2.15-cpu-* orders against PyTorch 2.15.0 as installed.

Runs with the python of the torch 2.15 venv that scripts/setup.sh makes (scripts/torch2-venv
--python); a missing or different torch is a failure, never a skip. For each CPU capability
this machine has, a worker process starts with ATEN_CPU_CAPABILITY set (torch reads it once, at
import), runs torch on 1 and on 2 threads, and runs ordo's order for that capability in the
same process through the Python package (build/python). Every output must have the same bit
patterns (every NaN equals every NaN). One regime is compared on 1 thread only: rms_norm over a
single row of more than 32768 elements, which torch sums in per-thread chunks on several threads
(docs/research/torch2.15-rms-norm.md); the orders do not model that split. The alias torch2.15-cpu, which resolves the capability
the way torch does, runs on a share of the cases and must agree as well.

Ops: layer_norm (f32, bf16, f16, and bf16/f16 input with f32 weight and bias; y, mean, rstd;
with and without weight and bias); rms_norm as torch.nn.functional.rms_norm and as transformers'
LlamaRMSNorm and GemmaRMSNorm (the llama-/gemma-rmsnorm-torch2.15-cpu-* orders), in the same
dtypes; softmax, log_softmax and var_mean (correction=0), in f32, bf16 and f16; x.mean(-1) in f32, bf16
and f16 and x.sum(-1) in f32 (the orders refuse the sum of 16-bit rows), including single rows over
32768, which torch sums in per-thread chunks; torch.nn.functional.silu and its gradient (silu_backward) in f32, bf16
and f16, whose launches of 32768 elements or more torch cuts into per-thread chunks, each with its
own scalar tail; torch.nn.functional.gelu(x, approximate="tanh") (gelu_tanh) likewise, cut above
16384 elements, and its gradient (gelu_tanh_backward, cut as silu's); these four also over a strided
input (a chunk of a wider tensor, which torch loops over row by row: the orders' inner_loop=row); torch.nn.functional.cross_entropy
with class indices (reductions mean, sum and none; ignore_index -100 and 0) in f32, bf16 and f16:
its loss, its log_softmax and the logits' gradient from loss.backward(g) (cross_entropy and
cross_entropy_backward); torch.nn.functional.gelu(x) (GELU's erf form, which torch hands to oneDNN)
and its gradient (gelu and gelu_backward) in f32, in bf16 where oneDNN takes it and ordo models its
store (AVX-512 with avx512_bf16) and in f16 where oneDNN takes it (avx512_fp16; elsewhere torch
runs ATen's own erf kernel, which ordo does not model), under every capability (oneDNN picks its
code by the CPU), and once more in f32 with ONEDNN_MAX_CPU_ISA=AVX2 against
torch2.15-cpu(onednn_isa=avx2) (oneDNN's code for a CPU without AVX-512).
"""
import argparse
import itertools
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiers  # noqa: E402
from torch2_harness import torch_error  # noqa: E402
from bits import capabilities, cpu_flags  # noqa: E402
from summary import print_summary  # noqa: E402


# Every tail length mod 8 and mod 16 (the f32 and 16-bit vector widths of the kernels), the
# chunk boundaries of the Welford cascade (16 vectors), and long rows across several cascade levels.
N_SWEEP = list(range(1, 34)) + [63, 64, 65, 127, 128, 129, 255, 256, 257, 1000, 1024, 2047, 2049, 4096, 4097, 12345, 65537, 70001]
# CI's share: every tail mod 16 once (1..17), then one width on each side of each boundary class.
N_CI = list(range(1, 18)) + [31, 33, 64, 129, 255, 1000, 1024, 2049, 4097, 12345, 65537]
N_QUICK = [1, 7, 8, 9, 16, 17, 33, 129, 1000, 4097]
# (name, offset, scale): ordinary values, a large offset with a tiny spread (catastrophic
# cancellation in any one-pass form), tiny values (denormal squares), and a wide range.
RANGES = [("normal", 0.0, 1.0), ("offset1e4", 1e4, 1e-3), ("tiny", 0.0, 1e-20), ("wide", 0.0, 1e3)]
EPS = [1e-5, 1e-12, 0.1]
AFFINE = ["weight+bias", "weight", "bias", "none"]
# Row counts that split unevenly over 2 threads.
ROWS = [5, 7, 3]
# gelu's: the spread of oneDNN's minimax intervals (|x| up to 5.54, then erf = 1), and values
# whose gelu is subnormal in f32 (the bf16 store flushes them).
GELU_RANGES = [("normal", 0.0, 1.0), ("spread4", 0.0, 4.0), ("wide", 0.0, 1e3), ("subnormal", 0.0, 1e-38)]


def gelu_dtypes():
    """The dtypes torch hands to oneDNN on this CPU and ordo models there (gen/order_table.cpp,
    torch215_gelu_erf): f32; bf16 with AVX-512 and avx512_bf16; f16 with AVX-512 and avx512_fp16."""
    flags = cpu_flags()
    avx512 = all(f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq"))
    return ["f32"] + (["bf16"] if avx512 and "avx512_bf16" in flags else []) + (["f16"] if avx512 and "avx512_fp16" in flags else [])


def gelu_cases(tier, dtypes, first_seed):
    out = []
    for i, (op, xd, n, (rng, _, _)) in enumerate(itertools.product(["gelu", "gelu_backward"], dtypes,
                                                                   tiers.pick(tier, N_QUICK, N_CI, N_SWEEP), GELU_RANGES)):
        out.append({"op": op, "dtype": xd, "n": n, "range": rng, "rows": ROWS[i % 3] if n < 20000 else 1 + i % 2, "seed": first_seed + i})
    return out


def cases(tier):
    """The case list, as plain data for the workers. Each dtype x N x range is a case. Affine and
    eps are part of the compiled kernel, so they rotate per (dtype, N), and the value ranges of
    one (dtype, N) share a kernel; across N every dtype meets every affine form and eps. The row
    count (a launch argument) rotates per case."""
    out = []
    ns = tiers.pick(tier, N_QUICK, N_CI, N_SWEEP)
    # The Hugging Face classes differ from F.rms_norm only after the shared sum (where they round
    # and how they take the weight), so they run on the shorter sweep.
    hf_ns = N_QUICK
    dtypes = [("f32", "f32"), ("bf16", "bf16"), ("f16", "f16"), ("bf16", "f32"), ("f16", "f32")]
    i = 0
    for k, ((xd, wd), n) in enumerate(itertools.product(dtypes, ns)):
        for rng, _, _ in RANGES:
            out.append({"op": "layer_norm", "dtype": xd, "weight_dtype": wd, "n": n, "range": rng, "affine": AFFINE[k % 4],
                        "eps": EPS[(k // 4) % 3], "rows": ROWS[i % 3] if n < 20000 else 2, "seed": i})
            i += 1
    # rms_norm: F.rms_norm and the Hugging Face classes, whose sum runs over one row too
    # (rows=1), where a reduction could split over threads.
    forms = [("F.rms_norm", ns), ("llama", hf_ns), ("gemma", hf_ns)]
    for k, (form, (xd, wd), n) in enumerate((f, d, n) for f, f_ns in forms for d in dtypes for n in f_ns):
        for rng, _, _ in RANGES:
            out.append({"op": "rms_norm", "form": form, "dtype": xd, "weight_dtype": wd, "n": n, "range": rng,
                        "affine": "weight" if form != "F.rms_norm" or k % 4 else "none", "eps": EPS[(k // 4) % 3],
                        "rows": [1, 5, 7, 3][i % 4] if n < 20000 else 1 + i % 2, "seed": i})
            i += 1
    for op, xd, n, (rng, _, _) in itertools.product(["softmax", "log_softmax", "var_mean"], ["f32", "bf16", "f16"], ns, RANGES):
        out.append({"op": op, "dtype": xd, "n": n, "range": rng, "rows": ROWS[i % 3] if n < 20000 else 1 + i % 2, "seed": i})
        i += 1
    for op, xd, n, (rng, _, _) in itertools.product(["sum", "mean"], ["f32", "bf16", "f16"], ns, RANGES):
        if op == "sum" and xd != "f32":
            continue
        out.append({"op": op, "dtype": xd, "n": n, "range": rng, "rows": ROWS[i % 3] if n < 20000 else 1 + i % 2, "seed": i})
        i += 1
    # silu: rows*N over 32768 (N >= 4681 at 7 rows) is cut into chunks between torch's threads;
    # gelu_tanh's forward above 16384.
    for op, xd, n, (rng, _, _) in itertools.product(["silu", "silu_backward", "gelu_tanh", "gelu_tanh_backward"], ["f32", "bf16", "f16"],
                                                    ns, RANGES):
        out.append({"op": op, "dtype": xd, "n": n, "range": rng, "rows": ROWS[i % 3] if n < 20000 else 1 + i % 2, "seed": i})
        i += 1
    # gelu_tanh's forward cuts a launch of more than 16384 elements by a grain of elements/threads:
    # launches between 16384 and 32768 elements (which silu's grain leaves whole), in the range
    # where Sleef's and glibc's tanh differ most (about 15% of the outputs at N(0, 1); measured:
    # without the grain rule 219 outputs of 90 such launches differ from torch).
    for xd, (rows, n), k in itertools.product(["f32", "bf16", "f16"], [(7, 4097), (1, 20001), (3, 5463)], range(2)):
        out.append({"op": "gelu_tanh", "dtype": xd, "n": n, "range": "normal", "rows": rows, "seed": i})
        i += 1
    # The same ops over a strided input whose rows torch cannot coalesce (a chunk of a wider
    # tensor, as Phi-3's gate is): torch's loop runs row by row, each row's part of a chunk with its
    # own scalar tail; the orders take inner_loop=row. Chunks cut mid-row at 3x20001 and 7x5001
    # on 2 threads.
    for op, xd, (rows, n) in itertools.product(["silu", "silu_backward", "gelu_tanh", "gelu_tanh_backward"], ["f32", "bf16", "f16"],
                                               [(7, 33), (96, 100), (40, 1000), (3, 20001), (7, 5001)]):
        out.append({"op": op, "dtype": xd, "n": n, "range": "normal", "rows": rows, "seed": i, "strided": True,
                    "params": "inner_loop=row"})
        i += 1
    # cross_entropy (forward and backward): class counts from the sweep, row counts on both sides of
    # nll_loss's cascade levels (16 and 256 rows), every reduction, ignore_index -100 (transformers')
    # and a class index (0: the rows that name class 0 are the ignored ones).
    ce_rows = [1, 5, 16, 17, 257, 4097]
    for k, (xd, n, red) in enumerate(itertools.product(["f32", "bf16", "f16"], ns, ["mean", "sum", "none"])):
        rows = ce_rows[k % len(ce_rows)]
        while rows > 1 and rows * n > (1 << 21):
            rows //= 4
        out.append({"op": "cross_entropy", "dtype": xd, "n": n, "range": RANGES[k % len(RANGES)][0], "rows": rows, "seed": i,
                    "reduction": red, "ignore_index": 0 if k % 4 == 3 and n > 1 else -100})
        i += 1
    return out + gelu_cases(tier, gelu_dtypes(), i)


WORKER = r'''
import json, sys
import numpy as np
import torch
import ordo

cap, cases = sys.argv[1], json.load(open(sys.argv[2]))
extra = sys.argv[4]  # order parameters for the environment beyond torch's threads ("" or onednn_isa=...)
TORCH_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
RANGES = {name: (offset, scale) for name, offset, scale in json.loads(sys.argv[3])}

from tensor_bits import same

def inputs(c):
    rng = np.random.default_rng(1000 + c["seed"])
    off, scale = RANGES[c["range"]]
    x = torch.from_numpy((off + scale * rng.standard_normal((c["rows"], c["n"]))).astype(np.float32)).to(TORCH_DTYPE[c["dtype"]])
    if c.get("strided"):  # the first half of each row of a tensor twice as wide: torch loops row by row
        x = torch.cat([x, x], dim=1)[:, :c["n"]]
    w = b = None
    if c["op"] in ("layer_norm", "rms_norm"):
        wd = TORCH_DTYPE[c["weight_dtype"]]
        if "weight" in c["affine"]:
            w = torch.from_numpy((1 + 0.1 * rng.standard_normal(c["n"])).astype(np.float32)).to(wd)
        if "bias" in c["affine"]:
            b = torch.from_numpy((0.1 * rng.standard_normal(c["n"])).astype(np.float32)).to(wd)
    if c["op"] in ("silu_backward", "gelu_tanh_backward", "gelu_backward"):  # w carries dy
        w = torch.from_numpy(rng.standard_normal((c["rows"], c["n"])).astype(np.float32)).to(TORCH_DTYPE[c["dtype"]])
    if c["op"] == "cross_entropy":  # w carries the targets (a quarter of them ignore_index), b the loss's gradient
        w = torch.from_numpy(rng.integers(0, c["n"], c["rows"]))
        w[torch.from_numpy(rng.random(c["rows"]) < 0.25)] = c["ignore_index"]
        shape = (c["rows"],) if c["reduction"] == "none" else ()
        b = torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(TORCH_DTYPE[c["dtype"]])
    return x, w, b

def hf_module(c, w):
    """transformers' own class, with the case's weight (in the weight's dtype) and eps."""
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    m = (LlamaRMSNorm if c["form"] == "llama" else GemmaRMSNorm)(c["n"], eps=c["eps"])
    m.weight = torch.nn.Parameter(w.clone(), requires_grad=False)
    return m

def grad_input(c, x):
    """(the input autograd's backward sees, the leaf whose .grad holds the gradient): x itself, or
    for a strided case a view of a wider leaf, so that torch's backward loops over the view (a
    clone of the view would be contiguous)."""
    leaf = (torch.cat([x, x], dim=1) if c.get("strided") else x.clone()).requires_grad_()
    return (leaf[:, :c["n"]] if c.get("strided") else leaf), leaf

def torch_outputs(c, x, w, b):
    if c["op"] == "rms_norm":
        with torch.no_grad():
            y = torch.nn.functional.rms_norm(x, [c["n"]], w, c["eps"]) if c["form"] == "F.rms_norm" else hf_module(c, w)(x)
        return {"y": y}
    if c["op"] == "layer_norm":
        y, mean, rstd = torch.native_layer_norm(x, [c["n"]], w, b, c["eps"])
        return {"y": y, "mean": mean.reshape(-1), "rstd": rstd.reshape(-1)}
    if c["op"] == "var_mean":
        var, mean = torch.var_mean(x, -1, correction=0)
        return {"var": var, "mean": mean}
    if c["op"] in ("sum", "mean"):
        return {c["op"]: getattr(x, c["op"])(-1)}
    if c["op"] == "cross_entropy":
        xr = x.clone().requires_grad_()
        loss = torch.nn.functional.cross_entropy(xr, w, ignore_index=c["ignore_index"], reduction=c["reduction"])
        loss.backward(b)
        return {"loss": loss.detach(), "logp": torch.log_softmax(x, 1), "dx": xr.grad}
    if c["op"] == "silu":
        return {"y": torch.nn.functional.silu(x)}
    if c["op"] == "gelu_tanh":
        return {"y": torch.nn.functional.gelu(x, approximate="tanh")}
    if c["op"] == "gelu_tanh_backward":
        xr, leaf = grad_input(c, x)
        torch.nn.functional.gelu(xr, approximate="tanh").backward(w)
        return {"dx": leaf.grad[:, :c["n"]]}
    if c["op"] == "gelu":
        return {"y": torch.nn.functional.gelu(x)}
    if c["op"] == "gelu_backward":
        xr = x.clone().requires_grad_()
        torch.nn.functional.gelu(xr).backward(w)
        return {"dx": xr.grad}
    if c["op"] == "silu_backward":
        xr, leaf = grad_input(c, x)
        torch.nn.functional.silu(xr).backward(w)
        return {"dx": leaf.grad[:, :c["n"]]}
    return {"y": getattr(torch, c["op"])(x, -1)}

def ordo_outputs(c, x, w, b, order):
    x = x.contiguous()  # the strided cases: ordo's order models torch's loop over the view, on the same values
    if c["op"] == "rms_norm":
        if c["form"] != "F.rms_norm":
            order = c["form"] + "-rmsnorm-" + order
        y, _ = ordo.rms_norm(x, w, eps=c["eps"], order=order, allow_mixed_dtypes=c["weight_dtype"] != c["dtype"])
        return {"y": y}
    if c["op"] == "layer_norm":
        y, mean, rstd = ordo.layer_norm(x, w, b, eps=c["eps"], order=order,
                                        allow_mixed_dtypes=c["weight_dtype"] != c["dtype"])
        return {"y": y, "mean": mean.reshape(-1), "rstd": rstd.reshape(-1)}
    if c["op"] == "var_mean":
        var, mean = ordo.var_mean(x, order=order)
        return {"var": var, "mean": mean}
    if c["op"] in ("sum", "mean"):
        return {c["op"]: getattr(ordo, c["op"])(x, order=order)}
    if c["op"] == "silu_backward":
        return {"dx": ordo.silu_backward(w, x, order=order)}
    if c["op"] == "cross_entropy":
        kw = dict(ignore_index=c["ignore_index"], reduction=c["reduction"], order=order)
        loss, logp, total_weight = ordo.cross_entropy(x, w, **kw)
        return {"loss": loss, "logp": logp, "dx": ordo.cross_entropy_backward(b, logp, w, total_weight, **kw)}
    if c["op"] == "gelu_tanh_backward":
        return {"dx": ordo.gelu_tanh_backward(w, x, order=order)}
    if c["op"] == "gelu_backward":
        return {"dx": ordo.gelu_backward(w, x, order=order)}
    return {"y": getattr(ordo, c["op"])(x, order=order)}

def single_row_split(c):
    """torch sums a single row of more than 32768 elements in per-thread chunks when it has
    several threads (docs/research/torch2.15-rms-norm.md); the orders model that with threads=T.
    These rows also run with torch on 3 and 8 threads (the slot sum's scalar and vector paths)."""
    if c["op"] in ("silu", "silu_backward", "gelu_tanh_backward"):
        return c["rows"] * c["n"] >= 32768
    if c["op"] == "gelu_tanh":
        return c["rows"] * c["n"] > 16384
    return c["op"] in ("rms_norm", "sum", "mean") and c["rows"] == 1 and c["n"] > 32768

results = []
for threads in (1, 2, 3, 8):
    torch.set_num_threads(threads)
    for i, c in enumerate(cases):
        if threads > 2 and not single_row_split(c):
            continue
        x, w, b = inputs(c)
        want = torch_outputs(c, x, w, b)
        orders = [f"torch2.15-cpu-{cap}"] + (["torch2.15-cpu"] if i % 5 == 0 else [])
        for order in orders:
            # The environment torch ran in: its thread count.
            params = ([f"threads={threads}"] if threads > 1 else []) + ([extra] if extra else []) + ([c["params"]] if "params" in c else [])
            named = f"{order}({','.join(params)})" if params else order
            try:
                got = ordo_outputs(c, x, w, b, named)
            except Exception as e:  # ordo refused the request: a failure, with its message
                results.append({"case": i, "order": named, "threads": threads, "ok": False, "why": f"ordo: {e}"})
                continue
            why = [f"{k}: {m}" for k in want for ok, m in [same(want[k], got[k])] if not ok]
            results.append({"case": i, "order": named, "threads": threads, "ok": not why, "why": "; ".join(why)})
print(json.dumps({"torch": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability(), "results": results}))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"), help="ordo's build directory")
    tiers.add_arguments(ap)
    args = ap.parse_args()
    if error := torch_error():
        print(error)
        return 1

    all_cases = cases(tiers.chosen(args))
    import tempfile
    spec = tempfile.NamedTemporaryFile("w", suffix=".json", prefix="ordo_torch2_", delete=False)
    json.dump(all_cases, spec)
    spec.close()
    table, passed, failed = {}, 0, 0
    env_base = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(os.path.abspath(args.build), "python"), HERE]))
    # gelu in f32 with oneDNN held to AVX2: its Abramowitz and Stegun forward (a CPU without AVX-512).
    avx2_spec = tempfile.NamedTemporaryFile("w", suffix=".json", prefix="ordo_torch2_", delete=False)
    avx2_cases = gelu_cases(tiers.chosen(args), ["f32"], len(all_cases))
    json.dump(avx2_cases, avx2_spec)
    avx2_spec.close()
    runs = [(cap, spec.name, all_cases, {}, "") for cap in capabilities(print, "torch2.15-cpu-avx512")]
    runs.append(("avx2", avx2_spec.name, avx2_cases, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, "onednn_isa=avx2"))
    for cap, spec_name, run_cases, extra_env, extra in runs:
        # Passive OpenMP waits: ctest runs other tests beside this one, and spinning threads on a
        # shared core slow torch several times over. Scheduling only; the bits do not change.
        env = dict(env_base, ATEN_CPU_CAPABILITY=cap, OMP_WAIT_POLICY="PASSIVE", **extra_env)
        worker = subprocess.run([sys.executable, "-c", WORKER, cap, spec_name, json.dumps(RANGES + GELU_RANGES), extra], env=env,
                                capture_output=True, text=True)
        if worker.returncode != 0:
            print(f"FAIL: worker for ATEN_CPU_CAPABILITY={cap} exited {worker.returncode}:\n{worker.stderr}")
            return 1
        out = json.loads(worker.stdout.strip().splitlines()[-1])
        held = "".join(f", {k}={v}" for k, v in extra_env.items())
        print(f"torch {out['torch']}, ATEN_CPU_CAPABILITY={cap}{held} (torch reports {out['capability']}), threads 1 and 2")
        for r in out["results"]:
            c = run_cases[r["case"]]
            dtype = c["dtype"] if c.get("weight_dtype", c["dtype"]) == c["dtype"] else f"{c['dtype']}+{c['weight_dtype']}"
            base = r["order"].split("(")[0]
            order = base if c.get("form", "F.rms_norm") == "F.rms_norm" else c["form"] + "-rmsnorm-" + base
            params = ",".join(p for p in (extra, c.get("params", "")) if p)
            key = (c["op"], order + ("" if order.endswith(cap) else f"[{cap}]") + (f"({params})" if params else ""), dtype)
            entry = table.setdefault(key, [0, 0])
            entry[1] += 1
            if r["ok"]:
                entry[0] += 1
                passed += 1
            else:
                failed += 1
                detail = (f" affine={c['affine']} eps={c['eps']}" if c["op"] in ("layer_norm", "rms_norm")
                          else f" reduction={c['reduction']} ignore_index={c['ignore_index']}" if c["op"] == "cross_entropy" else "")
                print(f"FAIL {c['op']} {order} {dtype} N={c['n']} rows={c['rows']} {c['range']}{detail} "
                      f"threads={r['threads']}: {r['why']}")
    os.unlink(spec.name)
    os.unlink(avx2_spec.name)
    print("\n(each case is counted once per torch thread count, 1 and 2, and single rows over 32768 also on 3 and 8)")
    return print_summary(table, passed, failed)


if __name__ == "__main__":
    sys.exit(main())
