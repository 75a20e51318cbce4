#!/usr/bin/env python3
"""Every bad request to `ordo run` must fail cleanly, and every form of help must work.

Run: /usr/bin/python3 tests/error/cli_errors.py --ordo build/bin/ordo

A clean failure is: exit code exactly 2, stderr starting with "ordo: error:" and naming the
bad value, no signal, and nothing written to the output directory (no requested file and no
leftover *.tmp.* file). A user who scripts around ordo relies on all four: 2 tells "your input"
apart from 1 "our bug", the name tells them what to fix, and a half-written output set would
be silently mixed with stale results from an earlier run.

A few valid runs are included so the script cannot pass by everything failing.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Callable, List, Optional

import numpy as np

ROWS, N = 4, 8


@dataclass
class Case:
    name: str
    argv: List[str]  # after `ordo`; "{in}" and "{out}" are the input and output directories
    expect: Optional[List[str]]  # stderr substrings for a failure; None means the run must succeed
    check: Optional[Callable[[str], Optional[str]]] = None  # success check on the out dir; returns a reason or None
    dirs: List[str] = field(default_factory=list)  # made in the out dir beforehand
    note: str = ""  # printed on failure: what the case is probing
    env: dict = field(default_factory=dict)  # added to ordo's environment


def ln(*extra, order="fast", op="layer_norm", x="x.npy", out=("y",)):
    """A `run` command line; most cases differ from a valid one in a single place."""
    argv = ["run", op, "--order", order, "--in", "x={in}/" + x]
    argv += list(extra)
    for o in out:
        argv += ["--out", f"{o}={{out}}/{o}.npy"]
    return argv


def make_inputs(d):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, N)).astype("<f4")
    np.save(f"{d}/x.npy", x)
    np.save(f"{d}/w.npy", np.linspace(0.5, 1.5, N).astype("<f4"))
    np.save(f"{d}/b.npy", np.linspace(-1, 1, N).astype("<f4"))
    np.save(f"{d}/x_f16.npy", x.astype("<f2"))
    np.save(f"{d}/w_f16.npy", np.ones(N, "<f2"))
    np.save(f"{d}/x_f64.npy", x.astype("<f8"))
    np.save(f"{d}/x_i32.npy", np.ones((ROWS, N), "<i4"))
    np.save(f"{d}/x_fortran.npy", np.asfortranarray(x))
    np.save(f"{d}/x_n0.npy", np.zeros((3, 0), "<f4"))
    np.save(f"{d}/x_n6.npy", np.ones((3, 6), "<f4"))
    np.save(f"{d}/x_0d.npy", np.array(1.0, "<f4"))
    np.save(f"{d}/w_short.npy", np.ones(N - 1, "<f4"))
    np.save(f"{d}/w_2d.npy", np.ones((1, N), "<f4"))
    good = open(f"{d}/x.npy", "rb").read()
    # Cut both inside the data and inside the header: they are different parse paths.
    open(f"{d}/x_trunc_data.npy", "wb").write(good[:-5])
    open(f"{d}/x_trunc_header.npy", "wb").write(good[:30])
    open(f"{d}/not_npy.npy", "w").write("x,y\n1,2\n")
    # attention: q [2, 3, 5, 8], k and v [2, 3, 7, 8], and wrong variants.
    np.save(f"{d}/q.npy", rng.standard_normal((2, 3, 5, 8)).astype("<f4"))
    np.save(f"{d}/k.npy", rng.standard_normal((2, 3, 7, 8)).astype("<f4"))
    np.save(f"{d}/v.npy", rng.standard_normal((2, 3, 7, 8)).astype("<f4"))
    np.save(f"{d}/v_short.npy", rng.standard_normal((2, 3, 6, 8)).astype("<f4"))
    np.save(f"{d}/k_heads.npy", rng.standard_normal((2, 4, 7, 8)).astype("<f4"))
    np.save(f"{d}/q_d6.npy", rng.standard_normal((2, 3, 5, 6)).astype("<f4"))
    np.save(f"{d}/k_d6.npy", rng.standard_normal((2, 3, 7, 6)).astype("<f4"))
    np.save(f"{d}/v_d6.npy", rng.standard_normal((2, 3, 7, 6)).astype("<f4"))
    np.save(f"{d}/k_f16.npy", rng.standard_normal((2, 3, 7, 8)).astype("<f2"))
    np.save(f"{d}/q_1d.npy", rng.standard_normal(8).astype("<f4"))
    # attention masks: [B, 1, S_q, S_k] with -inf in it, and one whose heads are neither 1 nor q's 3.
    np.save(f"{d}/mask.npy", np.where(rng.random((2, 1, 5, 7)) > 0.7, -np.inf, 0).astype("<f4"))
    np.save(f"{d}/mask_heads.npy", np.zeros((2, 2, 5, 7), "<f4"))
    # attention_backward: out and dout like q, lse [2, 3, 5] f32, and wrong variants.
    np.save(f"{d}/ab_out.npy", rng.standard_normal((2, 3, 5, 8)).astype("<f4"))
    np.save(f"{d}/ab_dout.npy", rng.standard_normal((2, 3, 5, 8)).astype("<f4"))
    np.save(f"{d}/ab_dout_short.npy", rng.standard_normal((2, 3, 4, 8)).astype("<f4"))
    np.save(f"{d}/ab_dout_f16.npy", rng.standard_normal((2, 3, 5, 8)).astype("<f2"))
    np.save(f"{d}/ab_lse.npy", rng.standard_normal((2, 3, 5)).astype("<f4"))
    np.save(f"{d}/ab_lse_rows.npy", rng.standard_normal((2, 3, 6)).astype("<f4"))
    np.save(f"{d}/ab_lse_f16.npy", rng.standard_normal((2, 3, 5)).astype("<f2"))
    # cross_entropy: x is (ROWS, N) logits; class indices, one out of range, one of the wrong rows, int32.
    np.save(f"{d}/target.npy", np.array([1, -100, 7, 0], "<i8"))
    np.save(f"{d}/target_bad.npy", np.array([1, 8, 7, 0], "<i8"))
    np.save(f"{d}/target_rows.npy", np.array([1, 2, 3], "<i8"))
    np.save(f"{d}/target_i32.npy", np.array([1, 2, 3, 0], "<i4"))
    np.save(f"{d}/dloss.npy", np.array(1.0, "<f4"))
    np.save(f"{d}/total_weight.npy", np.array(3.0, "<f4"))
    # layer_norm_backward: dy like x, per-row statistics, and wrong variants.
    np.save(f"{d}/dy.npy", rng.standard_normal((ROWS, N)).astype("<f4"))
    np.save(f"{d}/dy_short.npy", rng.standard_normal((ROWS, N - 1)).astype("<f4"))
    np.save(f"{d}/dy_f16.npy", rng.standard_normal((ROWS, N)).astype("<f2"))
    np.save(f"{d}/mean.npy", x.mean(-1).astype("<f4"))
    np.save(f"{d}/rstd.npy", (1 / np.sqrt(x.var(-1) + 1e-5)).astype("<f4"))
    np.save(f"{d}/rstd_f16.npy", (1 / np.sqrt(x.var(-1) + 1e-5)).astype("<f2"))
    np.save(f"{d}/mean_rows.npy", np.zeros(ROWS + 1, "<f4"))
    assert np.load(f"{d}/x_fortran.npy").flags.f_contiguous and not np.load(f"{d}/x_fortran.npy").flags.c_contiguous


def ref_layer_norm(ind, with_affine):
    x = np.load(f"{ind}/x.npy").astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    y = (x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    if with_affine:
        y = y * np.load(f"{ind}/w.npy") + np.load(f"{ind}/b.npy")
    return y, mean[..., 0]


def expect_outputs(specs, ind, value_check=None):
    """Success check: exactly these files, with these shapes and dtypes, then optional values."""
    def check(out):
        want = sorted(f"{n}.npy" for n, _, _ in specs)
        got = sorted(os.listdir(out))
        if got != want:
            return f"out dir holds {got}, expected {want}"
        for n, shape, dtype in specs:
            a = np.load(f"{out}/{n}.npy")
            if a.shape != shape or a.dtype != np.dtype(dtype):
                return f"{n}: {a.dtype}{a.shape}, expected {np.dtype(dtype)}{shape}"
        return value_check(out) if value_check else None
    return check


def softmax_values(ind):
    def check(out):
        x = np.load(f"{ind}/x.npy").astype(np.float64)
        e = np.exp(x - x.max(-1, keepdims=True))
        y = np.load(f"{out}/y.npy")
        if not np.allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7):
            return "softmax y differs from numpy"
        return None
    return check


def expect_png(name):
    """Success check: the only file is a PNG (its signature and IHDR chunk)."""
    def check(out):
        if sorted(os.listdir(out)) != [name]:
            return f"out dir holds {sorted(os.listdir(out))}, expected [{name!r}]"
        head = open(f"{out}/{name}", "rb").read(16)
        if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
            return f"{name} is not a PNG"
        return None
    return check


def layer_norm_values(ind, with_affine):
    def check(out):
        y_ref, mean_ref = ref_layer_norm(ind, with_affine)
        y = np.load(f"{out}/y.npy")
        if not np.allclose(y, y_ref, rtol=1e-4, atol=1e-4):
            return f"y differs from numpy by {np.abs(y - y_ref).max():.3g}"
        if os.path.exists(f"{out}/mean.npy") and not np.allclose(np.load(f"{out}/mean.npy"), mean_ref, atol=1e-5):
            return "mean differs from numpy"
        return None
    return check


def cuda_manifest(block, grid, params):
    """Checks k.json next to k.cubin: the launch shape and each parameter's role."""
    def check(out):
        if not os.path.getsize(f"{out}/k.cubin"):
            return "k.cubin is empty"
        kernel = json.load(open(f"{out}/k.json"))["kernels"][0]
        if kernel["launch"]["block"][0] != block or kernel["launch"]["grid"][0] != grid:
            return f"launch {kernel['launch']}, expected block {block} and grid {grid}"
        got = [(p["name"], p.get("elements", p.get("value"))) for p in kernel["params"]]
        return None if got == params else f"params {got}, expected {params}"
    return check


def lnb_cuda_manifest(out):
    """k.json lists the rows stage (k.cubin) and the column stage (k.stage2.cubin), with the column
    stage's fixed grid of one thread per column."""
    kernels = json.load(open(f"{out}/k.json"))["kernels"]
    if [k["binary"] for k in kernels] != ["k.cubin", "k.stage2.cubin"]:
        return f"binaries {[k['binary'] for k in kernels]}"
    for k in kernels:
        if not os.path.getsize(f"{out}/{k['binary']}"):
            return f"{k['binary']} is empty"
    params = [(p["name"], p.get("elements", p.get("value"))) for p in kernels[1]["params"]]
    if params[-3:] != [("ext0", 100), ("launch_rows", "rows"), ("instances", "100")]:
        return f"column stage params {params[-3:]}"
    return None


def lnb(*extra, order="torch2.15-cpu", dy="dy.npy", x="x.npy", mean="mean.npy", rstd="rstd.npy", w=None, out=("dx",)):
    argv = ["run", "layer_norm_backward", "--order", order, "--in", "dy={in}/" + dy, "--in", "x={in}/" + x]
    if mean:
        argv += ["--in", "mean={in}/" + mean]
    argv += ["--in", "rstd={in}/" + rstd]
    if w:
        argv += ["--in", "weight={in}/" + w]
    argv += list(extra)
    for o in out:
        argv += ["--out", f"{o}={{out}}/{o}.npy"]
    return argv


def attn(*extra, order="exact-tiled", q="q.npy", k="k.npy", v="v.npy", out=("out",)):
    argv = ["run", "attention", "--order", order, "--in", "q={in}/" + q, "--in", "k={in}/" + k, "--in", "v={in}/" + v]
    argv += list(extra)
    for o in out:
        argv += ["--out", f"{o}={{out}}/{o}.npy"]
    return argv


def attnb(*extra, order="flash", q="q.npy", k="k.npy", v="v.npy", out_in="ab_out.npy", dout="ab_dout.npy", lse="ab_lse.npy",
          out=("dq", "dk", "dv")):
    argv = ["run", "attention_backward", "--order", order, "--in", "q={in}/" + q, "--in", "k={in}/" + k, "--in", "v={in}/" + v,
            "--in", "out={in}/" + out_in]
    if dout:
        argv += ["--in", "dout={in}/" + dout]
    if lse:
        argv += ["--in", "lse={in}/" + lse]
    argv += list(extra)
    for o in out:
        argv += ["--out", f"{o}={{out}}/{o}.npy"]
    return argv


def attention_values(ind):
    def check(out):
        q, k, v = (np.load(f"{ind}/{n}.npy").astype(np.float64) for n in "qkv")
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(8)
        e = np.exp(s - s.max(-1, keepdims=True))
        o = (e / e.sum(-1, keepdims=True)) @ v
        if not np.allclose(np.load(f"{out}/out.npy"), o, rtol=1e-5, atol=1e-6):
            return "attention out differs from numpy"
        return None
    return check


def cases(ind):
    AVX2 = "torch1.13-cpu-avx2"
    W, B = "weight={in}/w.npy", "bias={in}/b.npy"
    return [
        # Sanity: valid runs succeed and write correct outputs.
        Case("valid layer_norm", ln("--in", W, "--in", B, out=("y", "mean", "rstd")), None,
             expect_outputs([("y", (ROWS, N), "<f4"), ("mean", (ROWS,), "<f4"), ("rstd", (ROWS,), "<f4")], ind,
                            layer_norm_values(ind, True))),
        Case("valid reference order", ln(order=AVX2), None,
             expect_outputs([("y", (ROWS, N), "<f4")], ind, layer_norm_values(ind, False))),
        Case("valid var_mean on interpreter", ln("--target", "interpreter", op="var_mean", order="two-pass-sequential",
                                                 out=("var", "mean")), None,
             expect_outputs([("var", (ROWS,), "<f4"), ("mean", (ROWS,), "<f4")], ind)),
        Case("mixed dtypes with --allow-mixed-dtypes",
             ln("--allow-mixed-dtypes", "--in", "weight={in}/w_f16.npy"), None,
             expect_outputs([("y", (ROWS, N), "<f4")], ind)),

        # The CUDA-native orders: torch-cuda is device-only; its tree runs everywhere, on its shapes.
        Case("valid torch-cuda-tree layer_norm on cuda-emu",
             ln("--target", "cuda-emu", "--in", W, "--in", B, order="torch-cuda-tree", out=("y", "mean", "rstd")), None,
             expect_outputs([("y", (ROWS, N), "<f4"), ("mean", (ROWS,), "<f4"), ("rstd", (ROWS,), "<f4")], ind,
                            layer_norm_values(ind, True))),
        Case("valid warp-butterfly softmax", ln(op="softmax", order="warp-butterfly"), None,
             expect_outputs([("y", (ROWS, N), "<f4")], ind)),
        Case("device-only order on the cpu", ln(order="torch-cuda"), ["order 'torch-cuda' is device-only", "not cpu", "torch-cuda-tree"]),
        Case("device-only order on cuda-emu", ln("--target", "cuda-emu", op="softmax", order="torch-cuda"),
             ["device-only", "not cuda-emu", "warp-butterfly"]),
        # N % 4 != 0: PyTorch's two-kernel path, a block of 512 threads (rows of ones: y = +0).
        Case("torch-cuda-tree with N not a multiple of 4 on cuda-emu",
             ln("--target", "cuda-emu", order="torch-cuda-tree", x="x_n6.npy"), None,
             expect_outputs([("y", (3, 6), "<f4")], ind,
                            lambda out: None if np.load(f"{out}/y.npy").view("<u4").max() == 0 else "y is not +0 everywhere")),
        Case("torch-cuda with N not a multiple of 4 builds a 512-thread block",
             ["build", "layer_norm", "--order", "torch-cuda", "--cols", "6", "--target", "cuda", "-o", "{out}/k.cubin"], None,
             cuda_manifest(512, "ceil(rows / 1)", [("b0_x", "rows*6"), ("b1_weight", "6"), ("b2_bias", "6"), ("b3_y", "rows*6"),
                                                   ("b4_mean", "rows"), ("b5_rstd", "rows"), ("ext0", "rows"), ("launch_rows", "rows"), ("instances", "rows")])),
        Case("torch-cuda builds for target cuda, with its block launch in the manifest",
             ["build", "layer_norm", "--order", "torch-cuda", "--cols", "8", "--target", "cuda", "-o", "{out}/k.cubin"], None,
             cuda_manifest(128, "ceil(rows / 1)", [("b0_x", "rows*8"), ("b1_weight", "8"), ("b2_bias", "8"), ("b3_y", "rows*8"),
                                                   ("b4_mean", "rows"), ("b5_rstd", "rows"), ("ext0", "rows"), ("launch_rows", "rows"), ("instances", "rows")])),
        Case("flash-cuda manifest: q/k/v per (batch, head), query blocks fixed",
             ["build", "attention", "--order", "flash-cuda", "--cols", "64", "--sq", "100", "--sk", "30", "--target", "cuda",
              "-o", "{out}/k.cubin"], None,
             cuda_manifest(64, "ceil(rows*2 / 1)", [("b0_q", "rows*6400"), ("b1_k", "rows*1920"), ("b2_v", "rows*1920"),
                                                    ("b3_out", "rows*6400"), ("ext0", "rows"), ("ext1", 2), ("launch_rows", "rows"), ("instances", "rows*2")])),
        Case("layer_norm_backward builds for target cuda: one binary per stage, the column stage's grid fixed",
             ["build", "layer_norm_backward", "--order", "torch2.15-cpu(threads=2)", "--cols", "100", "--target", "cuda", "-o",
              "{out}/k.cubin"], None, lnb_cuda_manifest),
        Case("flash-cuda threads not a power of two", attn(order="flash-cuda(threads=48)"), ["threads=48", "power of two"]),

        Case("ORDO_EXECUTOR unknown", ln(), ["ORDO_EXECUTOR", "tbb", "pool or openmp"], env={"ORDO_EXECUTOR": "tbb"}),
        Case("valid softmax with N at launch (one kernel for every N)", ln("--cols", "launch", op="softmax", order="torch2.15-cpu"), None,
             expect_outputs([("y", (ROWS, N), "<f4")], ind, softmax_values(ind))),
        Case("valid layer_norm with N at launch", ln("--cols", "launch", "--in", W, "--in", B, out=("y", "mean", "rstd")), None,
             expect_outputs([("y", (ROWS, N), "<f4"), ("mean", (ROWS,), "<f4"), ("rstd", (ROWS,), "<f4")], ind,
                            layer_norm_values(ind, True))),
        Case("N at launch under an order built for one N", ln("--cols", "launch", order="inductor2.15-cpu-avx2"),
             ["inductor2.15-cpu-avx2", "builds its layer_norm for one N", "give N"]),
        Case("N at launch for a backward op", ["build", "layer_norm_backward", "--order", "fast", "--cols", "launch", "-o", "{out}/k.so"],
             ["layer_norm_backward", "N at launch is for the row ops' forward"]),
        Case("--cols with a number in run", ln("--cols", "64"), ["drop --cols", "--cols launch is the exception"]),
        Case("bench of a backward op whose row input is y", ["bench", "softmax_backward", "--order", "fast", "--rows", "4",
                                                             "--cols", "64", "--json"], None,
             note="the copy baseline read a buffer named x, which the softmax backward ops do not have"),
        Case("bench with N at launch", ["bench", "softmax", "--order", "fast", "--cols", "launch", "--json"],
             ["bench", "--cols launch", "--cols N"]),
        Case("compare with N at launch", ["compare", "layer_norm", "--cols", "launch"], ["compare", "--cols launch", "--cols N"]),
        Case("softmax manifest with N at launch: x and y sized by it, N a parameter",
             ["build", "softmax", "--order", "fast", "--cols", "launch", "--target", "cuda", "-o", "{out}/k.cubin"], None,
             cuda_manifest(128, "ceil(rows / 128)", [("b0_x", "rows*N"), ("b1_y", "rows*N"), ("ext0", "rows"), ("launch_rows", "rows"),
                                                   ("size0", "N"), ("instances", "rows")])),
        Case("valid attention with S_k at launch (one kernel for every S_k)", attn("--sk", "launch", order="fast"), None,
             expect_outputs([("out", (2, 3, 5, 8), "<f4")], ind, attention_values(ind))),
        Case("S_k at launch under an order built for one S_k", attn("--sk", "launch", order="exact-tiled"),
             ["exact-tiled", "builds its attention for one S_k", "give seq_k"]),
        Case("bench with S_k at launch", ["bench", "attention", "--order", "fast", "--cols", "64", "--sq", "1", "--sk", "launch", "--json"],
             ["bench", "--sk launch", "--sk N"]),
        Case("compare with S_k at launch", ["compare", "attention", "--cols", "64", "--sq", "1", "--sk", "launch"],
             ["compare", "--sk launch", "--sk N"]),
        Case("flash manifest with S_k at launch: k and v sized by it, S_k a parameter",
             ["build", "attention", "--order", "flash", "--cols", "64", "--sq", "1", "--sk", "launch", "--target", "cuda",
              "-o", "{out}/k.cubin"], None,
             cuda_manifest(128, "ceil(rows / 128)", [("b0_q", "rows*64"), ("b1_k", "rows*64*S_k"), ("b2_v", "rows*64*S_k"),
                                                     ("b3_out", "rows*64"), ("ext0", "rows"), ("ext1", 1), ("launch_rows", "rows"),
                                                     ("size0", "S_k"), ("instances", "rows")])),
        Case("valid attention with lse", attn(out=("out", "lse")), None,
             expect_outputs([("out", (2, 3, 5, 8), "<f4"), ("lse", (2, 3, 5), "<f4")], ind, attention_values(ind))),

        # layer_norm_backward's inputs: each mismatch names both tensors.
        Case("layer_norm_backward: dy and x shapes differ", lnb(dy="dy_short.npy"), ["dy has shape", "x has"]),
        Case("layer_norm_backward: dy and x dtypes differ", lnb(dy="dy_f16.npy"), ["dy is f16", "x is f32"]),
        Case("layer_norm_backward: mean has the wrong row count", lnb(mean="mean_rows.npy"), ["mean has shape", "x has"]),
        Case("layer_norm_backward: mean and rstd dtypes differ", lnb(rstd="rstd_f16.npy"), ["mean is f32", "rstd is f16"]),
        Case("layer_norm_backward: mean missing", lnb(mean=None), ["missing --in mean"]),
        Case("layer_norm_backward: dweight without a weight", lnb(out=("dx", "dweight")), ["dweight", "weight"]),
        Case("layer_norm_backward: threads=0", lnb(order="torch2.15-cpu(threads=0)"), ["threads=0"]),
        Case("layer_norm_backward: an input the op has not", lnb("--in", "bias={in}/b.npy"), ["no input 'bias'"]),

        # Attention's own inputs.
        Case("attention: k and v differ", attn(v="v_short.npy"), ["k has shape", "v has"]),
        Case("attention: heads differ", attn(k="k_heads.npy", v="k_heads.npy"), ["leading"]),
        Case("attention: D not a multiple of 8", attn(q="q_d6.npy", k="k_d6.npy", v="v_d6.npy"), ["D = 6"]),
        Case("attention: mixed dtypes", attn(k="k_f16.npy"), ["one dtype", "f16"]),
        Case("attention: q without S", attn(q="q_1d.npy"), ["q has shape", "[..., S, D]"]),
        Case("attention: missing v", ["run", "attention", "--order", "flash", "--in", "q={in}/q.npy", "--in", "k={in}/k.npy",
                                      "--out", "out={out}/out.npy"], ["missing --in v"]),
        Case("attention: bad scale", attn("--scale", "-1"), ["scale", "-1"]),
        Case("attention: unknown output", attn(out=("o",)), ["no output 'o'"]),
        Case("attention: bad flash block", attn(order="flash(0)"), ["bc=0"]),
        Case("attention: exp2 with division", attn(order="flash(exp2=on,scale=divide)"), ["exp2", "scale=multiply"]),
        Case("attention: reference order with parameters", attn(order="exact-tiled(bc=8)"), ["exact-tiled", "no parameters"]),
        Case("attention: causal on layer_norm", ln("--causal"), ["--causal", "layer_norm"]),
        Case("valid masked attention", attn("--in", "mask={in}/mask.npy", order="torch2.15-cpu-avx2(mkl=amd)"), None,
             expect_outputs([("out", (2, 3, 5, 8), "<f4")], ind)),
        Case("attention: a mask that does not broadcast", attn("--in", "mask={in}/mask_heads.npy", order="torch2.15-cpu-avx2(mkl=amd)"),
             ["mask has shape (2, 2, 5, 7)", "does not broadcast to (2, 3, 5, 7)"]),
        Case("attention: a mask on an order without one", attn("--in", "mask={in}/mask.npy", order="exact-tiled"),
             ["order 'exact-tiled' has no attention mask"]),
        Case("attention: a mask with causal", attn("--causal", "--in", "mask={in}/mask.npy", order="torch2.15-cpu-avx2(mkl=amd)"),
             ["causal and a mask"]),
        Case("valid cross_entropy", ln("--in", "target={in}/target.npy", op="cross_entropy", order="torch2.15-cpu-avx2",
                                       out=("loss", "logp", "total_weight")), None,
             expect_outputs([("loss", (), "<f4"), ("logp", (ROWS, N), "<f4"), ("total_weight", (), "<f4")], ind)),
        Case("cross_entropy: a target out of range", ln("--in", "target={in}/target_bad.npy", op="cross_entropy", out=("loss", "logp")),
             ["target[1] = 8 is out of bounds", "not in [0, 8)"]),
        Case("cross_entropy: a target per row", ln("--in", "target={in}/target_rows.npy", op="cross_entropy", out=("loss",)),
             ["target has shape (3,)", "(4,)"]),
        Case("cross_entropy: int32 targets", ln("--in", "target={in}/target_i32.npy", op="cross_entropy", out=("loss",)),
             ["target_i32.npy", "'<i4'"]),
        Case("cross_entropy: missing target", ln(op="cross_entropy", out=("loss",)), ["missing --in target"]),
        Case("cross_entropy: bad reduction", ln("--in", "target={in}/target.npy", "--reduction", "avg", op="cross_entropy", out=("loss",)),
             ["--reduction 'avg'"]),
        Case("cross_entropy: 1.13 has no backward", ["run", "cross_entropy_backward", "--order", "torch1.13-cpu-avx2", "--in",
                                                      "dloss={in}/dloss.npy", "--in", "logp={in}/x.npy", "--in", "target={in}/target.npy",
                                                      "--in", "total_weight={in}/total_weight.npy", "--out", "dx={out}/dx.npy"],
             ["order 'torch1.13-cpu-avx2' is not defined for cross_entropy_backward"]),
        Case("cross_entropy_backward: dloss of the wrong shape", ["run", "cross_entropy_backward", "--order", "fast", "--reduction", "none",
                                                                  "--in", "dloss={in}/dloss.npy", "--in", "logp={in}/x.npy", "--in",
                                                                  "target={in}/target.npy", "--in", "total_weight={in}/total_weight.npy",
                                                                  "--out", "dx={out}/dx.npy"],
             ["dloss has shape ()", "--reduction none has (4,)"]),
        Case("layer_norm: --reduction", ln("--reduction", "sum"), ["ignore_index and reduction are cross_entropy's", "layer_norm"]),
        Case("attention: --mask on run", attn("--mask", "f32:B1QK", order="torch2.15-cpu-avx2(mkl=amd)"), ["--mask"]),
        Case("emit: a malformed --mask", ["emit", "attention", "--ir", "--order", "torch2.15-cpu-avx2(mkl=amd)", "--cols", "8", "--sq", "5",
                                          "--sk", "7", "--mask", "f32:BXQK"], ["--mask 'f32:BXQK'"]),

        # attention_backward: each mismatch names both tensors.
        Case("valid attention_backward", attnb("--causal"), None,
             expect_outputs([("dq", (2, 3, 5, 8), "<f4"), ("dk", (2, 3, 7, 8), "<f4"), ("dv", (2, 3, 7, 8), "<f4")], ind)),
        Case("valid attention_backward without lse", attnb(lse=None, order="fast"), None,
             expect_outputs([("dq", (2, 3, 5, 8), "<f4"), ("dk", (2, 3, 7, 8), "<f4"), ("dv", (2, 3, 7, 8), "<f4")], ind)),
        Case("attention_backward: dout and q shapes differ", attnb(dout="ab_dout_short.npy"), ["dout has shape", "q has"]),
        Case("attention_backward: out and q shapes differ", attnb(out_in="v.npy"), ["out has shape", "q has"]),
        Case("attention_backward: k and v differ", attnb(v="v_short.npy"), ["k has shape", "v has"]),
        Case("attention_backward: dout dtype differs from q", attnb(dout="ab_dout_f16.npy"), ["dout is f16", "q is f32"]),
        Case("attention_backward: lse has the wrong row count", attnb(lse="ab_lse_rows.npy"), ["lse has shape", "q has"]),
        Case("attention_backward: lse not f32", attnb(lse="ab_lse_f16.npy"), ["lse is f16", "f32"]),
        Case("attention_backward: heads differ", attnb(k="k_heads.npy", v="k_heads.npy"), ["leading"]),
        Case("valid masked attention_backward", attnb("--in", "mask={in}/mask.npy", order="torch2.15-cpu-avx2(mkl=amd)"), None,
             expect_outputs([("dq", (2, 3, 5, 8), "<f4"), ("dk", (2, 3, 7, 8), "<f4"), ("dv", (2, 3, 7, 8), "<f4")], ind)),
        Case("attention_backward: missing dout", attnb(dout=None), ["missing --in dout"]),
        Case("attention_backward: lse as an output", attnb(out=("dq", "lse")), ["no output 'lse'"]),
        Case("attention_backward: order without a backward", attnb(order="exact-tiled"), ["exact-tiled", "attention_backward"]),
        Case("attention: f16 for an eager order", attn(q="q.npy", k="k_f16.npy", v="k_f16.npy"), ["one dtype"]),

        # Op and order.
        Case("unknown op", ln(op="layer_nrom"), ["unknown op 'layer_nrom'"]),
        Case("missing op", ["run", "--order", "fast", "--in", "x={in}/x.npy", "--out", "y={out}/y.npy"], ["missing the op"]),
        Case("unknown order", ln(order="fastest"), ["'fastest'"]),
        Case("order not defined for op", ln(op="rms_norm", order=AVX2), [AVX2, "rms_norm"]),
        Case("order not defined for dtype", ln(order=AVX2, x="x_f16.npy"), [AVX2, "f16"]),
        Case("order param: lanes=3", ln(order="lane-welford(lanes=3)"), ["lanes=3", "power of two"]),
        Case("order param: unknown name", ln(order="lane-welford(foo=1)"), ["'foo'"]),
        Case("order param on a reference order", ln(order=AVX2 + "(lanes=8)"), [AVX2, "no parameters"]),

        # The .npy files themselves.
        Case("x float64", ln(x="x_f64.npy"), ["x_f64.npy", "'<f8'"]),
        Case("x int32", ln(x="x_i32.npy"), ["x_i32.npy", "'<i4'"]),
        Case("x truncated in data", ln(x="x_trunc_data.npy"), ["x_trunc_data.npy", "bytes"]),
        Case("x truncated in header", ln(x="x_trunc_header.npy"), ["x_trunc_header.npy", "truncated"]),
        Case("x not a .npy file", ln(x="not_npy.npy"), ["not_npy.npy", "not a .npy"]),
        Case("x missing file", ln(x="no_such.npy"), ["no_such.npy"]),
        Case("x Fortran order", ln(x="x_fortran.npy"), ["x_fortran.npy", "Fortran"]),

        # Shapes.
        Case("weight wrong length", ln("--in", "weight={in}/w_short.npy"), ["weight", f"({N - 1},)", f"({N},)"]),
        Case("bias wrong length", ln("--in", W, "--in", "bias={in}/w_short.npy"), ["bias", f"({N - 1},)", f"({N},)"]),
        Case("weight 2-d", ln("--in", "weight={in}/w_2d.npy"), ["weight", f"(1, {N})"]),
        Case("N = 0", ln(x="x_n0.npy"), ["N (the last dim)", "got 0"]),
        Case("x 0-d", ln(x="x_0d.npy"), ["x has shape ()"]),

        # eps.
        Case("eps < 0", ln("--eps", "-1e-5"), ["eps", "-1e-05"]),
        Case("eps nan", ln("--eps", "nan"), ["eps", "nan"]),
        Case("eps not a number", ln("--eps", "abc"), ["--eps", "'abc'"]),

        # Dtypes across inputs.
        Case("mixed dtypes without flag", ln("--in", "weight={in}/w_f16.npy"), ["f32", "f16", "--allow-mixed-dtypes"]),

        # Command-line shape.
        Case("unknown --in name", ln("--in", "gamma={in}/w.npy"), ["'gamma'"]),
        Case("unknown --out name", ln(out=("var",)), ["'var'", "layer_norm"]),
        Case("missing --order", ["run", "layer_norm", "--in", "x={in}/x.npy", "--out", "y={out}/y.npy"], ["--order"]),
        Case("no --out", ln(out=()), ["--out"]),
        Case("--in without '='", ["run", "layer_norm", "--order", "fast", "--in", "{in}/x.npy", "--out", "y={out}/y.npy"],
             ["--in", "x.npy", "NAME=FILE.npy"]),
        Case("unknown option", ln("--frobnicate"), ["'--frobnicate'"]),
        Case("bad --target", ln("--target", "gpu"), ["--target", "'gpu'"]),
        Case("bad --arch", ln("--target", "cuda", "--arch", "sm_75"), ["--arch", "'sm_75'"]),
        Case("valid run on cuda-emu", ln("--target", "cuda-emu"), None),
        Case("glibc-expf order on cuda-emu", ln("--target", "cuda-emu", op="softmax", order="torch1.13-cpu-default"), None,
             note="glibc's expf is IR, so PyTorch's default-capability softmax runs on the CUDA targets too"),
        Case("--in x given twice", ln("--in", "x={in}/x.npy"), ["'x'", "twice"]),

        # Output failures: the kernel runs fine, so these test that writing is all-or-nothing.
        Case("first output unwritable", ln("--out", "y=/nonexistent_dir/y.npy", "--out", "mean={out}/mean.npy", out=()),
             ["/nonexistent_dir/y.npy"], note="y is written before mean, so nothing has been written yet"),
        Case("second output unwritable", ln("--out", "y={out}/y.npy", "--out", "mean=/nonexistent_dir/mean.npy", out=()),
             ["/nonexistent_dir/mean.npy"], note="mean is written after y, so y must not be left behind"),
        Case("second output unwritable, listed first",
             ln("--out", "mean=/nonexistent_dir/mean.npy", "--out", "y={out}/y.npy", out=()),
             ["/nonexistent_dir/mean.npy"], note="writes follow the kernel's argument order, not the command line's"),
        Case("output path is a directory", ln("--out", "y={out}/y_dir", out=()), ["y_dir"], dirs=["y_dir"],
             note="the rename fails after the temporary file is complete; it must be removed"),
        # softmax and log_softmax take x only and write y.
        Case("softmax valid", ln(op="softmax", order="torch1.13-cpu-avx2"), None,
             check=expect_outputs([("y", (ROWS, N), "<f4")], ind, softmax_values(ind))),
        Case("softmax with a weight", ln("--in", W, op="softmax"), ["softmax has no input 'weight'"]),
        Case("log_softmax unknown --out", ln(op="log_softmax", out=("mean",)), ["'mean'", "log_softmax"]),
        Case("softmax layer_norm-only order", ln(op="softmax", order="torch-decomp-cpu"), ["torch-decomp-cpu", "softmax"]),
        # compare --plot: the directory is checked before any work, and nothing is written.
        Case("compare --plot into a missing directory",
             ["compare", "softmax", "--cols", "16", "--rows", "2", "--plot", "/nonexistent_dir/p.png"],
             ["--plot", "/nonexistent_dir"]),
        Case("compare --plot is a directory",
             ["compare", "softmax", "--cols", "16", "--rows", "2", "--plot", "{out}/p_dir"], ["--plot", "is a directory"],
             dirs=["p_dir"]),
        *[Case(f"ORDO_KERNEL_CACHE_ENTRIES={v!r}", ln(), ["ORDO_KERNEL_CACHE_ENTRIES", f'"{v}"', "positive whole number"],
               env={"ORDO_KERNEL_CACHE_ENTRIES": v}) for v in ("0", "-3", "abc", "12k", "99999999999999999999999")],
        *[Case(f"ORDO_CACHE_MAX_MB={v!r}", ln(), ["ORDO_CACHE_MAX_MB", f'"{v}"', "whole number of MiB"],
               env={"ORDO_CACHE_MAX_MB": v}) for v in ("-1", "lots", "64k", "99999999999999")],
        *[Case(f"ORDO_CACHE={v!r}", ln(), ["ORDO_CACHE", f'"{v}"', "expected 0"], env={"ORDO_CACHE": v}) for v in ("off", "2")],
        Case("ORDO_KERNEL_CACHE_ENTRIES=1 runs", ln(), None, check=expect_outputs([("y", (ROWS, N), "<f4")], ind),
             env={"ORDO_KERNEL_CACHE_ENTRIES": "1"}),
        Case("compare --plot valid", ["compare", "log_softmax", "--cols", "16", "--rows", "2", "--plot", "{out}/p.png"],
             None, check=expect_png("p.png")),
    ]


def run_case(ordo, case, ind, outd):
    argv = [a.replace("{in}", ind).replace("{out}", outd) for a in case.argv]
    for d in case.dirs:
        os.mkdir(os.path.join(outd, d))
    try:
        p = subprocess.run([ordo] + argv, capture_output=True, text=True, timeout=120, env={**os.environ, **case.env})
    except subprocess.TimeoutExpired:
        return "timed out"
    if p.returncode < 0:
        return f"killed by signal {-p.returncode}; stderr: {p.stderr.strip()!r}"
    err = p.stderr.strip()
    if case.expect is None:
        if p.returncode != 0:
            return f"exit {p.returncode}, expected 0; stderr: {err!r}"
        return case.check(outd) if case.check else None
    problems = []
    if p.returncode != 2:
        problems.append(f"exit {p.returncode}, expected 2")
    if not err.startswith("ordo: error:"):
        problems.append("stderr does not start with 'ordo: error:'")
    missing = [s for s in case.expect if s not in err]
    if missing:
        problems.append(f"stderr lacks {missing}")
    # Any file at all counts: the requested outputs and *.tmp.* leftovers alike.
    left = sorted(os.path.relpath(os.path.join(r, f), outd) for r, _, fs in os.walk(outd) for f in fs)
    if left:
        problems.append(f"left files behind: {left}")
    if problems:
        return "; ".join(problems) + f" (stderr: {err!r})"
    return None


COMMANDS = ["run", "orders", "compare", "demo", "emit", "bench", "build", "cache"]


def help_cases(ordo):
    """Help in every form exits 0 and prints usage to stdout; typos get the closest name.
    Returns (passed, failed)."""
    passed = failed = 0

    def check(name, argv, code, out_has=(), err_has=()):
        nonlocal passed, failed
        p = subprocess.run([ordo] + argv, capture_output=True, text=True)
        bad = [f"exit {p.returncode}, expected {code}"] if p.returncode != code else []
        bad += [f"stdout lacks {s!r}" for s in out_has if s not in p.stdout]
        bad += [f"stderr lacks {s!r}" for s in err_has if s not in p.stderr]
        if bad:
            failed += 1
            print(f"FAIL {name}: {'; '.join(bad)} (stdout {p.stdout[:200]!r}, stderr {p.stderr!r})")
        else:
            passed += 1
            print(f"PASS {name}")

    for argv in (["--help"], ["-h"], ["help"]):
        check(f"ordo {' '.join(argv)}", argv, 0, ["usage: ordo <command>"] + COMMANDS)
    for c in COMMANDS:
        for argv in ([c, "--help"], ["help", c], [c, "-h"]):
            # Each command's help lists its options with an example: an `ordo ...` line or an option's own.
            check(f"ordo {' '.join(argv)}", argv, 0, [f"usage: ordo {c}", "--" if c not in ("orders", "cache") else c])
    check("--help after other options", ["bench", "layer_norm", "--order", "fast", "--help"], 0, ["usage: ordo bench"])
    check("unknown option names the closest", ["compare", "layer_norm", "--colz", "8"], 2,
          err_has=["unknown option '--colz' for 'compare'", "did you mean '--cols'?"])
    check("unknown option in run", ["run", "layer_norm", "--ordr", "fast"], 2, err_has=["did you mean '--order'?"])
    check("unknown command names the closest", ["comprae"], 2, err_has=["unknown command 'comprae'", "did you mean 'compare'?"])
    check("help for an unknown command", ["help", "bnech"], 2, err_has=["unknown command 'bnech'", "did you mean 'bench'?"])
    return passed, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ordo", default="build/bin/ordo")
    ap.add_argument("--nvrtc", choices=("yes", "no"), default="yes",
                    help="whether this ordo was built with NVRTC (CMake passes it); without it, builds for target cuda "
                         "must fail naming what is missing")
    args = ap.parse_args()
    ordo = os.path.abspath(args.ordo)
    if not os.access(ordo, os.X_OK):
        sys.exit(f"cli_errors.py: {ordo} is not an executable")
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="ordo_cli_errors_") as tmp:
        ind = os.path.join(tmp, "in")
        os.mkdir(ind)
        make_inputs(ind)
        for i, case in enumerate(cases(ind)):
            if args.nvrtc == "no" and case.expect is None and "--target" in case.argv and \
                    case.argv[case.argv.index("--target") + 1] == "cuda" and case.argv[0] == "build":
                case = Case(case.name + " (no NVRTC: refused)", case.argv, ["built without NVRTC", "cuda-emu"])
            # A fresh, empty directory per case makes "nothing was written" a plain listdir.
            outd = os.path.join(tmp, f"out{i:02d}")
            os.mkdir(outd)
            reason = run_case(ordo, case, ind, outd)
            if reason is None:
                passed += 1
                print(f"PASS {case.name}")
            else:
                failed += 1
                print(f"FAIL {case.name}: {reason}" + (f" [{case.note}]" if case.note else ""))
    p, f = help_cases(ordo)
    passed, failed = passed + p, failed + f
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
