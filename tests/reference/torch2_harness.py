"""The driver the torch 2.15 backward reference tests share: their command line, a check of the
installed torch, one worker process per CPU capability (ATEN_CPU_CAPABILITY set before torch is
imported, ordo's Python package on PYTHONPATH), the tally of the workers' results by (op, order,
dtype) and the exit status, and what the host's CPU is (for the MKL and oneDNN models).

A worker is Python source run as `python -c WORKER cap cases.json ranges.json`; its last stdout
line is JSON: {"torch": version, "capability": name, "results": [{"case": i, "ok": bool,
"why": text, "threads": T, "order": name (optional)}, ...]}.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from bits import capabilities
from summary import print_summary
import tiers

WANT_TORCH = "2.15.0"


def torch_error(orders="the torch2.15 orders"):
    """None when this python imports torch 2.15.0, else the failure to print (never a skip).
    `orders`: what the script checks against that torch, for the message."""
    try:
        import torch
    except ImportError:
        return (f"FAIL: torch is not importable by {sys.executable}; scripts/setup.sh installs the torch 2.15 venv "
                f"(scripts/torch2-venv --python names its python)")
    if torch.__version__.split("+")[0] != WANT_TORCH:
        return f"FAIL: this is torch {torch.__version__} ({sys.executable}); {orders} are checked against {WANT_TORCH}"
    return None


def run_workers(build, worker, cases, ranges, key_of, failure, env_extra=None):
    """Runs `worker` for each capability this CPU has over `cases`; returns (table, passed, failed)
    for summary.print_summary, or None after printing why a worker failed. key_of(case, result,
    cap) names a result's table row; failure(case, result) describes a mismatch. env_extra: more
    environment for the workers (the passive OpenMP wait is always set: ctest runs other tests
    beside these, and spinning threads slow torch several times over; scheduling only)."""
    here = os.path.dirname(os.path.abspath(__file__))
    spec = tempfile.NamedTemporaryFile("w", suffix=".json", prefix="ordo_torch2_", delete=False)
    json.dump(cases, spec)
    spec.close()
    table, passed, failed = {}, 0, 0
    env_base = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(os.path.abspath(build), "python"), here]),
                    OMP_WAIT_POLICY="PASSIVE", **(env_extra or {}))
    try:
        for cap in capabilities(print, "torch2.15-cpu-avx512"):
            worker_run = subprocess.run([sys.executable, "-c", worker, cap, spec.name, json.dumps(ranges)],
                                        env=dict(env_base, ATEN_CPU_CAPABILITY=cap), capture_output=True, text=True)
            if worker_run.returncode != 0:
                print(f"FAIL: worker for ATEN_CPU_CAPABILITY={cap} exited {worker_run.returncode}:\n{worker_run.stderr}")
                return None
            out = json.loads(worker_run.stdout.strip().splitlines()[-1])
            print(f"torch {out['torch']}, ATEN_CPU_CAPABILITY={cap} (torch reports {out['capability']})")
            for r in out["results"]:
                c = cases[r["case"]]
                entry = table.setdefault(key_of(c, r, cap), [0, 0])
                entry[1] += 1
                if r["ok"]:
                    entry[0] += 1
                    passed += 1
                else:
                    failed += 1
                    print(f"FAIL {failure(c, r)}: {r['why']}")
    finally:
        os.unlink(spec.name)
    return table, passed, failed


def order_row(r, cap):
    """A result's order as a table row: the capability's own order, or an alias tagged with it."""
    base = r["order"].split("(")[0]
    return base + ("" if base.endswith(cap) else f"[{cap}]")


def parse_arguments(doc):
    """A test's command line: --build (ordo's build directory) and the tier flags (tiers.py)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build"),
                    help="ordo's build directory")
    tiers.add_arguments(ap)
    return ap.parse_args()


def report(result, counted="each case is counted once per torch thread count, 1 and 2"):
    """The exit status of a test from run_workers' result: 1 when a worker failed (already said),
    else the summary's (1 on any mismatch)."""
    if result is None:
        return 1
    print(f"\n({counted})")
    return print_summary(*result)


def cpu_info():
    try:
        return open("/proc/cpuinfo").read()
    except OSError:
        return ""


def amd_host():
    """An AMD CPU, whose MKL runs its generic kernels (ordo's MklAmd model), with or without AVX-512."""
    return "AuthenticAMD" in cpu_info()


def intel_avx512_host():
    """An Intel CPU with AVX-512, whose MKL runs its avx512 kernels (ordo's MklIntelAvx512 model)."""
    return "GenuineIntel" in cpu_info() and has_cpu_flag("avx512f")


def onednn_16bit_host():
    """Whether PyTorch's oneDNN check for bf16 (and f16) kernels passes here: a CPU with AVX-512 or
    AVX-NE-CONVERT. Where it fails, 16-bit matmuls are ATen's own (gemm_stub), as ordo models them."""
    return has_cpu_flag("avx512f") or has_cpu_flag("avx_ne_convert")


def has_cpu_flag(flag):
    """Whether /proc/cpuinfo lists `flag` (its spelling: avx512f, avx512_bf16, ...)."""
    return any(line.startswith("flags") and flag in line.split() for line in cpu_info().splitlines())
