"""Why ordo has no exact order for torch 2.15's f32 exp, tanh, sin, cos, log and erf: eager
computes them with MKL's Vector Math Library, whose algorithms are not published.

Checked here against torch 2.15 as installed (fails, never skips, without it):
- for each function, torch's f32 result equals what `vsExp`, `vsTanh`, ... (exported by the wheel's
  libtorch_cpu.so, MKL linked in) give for the same array, bit for bit, under every
  ATEN_CPU_CAPABILITY this CPU has and on 1 and 2 threads: the capability does not choose these
  bits, MKL's own CPU dispatch does;
- MKL's result at an element does not depend on its neighbours (the whole array, one element at a
  time and the array shifted by 3 give the same bits), so chunks and tails play no part;
- it is not glibc's libm (the function ordo models for ATen's scalar tails): some elements differ.

So eager's bits for these f32 functions are MKL's, on this host; Inductor's generated code uses
other algorithms, which is one way a compiled model leaves eager's bits. Inside `pinned`,
Inductor's lite mode keeps these calls as eager's ATen kernels. bf16 and f16 inputs take ATen's
vectorized functions instead (not checked here).
"""
import json
import os
import subprocess
import sys

from bits import capabilities
from torch2_harness import torch_error

FUNCTIONS = {"exp": "vsExp", "tanh": "vsTanh", "sin": "vsSin", "cos": "vsCos", "log": "vsLn", "erf": "vsErf"}

WORKER = r"""
import ctypes, glob, json, os, sys
import torch
lib = ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))[0])
libm = ctypes.CDLL("libm.so.6")
functions = json.loads(sys.argv[1])

def vml(name, x):
    y = torch.empty_like(x)
    getattr(lib, name)(ctypes.c_int(x.numel()), ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()))
    return y

def differ(a, b):
    return int((a.view(torch.int32) != b.view(torch.int32)).sum())

g = torch.Generator().manual_seed(15)
results = []
for fn, vname in functions.items():
    for scale in (1.0, 8.0, 80.0):
        x = (scale * torch.randn(200001, generator=g)).float()
        if fn == "log":
            x = x.abs()
        for threads in (1, 2):
            torch.set_num_threads(threads)
            results.append({"fn": fn, "what": f"torch.{fn} = MKL {vname}, |x| ~ {scale}, {threads} threads",
                            "differ": differ(getattr(torch, fn)(x), vml(vname, x))})
    x = (8.0 * torch.randn(2053, generator=g)).float()
    if fn == "log":
        x = x.abs()
    whole = vml(vname, x)
    alone = torch.cat([vml(vname, x[i:i + 1].clone()) for i in range(x.numel())])
    results.append({"fn": fn, "what": f"MKL {vname}: whole array = one element at a time", "differ": differ(whole, alone)})
    results.append({"fn": fn, "what": f"MKL {vname}: whole array = shifted by 3", "differ": differ(whole[3:], vml(vname, x[3:].clone()))})
    f = getattr(libm, fn + "f")
    f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float]
    glibc = torch.tensor([f(float(v)) for v in x.tolist()], dtype=torch.float32)
    results.append({"fn": fn, "what": f"glibc {fn}f differs from MKL {vname} somewhere", "differ": differ(whole, glibc),
                    "want_some": True})
print(json.dumps({"torch": torch.__version__, "results": results}))
"""


def main():
    error = torch_error("torch 2.15's f32 elementwise functions")
    if error:
        print(error)
        return 1
    here = os.path.dirname(os.path.abspath(__file__))
    failures, checked = [], 0
    for cap in capabilities(print, "torch2.15-cpu-avx512"):
        run = subprocess.run([sys.executable, "-c", WORKER, json.dumps(FUNCTIONS)], capture_output=True, text=True,
                             env=dict(os.environ, ATEN_CPU_CAPABILITY=cap, PYTHONPATH=here))
        if run.returncode != 0:
            print(f"FAIL: worker for ATEN_CPU_CAPABILITY={cap} exited {run.returncode}:\n{run.stderr}")
            return 1
        out = json.loads(run.stdout.strip().splitlines()[-1])
        for r in out["results"]:
            ok = r["differ"] > 0 if r.get("want_some") else r["differ"] == 0
            checked += 1
            line = f"{cap:8s} {r['what']}: {r['differ']} elements differ"
            print(("ok   " if ok else "FAIL ") + line)
            if not ok:
                failures.append(line)
    if checked == 0:
        print("FAIL: nothing was compared")
        return 1
    print(f"\n{checked} checks, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
