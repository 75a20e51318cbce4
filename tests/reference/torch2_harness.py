"""The driver the torch 2.15 backward reference tests share: check the installed torch, run one
worker process per CPU capability (ATEN_CPU_CAPABILITY set before torch is imported, ordo's
Python package on PYTHONPATH), and tally the workers' results by (op, order, dtype).

A worker is Python source run as `python -c WORKER cap cases.json ranges.json`; its last stdout
line is JSON: {"torch": version, "capability": name, "results": [{"case": i, "ok": bool,
"why": text, "threads": T, "order": name (optional)}, ...]}.
"""
import json
import os
import subprocess
import sys
import tempfile

from bits import capabilities

WANT_TORCH = "2.15.0"


def torch_error():
    """None when this python imports torch 2.15.0, else the failure to print (never a skip)."""
    try:
        import torch
    except ImportError:
        return (f"FAIL: torch is not importable by {sys.executable}; scripts/setup.sh installs the torch 2.15 venv "
                f"(scripts/torch2-venv --python names its python)")
    if torch.__version__.split("+")[0] != WANT_TORCH:
        return f"FAIL: this is torch {torch.__version__} ({sys.executable}); the torch2.15 orders are checked against {WANT_TORCH}"
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
            print(f"torch {out['torch']}, ATEN_CPU_CAPABILITY={cap} (torch reports {out['capability']}), threads 1 and 2")
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
