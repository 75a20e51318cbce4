#!/usr/bin/env python3
"""Several processes sharing one disk-cache directory: each gets a working kernel with the same
bits, exactly one entry is left, and no temporary file remains.

Run: /usr/bin/python3 tests/unit/disk_cache_processes.py --ordo build/bin/ordo
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

PROCESSES = 8


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ordo", required=True)
    ordo = os.path.abspath(ap.parse_args().ordo)
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        x = np.random.default_rng(0).standard_normal((64, 1000)).astype(np.float32)
        np.save(os.path.join(tmp, "x.npy"), x)
        env = dict(os.environ, ORDO_CACHE_DIR=cache, ORDO_CACHE="1")
        procs = [subprocess.Popen([ordo, "run", "log_softmax", "--order", "torch1.13-cpu-avx2", "--in", f"x={tmp}/x.npy",
                                   "--out", f"y={tmp}/y{i}.npy"], env=env, stderr=subprocess.PIPE, text=True)
                 for i in range(PROCESSES)]
        failures = []
        for i, p in enumerate(procs):
            _, err = p.communicate(timeout=300)
            if p.returncode != 0:
                failures.append(f"process {i} exited {p.returncode}: {err.strip()}")
        if not failures:
            ys = [np.load(os.path.join(tmp, f"y{i}.npy")).view(np.uint32) for i in range(PROCESSES)]
            if any(not np.array_equal(ys[0], y) for y in ys[1:]):
                failures.append("processes computed different bits")
        names = sorted(os.listdir(cache)) if os.path.isdir(cache) else []
        entries = [n for n in names if n.endswith(".ordo")]
        if len(entries) != 1:
            failures.append(f"expected one cache entry, found {names}")
        if any(".tmp." in n for n in names):
            failures.append(f"temporary files left: {names}")
        # One more process now finds the entry: `ordo cache stats` counts it.
        stats = subprocess.run([ordo, "cache", "stats"], env=env, capture_output=True, text=True)
        if "entries    1" not in stats.stdout:
            failures.append(f"cache stats: {stats.stdout!r}")
    for f in failures:
        print("FAIL", f)
    print(f"{PROCESSES} processes sharing one cache directory: {'ok' if not failures else 'FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
