#!/usr/bin/env python3
"""Bit-exact check of ordo's `onnxruntime-cpu` layer_norm order against the installed onnxruntime.

Each case builds a one-node ONNX model (LayerNormalization, opset 17, float32, axis -1) and
runs it on the CPU execution provider; `ordo run layer_norm --order onnxruntime-cpu` must give
the same bit patterns in Y, Mean and InvStdDev (ordo's y, mean, rstd). onnxruntime switches
algorithm at N = 8 (docs/research/onnxruntime-layernorm.md), so the sweep crosses it.
Run with the project's venv python (scripts/setup.sh installs onnxruntime there); a missing
onnxruntime is a failure, never a skip.
"""
import argparse
import itertools
import os
import struct
import subprocess
import sys

import numpy as np

from bits import same_bits
from summary import print_summary
from scratch import scratch_dir


# A minimal protobuf writer: just the ModelProto fields a LayerNormalization model needs, so the
# test does not depend on the `onnx` package.
def _varint(n):
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number, wire_type, payload):
    return _varint((number << 3) | wire_type) + payload


def _int(number, v):
    return _field(number, 0, _varint(v))


def _bytes(number, b):
    b = b.encode() if isinstance(b, str) else b
    return _field(number, 2, _varint(len(b)) + b)


def _value_info(name, dims):  # float tensor; a str dim is symbolic
    shape = b"".join(_bytes(1, _int(1, d) if isinstance(d, int) else _bytes(2, d)) for d in dims)
    return _bytes(1, name) + _bytes(2, _bytes(1, _int(1, 1) + _bytes(2, shape)))


def layer_norm_model(n, eps, with_bias):
    inputs = ["X", "Scale"] + (["B"] if with_bias else [])
    node = b"".join(_bytes(1, i) for i in inputs) + b"".join(_bytes(2, o) for o in ["Y", "Mean", "InvStdDev"])
    node += _bytes(4, "LayerNormalization")
    node += _bytes(5, _bytes(1, "axis") + _int(3, (1 << 64) - 1) + _int(20, 2))           # INT -1
    node += _bytes(5, _bytes(1, "epsilon") + _field(2, 5, struct.pack("<f", eps)) + _int(20, 1))  # FLOAT
    graph = _bytes(1, node) + _bytes(2, "g")
    graph += _bytes(11, _value_info("X", ["rows", n])) + _bytes(11, _value_info("Scale", [n]))
    if with_bias:
        graph += _bytes(11, _value_info("B", [n]))
    graph += _bytes(12, _value_info("Y", ["rows", n]))
    graph += _bytes(12, _value_info("Mean", ["rows", 1])) + _bytes(12, _value_info("InvStdDev", ["rows", 1]))
    return _int(1, 8) + _bytes(7, graph) + _bytes(8, _bytes(1, "") + _int(2, 17))


N_SWEEP = [1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 15, 16, 17, 31, 33, 100, 127, 128, 129, 1000, 1023, 1024, 1025,
           4095, 4096, 4097, 65537]
RANGES = [("normal", 0.0, 1.0), ("spread10", 0.0, 10.0), ("offset1e4", 1e4, 1e-3), ("wide", None, None)]


def make_x(rng, rname, rows, n):
    if rname == "wide":  # magnitudes 1e-3 .. 1e3 with random signs
        return rng.choice([-1.0, 1.0], (rows, n)) * 10.0 ** rng.uniform(-3, 3, (rows, n))
    _, off, scale = next(r for r in RANGES if r[0] == rname)
    return off + scale * rng.standard_normal((rows, n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ordo", required=True)
    ap.add_argument("--quick", action="store_true", help="fewer shapes")
    args = ap.parse_args()
    try:
        import onnxruntime as ort
    except ImportError:
        print("FAIL: onnxruntime is not importable by", sys.executable, "- run scripts/setup.sh (it installs it into build/pyenv)")
        return 1
    print("onnxruntime", ort.__version__)

    rng = np.random.default_rng(20261122)
    tmp = scratch_dir("ordo_ort_")
    sweep = N_SWEEP if not args.quick else [3, 7, 8, 13, 1025]
    cases = [(n, r[0], bias, 1e-5) for n, r, bias in itertools.product(sweep, RANGES, [True, False])]
    cases += [(n, "normal", True, 0.1) for n in (5, 100)]  # another epsilon
    cases += [(n, "nan_inf", True, 1e-5) for n in (5, 300)]

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    table, passed, failed = {}, 0, 0
    for i, (n, rname, bias, eps) in enumerate(cases):
        rows = 4 if n > 10000 else 8
        if rname == "nan_inf":  # NaN and ±Inf propagate through onnxruntime's statistics
            x = rng.standard_normal((rows, n))
            x[0, n // 2], x[1, n - 1], x[2, 0] = np.nan, np.inf, -np.inf
        else:
            x = make_x(rng, rname, rows, n)
        x = x.astype(np.float32)
        w = (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)
        b = (0.1 * rng.standard_normal(n)).astype(np.float32)
        sess = ort.InferenceSession(layer_norm_model(n, eps, bias), opts, providers=["CPUExecutionProvider"])
        feeds = {"X": x, "Scale": w}
        if bias:
            feeds["B"] = b
        want_y, want_mean, want_rstd = sess.run(None, feeds)
        base = os.path.join(tmp, f"c{i}")
        np.save(base + "_x.npy", x)
        np.save(base + "_w.npy", w)
        np.save(base + "_b.npy", b)
        cmd = [args.ordo, "run", "layer_norm", "--order", "onnxruntime-cpu", "--eps", repr(eps), "--in", f"x={base}_x.npy",
               "--in", f"weight={base}_w.npy", "--out", f"y={base}_y.npy", "--out", f"mean={base}_m.npy",
               "--out", f"rstd={base}_r.npy"]
        if bias:
            cmd += ["--in", f"bias={base}_b.npy"]
        key = ("layer_norm", "onnxruntime-cpu", "f32")
        table.setdefault(key, [0, 0])[1] += 1
        label = f"N={n} {rname} bias={bias} eps={eps}"
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL {label}: ordo exited {r.returncode}: {r.stderr.strip()}")
            failed += 1
            continue
        why = []
        for name, suffix, want in [("y", "y", want_y), ("mean", "m", want_mean.reshape(-1)), ("rstd", "r", want_rstd.reshape(-1))]:
            ok, msg = same_bits(np.load(f"{base}_{suffix}.npy"), want)
            if not ok:
                why.append(f"{name}: {msg}")
        if why:
            failed += 1
            print(f"FAIL {label}: " + "; ".join(why))
        else:
            passed += 1
            table[key][0] += 1
    return print_summary(table, passed, failed)


if __name__ == "__main__":
    sys.exit(main())
